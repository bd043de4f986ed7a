"""The chapter's blocks written as plain functions of their parameters, with switches for the common mistakes.

Shapes: B batch, Q queries, K keys (= values), N steps, H hidden, h heads, d = H / h, F the FFN's hidden
size, S source steps, T target steps, L layers, V vocabulary.
Each function reads the parameters by the book's state-dict names (`W_q.weight`, `ln.bias`, ...) from
`params` and computes what the book's code computes (d2l.ai sections 11.2-11.7). With every switch of
`Knobs` at its default it equals attn-mt's module (tests/test_check.py proves it, case by case); one
switch moved gives the output of a learner's code with that one mistake, which is how `attn-mt check`
names a mistake: a learner's output that equals a variant's, where attn-mt's differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

Params = dict[str, torch.Tensor]
BOOK_FILL = -1e6  # the value the book's _sequence_mask writes over masked scores


@dataclass(frozen=True)
class Knobs:
    """Where the code may go wrong; the defaults are the book's (and attn-mt's) choices."""

    fill: str = "large_negative"  # "zero" | "neg_inf" | "none" (valid_lens ignored)
    off_by_one: bool = False  # the mask keeps positions <= valid_len (one key of padding too many)
    lens_1d: str = "interleave"  # 1-D valid_lens per row: "tile" (.repeat) | "query" (indexed by the query)
    inverted: bool = False  # the mask keeps the padding and hides the real keys
    axis: int = -1  # 1: softmax over the queries
    empty: str = "zero"  # a query with no valid key: "zero" (attn-mt) or "uniform" (the book's -1e6)
    scale: str = "sqrt_d"  # "none" | "d" | "sqrt_hidden" (multi-head: sqrt(H), not each head's sqrt(d))
    tanh: bool = True
    split: str = "per_position"  # "wrong": (B, N, H) read as (B, h, N, d)
    merge: str = "inverse"  # "wrong": (B*h, N, d) read straight as (B, N, H)
    repeat: str = "interleave"  # "tile": valid_lens.repeat(h) instead of repeat_interleave
    w_o: bool = True
    table: str = "book"  # "swapped": cos at even columns | "exponent": 10000^(j/H) instead of 10000^(2j/H)
    pe_rows: str = "steps"  # "batch": the table sliced by the batch size (P[:, :B]) instead of the steps
    relu: bool = True
    addnorm: str = "post"  # "norm_first": X + LN(Y) | "no_residual": LN(Y)
    block_residual: str = "Y"  # "X": the second add & norm adds the block's input
    block_mask: bool = True  # False: the encoder block's attention is called without valid_lens
    query_layer: int = -1  # 0: the decoder's query is the first GRU layer's state
    decoder_mask: bool = True  # False: enc_valid_lens not passed to the attention
    causal: bool = True  # False: the decoder block's self-attention sees later steps in training
    cross_mask: bool = True  # False: the decoder block's encoder-decoder attention gets no enc_valid_lens
    concat: str = "context_first"  # "embedding_first": the GRU reads cat(x, context), not cat(context, x)
    embed_scale: str = "before"  # the sqrt(H) scaling of the embedding: "none" | "after" (of X + P too)
    positions: bool = True  # False: the Transformer's embedding gets no positional encoding
    step_positions: str = "zero"  # one token at a time: the book's P[0] for each | "offset": step t gets P[t]
    cache: str = (
        "all"  # the decoder's per-block cache: "none" (a step sees itself) | "last" (the step before)
    )
    block_weights: str = "each"  # "last": the encoder keeps only the last block's attention weights
    nw_repeat: str = "interleave"  # "tile": the NW queries repeated with .repeat, not repeat_interleave
    nw_sign: int = -1  # +1: the NW exponent +((q - k) w)^2 / 2, far keys weighted most
    nw_w: str = "distance"  # "squared": w multiplies the squared distance, not the distance


BOOK = Knobs()


def with_knob(knobs: Knobs, **changes: object) -> Knobs:
    """A copy of `knobs` with some switches moved."""
    return replace(knobs, **changes)


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None, k: Knobs = BOOK) -> torch.Tensor:
    """Softmax of scores X (B, Q, K) over the keys, keys at or past each valid length masked."""
    if valid_lens is None or k.fill == "none":
        return F.softmax(X, dim=k.axis)
    lens = row_lens(valid_lens, X.shape, k)  # (B|1, 1|Q, 1)
    keep = torch.arange(X.shape[-1]) < lens + int(k.off_by_one)  # (B, 1|Q, K)
    if k.inverted:
        keep = ~keep
    fill = {"large_negative": BOOK_FILL, "zero": 0.0, "neg_inf": -math.inf}[k.fill]
    weights = F.softmax(X.masked_fill(~keep, fill), dim=k.axis)  # (B, Q, K)
    if k.empty == "zero" and k.fill == "large_negative" and not k.inverted and not k.off_by_one:
        weights = weights.masked_fill(lens <= 0, 0.0)
    return weights


def row_lens(valid_lens: torch.Tensor, shape: torch.Size, k: Knobs) -> torch.Tensor:
    """Each row's valid length for scores of `shape` (B, Q, K): (B, 1, 1), (B, Q, 1), misread (1, Q, 1)."""
    batch, queries = shape[0], shape[1]
    if valid_lens.dim() == 2:
        return valid_lens.unsqueeze(-1)
    if k.lens_1d == "tile":  # valid_lens.repeat(Q): row b * Q + q gets valid_lens[(b * Q + q) % B]
        return valid_lens.repeat(queries).reshape(batch, queries, 1)
    if k.lens_1d == "query":  # valid_lens[None, :, None]: query q gets sentence q's length
        if queries != batch:
            raise ValueError("this misreading fails unless there are as many queries as sentences")
        return valid_lens.reshape(1, -1, 1)
    return valid_lens.reshape(-1, 1, 1)


