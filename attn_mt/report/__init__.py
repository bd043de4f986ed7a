"""`attn-mt report`: a self-contained HTML page of one or more trained runs, read from their directories."""

from attn_mt.report.html import render_report, run_report

__all__ = ["render_report", "run_report"]
