"""The training timeline (train.timeline, timeline.jsonl): a book Bahdanau run records the book's four
sentences' greedy output and attention before training and after every epoch; the first point is near
uniform attention, the last equals the run's final attention dump, and a torn last line is skipped (even
one cut inside a character); a resumed run keeps its probes, and a damaged file is named so."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import corpus_file
from support.helpers import ROOT

from attn_mt.config import ConfigError, load_config, save_config
from attn_mt.decoding.attention import attention_entropy
from attn_mt.errors import UserError
from attn_mt.lab.timeline import run_timeline
from attn_mt.report.timeline import timeline_section
from attn_mt.run.run_dir import RunPaths, read_metrics, truncate_metrics
from attn_mt.training.launch import train
from attn_mt.training.resume import resolve_resume_config
from attn_mt.training.timeline import TimelineError, read_timeline

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
    with pytest.raises(ConfigError) as info:
        load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ['train.timeline_probes=["go .", " "]'])
    assert info.value.problems == ["train.timeline_probes[1]: a probe must be a sentence, got the blank ' '"]


PROBES = ["go .", "i lost ."]
SOURCE_TOKENS = [["go", ".", "<eos>"], ["i", "lost", ".", "<eos>"]]


def point_line(step: int, probes: list[str] = PROBES) -> dict[str, Any]:
    """A point as Timeline.record writes it: each probe's output 'été !' and its (3, S) weights."""
    return {
        "step": step,
        "epoch": step // 10,
        "elapsed_s": step / 10,
        "scores": {"train_loss": round(5 / (step + 1), 5)},
        "probes": [
            {
                "output": "été !",
                "output_tokens": ["été", "!", "<eos>"],
                "maps": {"cross": [[1000 // len(tokens)] * len(tokens)] * 3},
            }
            for tokens in SOURCE_TOKENS[: len(probes)]
        ],
    }


def write_timeline(folder: Path, points: list[dict[str, Any]], header: bool = True) -> Path:
    """A run folder's timeline.jsonl written by hand, its lines as Timeline.record writes them."""
    records = [
        {
            "header": True,
            "model": "gru_bahdanau",
            "scale": 1000,
            "probes": PROBES,
            "source_tokens": SOURCE_TOKENS,
        }
    ]
    records = (records if header else []) + points
    path = folder / "timeline.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def opened(folder: Path) -> Any:
    """What the lab's timeline panel reads of a run it opened: the folder it came from."""
    return SimpleNamespace(source=str(folder))


def test_a_last_line_torn_inside_a_character_is_dropped_by_every_reader(tmp_path: Path) -> None:
    path = write_timeline(tmp_path, [point_line(step) for step in (0, 10, 20)])
    whole = json.dumps(point_line(30), ensure_ascii=False).encode("utf-8")
    cut = whole.index("été".encode()) + 1  # inside the two bytes of é
    with path.open("ab") as handle:
        handle.write(whole[:cut])
    timeline = read_timeline(path)
    assert timeline is not None and [point.step for point in timeline.points] == [0, 10, 20]
    assert timeline.points[-1].outputs == ["été !", "été !"]
    # the lab's "watch it learn" panel and the report show the whole points
    assert len(run_timeline(opened(tmp_path)).points) == 3
    assert timeline_section(tmp_path, "run-1-timeline").count("<img ") == len(PROBES)
    # a resumed run (train --resume / --auto-resume) truncates the torn line away
    truncate_metrics(path, 10)
    lines = path.read_bytes().decode("utf-8").splitlines()
    assert [json.loads(line).get("step") for line in lines] == [None, 0, 10]


def test_a_resumed_run_keeps_its_probes_while_it_has_a_timeline(tmp_path: Path) -> None:
    cfg = load_config(ROOT / "configs" / "d2l_bahdanau.yaml", [f"train.timeline_probes={json.dumps(PROBES)}"])
    paths = RunPaths(tmp_path)
    save_config(cfg, paths.config)
    other = ['train.timeline_probes=["go ."]']
    assert resolve_resume_config(paths, None, other).train.timeline_probes == ["go ."]  # no timeline yet
    write_timeline(tmp_path, [point_line(0)])
    with pytest.raises(UserError) as info:
        resolve_resume_config(paths, None, other, "--auto-resume")
    assert str(info.value) == (
        "--auto-resume: train.timeline_probes cannot change in a resumed run (['go .', 'i lost .'] -> "
        f"['go .']): {paths.timeline} holds points of the old probes; keep them, or move timeline.jsonl "
        "away to record a new timeline from the resumed step"
    )
    changed = load_config(ROOT / "configs" / "d2l_bahdanau.yaml", other)
    with pytest.raises(UserError, match=r"^--resume: train.timeline_probes cannot change in a resumed run"):
        resolve_resume_config(paths, changed, [])
    assert resolve_resume_config(paths, None, ["train.timeline_every=2"]).train.timeline_probes == PROBES


def test_points_holding_fewer_probes_than_the_header_are_a_clear_error(tmp_path: Path) -> None:
    path = write_timeline(tmp_path, [point_line(0), point_line(10), point_line(20, PROBES[:1])])
    expected = (
        f"{path}: the point at step 20 holds 1 probes, the header 2: the run was resumed with other "
        "train.timeline_probes; move the file away (a resumed run then records a new timeline)"
    )
    with pytest.raises(TimelineError) as info:
        read_timeline(path)
    assert str(info.value) == expected
    # the lab's panel answers it as a 422 (a UserError), not a 500
    with pytest.raises(UserError) as info:
        run_timeline(opened(tmp_path))
    assert str(info.value) == expected
    assert f"The timeline cannot be shown: {html.escape(expected)}" in timeline_section(tmp_path, "t")


def test_a_timeline_without_its_header_is_called_damaged(tmp_path: Path) -> None:
    path = write_timeline(tmp_path, [point_line(10 * k) for k in range(21)], header=False)
    expected = (
        f"{path} is damaged: it holds 21 points but no header line (the probes and their source tokens); "
        "move it away, and a resumed run records a new timeline from there"
    )
    with pytest.raises(UserError) as info:
        run_timeline(opened(tmp_path))
    assert str(info.value) == expected
    assert f"The timeline cannot be shown: {html.escape(expected)}" in timeline_section(tmp_path, "t")
    path.write_text("", encoding="utf-8")
    assert read_timeline(path) is None  # an empty file holds no point yet, and is not damaged
