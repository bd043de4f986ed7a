"""Lab panels of the book section "Attention Scoring Functions": the masked softmax, additive and scaled
dot-product attention on editable toy tensors, and what the 1/sqrt(d) scale does as the key size d grows.

Shapes (the book's code comments name them batch_size, no. of queries, no. of key-value pairs; its
equations write n queries and m key-value pairs): B batch size, Q number of queries, K number of key-value
pairs, q query size, k key size, d = q = k for dot products, v value size, H additive attention's
hidden size (num_hiddens).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from attn_mt.i18n import N_, _, ngettext
from attn_mt.lab.inputs import (
    MAX_ELEMENTS,
    LabError,
    choice,
    limit_elements,
    limit_work,
    tensor,
    whole,
)
from attn_mt.lab.shown import answer, code, line_of, number, plot, shown
from attn_mt.models.attention import (
    AdditiveAttention,
    AttentionMask,
    DotProductAttention,
    masked_softmax,
    softmax_with_mask,
)

DEFAULT_SCORES = (
    "[[[0.5, 0.1, 0.9, 0.3], [0.2, 0.8, 0.4, 0.6]], [[0.7, 0.3, 0.1, 0.5], [0.6, 0.2, 0.9, 0.4]]]"
)
DEFAULT_VALID_LENS = "[2, 3]"
DEFAULT_QUERIES = "[[[1, 0], [0, 2]]]"
DEFAULT_KEYS = "[[[1, 0], [0, 1], [1, 1], [-1, 0.5]]]"
DEFAULT_VALUES = "[[[1, 0], [0, 1], [2, 2], [0, -1]]]"
MAX_KEY_SIZE = 1024
FILLS = {  # what a masked score is replaced with before the softmax
    "attn-mt": N_("attn-mt's masked_softmax (-inf, and a row of zeros for a query with no valid key)"),
    "-1e6": N_("the book's -1e6 (minus a million)"),
    "-inf": "-inf",
    "0": "0",
    "1e-6": N_("1e-6 (a millionth: what -1e6 is often misread as)"),
}
LEAKS = {  # what each fill but attn-mt's does to the masked keys' weight
    "-1e6": N_(
        "exp(-1e6 - max) underflows to 0, so no weight leaks while a query has a valid "
        "key; a query with none has every score -1e6 and spreads its weight evenly over keys it "
        "should ignore."
    ),
    "-inf": N_(
        "Masked keys get exactly 0, but a query with no valid key is all -inf: "
        "its softmax is 0/0, NaN (shown as NaN), and NaN spreads through everything after it."
    ),
    "0": N_(
        "A score of 0 is an ordinary score: each masked key gets the weight the softmax "
        "gives any key of score 0, exp(0) divided by the sum of exp over the whole row, the masked "
        "keys' exp(0) = 1 included; a large share when the valid scores are near 0 and a small "
        "one, never 0, when they are large (valid scores [10, 12] leave about 5e-6 on each masked "
        "key)."
    ),
    "1e-6": N_(
        "1e-6 (a millionth) is a score all but equal to 0, nothing like the book's -1e6: "
        "each masked key gets the weight of a key of score 1e-6, exp(1e-6) divided by the sum of "
        "exp over the whole row, masked keys included: the same as with a fill of 0, not the "
        "weight its own score would have given it."
    ),
}
KEY_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the sweep of the key-size plot
SWEEP_KEYS = 8  # keys per query in the key-size experiment
SWEEP_QUERIES = 64  # queries averaged over at each key size of the plot


def valid_lens_of(state: dict[str, Any], scores_shape: tuple[int, ...], default: str) -> torch.Tensor | None:
    """`valid_lens` as (B,) or (B, Q) whole numbers from 0 to K; None when the field is blank (no mask)."""
    if state.get("valid_lens", default) in ("", None):
        return None
    raw = tensor(state, "valid_lens", default, (1, 2))
    batch, queries, keys = scores_shape
    if raw.shape not in ((batch,), (batch, queries)):
        raise LabError(
            _(
                "valid_lens: expected shape {per_batch} (one per batch element) or {per_query} "
                "(one per query), got {shape}"
            ).format(per_batch=(batch,), per_query=(batch, queries), shape=tuple(raw.shape))
        )
    if not torch.equal(raw, raw.round()) or raw.min() < 0:
        raise LabError(_("valid_lens: expected whole numbers of valid keys, 0 or more"))
    if raw.max() > keys:
        raise LabError(
            _("valid_lens: {length} is past the number of keys K = {keys}").format(
                length=int(raw.max()), keys=keys
            )
        )
    return raw.long()


def blocked_keys(valid_lens: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor | None:
    """bool (B, Q, K): the keys the mask sets aside, the rows of queries without a valid key included."""
    if valid_lens is None:
        return None
    mask = AttentionMask.from_valid_lens(valid_lens, shape[1], shape[2])
    blocked = mask.blocked.expand(shape)  # (B, Q, K)
    return blocked if mask.empty is None else blocked | mask.empty.expand(shape)


def filled_softmax(scores: torch.Tensor, blocked: torch.Tensor, fill: float) -> torch.Tensor:
    """softmax(X) (B, Q, K) with the scores of `blocked` keys (B, Q, K) replaced by `fill`: the book's
    masking with any fill value. A row whose every score is -inf comes out NaN."""
    return torch.softmax(scores.masked_fill(blocked, fill), dim=-1)  # (B, Q, K)


def leak_example(scores: torch.Tensor, blocked: torch.Tensor, weights: torch.Tensor, fill: str) -> str:
    """One query's leak written out, for the fills that leave a masked key an ordinary score (0, 1e-6): the
    first query with valid and masked keys, its valid scores and the weight each masked key gets."""
    if fill not in ("0", "1e-6"):
        return ""
    rows = (blocked.any(-1) & ~blocked.all(-1)).nonzero().tolist()  # [(b, q), ...]
    if not rows:
        return ""
    b, q = rows[0]
    valid = [f"{v:g}" for v in scores[b, q][~blocked[b, q]].tolist()]
    masked = int(blocked[b, q].sum())
    per_key = float(weights[b, q][blocked[b, q]][0])
    return " " + ngettext(
        "Query (B={b}, Q={q}), valid scores {scores} and {count} masked key: each masked key gets {weight}.",
        "Query (B={b}, Q={q}), valid scores {scores} and {count} masked keys: each masked key gets {weight}.",
        masked,
    ).format(b=b, q=q, scores=f"[{', '.join(valid)}]", count=masked, weight=number(per_key, ".3f"))


def masked_softmax_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Scores (B, Q, K) and valid_lens (B,) or (B, Q) -> the mask and the masked softmax's weights, with
    masked scores filled with the chosen value, and the weight that leaks onto masked keys."""
    scores = tensor(state, "scores", DEFAULT_SCORES, (3,))  # (B, Q, K)
    valid_lens = valid_lens_of(state, tuple(scores.shape), DEFAULT_VALID_LENS)
    fill_name = choice(state, "fill", "attn-mt", tuple(FILLS))
    blocked = blocked_keys(valid_lens, tuple(scores.shape))  # (B, Q, K) or None
    if fill_name == "attn-mt" or blocked is None:
        weights = masked_softmax(scores, valid_lens)  # (B, Q, K)
    else:
        weights = filled_softmax(scores, blocked, float(fill_name))  # (B, Q, K)
    tensors = [shown("X (scores)", scores, ["B", "Q", "K"], mask=blocked)]
    if valid_lens is not None:
        tensors.append(
            shown(
                "valid_lens",
                valid_lens.float(),
                ["B"] if valid_lens.dim() == 1 else ["B", "Q"],
                scale="sequential",  # lengths: 0 up, not signed values
            )
        )
    name = (
        "masked_softmax(X, valid_lens)"
        if fill_name == "attn-mt"
        else _("softmax, masked scores = {fill}").format(fill=fill_name)
    )
    tensors.append(shown(name, weights, ["B", "Q", "K"], mask=None if fill_name != "attn-mt" else blocked))
    notes = [
        _("1-D valid_lens give one length per batch element (its queries share it); 2-D give one per query."),
    ]
    if fill_name == "attn-mt":
        notes.insert(
            0,
            _(
                "Masked keys (struck through) are filled with -inf before the softmax, so they get weight "
                "exactly 0 and each row's weights over its valid keys sum to 1."
            ),
        )
        if valid_lens is not None and bool((valid_lens == 0).any()):
            notes.append(
                _("A query with valid length 0 has no key to attend to: attn-mt gives it a row of zeros.")
            )
    elif blocked is not None:
        leaked = torch.where(blocked, weights, torch.zeros_like(weights)).sum(-1)  # (B, Q)
        tensors.append(
            shown(
                _("weight leaked onto masked keys"),
                leaked,
                ["B", "Q"],
                note=_(
                    "the sum of each query's weights on keys past its valid length; the right answer is 0"
                ),
            )
        )
        most = float(leaked.max())
        notes.insert(
            0,
            _(
                "Masked scores are replaced with {fill} before the softmax; the masked keys keep "
                "their weight here (not struck through) so the leak shows."
            ).format(fill=_(FILLS[fill_name]))
            + " "
            + _(LEAKS[fill_name])
            + " "
            + _("Here the most any query leaks is {most}.").format(most=number(most, ".4g"))
            + leak_example(scores, blocked, weights, fill_name),
        )
    lines = [
        code(masked_softmax),
        code(AttentionMask.from_valid_lens, "AttentionMask.from_valid_lens"),
        line_of(softmax_with_mask, "masked_fill(mask.blocked", "softmax_with_mask"),
    ]
    if fill_name != "attn-mt":
        lines.append(code(filled_softmax, _("filled_softmax (the lab's, the book's masking)")))
    return answer(tensors, lines, notes)


