"""`attn-mt report`: a self-contained HTML page of one or more trained runs, read from their directories."""

from attn_mt.report.collect import check_run_folder, read_run
from attn_mt.report.html import render_report

__all__ = ["check_run_folder", "read_run", "render_report"]
