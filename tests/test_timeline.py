"""The training timeline (train.timeline, timeline.jsonl): a book Bahdanau run records the book's four
sentences' greedy output and attention before training and after every epoch; the first point is near
uniform attention, the last equals the run's final attention dump, and a torn last line is skipped."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import corpus_file
from support.helpers import ROOT

from attn_mt.config import ConfigError, load_config
from attn_mt.decoding.attention import attention_entropy
from attn_mt.run.run_dir import read_metrics
from attn_mt.training.launch import train
from attn_mt.training.timeline import read_timeline

EPOCHS = 30


@pytest.fixture(scope="module")
def book_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/d2l_bahdanau.yaml (timeline on) for 30 epochs."""
    run_dir = tmp_path_factory.mktemp("timeline") / "run"
    cfg = load_config(ROOT / "configs" / "d2l_bahdanau.yaml", [f"train.epochs={EPOCHS}"])
    assert cfg.train.timeline
    train(cfg, run_dir, data_path=str(corpus_file()), quiet=True)
    return run_dir


def test_a_book_run_records_a_point_before_training_and_after_each_epoch(book_run: Path) -> None:
    timeline = read_timeline(book_run / "timeline.jsonl")
    assert timeline is not None and timeline.model == "gru_bahdanau"
    assert timeline.probes == ["go .", "i lost .", "he's calm .", "i'm home ."]
    assert [point.epoch for point in timeline.points] == list(range(EPOCHS + 1))
    assert [point.step for point in timeline.points] == [10 * epoch for epoch in range(EPOCHS + 1)]
    assert timeline.points[0].scores == {} and timeline.points[0].elapsed_s == 0.0
    epoch_losses = [r["epoch_loss"] for r in read_metrics(book_run / "metrics.jsonl") if "epoch_loss" in r]
    assert [point.scores["train_loss"] for point in timeline.points[1:]] == pytest.approx(
        epoch_losses, abs=1e-5
    )
    # each probe's map: one row per output token and <eos>, one column per source token and <eos>
    for point in timeline.points:
        for tokens, maps, source in zip(point.output_tokens, point.maps, timeline.source_tokens, strict=True):
            assert maps["cross"].shape == (len(tokens), len(source))
    summary = json.loads((book_run / "run_summary.json").read_text(encoding="utf-8"))
    assert summary["hooks_s"] > 0  # the recording's time, left out of the training clock
    size = (book_run / "timeline.jsonl").stat().st_size
    assert size < 40_000  # 31 points; the full 250-epoch run writes about 190 kB (docs/training.md)


def test_attention_starts_near_uniform_and_sharpens(book_run: Path) -> None:
    timeline = read_timeline(book_run / "timeline.jsonl")
    assert timeline is not None
    uniform = [math.log(len(tokens)) for tokens in timeline.source_tokens]  # ln S: 1.10, 1.39, 1.39, 1.39
    first = [float(attention_entropy(maps["cross"])) for maps in timeline.points[0].maps]
    last = [float(attention_entropy(maps["cross"])) for maps in timeline.points[-1].maps]
    # the untrained model: within 0.01 nats of uniform for every probe (measured 1.096, 1.384, 1.386, 1.384)
    assert first == pytest.approx(uniform, abs=0.01)
    # after 30 epochs the mean entropy has fallen by over 3% (measured 1.31 -> 1.22 nats, 7%)
    assert np.mean(last) < 0.97 * np.mean(first)


def test_the_last_point_is_the_final_attention_dump(book_run: Path, tmp_path: Path, run_cli) -> None:
    timeline = read_timeline(book_run / "timeline.jsonl")
    assert timeline is not None
    sources = tmp_path / "probes.txt"
    sources.write_text("".join(probe + "\n" for probe in timeline.probes), encoding="utf-8")
    dumps = tmp_path / "attention"
    done = run_cli(
        "translate",
        str(book_run),
        "--input",
        str(sources),
        "--checkpoint",
        "last",
        "--beam",
        "1",
        "--attention-dir",
        str(dumps),
    )
    assert done.returncode == 0, done.stderr
    last = timeline.points[-1]
    assert done.stdout.splitlines() == last.outputs
    for index, maps in enumerate(last.maps):
        dumped = np.load(dumps / f"{index:04d}.npz")["cross"]
        assert maps["cross"].shape == dumped.shape
        assert np.abs(maps["cross"] - dumped).max() <= 0.0005 + 1e-6  # stored in thousandths


def test_a_torn_last_line_is_skipped(book_run: Path, tmp_path: Path) -> None:
    torn = tmp_path / "timeline.jsonl"
    text = (book_run / "timeline.jsonl").read_text(encoding="utf-8")
    torn.write_text(text + text.splitlines()[-1][:100], encoding="utf-8")
    timeline = read_timeline(torn)
    assert timeline is not None and len(timeline.points) == EPOCHS + 1


def test_the_timeline_keys_are_validated() -> None:
    with pytest.raises(ConfigError, match="train.timeline_every: must be > 0, got 0"):
        load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.timeline_every=0"])
    with pytest.raises(ConfigError, match=r"train.timeline_probes\[0\]: expected"):
        load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.timeline_probes=[3]"])
