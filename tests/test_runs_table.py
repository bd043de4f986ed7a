"""`attn-mt runs`: the table of two small trained runs (one evaluated), with a folder that is not a run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attn_mt.commands.evaluate import run_eval
from attn_mt.run.run_dir import load_run, read_metrics


@pytest.fixture(scope="module")
def runs_root(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a GRU-Bahdanau run, a Transformer run evaluated on test, and a folder of notes."""
    root = tmp_path_factory.mktemp("runs")
    dirs = tiny_runs.copy_to(root)
    run_eval(dirs["transformer"], "test", None, 0, None, "best", str(tiny_runs.corpus), "cpu")
    (root / "notes").mkdir()
    (root / "notes" / "ideas.txt").write_text("try a bigger model\n", encoding="utf-8")
    return root


def expected_row(run_dir: Path) -> dict:
    """What the row of `run_dir` must say, worked out from the run's files and its model."""
    summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    metrics = read_metrics(run_dir / "metrics.jsonl")
    loaded = load_run(run_dir)
    row = {
        "name": run_dir.name,
        "path": str(run_dir),
        "model": loaded.config.model.type,
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "data": "book en-fr",
        "steps": max(r["step"] for r in metrics),
        "minutes": max(r["elapsed_s"] for r in metrics) / 60,
        "stop": "epochs",
        "valid_bleu": max(r["valid_bleu"] for r in metrics if "valid_bleu" in r),
        "test_bleu": None,
        "test_chrf": None,
        "tokens_per_s": summary["tokens_per_s"],
        "test_signature": None,
        "parent": None,
    }
    scores_path = run_dir / "eval" / "test" / "scores.json"
    if scores_path.exists():
        scores = json.loads(scores_path.read_text(encoding="utf-8"))
        row.update(
            test_bleu=scores["bleu"], test_chrf=scores["chrf"], test_signature=scores["bleu_signature"]
        )
    return row


def test_runs_prints_one_row_per_run_and_notes_the_folder_that_is_not_one(runs_root, run_cli):
    code, out, err = run_cli("runs", str(runs_root))
    assert code == 0, err
    assert err.strip() == f"skipped {runs_root / 'notes'}: not a run directory (no readable config.yaml)"
    header, *rows = out.splitlines()
    assert header.split("  ")[0] == "run" and "best valid BLEU" in header and "test signature" in header
    assert [row.split()[0] for row in rows] == ["gru_bahdanau", "transformer"]
    for row, name in zip(rows, ["gru_bahdanau", "transformer"], strict=True):
        want = expected_row(runs_root / name)
        cells = row.split()
        assert cells[:5] == [name, name, f"{want['parameters']:,}", "book", "en-fr"]
        assert cells[5:8] == [str(want["steps"]), f"{want['minutes']:.1f}", "epochs"]
        assert cells[8] == f"{want['valid_bleu']:.2f}"
        if want["test_bleu"] is None:
            assert cells[9:] == [
                "-",
                "-",
                f"{want['tokens_per_s']:,.0f}",
                "-",
                "-",
            ]  # no parent: not fine-tuned
        else:
            assert cells[9:] == [
                f"{want['test_bleu']:.2f}",
                f"{want['test_chrf']:.2f}",
                f"{want['tokens_per_s']:,.0f}",
                want["test_signature"],
                "-",
            ]
    assert all(len(line) > 0 for line in out.splitlines())


def test_runs_json_holds_the_raw_values(runs_root, run_cli):
    code, out, _ = run_cli("runs", str(runs_root), "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["gru_bahdanau", "transformer"]
    for row in rows:
        want = expected_row(runs_root / row["name"])
        assert row == pytest.approx(want)
    assert rows[1]["test_signature"].startswith("nrefs:") and rows[0]["test_bleu"] is None


def test_runs_sort_puts_high_numbers_first_and_empty_cells_last(runs_root, run_cli):
    def names(*options: str) -> list[str]:
        code, out, err = run_cli("runs", str(runs_root), "--json", *options)
        assert code == 0, err
        return [r["name"] for r in json.loads(out)]

    assert names("--sort", "test_bleu") == ["transformer", "gru_bahdanau"]  # the GRU has no test score
    assert names("--sort", "name") == ["gru_bahdanau", "transformer"]
    params = {name: expected_row(runs_root / name)["parameters"] for name in ("gru_bahdanau", "transformer")}
    assert names("--sort", "parameters") == sorted(params, key=params.get, reverse=True)
    code, _, err = run_cli("runs", str(runs_root), "--sort", "bleu")
    assert code == 2 and "--sort bleu: not a column; choose one of name, model, parameters" in err


def test_runs_takes_run_directories_too_and_marks_a_run_without_summary_unfinished(
    runs_root, tmp_path, run_cli
):
    killed = tmp_path / "killed"
    shutil.copytree(runs_root / "gru_bahdanau", killed)
    (killed / "run_summary.json").unlink()  # a first session killed before it wrote its summary
    missing = tmp_path / "nowhere"
    code, out, err = run_cli("runs", str(runs_root / "transformer"), str(killed), str(missing), "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["transformer", "killed"]
    last_window = [r for r in read_metrics(killed / "metrics.jsonl") if "tokens_per_s" in r][-1]
    assert (rows[1]["stop"], rows[1]["parameters"]) == ("unfinished", None)
    assert rows[1]["tokens_per_s"] == last_window["tokens_per_s"]
    assert rows[1]["steps"] == expected_row(runs_root / "gru_bahdanau")["steps"]
    assert err.strip() == f"skipped {missing}: no such directory"


def test_runs_without_any_run_says_so(tmp_path, run_cli):
    code, out, err = run_cli("runs", str(tmp_path))
    assert code == 0
    assert out.splitlines()[0].startswith("run ") and len(out.splitlines()) == 1
    assert f"no run directories in {tmp_path}" in err
