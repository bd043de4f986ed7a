"""`attn-mt tune`: each beam and length penalty decoded on the valid split, the best pair chosen by valid
BLEU, and with --write stored as the run's decode settings; the test split is never read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from support.synthetic import close_run_log

from attn_mt.commands.evaluate import run_eval
from attn_mt.data import dataset
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.evaluate import split_examples
from attn_mt.evaluation.tuning import TunedPair, best_pair, search_pairs
from attn_mt.run.run_dir import load_run
from attn_mt.training.launch import train


def digests(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the SHA-1 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


class WithoutTest:
    """Loaded data whose test split cannot be read: reading it fails the test."""

    def __init__(self, data: dataset.NMTData):
        self._data = data

    def __getattr__(self, name: str):
        if name == "test":
            raise AssertionError("the test split was read")
        return getattr(self._data, name)


@pytest.fixture
def run_dir(tiny_runs, tmp_path) -> Path:
    """A copy of the session's tiny Transformer run (word-level, 10 valid and 10 test sentences)."""
    return tiny_runs.copy_to(tmp_path)["transformer"]


@pytest.fixture
def no_test_split(run_dir, tiny_runs, monkeypatch) -> list[str]:
    """From here on, loading the corpus gives data whose test split raises, and translating any test sentence
    fails; returns the valid split's sources."""
    loaded = load_run(run_dir)
    test_sources, _ = split_examples(loaded, "test", str(tiny_runs.corpus), run_dir)
    valid_sources, _ = split_examples(loaded, "valid", str(tiny_runs.corpus), run_dir)
    assert test_sources and valid_sources and not set(test_sources) & set(valid_sources)
    real_load, real_translate = dataset.load_data, Translator.translate

    def load_without_test(*args, **kwargs):
        return WithoutTest(real_load(*args, **kwargs))

    def translate_no_test(self, sentences, *args, **kwargs):
        assert not set(sentences) & set(test_sources), "a test sentence was translated"
        return real_translate(self, sentences, *args, **kwargs)

    monkeypatch.setattr(dataset, "load_data", load_without_test)
    monkeypatch.setattr(Translator, "translate", translate_no_test)
    with pytest.raises(AssertionError, match="the test split was read"):  # the guard is real
        split_examples(loaded, "test", str(tiny_runs.corpus), run_dir)
    return valid_sources


def test_tune_write_changes_only_the_decode_settings_and_never_reads_test(run_dir, no_test_split, run_cli):
    before_files = digests(run_dir)
    before = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    before_summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    result = run_cli(
        "tune",
        str(run_dir),
        "--beams",
        "1,2,3",
        "--length-penalties",
        "0.5,1.0",
        "--write",
        "--device",
        "cpu",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"valid split ({len(no_test_split)} sentences)" in lines[0]
    header = lines.index(next(line for line in lines if "valid BLEU" in line))
    rows = [line.split() for line in lines[header + 1 : header + 6]]
    assert [(r[0], r[1]) for r in rows] == [("1", "any"), ("2", "0.5"), ("2", "1"), ("3", "0.5"), ("3", "1")]
    changed = {
        k
        for k in before_files.keys() | digests(run_dir).keys()
        if before_files.get(k) != digests(run_dir).get(k)
    }
    assert changed <= {"config.yaml", "config_history.jsonl", "run_summary.json"}
    assert "run_summary.json" in changed
    after = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    for section in ("data", "model", "train"):
        assert after[section] == before[section]
    other_decode = {k: v for k, v in after["decode"].items() if k not in ("beam_size", "length_penalty")}
    assert other_decode == {
        k: v for k, v in before["decode"].items() if k not in ("beam_size", "length_penalty")
    }
    summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    tuned = summary.pop("tuned_decode")
    assert summary == before_summary  # what training wrote stays
    assert len(tuned["pairs"]) == 5 and tuned["split"] == "valid" and tuned["checkpoint"] == "best.pt"
    assert tuned["valid_bleu"] == max(pair["bleu"] for pair in tuned["pairs"])
    assert (after["decode"]["beam_size"], after["decode"]["length_penalty"]) == (
        tuned["beam_size"],
        tuned["length_penalty"],
    )
    # eval on the valid split with the written settings scores what tune's table said
    scores = run_eval(run_dir, "valid", None, 0, None, "best", None, "cpu")
    assert round(scores["bleu"], 2) == tuned["valid_bleu"]
    assert scores["beam_size"] == tuned["beam_size"]


def test_tune_without_write_changes_nothing(run_dir, no_test_split, run_cli):
    before = digests(run_dir)
    result = run_cli("tune", str(run_dir), "--beams", "1,2", "--length-penalties", "1.0", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert "best: beam" in result.stdout and "--write" in result.stdout
    assert digests(run_dir) == before


def test_a_resumed_run_keeps_the_tuned_record(run_dir, tiny_runs, run_cli):
    assert run_cli("tune", str(run_dir), "--beams", "1,2", "--write", "--device", "cpu").returncode == 0
    tuned = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))["tuned_decode"]
    try:
        train(
            None,
            run_dir,
            overrides=["train.epochs=7"],
            data_path=str(tiny_runs.corpus),
            resume=True,
            quiet=True,
        )
    finally:
        close_run_log()
    summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    assert summary["epochs"] == 7 and summary["tuned_decode"] == tuned