def seeded_additive(key_size: int, query_size: int, num_hiddens: int, seed: int) -> AdditiveAttention:
    """AdditiveAttention(key_size, query_size, num_hiddens, dropout 0) as manual_seed(seed) starts it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attention = AdditiveAttention(key_size, query_size, num_hiddens, dropout=0.0)
    return attention.eval()


def seeded_bilinear(query_size: int, key_size: int, seed: int) -> torch.Tensor:
    """A (q, k) matrix M of N(0, 1/q) entries from manual_seed(seed), for the bilinear score qᵀ M k."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(query_size, key_size, generator=generator) / math.sqrt(query_size)  # (q, k)


def dot_product_terms(queries: torch.Tensor, keys: torch.Tensor) -> list:
    """(B, Q, K) nested texts: each q . k written out as its products and their sum, for hovering."""
    terms = queries.unsqueeze(2) * keys.unsqueeze(1)  # (B, Q, K, d)
    return [
        [
            [
                " + ".join(f"{a:g}×{b:g}" for a, b in zip(q.tolist(), k.tolist(), strict=True))
                + f" = {t.sum():g}"
                for k, t in zip(batch_keys, row_terms, strict=True)
            ]
            for q, row_terms in zip(batch_queries, batch_terms, strict=True)
        ]
        for batch_queries, batch_keys, batch_terms in zip(queries, keys, terms, strict=True)
    ]


