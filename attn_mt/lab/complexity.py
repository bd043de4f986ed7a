"""Lab panel of the book section "Self-Attention and Positional Encoding": comparing CNNs, RNNs and
self-attention for a sequence of n tokens of d dimensions and a convolution kernel of size k.

Each column of the chapter's table is computed, not quoted: the multiply-adds of one layer come from
the layer's own weights (a Conv1d applied at n positions, a recurrent d x d update taken n times, and
the n x n attention weights of attn-mt's DotProductAttention, each a dot product of size d followed by a
weighted sum of d values), the sequential operations are the steps one layer must take one after
the other, and the maximum path length is found by sending a signal from the first token through
layers until the last token receives it (the convolution's own window, the recurrence, attn-mt's
attention weights). The book's asymptotic forms are O(knd^2), O(nd^2), O(n^2 d); O(1), O(n), O(1);
O(n/k), O(n), O(1).

Shapes: n tokens, d dimensions per token, k kernel size (odd, centred on each token).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attn_mt.i18n import N_, _, ngettext
from attn_mt.lab.inputs import LabError, limit_elements, whole
from attn_mt.lab.shown import answer, code, shown
from attn_mt.models.attention import DotProductAttention

MAX_TOKENS = 128
MAX_DIMENSIONS = 256
ARCHITECTURES = ("CNN", "RNN", "self-attention")
NAMES = {"CNN": "CNN", "RNN": "RNN", "self-attention": N_("self-attention")}  # as the page shows them


def layer_costs(n: int, d: int, k: int) -> list[int]:
    """Multiply-adds of one layer of each architecture on n tokens of d dimensions, from the layers'
    own weights and the attention weights attn-mt's DotProductAttention computes."""
    conv = nn.Conv1d(d, d, k, padding=k // 2, bias=False)  # weight (d, d, k), applied at n positions
    recurrent = nn.Linear(d, d, bias=False)  # h_t = tanh(W h_(t-1) + x_t): weight (d, d), n steps
    X = torch.randn(1, n, d)  # (1, n, d)
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        attention(X, X, X)
    pairs = attention.attention_weights.numel()  # n x n scores, each a dot product of size d
    return [conv.weight.numel() * n, recurrent.weight.numel() * n, 2 * pairs * d]


def cnn_path(n: int, k: int) -> list[int]:
    """The positions the first token's signal has reached after each stacked convolution layer."""
    conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)
    nn.init.ones_(conv.weight)
    signal = torch.zeros(1, 1, n)  # (1, 1, n)
    signal[0, 0, 0] = 1.0
    reached = [0]
    with torch.no_grad():
        while signal[0, 0, -1] == 0:
            signal = (conv(signal) > 0).float()  # (1, 1, n)
            reached.append(int(signal[0, 0].nonzero().max()))
    return reached


def attention_path(n: int, d: int) -> list[int]:
    """The same for self-attention layers: a token reaches every token its attention weights touch."""
    X = torch.randn(1, n, d, generator=torch.Generator().manual_seed(0))  # (1, n, d)
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        attention(X, X, X)
    weights = attention.attention_weights[0]  # (n, n)
    signal = torch.zeros(n)
    signal[0] = 1.0
    reached = [0]
    while signal[-1] == 0:
        signal = ((weights @ signal) > 0).float()  # (n,)
        reached.append(int(signal.nonzero().max()))
    return reached


def complexity_panel(state: dict[str, Any]) -> dict[str, Any]:
    """n, d and k -> the chapter's table computed: cost of a layer, sequential operations, path length."""
    n = whole(state, "n", 16, 2, MAX_TOKENS)
    d = whole(state, "d", 32, 1, MAX_DIMENSIONS)
    k = whole(state, "k", 3, 3, 31)
    if k % 2 == 0:
        raise LabError(
            _("k: the kernel is centred on each token, so k must be odd, got {value}").format(value=k)
        )
    limit_elements(_("the tokens X (n, d)"), n, d)
    costs = layer_costs(n, d, k)
    paths = {"CNN": cnn_path(n, k), "RNN": list(range(n)), "self-attention": attention_path(n, d)}
    sequential = [1, n, 1]
    lengths = [len(paths[name]) - 1 for name in ARCHITECTURES]
    table = torch.tensor(
        [[cost, steps, length] for cost, steps, length in zip(costs, sequential, lengths, strict=True)],
        dtype=torch.float64,
    )  # (3, 3)
    tensors = [
        shown(
            _("per layer, n = {n}, d = {d}, k = {k}").format(n=n, d=d, k=k),
            table,
            ["architecture", "measure"],
            rows=[_(NAMES[name]) for name in ARCHITECTURES],
            columns=[_("multiply-adds"), _("sequential operations"), _("maximum path length")],
        )
    ]
    window = ngettext("{count} position", "{count} positions", k // 2).format(count=k // 2)
    layers = ngettext("{count} stacked layer", "{count} stacked layers", lengths[0]).format(count=lengths[0])
    steps = ngettext("{count} step", "{count} steps", lengths[1]).format(count=lengths[1])
    notes = [
        _(
            "Multiply-adds of one layer: CNN k·n·d² = {cnn}, RNN n·d² = {rnn}, self-attention 2·n²·d = "
            "{attention} (n² scores of size d, then n² weighted sums of d values): self-attention costs less "
            "than the RNN while 2n < d, and its n² grows fastest with the length."
        ).format(cnn=k * n * d * d, rnn=n * d * d, attention=2 * n * n * d),
        _(
            "Sequential operations: a CNN layer or a self-attention layer computes all {n} positions "
            "at once; an RNN must take its {n} steps one after the other, each needing the previous hidden "
            "state."
        ).format(n=n),
        _(
            "Maximum path length, from the first token to the last (drawn below): the convolution's "
            "window reaches {window} further each layer, so {layers} (O(n/k)); the RNN passes the signal on "
            "one step at a time, {steps} (O(n)); one self-attention layer joins every pair of tokens (O(1)): "
            "a short path makes long-range dependencies easier to learn."
        ).format(window=window, layers=layers, steps=steps),
    ]
    lines = [code(DotProductAttention.forward), code(layer_costs, _("layer_costs (the lab's)"))]
    drawn = [{"label": _(NAMES[name]), "n": n, "reached": paths[name]} for name in ARCHITECTURES]
    return answer(tensors, lines, notes, paths=drawn)
