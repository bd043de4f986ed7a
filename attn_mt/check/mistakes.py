"""The common mistakes in the chapter's blocks, each with the sentence `attn-mt check` teaches on seeing it.

A mistake found by comparison moves one switch of `variants.Knobs`: a learner's output equal to that
variant's names it. The two dropout mistakes are found by behaviour instead (two eval calls that
differ; a training call equal to an eval call).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mistake:
    """One named mistake: its id, a short title, the teaching sentence and the switches it moves."""

    id: str
    title: str
    lesson: str
    knobs: dict[str, object] = field(default_factory=dict)


MISTAKES = (
    Mistake(
        "mask-with-zero",
        "padding masked with 0 instead of a large negative number",
        "A masked score of 0 still gets exp(0) = 1 in the softmax, so padding keeps real weight; the book "
        "writes -1e6 over the masked scores so that exp() of them is 0.",
        {"fill": "zero"},
    ),
    Mistake(
        "mask-with-minus-infinity",
        "padding masked with -inf",
        "With -inf a query whose valid length is 0 has every score at -inf, and softmax of that row is "
        "0/0 = NaN, which then spreads through the whole batch; the book's -1e6 (or a finite large "
        "negative) keeps it finite.",
        {"fill": "neg_inf"},
    ),
    Mistake(
        "valid-lens-ignored",
        "valid_lens ignored: the padding is not masked",
        "Keys at or past a sequence's valid length are padding; the softmax must give them no weight, so "
        "mask them (scores at positions >= valid_len) before the softmax.",
        {"fill": "none"},
    ),
    Mistake(
        "mask-inverted",
        "the mask is inverted: it hides the real keys and keeps the padding",
        "Keep the keys at positions < valid_len and mask those at positions >= valid_len; yours masks "
        "the first valid_len keys instead.",
        {"inverted": True},
    ),
    Mistake(
        "softmax-wrong-axis",
        "softmax over the wrong axis (the queries, not the keys)",
        "Each query's weights over the keys must sum to 1, so the softmax runs over the last axis "
        "(dim=-1) of the (batch, queries, keys) scores.",
        {"axis": 1},
    ),
    Mistake(
        "no-scaling",
        "no 1/sqrt(d) scaling of the dot products",
        "Dot products of d-dimensional vectors with unit-variance entries have variance d; dividing by "
        "sqrt(d) keeps the scores at unit scale so the softmax does not saturate (book eq. 11.3.4).",
        {"scale": "none"},
    ),
    Mistake(
        "scaled-by-d",
        "dot products divided by d instead of sqrt(d)",
        "The scaling is 1/sqrt(d), the standard deviation of a dot product of d unit-variance entries; "
        "dividing by d flattens the weights towards uniform as d grows.",
        {"scale": "d"},
    ),
    Mistake(
        "no-tanh",
        "additive attention without the tanh",
        "Without tanh, w_v^T (W_q q + W_k k) = w_v^T W_q q + w_v^T W_k k: the query's part is the same for "
        "every key and cancels in the softmax, so the query has no effect (book eq. 11.3.7 has tanh).",
        {"tanh": False},
    ),
    Mistake(
        "heads-split-wrong",
        "heads split from the wrong dimension",
        "Reshape (batch, steps, num_hiddens) to (batch, steps, num_heads, d) and then move the heads "
        "forward (permute(0, 2, 1, 3)); reshaping straight to (batch, num_heads, steps, d) mixes "
        "positions into heads.",
        {"split": "wrong"},
    ),
    Mistake(
        "heads-merged-wrong",
        "transpose_output does not undo transpose_qkv",
        "Go back the way transpose_qkv came: (batch * num_heads, steps, d) -> (batch, num_heads, steps, "
        "d) -> permute(0, 2, 1, 3) -> (batch, steps, num_hiddens); a plain reshape mixes heads and "
        "positions.",
        {"merge": "wrong"},
    ),
    Mistake(
        "valid-lens-tiled",
        "valid_lens repeated with .repeat instead of repeat_interleave",
        "After transpose_qkv the rows are sentence 0's heads, then sentence 1's heads, ...; each valid "
        "length must be repeated num_heads times in place (torch.repeat_interleave(valid_lens, num_heads, "
        "dim=0)), while .repeat tiles the whole list and gives heads another sentence's length.",
        {"repeat": "tile"},
    ),
    Mistake(
        "no-output-projection",
        "the heads are concatenated but W_o is not applied",
        "Multi-head attention ends with the output projection W_o over the concatenated heads "
        "(book eq. 11.5.2).",
        {"w_o": False},
    ),
    Mistake(
        "sin-cos-swapped",
        "sine and cosine swapped",
        "The book puts sin at the even columns (P[:, 0::2]) and cos at the odd ones (P[:, 1::2]).",
        {"table": "swapped"},
    ),
    Mistake(
        "frequency-exponent",
        "the frequencies use 10000^(j/d) instead of 10000^(2j/d)",
        "Columns 2j and 2j+1 share the frequency 1 / 10000^(2j/d): the exponent runs over the even "
        "column indices (torch.arange(0, num_hiddens, 2) / num_hiddens).",
        {"table": "exponent"},
    ),
    Mistake(
        "no-relu",
        "the position-wise FFN has no ReLU",
        "Two dense layers without a nonlinearity between them are one linear map; the FFN is "
        "dense2(relu(dense1(X))).",
        {"relu": False},
    ),
    Mistake(
        "norm-before-add",
        "add & norm normalises Y before the residual sum",
        "The book's (post-norm) AddNorm is LayerNorm(dropout(Y) + X): add the residual first, then "
        "normalise the sum.",
        {"addnorm": "norm_first"},
    ),
    Mistake(
        "no-residual",
        "add & norm leaves out the residual X",
        "The residual connection is the 'add' in add & norm: LayerNorm(dropout(Y) + X), not LayerNorm(Y).",
        {"addnorm": "no_residual"},
    ),
    Mistake(
        "block-residual-from-input",
        "the encoder block's second add & norm adds the block's input X",
        "Each add & norm adds the input of the sublayer it wraps: addnorm2(Y, ffn(Y)), with Y the first "
        "add & norm's output.",
        {"block_residual": "X"},
    ),
    Mistake(
        "block-without-mask",
        "the encoder block's self-attention gets no valid_lens",
        "Pass valid_lens to self.attention(X, X, X, valid_lens) so that no position attends to padding "
        "(if you do, your masked_softmax ignores it: check masked_softmax).",
        {"block_mask": False},
    ),
    Mistake(
        "query-from-first-layer",
        "the decoder's query is the first GRU layer's state",
        "The query is the previous step's state of the top layer, hidden_state[-1]; hidden_state[0] is "
        "the bottom layer (the same only with one layer).",
        {"query_layer": 0},
    ),
    Mistake(
        "decoder-without-mask",
        "the decoder's attention ignores enc_valid_lens",
        "Pass enc_valid_lens to the attention at every step, so that the decoder never attends to the "
        "source's padding (if you do, your masked_softmax ignores it: check masked_softmax).",
        {"decoder_mask": False},
    ),
    Mistake(
        "dropout-in-eval",
        "dropout applied in eval mode",
        "Use an nn.Dropout module (self.dropout), which model.eval() turns off; F.dropout(x, p) without "
        "training=self.training drops values at test time too.",
    ),
    Mistake(
        "dropout-not-in-training",
        "dropout never applied in training",
        "In train mode the block should drop values with probability p (the book's self.dropout); yours "
        "gives the same output in train and eval mode.",
    ),
)

BY_ID = {mistake.id: mistake for mistake in MISTAKES}
