"""Attention dumps: documented shapes, rows summing to 1, statistics by hand, valid PNG heatmaps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from support.search_fakes import BOS, EOS, PAD, ToyAttentionModel
from support.synthetic import write_corpus
from support.tolerances import assert_float32_close, decoding_terms

from attn_mt.config import ModelConfig, load_config
from attn_mt.decoding.attention import (
    SentenceAttention,
    attention_entropy,
    attention_stats,
    collect_attention,
    key_share,
    trim_maps,
)
from attn_mt.decoding.search import greedy_search
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.attention_dumps import save_attention
from attn_mt.evaluation.plots import attention_figure, plot_training_curves, training_curves_figure
from attn_mt.evaluation.scores import BOOK_SENTENCES
from attn_mt.models.build import build_model
from attn_mt.run.run_dir import load_run
from attn_mt.training.launch import train

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SENTENCE = [3, 4, 5, 6]  # source ids without <eos>
LAYERS, HEADS = 2, 3


def heatmap_panels(fig) -> int:
    return sum(1 for ax in fig.axes if ax.images)


def translate_and_collect(model):
    src_ids = [*SENTENCE, EOS]
    (hyp,) = greedy_search(
        model,
        torch.tensor([src_ids]),
        torch.tensor([len(src_ids)]),
        bos_id=BOS,
        eos_id=EOS,
        need_attention=True,
    )
    source_tokens = [f"s{i}" for i in SENTENCE] + ["<eos>"]
    output_tokens = [f"t{i}" for i in hyp.tokens] + ["<eos>"]
    attention = collect_attention(
        model,
        src_ids,
        hyp.tokens,
        bos_id=BOS,
        source_tokens=source_tokens,
        output_tokens=output_tokens,
        bos_token="<bos>",
    )
    return hyp, attention


def assert_rows_sum_to_one(name, weights):
    rows = weights.sum(axis=-1)
    assert np.allclose(rows, 1.0, atol=1e-5), f"{name}: rows sum to {rows}"


def test_bahdanau_dump(tmp_path):
    model = ToyAttentionModel(heads=0)
    hyp, attention = translate_and_collect(model)
    S, T = len(SENTENCE) + 1, len(hyp.tokens) + 1
    files = save_attention(attention, tmp_path, "sentence_0")
    assert [p.name for p in files] == ["sentence_0.npz", "sentence_0_cross.png", "sentence_0.json"]
    with np.load(tmp_path / "sentence_0.npz") as npz:
        assert sorted(npz.files) == ["cross"]
        cross = npz["cross"]
    assert cross.shape == (T, S)
    assert_rows_sum_to_one("cross", cross)
    np.testing.assert_allclose(cross, hyp.attention.numpy(), atol=1e-6)  # same as the search's own maps
    meta = json.loads((tmp_path / "sentence_0.json").read_text(encoding="utf-8"))
    assert meta["source_tokens"] == ["s3", "s4", "s5", "s6", "<eos>"]
    assert meta["output_tokens"][-1] == "<eos>" and len(meta["output_tokens"]) == T
    assert meta["decoder_input_tokens"] == ["<bos>", *meta["output_tokens"][:-1]]
    assert meta["shapes"] == {"cross": [T, S]}
    assert meta["entropy"] == pytest.approx(float(np.mean(-(cross * np.log(cross)).sum(-1))), abs=1e-6)
    assert meta["eos_share"] == pytest.approx(float(cross[:, -1].mean()), abs=1e-6)
    assert 0.0 < meta["entropy"] < math.log(S)


def test_transformer_dump(tmp_path):
    model = ToyAttentionModel(heads=HEADS, layers=LAYERS)
    hyp, attention = translate_and_collect(model)
    S, T = len(SENTENCE) + 1, len(hyp.tokens) + 1
    files = save_attention(attention, tmp_path, "s")
    assert sorted(p.name for p in files) == sorted(
        ["s.npz", "s.json", "s_encoder_self.png", "s_decoder_self.png", "s_cross.png"]
    )
    with np.load(tmp_path / "s.npz") as npz:
        maps = {name: npz[name] for name in npz.files}
    assert {name: m.shape for name, m in maps.items()} == {
        "encoder_self": (LAYERS, HEADS, S, S),
        "decoder_self": (LAYERS, HEADS, T, T),
        "cross": (LAYERS, HEADS, T, S),
    }
    for name, weights in maps.items():
        assert_rows_sum_to_one(name, weights)
    # Decoder self-attention: query j only sees keys 0..j, so its weights sum to 1 over those alone.
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    assert np.all(maps["decoder_self"][..., future] == 0.0)
    np.testing.assert_allclose(maps["cross"], hyp.attention.permute(1, 2, 0, 3).numpy(), atol=1e-6)
    meta = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert meta["axes"]["cross"] == ["layer", "head", "query (target)", "key (source)"]
    assert np.array(meta["stats"]["encoder_self"]["entropy_per_head"]).shape == (LAYERS, HEADS)
    assert "eos_share" not in meta["stats"]["decoder_self"]
    assert meta["eos_share"] == pytest.approx(float(maps["cross"][..., -1].mean()), abs=1e-6)


def test_trimming_a_padded_batch_matches_one_sentence():
    model = ToyAttentionModel(heads=HEADS, layers=LAYERS)
    src = torch.tensor([[3, 4, 5, 6, EOS], [7, EOS, PAD, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 8, 9, 10], [BOS, 4, PAD, PAD]])
    with torch.no_grad():
        batch = model.attention_maps(src, torch.tensor([5, 2]), tgt_in)
        alone = model.attention_maps(src[1:, :2], torch.tensor([2]), tgt_in[1:, :2])
    trimmed = trim_maps(batch, 1, src_len=2, tgt_len=2)
    assert {k: v.shape for k, v in trimmed.items()} == {name: (LAYERS, HEADS, 2, 2) for name in batch}
    for name, weights in trimmed.items():
        # padded to 5 keys and 4 queries or not: the toy's 8-unit scores and softmax summed in another order
        assert_float32_close(torch.from_numpy(weights), alone[name][0], terms=decoding_terms(4, 8, 5))
        assert_rows_sum_to_one(name, weights)
    assert float(batch["encoder_self"][1, ..., 2:, 2:].sum()) > 0  # padded rows held junk, now dropped
    with pytest.raises(ValueError, match="unknown attention map"):
        trim_maps({"mystery": batch["cross"]}, 0, 2, 2)


def test_entropy_and_eos_share_by_hand():
    weights = np.array([[0.25, 0.25, 0.5], [0.0, 0.0, 1.0]])
    row0 = -(2 * 0.25 * math.log(0.25) + 0.5 * math.log(0.5))
    assert float(attention_entropy(weights)) == pytest.approx(row0 / 2)
    assert float(key_share(weights, 2)) == pytest.approx(0.75)
    per_head = np.stack([weights, np.full((2, 3), 1 / 3)])[None]  # (L=1, h=2, Q=2, K=3)
    np.testing.assert_allclose(attention_entropy(per_head), [[row0 / 2, math.log(3)]])
    causal = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])  # (L=1, h=1, T=2, T=2)
    stats = attention_stats({"cross": per_head, "decoder_self": causal})
    np.testing.assert_allclose(stats["cross"]["eos_share_per_head"], [[0.75, 1 / 3]])
    assert stats["cross"]["eos_share"] == pytest.approx((0.75 + 1 / 3) / 2)
    assert stats["decoder_self"]["entropy"] == pytest.approx(math.log(2) / 2)


def test_heatmaps_are_pngs_with_one_panel_per_head(tmp_path):
    model = ToyAttentionModel(heads=HEADS, layers=LAYERS)
    _, attention = translate_and_collect(model)
    files = save_attention(attention, tmp_path, "s")
    for path in (p for p in files if p.suffix == ".png"):
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    for name, weights in attention.maps.items():
        rows, cols = attention.labels(name)
        fig = attention_figure(weights, rows, cols)
        assert heatmap_panels(fig) == LAYERS * HEADS
        first = next(ax for ax in fig.axes if ax.images)
        assert [t.get_text() for t in first.get_yticklabels()] == rows
        assert [t.get_text() for t in first.get_xticklabels()] == cols
        assert first.images[0].get_array().shape == weights.shape[-2:]
    bahdanau = ToyAttentionModel(heads=0)
    _, single = translate_and_collect(bahdanau)
    assert heatmap_panels(attention_figure(single.maps["cross"], *single.labels("cross"))) == 1


def test_every_heatmap_draws_weights_on_the_fixed_scale_0_to_1_with_a_labelled_colour_bar():
    near_uniform = np.array([[0.36, 0.32, 0.32], [0.34, 0.33, 0.33]])  # must not look dark against white
    fig = attention_figure(near_uniform, None, None)
    image = next(ax for ax in fig.axes if ax.images).images[0]
    assert image.get_clim() == (0.0, 1.0)
    colour_bar = next(ax for ax in fig.axes if not ax.images)
    assert "attention weight" in colour_bar.get_ylabel()


def test_labels_must_match_the_maps():
    with pytest.raises(ValueError, match="query"):
        SentenceAttention({"cross": np.ones((3, 2)) / 2}, ["a", "<eos>"], ["x", "<eos>"], ["<bos>", "x"])
    with pytest.raises(ValueError, match="labels"):
        attention_figure(np.ones((2, 2)) / 2, ["a"], ["b", "c"])


def test_training_curves(tmp_path):
    metrics = [
        {"step": 50, "loss": 3.2, "lr": 0.005},
        {"step": 100, "loss": 2.9, "lr": 0.005},
        {"step": 100, "valid_loss": 3.0, "valid_bleu": 4.5, "lr": 0.005},
        {"step": 150, "epoch_loss": 2.7, "lr": 0.0025},
    ]
    path = plot_training_curves(metrics, tmp_path / "curves" / "train.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    fig = training_curves_figure(metrics)
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss (nats per token)", "valid BLEU", "learning rate"]
    assert len(fig.axes[0].get_lines()) == 3  # window, epoch and valid loss
    no_valid = [m for m in metrics if "valid_bleu" not in m]
    assert [ax.get_ylabel() for ax in training_curves_figure(no_valid).axes] == [
        "loss (nats per token)",
        "learning rate",
    ]
    assert plot_training_curves([], tmp_path / "empty.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("kind", ["gru_bahdanau", "transformer"])
def test_real_model_dumps(tmp_path, kind):
    torch.manual_seed(0)
    cfg = ModelConfig(
        type=kind, embed_size=8, num_hiddens=8, num_layers=2, num_heads=2, ffn_num_hiddens=16, dropout=0.0
    )
    model = build_model(cfg, 20, 20).eval()
    hyp, attention = translate_and_collect(model)
    S, T = len(SENTENCE) + 1, len(hyp.tokens) + 1
    save_attention(attention, tmp_path, "s", heatmaps=False)
    with np.load(tmp_path / "s.npz") as npz:
        maps = {name: npz[name] for name in npz.files}
    expected = (
        {"cross": (T, S)}
        if kind == "gru_bahdanau"
        else {
            "encoder_self": (2, 2, S, S),
            "decoder_self": (2, 2, T, T),
            "cross": (2, 2, T, S),
        }
    )
    assert {name: m.shape for name, m in maps.items()} == expected
    for name, weights in maps.items():
        assert_rows_sum_to_one(name, weights)
    if "decoder_self" in maps:
        assert np.all(maps["decoder_self"][..., np.triu(np.ones((T, T), dtype=bool), k=1)] < 1e-6)
    search_cross = hyp.attention if kind == "gru_bahdanau" else hyp.attention.permute(1, 2, 0, 3)
    # a teacher-forced pass against the search's steps: at most 7 steps of 16-unit products and 5 keys
    assert_float32_close(torch.from_numpy(maps["cross"]), search_cross, terms=decoding_terms(7, 16, 5))


def test_book_gru_dumps_come_from_the_padded_pass_that_translated(tmp_path, run_cli):
    """translate --attention-dir and eval --attention on a book-mode GRU run show the decoding's own maps."""
    root = Path(__file__).resolve().parent.parent
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(root / "configs" / "d2l_bahdanau.yaml", ["train.epochs=3"])
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    run = load_run(tmp_path / "run")
    translator = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)
    long = " ".join(["alpha", "bravo", "charlie", "delta"] * 3) + "."  # 13 tokens with <eos>: cut to 10
    sentences = ["Alpha bravo.", "Charlie delta echo foxtrot.", long]
    dumps = {"translate": tmp_path / "dumps", "eval": tmp_path / "run" / "eval" / "book" / "attention"}
    commands = {
        "translate": [
            "translate",
            str(tmp_path / "run"),
            *sentences,
            "--attention-dir",
            str(dumps["translate"]),
        ],
        "eval": ["eval", str(tmp_path / "run"), "--split", "book", "--attention", str(len(BOOK_SENTENCES))],
    }
    for how, sources in (("translate", sentences), ("eval", [en for en, _ in BOOK_SENTENCES])):
        result = run_cli(*commands[how], "--device", "cpu")
        assert result.returncode == 0, result.stderr
        decoded = translator.translate(sources, need_attention=True)
        for i, translation in enumerate(decoded):
            with np.load(dumps[how] / f"{i:04d}.npz") as npz:
                cross = npz["cross"]  # (T, S)
            searched = translation.hypotheses[0].attention.numpy()  # (T, S): the maps greedy search used
            # another process and batch: 11 steps of the GRU's 64-term input (embedding + context), 10 keys
            assert_float32_close(
                torch.from_numpy(cross), torch.from_numpy(searched), terms=decoding_terms(11, 64, 10), msg=how
            )
    summary = json.loads((dumps["translate"] / "0002.json").read_text(encoding="utf-8"))
    assert len(summary["source_tokens"]) == cfg.data.num_steps and summary["source_tokens"][-1] != "<eos>"
    assert summary["eos_share"] is None and "eos_share" not in summary["stats"]["cross"]
    first = json.loads((dumps["translate"] / "0000.json").read_text(encoding="utf-8"))
    assert first["source_tokens"][-1] == "<eos>" and first["eos_share"] == pytest.approx(
        float(np.load(dumps["translate"] / "0000.npz")["cross"][:, -1].mean()), abs=1e-6
    )
