"""The chapter's exercise switches (model.positional_encoding, model.norm, model.scoring): each trains,
checkpoints, reloads and translates; each does what its name says; the book's default is unchanged; the
places that cannot express a switch refuse it by name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.synthetic import TINY, TINY_EVERY_STEP, close_run_log, reverse_pairs, write_corpus

from attn_mt.config import ConfigError, ModelConfig, config_from_dict, load_config
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Sampling
from attn_mt.errors import UserError
from attn_mt.lab.exercises import learned_or_no_positions
from attn_mt.lab.inputs import LabError
from attn_mt.lab.stepping import stepping_panel
from attn_mt.lab.transformer import transformer_panel
from attn_mt.models.bahdanau import GRUBahdanau
from attn_mt.models.build import build_model
from attn_mt.models.transformer import Transformer
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.run_dir import load_run
from attn_mt.shipping.average import average_weights
from attn_mt.shipping.ctranslate2_export import _check_transformer
from attn_mt.training.launch import train

SWITCHES = {
    "learned": ["model.positional_encoding=learned", "model.max_positions=32"],
    "none": ["model.positional_encoding=none"],
    "batch": ["model.norm=batch"],
    "dot": ["model.type=gru_bahdanau", "model.scoring=dot"],
}
SENTENCES = [en for en, _ in reverse_pairs(6, seed=3)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("switches") / "reverse.txt", n=120)


def fit(run_dir: Path, corpus: Path, overrides: list[str]) -> Path:
    """Two epochs of configs/tiny.yaml + `overrides` (train.kernels auto: plain torch for a switch)."""
    threads = torch.get_num_threads()
    try:
        cfg = load_config(TINY, [*TINY_EVERY_STEP, *overrides])
        train(cfg, run_dir, data_path=str(corpus), quiet=True, device="cpu")
    finally:
        torch.set_num_threads(threads)
        close_run_log()
    return run_dir


@pytest.fixture(scope="module", params=sorted(SWITCHES))
def switched_run(request, corpus) -> tuple[str, Path]:
    """A tiny run with one switch."""
    return request.param, fit(corpus.parent / request.param, corpus, SWITCHES[request.param])


def test_a_switched_run_trains_reloads_and_translates(switched_run):
    case, run_dir = switched_run
    summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    assert summary["kernels"] == "reference"  # the CPU kernels implement the book's blocks only
    run = load_run(run_dir)  # built from config.yaml, its checkpoint loaded strictly
    key = {"learned": "positional_encoding", "none": "positional_encoding", "batch": "norm", "dot": "scoring"}
    assert run.config.model.switches == {f"model.{key[case]}": case}
    weights = load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]
    if case == "learned":
        assert weights["encoder.pos_encoding.P"].shape == (1, 32, 16)
        assert "decoder.pos_encoding.P" in weights
    if case == "batch":
        mean = weights["encoder.blks.block0.addnorm1.bn.running_mean"]
        assert not torch.equal(mean, torch.zeros_like(mean))  # statistics gathered while training
        assert int(weights["encoder.blks.block0.addnorm1.bn.num_batches_tracked"]) > 0
        assert not any(".ln." in key for key in weights)
    if case == "dot":
        assert not any(key.startswith("decoder.attention.") for key in weights)  # no scoring parameters
    for beam in (1, 2):
        results = translator_for(run, run.config).translate(SENTENCES, beam_size=beam)
        assert len(results) == len(SENTENCES)
        assert all(math.isfinite(r.hypotheses[0].score) for r in results)  # two epochs: words, not good ones


@pytest.mark.parametrize("case", sorted(SWITCHES))
def test_step_by_step_decoding_matches_teacher_forcing(case):
    """The cached one-step path (learned rows at an offset, BatchNorm's running statistics) is the
    teacher-forced pass."""
    cfg = load_config(TINY, ["model.num_layers=2", *SWITCHES[case]]).model
    torch.manual_seed(0)
    model = build_model(cfg, 20, 20)
    if case == "batch":  # running statistics away from the initial 0 and 1
        model.train()
        model(torch.randint(4, 20, (8, 6)), torch.full((8,), 6), torch.randint(4, 20, (8, 5)))
    model.eval()
    src, src_lens = torch.randint(4, 20, (3, 6)), torch.tensor([6, 4, 2])
    tgt = torch.randint(4, 20, (3, 5))
    with torch.no_grad():
        forced = model(src, src_lens, tgt)  # (B, T, V)
        state = model.init_state(model.encode(src, src_lens))
        steps = []
        for t in range(tgt.shape[1]):
            logits, state, _ = model.step(tgt[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), forced, atol=1e-5, rtol=1e-5)


def encoder_outputs(model: Transformer, src: torch.Tensor) -> torch.Tensor:
    """Memory (B, S, H) of `src` with every position valid."""
    return model.encode(src, torch.full((src.shape[0],), src.shape[1]))["memory"]


def test_no_positions_make_the_encoder_permutation_equivariant():
    torch.manual_seed(0)
    src = torch.tensor([[5, 9, 7, 12, 6, 3]])  # (1, S)
    permutation = torch.tensor([3, 0, 5, 1, 4, 2])
    for kind, equivariant in (("none", True), ("sinusoidal", False), ("learned", False)):
        model = build_model(ModelConfig(type="transformer", positional_encoding=kind), 20, 20).eval()
        with torch.no_grad():
            memory, permuted = encoder_outputs(model, src), encoder_outputs(model, src[:, permutation])
        same = torch.allclose(permuted, memory[:, permutation], atol=1e-5)
        assert same == equivariant, kind


def test_learned_positions_are_parameters_and_refuse_a_longer_input():
    cfg = ModelConfig(type="transformer", positional_encoding="learned", max_positions=8)
    model = build_model(cfg, 20, 20)
    names = dict(model.named_parameters())
    assert names["encoder.pos_encoding.P"].shape == (1, 8, 32)
    assert names["decoder.pos_encoding.P"].requires_grad
    with pytest.raises(UserError, match=r"9 positions is longer than the learned position table"):
        model.encode(torch.randint(4, 20, (1, 9)), torch.tensor([9]))


def test_batch_norm_normalises_each_feature_over_the_batch_rows():
    model = build_model(ModelConfig(type="transformer", norm="batch"), 20, 20).train()
    addnorm = model.encoder.blks["block0"].addnorm1
    X, Y = torch.randn(4, 6, 32) * 3 + 1, torch.randn(4, 6, 32)
    addnorm.dropout.p = 0.0
    out = addnorm(X, Y).reshape(-1, 32)  # (B * N, H)
    torch.testing.assert_close(out.mean(0), torch.zeros(32), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(0, unbiased=False), torch.ones(32), atol=1e-3, rtol=0)
    assert not torch.equal(addnorm.bn.running_mean, torch.zeros(32))


def test_dot_scoring_weights_are_the_scaled_dot_products_softmaxed():
    torch.manual_seed(1)
    model = build_model(ModelConfig(scoring="dot"), 20, 20).eval()
    assert isinstance(model, GRUBahdanau)
    src, src_lens = torch.randint(4, 20, (2, 7)), torch.tensor([7, 4])
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_lens))
        query, keys = state["hidden"][-1], state["memory"]  # (B, H), (B, S, H)
        _, _, attention = model.step(torch.tensor([2, 2]), state, need_attention=True)
    scores = torch.einsum("bh,bsh->bs", query, keys) / math.sqrt(32)  # (B, S)
    scores[1, 4:] = float("-inf")  # the second source has 4 valid tokens
    torch.testing.assert_close(attention["cross"], F.softmax(scores, dim=-1), atol=1e-6, rtol=1e-6)
    assert torch.all(attention["cross"][1, 4:] == 0)


def test_the_default_is_the_book_architecture():
    assert ModelConfig().switches == {}
    book = load_config(Path(TINY).parent / "d2l_transformer.yaml")
    assert book.model.switches == {}
    raw = book.to_dict()
    for key in ("positional_encoding", "max_positions", "norm", "scoring"):  # a config saved before the keys
        del raw["model"][key]
    assert config_from_dict(raw, saved=True) == book
    model = build_model(book.model, 20, 20)
    keys = set(model.state_dict())
    assert "encoder.blks.block0.addnorm1.ln.weight" in keys
    assert not any("pos_encoding" in key or ".bn." in key for key in keys)  # the table stays a buffer
    bahdanau = build_model(ModelConfig(), 20, 20)
    assert "decoder.attention.W_q.weight" in bahdanau.state_dict()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.type=transformer", "model.norm=group"], "model.norm: 'group' is not one of layer, batch"),
        (["model.scoring=dott"], "model.scoring: 'dott' is not one of additive, dot (did you mean 'dot'?)"),
        (
            ["model.type=transformer", "model.scoring=dot"],
            "model.scoring: 'dot' applies to model.type 'gru_bahdanau' only, but model.type is 'transformer'",
        ),
        (["model.positional_encoding=learned"], "applies to model.type 'transformer' only"),
        (["model.type=transformer", "model.max_positions=0"], "model.max_positions: must be > 0, got 0"),
        (
            ["model.type=transformer", "model.norm=batch", "train.kernels=cpu"],
            "train.kernels: cpu runs the book's architecture only, but model.norm is 'batch'",
        ),
        (["model.positional_enconding=none"], "did you mean model.positional_encoding?"),
    ],
)
def test_bad_switches_are_named(overrides, message):
    with pytest.raises(ConfigError) as caught:
        load_config(Path(TINY).parent / "d2l_bahdanau.yaml", overrides)
    assert message in str(caught.value)


def test_exports_refuse_and_average_keeps_batch_statistics(switched_run):
    case, run_dir = switched_run
    run = load_run(run_dir)
    if case != "dot":
        with pytest.raises(UserError, match=r"--format ctranslate2 expresses the book's architecture only"):
            _check_transformer(run)
        with pytest.raises(LabError, match=r"this panel draws the book's Transformer"):
            transformer_panel({"run": run}, {"sentence": "alpha hotel ."})
    else:
        with pytest.raises(LabError, match=r"scores with model.scoring: dot"):
            stepping_panel({"run": run}, {"sentence": "alpha hotel ."})
    state = run.model.state_dict()
    later = {name: tensor + 1 if tensor.is_floating_point() else tensor * 2 for name, tensor in state.items()}
    averaged = average_weights([state, later])
    for name, tensor in state.items():
        if name.endswith("num_batches_tracked"):
            assert torch.equal(averaged[name], tensor * 2)  # the later checkpoint's count
        elif tensor.is_floating_point():
            torch.testing.assert_close(averaged[name], tensor + 0.5)


def test_the_lab_compares_opened_runs_that_differ_in_a_switch(corpus):
    runs = {
        name: load_run(fit(corpus.parent / f"lab-{name}", corpus, ["model.positional_encoding=" + name]))
        for name in ("sinusoidal", "none")
    }
    losses = {
        name: json.loads((run.source / "run_summary.json").read_text(encoding="utf-8"))["final_loss"]
        for name, run in runs.items()
    }
    found = learned_or_no_positions(runs)["found"]
    for name, loss in losses.items():
        assert f"{name} (model.positional_encoding: {name}) {loss:.4f}" in found
    assert "Their configs differ only in model.positional_encoding." in found
    alone = learned_or_no_positions({"sinusoidal": runs["sinusoidal"]})["found"]
    assert (
        alone.startswith("Measured, not computed now: on a 2-core AMD EPYC")
        and "--set model.positional_encoding=" in alone
    )


def test_a_learned_table_too_short_for_the_data_is_refused_before_the_run_directory(
    corpus, tmp_path, run_cli
):
    """`validate` refuses a table shorter than data.max_len allows; `train` one shorter than a valid sentence
    before it makes the run directory, so the corrected command starts it; and the search never asks the
    table for a position it lacks (outputs stop at model.max_positions tokens with <eos>)."""
    learned = ["--set", "model.type=transformer", "--set", "model.positional_encoding=learned"]
    checked = run_cli("validate", str(TINY), *learned, "--set", "model.max_positions=3")
    assert checked.returncode == 2
    assert "model.max_positions: a learned table of 3 positions is shorter than the training sentences " in (
        checked.stderr
    )
    run_dir = tmp_path / "run"
    settings = [*learned, "--set", "data.max_len=5", "--set", "train.epochs=1"]
    for option in TINY_EVERY_STEP:
        settings += ["--set", option]
    args = ["train", str(TINY), "--data", str(corpus), "--run-dir", str(run_dir), "-q", *settings]
    refused = run_cli(*args, "--set", "model.max_positions=5")
    close_run_log()
    assert refused.returncode == 2 and "the valid split holds" in refused.stderr, refused.stderr
    assert "raise model.max_positions to 7" in refused.stderr  # 6 words and <eos> (reverse_pairs)
    assert not run_dir.exists()
    corrected = run_cli(*args, "--set", "model.max_positions=7")
    close_run_log()
    assert corrected.returncode == 0, corrected.stderr
    engine = translator_for(load_run(run_dir))
    long_sentence = " ".join(["golf"] * 8) + " ."  # allowed 1.5 x 11 + 5 = 21 output tokens without the table
    drawn = engine.translate([long_sentence] * 3, sampling=Sampling(samples=4, temperature=100.0, seed=1))
    lengths = [len(h.tokens) + 1 for t in drawn for h in t.hypotheses]
    assert max(lengths) == 7  # a nearly uniform draw rarely ends: the table's size stops it
    beams = engine.translate([long_sentence], beam_size=3, nbest=3)[0].hypotheses
    assert all(len(h.tokens) < 7 for h in beams)
    assert engine.translate([long_sentence], beam_size=1, prefix=["un " * 6])[0].text.startswith("un un")
    with pytest.raises(UserError, match="the output of its sentence may hold at most 6"):
        engine.translate([long_sentence], beam_size=1, prefix=["un " * 7])