@contextmanager
def additive_intermediates(attention: AdditiveAttention) -> Iterator[dict[str, torch.Tensor]]:
    """Forward hooks on additive attention's own layers: W_q q, W_k k, the tanh features and w_v's scores."""
    kept: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        return lambda _module, _inputs, output: kept.__setitem__(name, output)

    hooks = [
        attention.W_q.register_forward_hook(keep("W_q q")),  # (B, Q, H)
        attention.W_k.register_forward_hook(keep("W_k k")),  # (B, K, H)
        attention.w_v.register_forward_pre_hook(
            lambda _module, inputs: kept.__setitem__("features", inputs[0])  # (B, Q, K, H)
        ),
        attention.w_v.register_forward_hook(keep("scores")),  # (B, Q, K, 1)
    ]
    try:
        yield kept
    finally:
        for hook in hooks:
            hook.remove()


def additive_steps(kept: dict[str, torch.Tensor], blocked: torch.Tensor | None) -> list:
    """Additive attention's intermediate tensors with their shapes; the 4-D ones while they are small."""
    queries, keys = kept["W_q q"].unsqueeze(2), kept["W_k k"].unsqueeze(1)  # (B, Q, 1, H), (B, 1, K, H)
    features = kept["features"]  # (B, Q, K, H)
    steps = [
        shown(_("W_q q, unsqueezed"), queries, ["B", "Q", "1", "H"]),
        shown(_("W_k k, unsqueezed"), keys, ["B", "1", "K", "H"]),
    ]
    if features.numel() <= MAX_ELEMENTS // 4:
        steps += [
            shown(_("W_q q + W_k k (broadcast)"), queries + keys, ["B", "Q", "K", "H"]),
            shown(_("tanh(W_q q + W_k k): the features"), features, ["B", "Q", "K", "H"]),
        ]
    steps.append(
        shown(
            _("scores w_vᵀ tanh(…), before masking"),
            kept["scores"].squeeze(-1),
            ["B", "Q", "K"],
            mask=blocked,
        )
    )
    return steps


