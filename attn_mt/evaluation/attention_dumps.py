"""Attention dumps on disk: every map of a sentence as .npz, its tokens and statistics as .json, heatmaps.

`decoding/attention.py` collects the maps (SentenceAttention); this module only writes them, so
decoding never imports the plotting code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attn_mt.decoding.attention import TITLES, SentenceAttention
from attn_mt.evaluation.plots import plot_attention


def save_attention(
    attention: SentenceAttention, out_dir: Path, stem: str, heatmaps: bool = True
) -> list[Path]:
    """Write `<stem>.npz` (every map), `<stem>.json` (tokens, shapes, stats) and one heatmap PNG per map."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / f"{stem}.npz"]
    np.savez_compressed(written[0], **{name: w.astype(np.float32) for name, w in attention.maps.items()})
    summary = attention.summary()
    if heatmaps:
        for name, weights in attention.maps.items():
            rows, cols = attention.labels(name)
            written.append(plot_attention(weights, rows, cols, out_dir / f"{stem}_{name}.png", TITLES[name]))
    summary["files"] = [p.name for p in written]
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return [*written, json_path]
