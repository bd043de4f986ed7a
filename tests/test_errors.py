"""Walk docs/errors.md: every listed mistake gives exit code 2 and its documented message, no traceback."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from support.synthetic import write_corpus

from attn_mt.commands.evaluate import run_eval
from attn_mt.commands.export import run_export
from attn_mt.config import load_config
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.kept_checkpoints import INFERENCE_KEYS
from attn_mt.training.launch import train

ROOT = Path(__file__).resolve().parent.parent
ERRORS_DOC = ROOT / "docs" / "errors.md"


def documented_cases() -> dict[str, str]:
    """id -> expected message fragment, from the table in docs/errors.md."""
    cases = {}
    for line in ERRORS_DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[0] not in ("id", "---"):
            cases[cells[0]] = cells[3].strip("`")
    return cases


def write_encrypted_zip(path: Path, member: str, text: str) -> None:
    """A zip whose one member is flagged as password-protected (zipfile cannot write real encryption)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, text)
    data = bytearray(path.read_bytes())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.index(signature) + flags_at] |= 0x1
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """Files every case needs, and one small book-mode run directory RUN."""
    ws = tmp_path_factory.mktemp("errors")
    (ws / "empty.yaml").write_text("")
    (ws / "broken.yaml").write_text("train:\n  lr: 0.1\n lr2: : 3\n")
    (ws / "typo.yaml").write_text("train:\n  lrr: 0.1\n")
    (ws / "list.yaml").write_text("- train\n- model\n")
    (ws / "dup.yaml").write_text("train:\n  lr: 0.1\n  lr: 0.2\n")
    (ws / "somedir").mkdir()
    (ws / "notzip.zip").write_text("hello\n")
    with zipfile.ZipFile(ws / "nomember.zip", "w") as archive:
        archive.writestr("other/readme.md", "x")
    write_encrypted_zip(ws / "encrypted.zip", "fra-eng/fra.txt", "Go.\tVa !\n")
    (ws / "empty.txt").write_text("")
    (ws / "notab.txt").write_text("Go.\tVa !\nHi. Salut !\n")
    (ws / "columns.txt").write_text("Go.\tVa !\nHi. Salut !\nRun!\tCours !\nWow! Ça alors !\n")
    (ws / "three.en").write_text("One.\nTwo.\nThree.\n")
    (ws / "two.fr").write_text("Un.\nDeux.\n")
    (ws / "three.fr").write_text("Un.\nDeux.\nTrois.\n")
    (ws / "gap.en").write_text("One.\n\nThree.\n")
    (ws / "latin1.txt").write_bytes("Go.\tVa !\nHi.\tSalut !\nOk.\tD\xe9j\xe0\n".encode("latin-1"))
    (ws / "incomplete").mkdir()
    (ws / "ct2folder").mkdir()
    (ws / "ct2folder" / "model.bin").write_bytes(b"")  # taken for a CTranslate2 folder by its model.bin
    (ws / "notes").mkdir()
    (ws / "notes" / "thesis.tex").write_text("not a run\n")
    corpus = write_corpus(ws / "reverse.txt", n=120)
    cfg = load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.epochs=1"])
    train(cfg, ws / "RUN", data_path=str(corpus), quiet=True, device="cpu")
    train(cfg, ws / "NOCKPT", data_path=str(corpus), quiet=True, device="cpu")
    dot = load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.epochs=1", "model.scoring=dot"])
    train(dot, ws / "DOTRUN", data_path=str(corpus), quiet=True, device="cpu")
    run_eval(ws / "RUN", "book", None, 0, None, "best", None, "cpu")
    subwords = [
        "data.mode=split",
        "data.tokenizer=sentencepiece",
        "data.vocab_size=300",
        "data.valid_size=5",
        "data.test_size=5",
        "data.max_tokens=400",
        "train.epochs=1",
        "train.best_metric=valid_loss",
    ]
    train(
        load_config(ROOT / "configs" / "tiny.yaml", subwords),
        ws / "SPRUN",
        data_path=str(corpus),
        quiet=True,
        device="cpu",
    )
    edits = {
        "NOVALID": {"data": {"valid_size": 0}, "train": {"best_metric": "train_loss"}},
        "NBEST": {"decode": {"nbest": 2}},
    }
    for name, sections in edits.items():
        shutil.copytree(ws / "SPRUN", ws / name)  # a run whose config.yaml says so (tune reads it first)
        config = yaml.safe_load((ws / name / "config.yaml").read_text(encoding="utf-8"))
        for section, values in sections.items():
            config[section].update(values)
        (ws / name / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    shutil.copytree(ws / "SPRUN", ws / "HISTORYDIR")
    (ws / "HISTORYDIR" / "config_history.jsonl").mkdir()  # tune --write cannot write its history there
    shutil.copytree(ws / "SPRUN", ws / "HISTORYBYTES")
    (ws / "HISTORYBYTES" / "config_history.jsonl").write_bytes(b'{"step": 0, "by": "caf\xe9"}\n')
    shutil.copytree(ws / "SPRUN", ws / "BADSUMMARY")
    (ws / "BADSUMMARY" / "run_summary.json").write_text("{", encoding="utf-8")
    run_export(ws / "SPRUN", ws / "sprun.pt", "best", "pt", None)
    configs_alone = (
        ("BOOKTF", "d2l_transformer.yaml", []),
        ("WORDTF", "tiny.yaml", []),
        ("BATCHTF", "d2l_transformer.yaml", ["model.norm=batch"]),
    )
    for name, config, sets in configs_alone:
        (ws / name).mkdir()
        (ws / name / "config.yaml").write_text(load_config(ROOT / "configs" / config, sets).to_yaml())
        for vocab in ("src_vocab.json", "tgt_vocab.json"):
            shutil.copyfile(ws / "RUN" / vocab, ws / name / vocab)
    for checkpoint in (ws / "NOCKPT" / "checkpoints").iterdir():
        checkpoint.unlink()
    state = load_checkpoint(ws / "RUN" / "checkpoints" / "last.pt")
    state["config"]["model"]["num_hiddens"] = 64
    torch.save(state, ws / "other.pt")
    state = load_checkpoint(ws / "RUN" / "checkpoints" / "last.pt")
    state["tgt_vocab"][4], state["tgt_vocab"][5] = state["tgt_vocab"][5], state["tgt_vocab"][4]
    torch.save(state, ws / "other-vocab.pt")
    torch.save({"model": {}, "payload": os.system}, ws / "evil.pt")
    (ws / "damaged.pt").write_bytes((ws / "RUN" / "checkpoints" / "last.pt").read_bytes()[:2000])
    state = load_checkpoint(ws / "RUN" / "checkpoints" / "last.pt")
    torch.save({k: state[k] for k in INFERENCE_KEYS}, ws / "kept.pt")  # no optimiser state
    shutil.copytree(ws / "RUN", ws / "NOLAST")
    (ws / "NOLAST" / "checkpoints" / "last.pt").unlink()
    foreign = load_checkpoint(ws / "RUN" / "checkpoints" / "last.pt")
    foreign = {"model": dict(list(foreign["model"].items())[:-1])}
    torch.save(foreign, ws / "foreign.pt")
    return ws


CASES: dict[str, list[str]] = {
    "missing-config": ["train", "missing.yaml"],
    "empty-config": ["validate", "empty.yaml"],
    "yaml-syntax": ["validate", "broken.yaml"],
    "config-not-mapping": ["validate", "list.yaml"],
    "config-is-directory": ["validate", "somedir"],
    "duplicate-key": ["validate", "dup.yaml"],
    "unknown-key": ["validate", "typo.yaml"],
    "explain-unknown-key": ["validate", "--explain", "train.lrr"],
    "validate-nothing": ["validate"],
    "wrong-type": ["train", "--set", "train.lr=fast", "--run-dir", "new"],
    "bad-choice": ["train", "--set", "model.type=lstm", "--run-dir", "new"],
    "switch-bad-value": ["train", "--set", "model.positional_encoding=rotary", "--run-dir", "new"],
    "switch-wrong-model": ["train", "--set", "model.norm=batch", "--run-dir", "new"],
    "switch-with-kernels": [
        "train",
        "--set",
        "model.scoring=dot",
        "--set",
        "train.kernels=cpu",
        "--run-dir",
        "new",
    ],
    "negative-size": ["train", "--set", "model.num_hiddens=-3", "--run-dir", "new"],
    "not-finite": ["train", "--set", "train.lr=.nan", "--run-dir", "new"],
    "blank-timeline-probe": ["train", "--set", 'train.timeline_probes=[" "]', "--run-dir", "new"],
    "no-valid-split": [
        "train",
        "--set",
        "data.mode=split",
        "--set",
        "data.valid_size=0",
        "--set",
        "train.best_metric=valid_loss",
        "--run-dir",
        "new",
    ],
    "impossible-combination": [
        "train",
        "--set",
        "model.type=transformer",
        "--set",
        "model.num_heads=5",
        "--run-dir",
        "new",
    ],
    "kernels-with-compile": [
        "train",
        "--set",
        "train.kernels=cpu",
        "--set",
        "train.compile=true",
        "--run-dir",
        "new",
    ],
    "learned-positions-too-short": [
        "train",
        "--set",
        "model.type=transformer",
        "--set",
        "model.positional_encoding=learned",
        "--set",
        "model.max_positions=3",
        "--run-dir",
        "new",
    ],
    "learned-positions-valid-split": [
        "train",
        "--data",
        "reverse.txt",
        "--run-dir",
        "new",
        "--set",
        "data.mode=split",
        "--set",
        "model.type=transformer",
        "--set",
        "model.positional_encoding=learned",
        "--set",
        "data.max_len=4",
        "--set",
        "model.max_positions=4",
        "--set",
        "data.valid_size=5",
        "--set",
        "data.test_size=5",
    ],
    "bad-set": ["train", "--set", "train.lr", "--run-dir", "new"],
    "bad-set-value": ["train", "--set", "train.adam_betas=[0.9", "--run-dir", "new"],
    "missing-data": ["data-report", "--data", "missing.zip"],
    "check-missing-file": ["check", "missing.py"],
    "check-unknown-block": ["check", "missing.py", "--block", "masked_sofmax"],
    "check-bad-timeout": ["check", "missing.py", "--timeout", "nan"],
    "missing-env-data": ["data-report"],
    "not-a-zip": ["data-report", "--data", "notzip.zip"],
    "zip-without-member": ["data-report", "--data", "nomember.zip"],
    "encrypted-zip": ["data-report", "--data", "encrypted.zip"],
    "data-is-directory": ["data-report", "--data", "somedir"],
    "empty-corpus": ["data-report", "--data", "empty.txt"],
    "no-tab": ["data-report", "--data", "notab.txt"],
    "not-utf8": ["data-report", "--data", "latin1.txt"],
    "bad-columns": ["data-report", "--data", "columns.txt"],
    "line-counts-differ": ["data-report", "--set", "data.path=[three.en, two.fr]"],
    "direction-mismatch": ["train", "--set", "data.direction=de-en", "--run-dir", "new"],
    "subwords-in-book-mode": ["train", "--set", "data.tokenizer=sentencepiece", "--run-dir", "new"],
    "vocab-too-large": [
        "train",
        "--data",
        "reverse.txt",
        "--run-dir",
        "new",
        "--set",
        "data.mode=split",
        "--set",
        "data.tokenizer=sentencepiece",
        "--set",
        "data.vocab_size=50000",
        "--set",
        "data.valid_size=5",
        "--set",
        "data.test_size=5",
    ],
    "empty-train-split": [
        "train",
        "--data",
        "reverse.txt",
        "--run-dir",
        "new",
        "--set",
        "data.mode=split",
        "--set",
        "data.max_len=1",
        "--set",
        "data.valid_size=5",
        "--set",
        "data.test_size=5",
    ],
    "compare-mixed-scoring": ["eval", "SPRUN", "--split", "book", "--compare", "RUN"],
    "existing-run-dir": ["train", "--run-dir", "RUN", "--data", "reverse.txt"],
    "overwrite-foreign-dir": [
        "train",
        "--overwrite",
        "--run-dir",
        "notes",
        "--data",
        "reverse.txt",
        "--set",
        "train.epochs=1",
    ],
    "auto-resume-foreign-dir": ["train", "--auto-resume", "--run-dir", "notes", "--data", "reverse.txt"],
    "init-from-other-model": [
        "train",
        str(ROOT / "configs" / "tiny.yaml"),
        "--init-from",
        "RUN",
        "--run-dir",
        "new",
    ],
    "init-from-model-key": [
        "train",
        "--init-from",
        "RUN",
        "--set",
        "model.num_hiddens=64",
        "--run-dir",
        "new",
    ],
    "init-from-damaged": ["train", "--init-from", "RUN:damaged.pt", "--run-dir", "new"],
    "init-from-missing": ["train", "--init-from", "missing-run", "--run-dir", "new"],
    "resume-nothing": ["train", "--resume", "--run-dir", "fresh"],
    "resume-fixed-key": ["train", "--resume", "--run-dir", "RUN", "--set", "train.lr=0.1"],
    "keep-optimizer-without-state": [
        "train",
        "--init-from",
        "RUN:kept.pt",
        "--keep-optimizer",
        "--run-dir",
        "new",
        "--data",
        "reverse.txt",
    ],
    "init-from-own-run": ["train", "--init-from", "RUN", "--run-dir", "RUN", "--overwrite"],
    "auto-resume-without-last": ["train", "--auto-resume", "--run-dir", "NOLAST", "--data", "reverse.txt"],
    "missing-run-dir": ["translate", "missing-run", "go ."],
    "incomplete-run-dir": ["eval", "incomplete"],
    "no-checkpoint": ["translate", "NOCKPT", "go ."],
    "beam-zero": ["translate", "RUN", "--beam", "0", "go ."],
    "nbest-over-beam": ["translate", "RUN", "--beam", "2", "--nbest", "3", "go ."],
    "beam-too-large": ["translate", "RUN", "--beam", "17", "go ."],
    "length-penalty-too-large": ["translate", "RUN", "--length-penalty", "5000", "go ."],
    "eval-length-penalty-too-large": ["eval", "RUN", "--split", "book", "--length-penalty", "5000"],
    "score-length-penalty-too-large": [
        "score",
        "RUN",
        "--source",
        "three.en",
        "--target",
        "three.en",
        "--length-penalty",
        "5000",
    ],
    "decode-out-of-bounds": ["train", "--set", "decode.beam_size=17", "--run-dir", "new"],
    "missing-input": ["translate", "RUN", "--input", "missing.txt"],
    "input-is-directory": ["translate", "RUN", "--input", "somedir"],
    "output-is-directory": ["translate", "RUN", "-o", "somedir", "go ."],
    "report-path-is-directory": ["data-report", "--data", "reverse.txt", "--json", "somedir"],
    "input-not-utf8": ["translate", "RUN", "--input", "latin1.txt"],
    "bad-split": ["eval", "RUN", "--split", "dev"],
    "book-run-test-split": ["eval", "RUN", "--split", "test"],
    "tune-book-run": ["tune", "RUN"],
    "tune-no-valid-split": ["tune", "NOVALID"],
    "tune-bad-list": ["tune", "SPRUN", "--beams", "1,four"],
    "tune-repeated-value": ["tune", "SPRUN", "--length-penalties", "1.0,1"],
    "tune-negative-alpha": ["tune", "SPRUN", "--length-penalties=-1,1"],
    "tune-beam-under-nbest": ["tune", "NBEST", "--beams", "1,4"],
    "tune-write-not-a-run": ["tune", "sprun.pt", "--write"],
    "tune-write-damaged-summary": ["tune", "BADSUMMARY", "--write"],
    "tune-write-unwritable": ["tune", "HISTORYDIR", "--write"],
    "tune-write-history-not-utf8": ["tune", "HISTORYBYTES", "--write"],
    "tune-alpha-too-large": ["tune", "SPRUN", "--length-penalties", "0.6,12"],
    "tune-beam-too-large": ["tune", "SPRUN", "--beams", "1,17"],
    "unsafe-checkpoint": ["translate", "RUN", "--checkpoint", "evil.pt", "go ."],
    "missing-checkpoint-file": ["translate", "RUN", "--checkpoint", "nope.pt", "go ."],
    "damaged-checkpoint": ["translate", "RUN", "--checkpoint", "damaged.pt", "go ."],
    "foreign-weights": ["translate", "RUN", "--checkpoint", "foreign.pt", "go ."],
    "mismatched-checkpoint": ["translate", "RUN", "--checkpoint", "other.pt", "go ."],
    "mismatched-vocabulary": ["translate", "RUN", "--checkpoint", "other-vocab.pt", "go ."],
    "missing-device": ["train", "--device", "cuda", "--run-dir", "new"],
    "bad-device": ["translate", "RUN", "--device", "gpu", "go ."],
    "prefix-unknown-word": ["translate", "RUN", "--prefix", "zebra", "go ."],
    "prefix-too-long": ["translate", "RUN", "--prefix", " ".join(["un"] * 40), "go ."],
    "prefix-twice": ["translate", "RUN", "--prefix", "un", "--prefix-file", "three.en", "go ."],
    "prefix-file-lines": ["translate", "RUN", "--prefix-file", "two.fr", "go ."],
    "prefix-special-token": ["translate", "RUN", "--prefix", "<bos>", "go ."],
    "stdin-twice": ["translate", "RUN", "--input", "-", "--prefix-file", "-"],
    "outputs-same-file": ["translate", "RUN", "-i", "three.en", "-o", "both.txt", "--alignments", "both.txt"],
    "output-is-input": ["translate", "RUN", "-i", "three.en", "-o", "three.en"],
    "sampling-without-sample": ["translate", "RUN", "--top-k", "5", "go ."],
    "sample-zero": ["translate", "RUN", "--sample", "0", "go ."],
    "temperature-zero": ["translate", "RUN", "--sample", "2", "--temperature", "0", "go ."],
    "negative-temperature": ["translate", "RUN", "--sample", "2", "--temperature", "-1", "go ."],
    "negative-top-k": ["translate", "RUN", "--sample", "2", "--top-k", "-1", "go ."],
    "bad-top-p": ["translate", "RUN", "--sample", "2", "--top-p", "1.5", "go ."],
    "negative-seed": ["translate", "RUN", "--sample", "2", "--seed", "-1", "go ."],
    "sample-with-beam": ["translate", "RUN", "--sample", "2", "--beam", "4", "go ."],
    "sample-with-nbest": ["translate", "RUN", "--sample", "2", "--nbest", "2", "--beam", "2", "go ."],
    "alignments-is-directory": ["translate", "RUN", "--alignments", "somedir", "go ."],
    "ensemble-mismatch": ["translate", "RUN", "SPRUN", "go ."],
    "ensemble-ctranslate2": ["eval", "RUN", "ct2folder", "--split", "book"],
    "unknown-demo": ["demo", "attention"],
    "report-not-a-run": ["report", "somedir"],
    "serve-bad-port": ["serve", "RUN", "--port", "70000"],
    "serve-bad-cors-origin": ["serve", "RUN", "--cors-origins", "example.org"],
    "serve-exposed-without-keys": ["serve", "RUN", "--host", "0.0.0.0"],
    "average-too-few": ["average", "RUN", "--last", "2"],
    "bad-quantize": ["translate", "RUN", "--quantize", "int4", "go ."],
    "damaged-export": ["translate", "damaged.pt", "go ."],
    "not-an-export": ["translate", "other.pt", "go ."],
    "onnx-out-is-file": ["export", "RUN", "empty.txt", "--format", "onnx"],
    "onnx-switch": ["export", "DOTRUN", "out", "--format", "onnx"],
    "hf-switch": ["export", "BATCHTF", "hf", "--format", "huggingface"],
    "hf-not-transformer": ["export", "RUN", "hf", "--format", "huggingface"],
    "hf-book-mode": ["export", "BOOKTF", "hf", "--format", "huggingface"],
    "hf-word-level": ["export", "WORDTF", "hf", "--format", "huggingface"],
    "hf-out-not-empty": ["export", "SPRUN", "notes", "--format", "huggingface"],
    "score-line-counts": ["score", "RUN", "--source", "three.en", "--target", "two.fr"],
    "score-outputs-same-file": [
        "score",
        "RUN",
        "--source",
        "three.en",
        "--target",
        "three.fr",
        "-o",
        "b.jsonl",
        "--alignments",
        "b.jsonl",
    ],
    "score-blank-line": ["score", "RUN", "--source", "gap.en", "--target", "three.fr"],
    "score-alignments-is-directory": [
        "score",
        "RUN",
        "--source",
        "three.en",
        "--target",
        "three.en",
        "--alignments",
        "somedir",
    ],
    "score-not-utf8": ["score", "RUN", "--source", "three.en", "--target", "latin1.txt"],
}


def test_every_documented_case_is_tested():
    assert set(documented_cases()) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_documented_error(case, workspace, monkeypatch, run_cli):
    monkeypatch.chdir(workspace)
    if case == "missing-env-data":
        monkeypatch.setenv("ATTN_MT_DATA", "missing.zip")
    if case == "missing-device":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused = run_cli(*CASES[case])
    stderr = refused.stderr
    assert refused.returncode == 2, stderr
    assert documented_cases()[case] in stderr
    assert stderr.startswith("attn-mt: error:") and "Traceback" not in stderr
    assert not (workspace / "new").exists(), "a failed train must not leave a run directory behind"
    assert (workspace / "notes" / "thesis.tex").is_file(), "--overwrite must not delete other folders"