def scoring_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Toy queries, keys and values -> additive and scaled dot-product weights side by side, and Q K^T."""
    queries = tensor(state, "queries", DEFAULT_QUERIES, (3,))  # (B, Q, q)
    keys = tensor(state, "keys", DEFAULT_KEYS, (3,))  # (B, K, k)
    values = tensor(state, "values", DEFAULT_VALUES, (3,))  # (B, K, v)
    hiddens = whole(state, "num_hiddens", 8, 1, 64)
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    if queries.shape[0] != keys.shape[0] or keys.shape[:2] != values.shape[:2]:
        raise LabError(
            _(
                "queries {queries}, keys {keys} and values {values} "
                "must share the batch size B, and keys and values the number of pairs K"
            ).format(queries=tuple(queries.shape), keys=tuple(keys.shape), values=tuple(values.shape))
        )
    batch, num_queries, num_keys = queries.shape[0], queries.shape[1], keys.shape[1]
    limit_elements(_("the attention weights (B, Q, K)"), batch, num_queries, num_keys)
    limit_elements(_("the outputs (B, Q, v)"), batch, num_queries, values.shape[2])
    limit_work(_("additive attention's features (B, Q, K, H)"), batch, num_queries, num_keys, hiddens)
    valid_lens = valid_lens_of(state, (queries.shape[0], queries.shape[1], keys.shape[1]), "")
    blocked = blocked_keys(valid_lens, (queries.shape[0], queries.shape[1], keys.shape[1]))
    additive = seeded_additive(keys.shape[2], queries.shape[2], hiddens, seed)
    with torch.no_grad(), additive_intermediates(additive) as kept:
        additive_output = additive(queries, keys, values, valid_lens)  # (B, Q, v)
    tensors = [
        shown("queries", queries, ["B", "Q", "q"]),
        shown("keys", keys, ["B", "K", "k"]),
        shown("values", values, ["B", "K", "v"]),
        *additive_steps(kept, blocked),
        shown(_("additive: attention_weights"), additive.attention_weights, ["B", "Q", "K"], mask=blocked),
    ]
    lines = [
        line_of(AdditiveAttention.attend, "torch.tanh(self.W_q(queries)", "AdditiveAttention.attend"),
        line_of(AdditiveAttention.attend, "scores = self.w_v", "AdditiveAttention.attend"),
    ]
    notes = [
        _(
            "Additive attention learns W_q (q -> {hiddens}), W_k (k -> {hiddens}) and w_v; here they hold "
            "torch's initial values after manual_seed({seed}), so queries and keys may have different sizes."
        ).format(hiddens=hiddens, seed=seed),
        _(
            "Its steps, as attn-mt runs them: W_q q and W_k k are made (B, Q, 1, H) and (B, 1, K, H), "
            "broadcast to (B, Q, K, H) and added (every query beside every key), tanh squashes each of the "
            "H features, and w_v turns the H features of each (query, key) pair into one score, (B, Q, K)."
        ),
        _(
            "Why a learned MLP can measure similarity: W_q and W_k map queries and keys into one "
            "H-dimensional space; each hidden unit then tests whether a query and a key push one direction "
            "together, and w_v weighs those tests. Training sets W_q, W_k and w_v so that pairs that should "
            "match get high scores: 'similar' is whatever the task needs, not a fixed geometry. With one "
            "hidden unit and tanh near linear it reduces to a sum of a query term and a key term."
        ),
    ]
    if queries.shape[2] == keys.shape[2]:
        dot = DotProductAttention(dropout=0.0).eval()
        with torch.no_grad():
            dot_output = dot(queries, keys, values, valid_lens)  # (B, Q, v)
        products = torch.matmul(queries, keys.transpose(1, 2))  # (B, Q, K)
        written = batch * num_queries * num_keys * queries.shape[2] <= MAX_ELEMENTS  # products to write out
        tensors += [
            shown(
                _("scaled dot-product: attention_weights"),
                dot.attention_weights,
                ["B", "Q", "K"],
                mask=blocked,
            ),
            shown(
                "Q Kᵀ",
                products,
                ["B", "Q", "K"],
                hover=dot_product_terms(queries, keys) if written else None,
                note=_("Point at a cell to see its dot product written out.")
                if written
                else _("Over {limit} products in all: not written out on hover.").format(limit=MAX_ELEMENTS),
            ),
            shown("Q Kᵀ / √d", products / math.sqrt(queries.shape[2]), ["B", "Q", "K"], mask=blocked),
            shown(_("additive: output"), additive_output, ["B", "Q", "v"]),
            shown(_("scaled dot-product: output"), dot_output, ["B", "Q", "v"]),
        ]
        lines.append(
            line_of(
                DotProductAttention.attend,
                "torch.matmul(queries, keys.transpose",
                "DotProductAttention.attend",
            )
        )
        notes.append(
            _(
                "Each output row is the attention-weighted average of the values: "
                "weights (B, Q, K) times values (B, K, v)."
            )
        )
    else:
        M = seeded_bilinear(queries.shape[2], keys.shape[2], seed)  # (q, k)
        bilinear = DotProductAttention(dropout=0.0).eval()
        with torch.no_grad():
            bilinear_output = bilinear(queries @ M, keys, values, valid_lens)  # (B, Q, v)
        tensors += [
            shown(_("M (q x k, random)"), M, ["q", "k"]),
            shown(
                _("bilinear qᵀ M k / √k: attention_weights"),
                bilinear.attention_weights,
                ["B", "Q", "K"],
                mask=blocked,
            ),
            shown(_("additive: output"), additive_output, ["B", "Q", "v"]),
            shown(_("bilinear: output"), bilinear_output, ["B", "Q", "v"]),
        ]
        lines.append(code(DotProductAttention.attend))
        notes.append(
            _(
                "The plain dot product q·k needs queries and keys of one size; these are q = {q} "
                "and k = {k}. The chapter's exercise qᵀ M k, with a (q x k) matrix M (learned in a "
                "model, random here from manual_seed({seed})), handles any sizes: it is DotProductAttention "
                "run on the queries mapped by M, (B, Q, q) @ (q, k) -> (B, Q, k)."
            ).format(q=queries.shape[2], k=keys.shape[2], seed=seed)
        )
    return answer(tensors, lines, notes)


SATURATED = 0.9  # a largest weight above this is "nearly all weight on one key"
SERIES = {  # the key-size plots' lines
    "std of scores with √d": N_("std of scores with √d"),
    "std of scores without √d": N_("std of scores without √d"),
    "largest weight with √d": N_("largest weight with √d"),
    "largest weight without √d": N_("largest weight without √d"),
}


def sweep_note(with_scale: list[float], without: list[float]) -> str:
    """What the plot of the largest weight shows over KEY_SIZES: the scaled curve's range, and the first
    key size at which the unscaled curve saturates (over SATURATED), if it does."""

    def first_saturated(curve: list[float]) -> int | None:
        return next((d for d, w in zip(KEY_SIZES, curve, strict=True) if w > SATURATED), None)

    def where(curve: list[float]) -> str:
        d = first_saturated(curve)
        if d is None:
            return _("stays between {low} and {high}, never over {limit}").format(
                low=number(min(curve), ".2f"), high=number(max(curve), ".2f"), limit=number(SATURATED)
            )
        return _("passes {limit} from d = {d} on (up to {high})").format(
            limit=number(SATURATED), d=d, high=number(max(curve), ".2f")
        )

    return _(
        "The plot (the mean over {queries} random queries at each d from {first} to "
        "{last}): with the scale the largest weight {scaled}; without it the largest "
        "weight {unscaled}."
    ).format(
        queries=SWEEP_QUERIES,
        first=KEY_SIZES[0],
        last=KEY_SIZES[-1],
        scaled=where(with_scale),
        unscaled=where(without),
    )


def key_size_panel(state: dict[str, Any]) -> dict[str, Any]:
    """One random query over 8 random keys of size d, with or without the 1/sqrt(d) scale, and the spread
    of the scores and the largest weight as d goes from 1 to 1024, both ways."""
    d = whole(state, "d", 64, 1, MAX_KEY_SIZE)
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    scaled = str(state.get("scaled", "true")).lower() != "false"
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(1, 1, d, generator=generator)  # (1, 1, d)
    keys = torch.randn(1, SWEEP_KEYS, d, generator=generator)  # (1, K, d)
    values = torch.arange(SWEEP_KEYS, dtype=torch.float32).reshape(1, SWEEP_KEYS, 1)  # (1, K, 1)
    factor = 1.0 if scaled else math.sqrt(d)  # unscaled: the same function on queries times sqrt(d)
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        output = attention(queries * factor, keys, values)  # (1, 1, 1)
    weights = attention.attention_weights  # (1, 1, K)
    scores = torch.matmul(queries * factor, keys.transpose(1, 2)) / math.sqrt(d)  # (1, 1, K)
    series: dict[str, list[float]] = {}
    sweep = torch.Generator().manual_seed(seed)
    for size in KEY_SIZES:
        q = torch.randn(SWEEP_QUERIES, 1, size, generator=sweep)  # (N, 1, d)
        k = torch.randn(SWEEP_QUERIES, SWEEP_KEYS, size, generator=sweep)  # (N, K, d)
        v = torch.zeros(SWEEP_QUERIES, SWEEP_KEYS, 1)  # (N, K, 1)
        for name, times in (("with √d", 1.0), ("without √d", math.sqrt(size))):
            with torch.no_grad():
                attention(q * times, k, v)
            raw = torch.matmul(q * times, k.transpose(1, 2)) / math.sqrt(size)  # (N, 1, K)
            series.setdefault(f"std of scores {name}", []).append(float(raw.std()))
            series.setdefault(f"largest weight {name}", []).append(
                float(attention.attention_weights.amax(-1).mean())
            )
    sizes = [math.log2(size) for size in KEY_SIZES]
    plots = [
        plot(
            _("spread of the scores"),
            "log2 d",
            "std",
            [(_(SERIES[n]), sizes, y) for n, y in series.items() if "std" in n],
        ),
        plot(
            _("largest weight of 8 keys (mean)"),
            "log2 d",
            _("weight"),
            [(_(SERIES[n]), sizes, y) for n, y in series.items() if "largest" in n],
        ),
    ]
    name = _("scores q kᵀ / √d") if scaled else _("scores q kᵀ (no scale)")
    tensors = [
        shown(name, scores, ["B", "Q", "K"]),
        shown("attention_weights", weights, ["B", "Q", "K"]),
        shown(_("output: weighted mean of the values 0..7"), output, ["B", "Q", "v"]),
    ]
    largest = float(weights.max())
    spread = float(scores.std())
    notes = [
        ngettext(
            "q and the 8 keys have d = {d} entry drawn from N(0, 1), so q · k has variance d.",
            "q and the 8 keys have d = {d} entries drawn from N(0, 1), so q · k has variance d.",
            d,
        ).format(d=d)
        + " "
        + (
            _("Dividing by √d brings the scores back to unit variance whatever d is")
            if scaled
            else _("Without the scale the scores spread like √d (std {spread} here)").format(
                spread=number(spread, ".2f")
            )
        )
        + (
            _(
                "; the largest of the 8 weights is {largest}: nearly all weight on one key, where the "
                "softmax's gradients vanish."
            )
            if largest > SATURATED
            else _("; the largest of the 8 weights is {largest}, the softmax not saturated at this d.")
        ).format(largest=number(largest, ".3f")),
        sweep_note(series["largest weight with √d"], series["largest weight without √d"]),
    ]
    lines = [
        line_of(
            DotProductAttention.attend, "torch.matmul(queries, keys.transpose", "DotProductAttention.attend"
        )
    ]
    return answer(tensors, lines, notes, plots)
