"""The small examples of the book section "Attention Scoring Functions".

Shapes: B batch, Q queries, K key-value pairs, D value size.
Masked softmax with 1-D (per batch) and 2-D (per query) valid lengths, then additive attention
(Bahdanau et al. 2014) and scaled dot-product attention (Vaswani et al. 2017) on keys that are all
equal, so the weights are uniform over each sequence's valid keys and the output is the mean of
those values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attn_mt.demos.figures import draw_heatmap, new_figure, prepare_out_dir, save_figure, to_lists, write_json
from attn_mt.i18n import _
from attn_mt.models.attention import AdditiveAttention, DotProductAttention, masked_softmax

NAME = "scoring"
SCORES_SHAPE = (2, 2, 4)  # (B, Q, K) random scores for the masked-softmax examples
BATCH_VALID_LENS = (2, 3)  # one valid length per batch element
QUERY_VALID_LENS = ((1, 3), (2, 4))  # one valid length per query
NUM_KEYS = 10
KEY_SIZE = 2
VALUE_SIZE = 4
ADDITIVE_QUERY_SIZE = 20
DOT_QUERY_SIZE = 2  # dot-product queries must match the key size
NUM_HIDDENS = 8
ADDITIVE_DROPOUT = 0.1
DOT_DROPOUT = 0.5
ATTENTION_VALID_LENS = (2, 6)


def masked_softmax_examples() -> dict[str, torch.Tensor]:
    """Random (B, Q, K) scores and their masked softmax under 1-D and 2-D valid lengths."""
    scores = torch.rand(SCORES_SHAPE)  # (B, Q, K)
    return {
        "scores": scores,
        "valid_lens_1d": masked_softmax(scores, torch.tensor(BATCH_VALID_LENS)),  # (B, Q, K)
        "valid_lens_2d": masked_softmax(scores, torch.tensor(QUERY_VALID_LENS)),  # (B, Q, K)
    }


def example_keys_values() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The book's keys (B, K, 2) of ones, values (B, K, 4) = 0..39 per batch, valid lengths (B,)."""
    batch = len(ATTENTION_VALID_LENS)
    keys = torch.ones(batch, NUM_KEYS, KEY_SIZE)  # (B, K, 2)
    values = torch.arange(NUM_KEYS * VALUE_SIZE, dtype=torch.float32)  # (K * D,)
    values = values.reshape(1, NUM_KEYS, VALUE_SIZE).repeat(batch, 1, 1)  # (B, K, D)
    return keys, values, torch.tensor(ATTENTION_VALID_LENS)


def additive_example() -> dict[str, torch.Tensor]:
    """Additive attention of one 20-d query per batch element; weights (B, 1, K), output (B, 1, D)."""
    keys, values, valid_lens = example_keys_values()
    queries = torch.normal(0.0, 1.0, (len(ATTENTION_VALID_LENS), 1, ADDITIVE_QUERY_SIZE))  # (B, 1, 20)
    attention = AdditiveAttention(
        key_size=KEY_SIZE, query_size=ADDITIVE_QUERY_SIZE, num_hiddens=NUM_HIDDENS, dropout=ADDITIVE_DROPOUT
    )
    attention.eval()
    with torch.no_grad():
        output = attention(queries, keys, values, valid_lens)  # (B, 1, D)
    return {"output": output, "weights": attention.attention_weights}


def dot_product_example() -> dict[str, torch.Tensor]:
    """Scaled dot-product attention of one 2-d query per batch element; same keys and values."""
    keys, values, valid_lens = example_keys_values()
    queries = torch.normal(0.0, 1.0, (len(ATTENTION_VALID_LENS), 1, DOT_QUERY_SIZE))  # (B, 1, 2)
    attention = DotProductAttention(dropout=DOT_DROPOUT)
    attention.eval()
    with torch.no_grad():
        output = attention(queries, keys, values, valid_lens)  # (B, 1, D)
    return {"output": output, "weights": attention.attention_weights}


def _plot_masked_softmax(examples: dict[str, torch.Tensor], path: Path) -> str:
    fig, axes = new_figure(ncols=2)
    batch, queries, keys = SCORES_SHAPE
    lengths = {
        "valid_lens_1d": list(BATCH_VALID_LENS),
        "valid_lens_2d": [list(row) for row in QUERY_VALID_LENS],
    }
    for ax, (key, valid_lens) in zip(axes, lengths.items(), strict=True):
        matrix = examples[key].reshape(batch * queries, keys)  # (B * Q, K)
        title = _("valid lengths {lengths}").format(lengths=valid_lens)
        draw_heatmap(fig, ax, matrix, xlabel=_("keys"), ylabel=_("(batch, query) rows"), title=title)
    return save_figure(fig, path)


def _plot_weights(weights: torch.Tensor, title: str, path: Path) -> str:
    fig, (ax,) = new_figure(panel_size=(4.0, 2.0))
    matrix = weights.reshape(weights.shape[0], -1)  # (B, K): one query per batch element
    draw_heatmap(fig, ax, matrix, xlabel=_("keys"), ylabel=_("queries"), title=title)
    return save_figure(fig, path)


def run(out_dir: Path, seed: int) -> dict[str, Any]:
    """Run the three examples, write their heatmap PNGs and scoring.json; torch's RNG is left as found."""
    out_dir = prepare_out_dir(out_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        softmax = masked_softmax_examples()
        additive = additive_example()
        dot_product = dot_product_example()
    figures = [
        _plot_masked_softmax(softmax, out_dir / "scoring_masked_softmax.png"),
        _plot_weights(additive["weights"], _("additive attention"), out_dir / "scoring_additive.png"),
        _plot_weights(
            dot_product["weights"], _("scaled dot-product attention"), out_dir / "scoring_dot_product.png"
        ),
    ]
    results = {
        "demo": NAME,
        "seed": seed,
        "valid_lens": {
            "masked_softmax_1d": list(BATCH_VALID_LENS),
            "masked_softmax_2d": [list(row) for row in QUERY_VALID_LENS],
            "attention": list(ATTENTION_VALID_LENS),
        },
        "masked_softmax": {key: to_lists(tensor) for key, tensor in softmax.items()},
        "additive": {key: to_lists(tensor) for key, tensor in additive.items()},
        "dot_product": {key: to_lists(tensor) for key, tensor in dot_product.items()},
        "figures": figures,
    }
    write_json(out_dir / "scoring.json", results)
    return results
