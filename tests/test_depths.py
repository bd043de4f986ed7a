"""Encoder and decoder depths apart (model.encoder_layers, model.decoder_layers): a 3-1 Transformer and a 2-1
GRU train, resume exactly and export (CTranslate2, ONNX) with the same outputs; runs saved before the two keys
existed load and resume as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from support.helpers import onnx_greedy_is_torchs
from support.near_ties import assert_decodings_agree
from support.synthetic import (
    SUBWORD_RUN_SETTINGS,
    TINY,
    TINY_EVERY_STEP,
    close_run_log,
    reverse_pairs,
    write_corpus,
)
from support.tolerances import decoding_terms

from attn_mt.config import load_config
from attn_mt.decoding.engines import translator_for
from attn_mt.errors import UserError
from attn_mt.run.checkpoint import load_checkpoint, save_checkpoint
from attn_mt.run.open import open_model
from attn_mt.run.run_dir import load_run, read_metrics
from attn_mt.shipping.ctranslate2_export import export_ctranslate2
from attn_mt.training.launch import train

SENTENCES = [en for en, _ in reverse_pairs(40, seed=5)]
SEARCH_TERMS = decoding_terms(steps=12, widest=64, keys_or_vocab=320)  # tests/test_ctranslate2.py's
RESUMED = ["train.log_every=1", "train.valid_every=3", "train.epochs=3", "train.threads=1"]
RUNS = {
    # a deep encoder and a one-block decoder, sentencepiece as the CTranslate2 tests' run
    "transformer-3-1": [*SUBWORD_RUN_SETTINGS, "model.encoder_layers=3", "model.decoder_layers=1", *RESUMED],
    # two encoder GRU layers, one decoder layer that starts from the encoder's top layer; dropout between
    # the encoder's layers (the CPU kernels draw it)
    "gru-2-1": [
        *TINY_EVERY_STEP,
        "model.type=gru_bahdanau",
        "model.num_layers=2",
        "model.decoder_layers=1",
        "model.dropout=0.2",
        *RESUMED,
    ],
}


def fit(run_dir: Path, corpus: Path, overrides: list[str], resume: bool = False):
    """Train configs/tiny.yaml + `overrides` (or resume with that config); torch's threads left as found."""
    threads = torch.get_num_threads()
    try:
        cfg = load_config(TINY, overrides)
        return train(cfg, run_dir, data_path=str(corpus), resume=resume, quiet=True, device="cpu")
    finally:
        torch.set_num_threads(threads)
        close_run_log()


def losses(run_dir: Path) -> list[tuple]:
    """Everything in metrics.jsonl except wall-clock figures."""
    return [
        tuple(sorted((k, v) for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")))
        for r in read_metrics(run_dir / "metrics.jsonl")
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("depths") / "reverse.txt", n=300)


@pytest.fixture(scope="module", params=sorted(RUNS))
def straight(request, corpus) -> tuple[str, Path]:
    """One uninterrupted run of each case."""
    run_dir = corpus.parent / request.param / "straight"
    fit(run_dir, corpus, RUNS[request.param])
    return request.param, run_dir


def test_runs_have_the_depths_and_resume_exactly(straight, corpus):
    case, straight_dir = straight
    run = load_run(straight_dir)
    if case.startswith("transformer"):
        assert (len(run.model.encoder.blks), len(run.model.decoder.blks)) == (3, 1)
    else:
        assert (run.model.encoder.rnn.num_layers, run.model.decoder.rnn.num_layers) == (2, 1)
    saved = yaml.safe_load((straight_dir / "config.yaml").read_text(encoding="utf-8"))["model"]
    assert saved["decoder_layers"] == 1
    resumed = straight_dir.parent / "resumed"
    first = fit(resumed, corpus, [*RUNS[case], "train.max_steps=5"])
    assert first.stopped_because == "max_steps" and first.step == 5
    second = fit(resumed, corpus, RUNS[case], resume=True)
    assert second.stopped_because == "epochs" and second.step > 5
    assert losses(resumed) == losses(straight_dir)
    a, b = (
        load_checkpoint(straight_dir / "checkpoints" / "last.pt"),
        load_checkpoint(resumed / "checkpoints" / "last.pt"),
    )
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_the_3_1_transformer_exports_to_ctranslate2_with_the_same_outputs(straight, tmp_path):
    case, run_dir = straight
    if not case.startswith("transformer"):
        with pytest.raises(UserError, match="exports Transformer runs only"):
            export_ctranslate2(run_dir, tmp_path / "ct2")
        return
    folder = export_ctranslate2(run_dir, tmp_path / "ct2")
    run, exported = load_run(run_dir), open_model(folder, device="cpu")
    torch_side, ct2_side = translator_for(run, run.config), translator_for(exported, run.config)
    for beam in (1, 2):
        expected = torch_side.translate(SENTENCES, beam_size=beam)
        got = ct2_side.translate(SENTENCES, beam_size=beam)
        assert_decodings_agree(
            torch_side, expected, got, beam=beam, terms=SEARCH_TERMS, other_search_rules=True
        )
    assert any(len(r.hypotheses[0].tokens) > 2 for r in expected)
    assert "decoder layer 1 of 1" in ct2_side.attention_description()


def test_both_export_to_onnx_with_the_same_greedy_outputs(straight, tmp_path, run_cli):
    _, run_dir = straight
    onnx_greedy_is_torchs(run_dir, tmp_path / "onnx", run_cli, SENTENCES[:8])


def test_runs_saved_before_the_depth_keys_load_and_resume(corpus, tmp_path):
    """Config and checkpoints without encoder_layers/decoder_layers: num_layers on each side, as before."""
    run_dir = tmp_path / "old"
    settings = [*TINY_EVERY_STEP, "model.type=transformer", "model.num_layers=2", "train.max_steps=2"]
    fit(run_dir, corpus, settings)
    before = load_run(run_dir)
    expected = translator_for(before, before.config).translate(SENTENCES[:5], beam_size=1)
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    for key in ("encoder_layers", "decoder_layers"):
        del config["model"][key]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for path in (run_dir / "checkpoints").glob("*.pt"):
        state = load_checkpoint(path)
        for key in ("encoder_layers", "decoder_layers"):
            del state["config"]["model"][key]
        save_checkpoint(state, path)
    after = load_run(run_dir)
    assert after.config.model.depths == (2, 2)
    got = translator_for(after, after.config).translate(SENTENCES[:5], beam_size=1)
    assert [r.text for r in got] == [r.text for r in expected]
    assert fit(run_dir, corpus, [*settings[:-1], "train.max_steps=3"], resume=True).step == 3
    config["model"]["decoder_layers"] = 1  # a config.yaml edited to another depth than its checkpoint's
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    with pytest.raises(UserError, match="the decoder has 2 layers in the checkpoint but 1 in the run"):
        load_run(run_dir)