def test_greedy_is_decoded_once_and_ties_go_to_the_smaller_beam_then_the_runs_alpha():
    assert search_pairs([1, 4], [0.6, 1.0]) == [(1, None), (4, 0.6), (4, 1.0)]
    rows = [TunedPair(4, 0.6, 50.0, 0, 1), TunedPair(4, 1.4, 50.0, 0, 1), TunedPair(6, 1.0, 50.0, 0, 1)]
    assert best_pair(rows, current_alpha=1.0) == rows[1]  # 1.4 is nearer 1.0 than 0.6 is
    assert best_pair([*rows, TunedPair(1, None, 50.0, 0, 1)], current_alpha=1.0).beam_size == 1
    assert best_pair([*rows, TunedPair(6, 2.0, 50.5, 0, 1)], current_alpha=1.0).length_penalty == 2.0


def test_every_value_is_checked_before_the_model_is_opened(run_dir, run_cli, monkeypatch):
    """Beams and alphas outside attn_mt/limits.py's bounds (NaN too) are refused by tune's own option
    names before anything is opened or decoded."""
    from attn_mt.commands import tune

    def not_opened(*args, **kwargs):
        raise AssertionError("the model was opened before the values were checked")

    monkeypatch.setattr(tune, "open_model", not_opened)
    for args, message in [
        (
            ["--beams", "1,2", "--length-penalties", "0.6,12"],
            "--length-penalties: each alpha must be from 0 to 10, got 12",
        ),
        (["--length-penalties", "nan"], "--length-penalties: each alpha must be from 0 to 10, got nan"),
        (["--length-penalties=-0.5"], "--length-penalties: each alpha must be from 0 to 10, got -0.5"),
        (["--beams", "0,2"], "--beams: each beam size must be from 1 to 16, got 0"),
        (["--beams", "1,17"], "--beams: each beam size must be from 1 to 16, got 17"),
    ]:
        result = run_cli("tune", str(run_dir), *args, "--device", "cpu")
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def test_tune_write_that_cannot_write_every_file_changes_nothing_and_decodes_nothing(run_dir, run_cli):
    """A run folder where config_history.jsonl cannot be written (a folder stands there) is refused before
    decoding, and every file keeps its bytes (config.yaml was once rewritten, with no history line)."""
    (run_dir / "config_history.jsonl").mkdir()
    before = digests(run_dir)
    result = run_cli("tune", str(run_dir), "--beams", "1,2", "--write", "--device", "cpu")
    assert result.returncode == 2 and "config_history.jsonl is a folder" in result.stderr, result.stderr
    assert "valid BLEU" not in result.stdout  # refused before the table
    assert digests(run_dir) == before


def test_tune_write_on_a_history_that_is_not_utf8_is_refused_before_decoding(run_dir, run_cli):
    """config_history.jsonl holding a byte that is not UTF-8: --write could not append to it, so it is
    refused before the first sentence is decoded, with every file as it was."""
    history = run_dir / "config_history.jsonl"
    history.write_bytes(b'{"step": 0, "changes": {"decode.beam_size": [4, 2]}, "by": "caf\xe9"}\n')
    before = digests(run_dir)
    result = run_cli("tune", str(run_dir), "--beams", "1,2", "--write", "--device", "cpu")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"attn-mt: error: tune --write: {history} is not UTF-8 text (byte 63), so the change cannot be "
        "appended to it; repair or move it away and tune again\n"
    )
    assert "valid BLEU" not in result.stdout  # refused before the table
    assert digests(run_dir) == before


def test_files_are_replaced_together_or_not_at_all(tmp_path):
    from attn_mt.errors import UserError
    from attn_mt.run.file_writes import check_writable, replace_files

    kept, new = tmp_path / "kept.txt", tmp_path / "new.txt"
    kept.write_text("before\n", encoding="utf-8")
    kept.chmod(0o640)
    with pytest.raises(UserError, match="cannot write"):
        replace_files({kept: "after\n", tmp_path / "missing" / "x.txt": "x\n"}, "test")
    assert kept.read_text(encoding="utf-8") == "before\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "kept.txt"
    ]
    replace_files({kept: "after\n", new: "new\n"}, "test")
    assert (kept.read_text(encoding="utf-8"), new.read_text(encoding="utf-8")) == ("after\n", "new\n")
    assert kept.stat().st_mode & 0o777 == 0o640  # a replaced file keeps its mode
    with pytest.raises(UserError, match="cannot write in"):
        check_writable([tmp_path / "missing" / "x.txt"], "test")