def dot_product(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    k: Knobs,
    heads: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention: output (B, Q, v) and weights (B, Q, K) (book eq. 11.3.4).

    `heads` is the number of heads whose (B * h, Q, d) rows these are, for the sqrt(H) mistake."""
    d = queries.shape[-1]
    scale = {"sqrt_d": math.sqrt(d), "d": d, "none": 1.0, "sqrt_hidden": math.sqrt(d * heads)}[k.scale]
    weights = masked_softmax(queries @ keys.transpose(1, 2) / scale, valid_lens, k)  # (B, Q, K)
    return weights @ values, weights


def additive(
    params: Params,
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    k: Knobs,
    prefix: str = "",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive attention w_v^T tanh(W_q q + W_k k): output (B, Q, v) and weights (B, Q, K) (eq. 11.3.7)."""
    features = (queries @ params[prefix + "W_q.weight"].T).unsqueeze(2) + (
        keys @ params[prefix + "W_k.weight"].T
    ).unsqueeze(1)  # (B, Q, K, H)
    if k.tanh:
        features = torch.tanh(features)
    scores = (features @ params[prefix + "w_v.weight"].T).squeeze(-1)  # (B, Q, K)
    weights = masked_softmax(scores, valid_lens, k)
    return weights @ values, weights


def split_heads(X: torch.Tensor, num_heads: int, k: Knobs = BOOK) -> torch.Tensor:
    """The book's transpose_qkv: (B, N, H) -> (B * h, N, d)."""
    batch, steps, hidden = X.shape
    if k.split == "wrong":
        return X.reshape(batch * num_heads, steps, hidden // num_heads)
    return X.reshape(batch, steps, num_heads, -1).permute(0, 2, 1, 3).reshape(batch * num_heads, steps, -1)


def merge_heads(X: torch.Tensor, num_heads: int, k: Knobs = BOOK) -> torch.Tensor:
    """The book's transpose_output: (B * h, N, d) -> (B, N, H)."""
    heads_batch, steps, size = X.shape
    if k.merge == "wrong":
        return X.reshape(heads_batch // num_heads, steps, num_heads * size)
    return X.reshape(-1, num_heads, steps, size).permute(0, 2, 1, 3).reshape(-1, steps, num_heads * size)


def multi_head(
    params: Params,
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
    num_heads: int,
    k: Knobs,
    prefix: str = "",
    kept: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Multi-head attention (book section 11.5): (B, Q, q), (B, K, k), (B, K, v) -> (B, Q, H).

    The heads' weights (B * h, Q, K) are appended to `kept` when it is given."""
    head_q, head_k, head_v = (
        split_heads(X @ params[f"{prefix}{name}.weight"].T, num_heads, k)  # (B * h, N, d)
        for X, name in ((queries, "W_q"), (keys, "W_k"), (values, "W_v"))
    )
    if valid_lens is not None:
        if k.repeat == "tile":
            valid_lens = valid_lens.repeat(num_heads, *([1] * (valid_lens.dim() - 1)))  # (B * h[, Q])
        else:
            valid_lens = torch.repeat_interleave(valid_lens, num_heads, dim=0)  # (B * h[, Q])
    output, weights = dot_product(head_q, head_k, head_v, valid_lens, k, num_heads)  # (B * h, Q, d)
    if kept is not None:
        kept.append(weights)
    merged = merge_heads(output, num_heads, k)  # (B, Q, H)
    return merged @ params[prefix + "W_o.weight"].T if k.w_o else merged


def sinusoids(num_steps: int, num_hiddens: int, k: Knobs = BOOK) -> torch.Tensor:
    """The (T, H) positional-encoding table (book section 11.6.3)."""
    exponents = torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens  # 2j / H, (H / 2,)
    if k.table == "exponent":
        exponents = exponents / 2  # j / H
    angles = torch.arange(num_steps, dtype=torch.float32).unsqueeze(1) / torch.pow(10000.0, exponents)
    even, odd = (torch.cos, torch.sin) if k.table == "swapped" else (torch.sin, torch.cos)
    table = torch.zeros(num_steps, num_hiddens)  # (T, H)
    table[:, 0::2] = even(angles)
    table[:, 1::2] = odd(angles[:, : num_hiddens // 2])
    return table


def positional(X: torch.Tensor, k: Knobs, offset: int = 0) -> torch.Tensor:
    """X (B, T, H) at positions offset.. plus those rows of the table (misread: its first B rows,
    broadcast over the steps)."""
    if k.pe_rows == "batch":
        return X + sinusoids(X.shape[0], X.shape[2], k).unsqueeze(0)  # fails unless B is 1 or T
    return X + sinusoids(offset + X.shape[1], X.shape[2], k)[offset:]


def ffn(params: Params, X: torch.Tensor, k: Knobs, prefix: str = "") -> torch.Tensor:
    """The position-wise FFN dense2(relu(dense1(X))) (book section 11.7.2): (B, N, H) -> (B, N, H)."""
    hidden = X @ params[prefix + "dense1.weight"].T + params[prefix + "dense1.bias"]  # (B, N, F)
    if k.relu:
        hidden = F.relu(hidden)
    return hidden @ params[prefix + "dense2.weight"].T + params[prefix + "dense2.bias"]


def add_norm(params: Params, X: torch.Tensor, Y: torch.Tensor, k: Knobs, prefix: str = "") -> torch.Tensor:
    """LayerNorm(X + Y) (book section 11.7.3): (B, N, H), (B, N, H) -> (B, N, H)."""

    def norm(Z: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(Z, Z.shape[-1:], params[prefix + "ln.weight"], params[prefix + "ln.bias"])

    if k.addnorm == "norm_first":
        return X + norm(Y)
    if k.addnorm == "no_residual":
        return norm(Y)
    return norm(X + Y)


def encoder_block(
    params: Params,
    X: torch.Tensor,
    valid_lens: torch.Tensor | None,
    num_heads: int,
    k: Knobs,
    prefix: str = "",
    kept: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """The Transformer encoder block (book section 11.7.4): (B, N, H) -> (B, N, H); its self-attention
    weights (B * h, N, N) appended to `kept` when it is given."""
    lens = valid_lens if k.block_mask else None
    attended = multi_head(params, X, X, X, lens, num_heads, k, prefix + "attention.", kept)
    Y = add_norm(params, X, attended, k, prefix + "addnorm1.")
    residual = X if k.block_residual == "X" else Y
    return add_norm(params, residual, ffn(params, Y, k, prefix + "ffn."), k, prefix + "addnorm2.")


def decoder_block(
    params: Params,
    X: torch.Tensor,
    past: torch.Tensor | None,
    memory: torch.Tensor,
    valid_lens: torch.Tensor | None,
    num_heads: int,
    training: bool,
    k: Knobs,
    prefix: str = "",
) -> torch.Tensor:
    """The Transformer decoder block (book section 11.7.5): new steps X (B, T, H) after the block's earlier
    inputs `past` (B, t, H), encoder outputs memory (B, S, H) -> (B, T, H). In training the steps attend
    causally (the book's dec_valid_lens 1..T); in eval mode every step sees every key."""
    keys = X if past is None else torch.cat((past, X), dim=1)  # (B, t + T, H)
    batch, steps = X.shape[:2]
    causal = torch.arange(1, steps + 1).repeat(batch, 1) if training and k.causal else None  # (B, T)
    attended = multi_head(params, X, keys, keys, causal, num_heads, k, prefix + "attention1.")
    Y = add_norm(params, X, attended, k, prefix + "addnorm1.")
    lens = valid_lens if k.cross_mask else None
    crossed = multi_head(params, Y, memory, memory, lens, num_heads, k, prefix + "attention2.")
    Z = add_norm(params, Y, crossed, k, prefix + "addnorm2.")
    return add_norm(params, Z, ffn(params, Z, k, prefix + "ffn."), k, prefix + "addnorm3.")


def embed(params: Params, ids: torch.Tensor, k: Knobs, offset: int = 0) -> torch.Tensor:
    """The Transformer's input: ids (B, N) at positions offset.. -> sqrt(H) embedding + positions."""
    X = params["embedding.weight"][ids]  # (B, N, H)
    scale = math.sqrt(X.shape[-1])
    if k.embed_scale == "before":
        X = X * scale
    if k.positions:
        X = positional(X, k, offset)
    return X * scale if k.embed_scale == "after" else X


def transformer_encoder(
    params: Params,
    src: torch.Tensor,
    valid_lens: torch.Tensor | None,
    num_heads: int,
    num_layers: int,
    k: Knobs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Transformer encoder (book section 11.7.4): source ids (B, S) -> (B, S, H), and every block's
    self-attention weights (B, L, h, S, S) (the last block's alone, (B, 1, h, S, S), when misread)."""
    X = embed(params, src, k)
    kept: list[torch.Tensor] = []
    for i in range(num_layers):
        X = encoder_block(params, X, valid_lens, num_heads, k, f"blks.block{i}.", kept)
    batch, steps = src.shape
    weights = torch.stack([w.reshape(batch, num_heads, steps, steps) for w in kept], dim=1)
    return X, weights[:, -1:] if k.block_weights == "last" else weights


def transformer_decoder(
    params: Params,
    tgt: torch.Tensor,
    memory: torch.Tensor,
    valid_lens: torch.Tensor | None,
    num_heads: int,
    num_layers: int,
    training: bool,
    one_at_a_time: bool,
    k: Knobs,
) -> torch.Tensor:
    """The Transformer decoder (book section 11.7.5): target ids (B, T) -> logits (B, T, V), all at once
    (causal in training), or one token at a time as the book's predict_seq2seq feeds them, each block
    keeping its inputs so far in the state's cache."""
    blocks = [f"blks.block{i}." for i in range(num_layers)]

    def logits(X: torch.Tensor) -> torch.Tensor:
        return X @ params["dense.weight"].T + params["dense.bias"]

    if not one_at_a_time:
        X = embed(params, tgt, k)
        for prefix in blocks:
            X = decoder_block(params, X, None, memory, valid_lens, num_heads, training, k, prefix)
        return logits(X)
    caches: list[torch.Tensor | None] = [None] * num_layers  # each block's inputs so far, (B, t, H)
    outputs = []
    for step in range(tgt.shape[1]):
        X = embed(params, tgt[:, step : step + 1], k, step if k.step_positions == "offset" else 0)
        for i, prefix in enumerate(blocks):
            past = caches[i]
            if k.cache == "all":
                caches[i] = X if past is None else torch.cat((past, X), dim=1)
            elif k.cache == "last":
                caches[i] = X
            X = decoder_block(params, X, past, memory, valid_lens, num_heads, training, k, prefix)
        outputs.append(logits(X))
    return torch.cat(outputs, dim=1)


def nadaraya_watson(
    w: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, k: Knobs
) -> tuple[torch.Tensor, torch.Tensor]:
    """The book's parametric Nadaraya-Watson regression: queries (n,), keys and values (n, K) ->
    predictions (n,) and weights softmax_K(-((q - k) w)^2 / 2) (n, K)."""
    pairs = keys.shape[1]
    if k.nw_repeat == "tile":
        repeated = queries.repeat(pairs).reshape(-1, pairs)  # row i: queries (i * K) % n, ...
    else:
        repeated = queries.repeat_interleave(pairs).reshape(-1, pairs)  # row i: query i, K times
    distances = repeated - keys  # (n, K)
    exponent = (distances * w) ** 2 if k.nw_w == "distance" else distances**2 * w
    weights = F.softmax(k.nw_sign * exponent / 2, dim=1 if k.axis == -1 else 0)  # (n, K)
    return (weights * values).sum(dim=1), weights


def bahdanau_decoder(
    params: Params,
    rnn: torch.nn.GRU,
    tgt: torch.Tensor,
    memory: torch.Tensor,
    hidden: torch.Tensor,
    valid_lens: torch.Tensor | None,
    k: Knobs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The book's Seq2SeqAttentionDecoder, teacher-forced: logits (B, T, V) and weights (B, T, S).

    `rnn` is a batch-first GRU holding the decoder's `rnn.*` parameters; memory (B, S, H) are the
    encoder's outputs and hidden (L, B, H) its final states.
    """
    lens = valid_lens if k.decoder_mask else None
    outputs, weights = [], []
    for x in params["embedding.weight"][tgt].unbind(1):  # T x (B, E)
        query = hidden[k.query_layer].unsqueeze(1)  # (B, 1, H)
        context, step_weights = additive(params, query, memory, memory, lens, k, "attention.")  # (B, 1, H)
        parts = (context, x.unsqueeze(1)) if k.concat == "context_first" else (x.unsqueeze(1), context)
        output, hidden = rnn(torch.cat(parts, dim=-1), hidden)  # (B, 1, H), (L, B, H)
        outputs.append(output)
        weights.append(step_weights)
    logits = torch.cat(outputs, dim=1) @ params["dense.weight"].T + params["dense.bias"]  # (B, T, V)
    return logits, torch.cat(weights, dim=1)
