"""A correct solution of the chapter's blocks written as the book writes them, and the text edits that plant
each common mistake into it (tests/test_check.py, tests/test_exercises.py)."""

from __future__ import annotations

import ast

from support.helpers import ROOT

SOLUTION = ROOT / "tests" / "check_solutions" / "d2l_blocks.py"

EMBEDDING = "X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))\n        "
ENCODER_EMBEDDING = EMBEDDING + "self.attention_weights = [None]"

# mistake id -> (the block it is checked in, the text of the solution it replaces, the replacement)
PLANTED = {
    "mask-with-zero": ("masked_softmax", "value=-1e6", "value=0"),
    "mask-with-minus-infinity": ("masked_softmax", "value=-1e6", "value=float('-inf')"),
    "valid-lens-ignored": ("masked_softmax", "if valid_lens is None:", "if True:"),
    "mask-inverted": ("masked_softmax", "X[~mask] = value", "X[mask] = value"),
    "mask-off-by-one": ("masked_softmax", "< valid_len[:, None]", "<= valid_len[:, None]"),
    "valid-lens-wrong-axis": (
        "masked_softmax",
        "torch.repeat_interleave(valid_lens, shape[1])",
        "valid_lens.repeat(shape[1])",
    ),
    "valid-lens-2d-as-1d": ("masked_softmax", "if valid_lens.dim() == 1:", "if valid_lens.dim() >= 1:"),
    "heads-scaled-by-hidden": (
        "MultiHeadAttention",
        "queries = self.transpose_qkv(self.W_q(queries))",
        "queries = self.transpose_qkv(self.W_q(queries)) / math.sqrt(self.num_heads)",
    ),
    "pe-sliced-by-batch": ("PositionalEncoding", "self.P[:, : X.shape[1], :]", "self.P[:, : X.shape[0], :]"),
    "concat-order-swapped": (
        "Seq2SeqAttentionDecoder",
        "torch.cat((context, torch.unsqueeze(x, dim=1)), dim=-1)",
        "torch.cat((torch.unsqueeze(x, dim=1), context), dim=-1)",
    ),
    "init-state-not-transposed": (
        "Seq2SeqAttentionDecoder",
        "return (outputs.permute(1, 0, 2), hidden_state, enc_valid_lens)",
        "return (outputs, hidden_state, enc_valid_lens)",
    ),
    "changes-its-input": (
        "PositionalEncoding",
        "X = X + self.P[:, : X.shape[1], :].to(X.device)",
        "X += self.P[:, : X.shape[1], :].to(X.device)",
    ),
    "gradient-cut": (
        "PositionalEncoding",
        "X = X + self.P[:, : X.shape[1], :].to(X.device)",
        "X = X.detach() + self.P[:, : X.shape[1], :].to(X.device)",
    ),
    "bias-hard-coded": (
        "MultiHeadAttention",
        "self.W_q = nn.LazyLinear(num_hiddens, bias=bias)",
        "self.W_q = nn.LazyLinear(num_hiddens, bias=True)",
    ),
    "softmax-wrong-axis": (
        "masked_softmax",
        "softmax(X.reshape(shape), dim=-1)",
        "softmax(X.reshape(shape), dim=1)",
    ),
    "no-scaling": ("DotProductAttention", " / math.sqrt(d)", ""),
    "scaled-by-d": ("DotProductAttention", " / math.sqrt(d)", " / d"),
    "no-tanh": ("AdditiveAttention", "features = torch.tanh(features)", "features = features"),
    "heads-split-wrong": (
        "transpose_qkv",
        "X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)\n        X = X.permute(0, 2, 1, 3)",
        "X = X.reshape(X.shape[0], self.num_heads, X.shape[1], -1)",
    ),
    "heads-merged-wrong": (
        "transpose_output",
        "X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])\n        X = X.permute(0, 2, 1, 3)\n"
        "        return X.reshape(X.shape[0], X.shape[1], -1)",
        "return X.reshape(-1, X.shape[1], X.shape[2] * self.num_heads)",
    ),
    "valid-lens-tiled": (
        "MultiHeadAttention",
        "torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)",
        "valid_lens.repeat(self.num_heads)",
    ),
    "no-output-projection": ("MultiHeadAttention", "return self.W_o(output_concat)", "return output_concat"),
    "sin-cos-swapped": (
        "PositionalEncoding",
        "self.P[:, :, 0::2] = torch.sin(X)\n        self.P[:, :, 1::2] = torch.cos(X)",
        "self.P[:, :, 0::2] = torch.cos(X)\n        self.P[:, :, 1::2] = torch.sin(X)",
    ),
    "frequency-exponent": (
        "PositionalEncoding",
        "torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens",
        "torch.arange(num_hiddens // 2, dtype=torch.float32) / num_hiddens",
    ),
    "no-relu": ("PositionWiseFFN", "self.dense2(self.relu(self.dense1(X)))", "self.dense2(self.dense1(X))"),
    "norm-before-add": ("AddNorm", "self.ln(self.dropout(Y) + X)", "self.ln(self.dropout(Y)) + X"),
    "no-residual": ("AddNorm", "self.ln(self.dropout(Y) + X)", "self.ln(self.dropout(Y))"),
    "block-residual-from-input": (
        "TransformerEncoderBlock",
        "self.addnorm2(Y, self.ffn(Y))",
        "self.addnorm2(X, self.ffn(Y))",
    ),
    "block-without-mask": (
        "TransformerEncoderBlock",
        "self.attention(X, X, X, valid_lens)",
        "self.attention(X, X, X, None)",
    ),
    "decoder-not-causal": ("TransformerDecoderBlock", "if self.training:", "if False:"),
    "cross-attention-without-mask": (
        "TransformerDecoderBlock",
        "self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)",
        "self.attention2(Y, enc_outputs, enc_outputs, None)",
    ),
    "query-from-first-layer": ("Seq2SeqAttentionDecoder", "hidden_state[-1]", "hidden_state[0]"),
    "decoder-without-mask": (
        "Seq2SeqAttentionDecoder",
        "self.attention(query, enc_outputs, enc_outputs, enc_valid_lens)",
        "self.attention(query, enc_outputs, enc_outputs, None)",
    ),
    "embedding-not-scaled": (
        "TransformerEncoder",
        ENCODER_EMBEDDING,
        "X = self.pos_encoding(self.embedding(X))\n        self.attention_weights = [None]",
    ),
    "embedding-scaled-after-positions": (
        "TransformerDecoder",
        "self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))\n        self._attention",
        "self.pos_encoding(self.embedding(X)) * math.sqrt(self.num_hiddens)\n        self._attention",
    ),
    "positions-left-out": (
        "TransformerEncoder",
        ENCODER_EMBEDDING,
        "X = self.embedding(X) * math.sqrt(self.num_hiddens)\n        self.attention_weights = [None]",
    ),
    "weights-of-last-block-only": (
        "TransformerEncoder",
        "self.attention_weights[i] = blk.attention.attention.attention_weights",
        "self.attention_weights = blk.attention.attention.attention_weights",
    ),
    "cache-not-kept": ("TransformerDecoder", "        state[2][self.i] = key_values\n", ""),
    "cache-overwritten": ("TransformerDecoder", "state[2][self.i] = key_values", "state[2][self.i] = X"),
    "cache-not-per-block": ("TransformerDecoder", "[None] * self.num_blks]", "[None]]"),
    "nw-exponent-sign": (
        "NWKernelRegression",
        "softmax(-(((queries - keys) * self.w) ** 2) / 2, dim=1)",
        "softmax((((queries - keys) * self.w) ** 2) / 2, dim=1)",
    ),
    "nw-queries-tiled": (
        "NWKernelRegression",
        "queries.repeat_interleave(keys.shape[1])",
        "queries.repeat(keys.shape[1])",
    ),
    "nw-w-on-squared-distance": (
        "NWKernelRegression",
        "softmax(-(((queries - keys) * self.w) ** 2) / 2, dim=1)",
        "softmax(-((queries - keys) ** 2) * self.w / 2, dim=1)",
    ),
    "parameters-not-registered": (
        "NWKernelRegression",
        "self.w = nn.Parameter(torch.rand((1,), requires_grad=True))",
        "self.w = torch.rand((1,), requires_grad=True)",
    ),
    "dropout-in-eval": (
        "AddNorm",
        "self.ln(self.dropout(Y) + X)",
        "self.ln(nn.functional.dropout(Y, self.dropout.p) + X)",
    ),
    "dropout-not-in-training": ("AddNorm", "self.ln(self.dropout(Y) + X)", "self.ln(Y + X)"),
}


def solution_source(name: str, planted: str = "") -> str:
    """The source of the solution's top-level function or class `name`, with mistake `planted` made in it."""
    text = SOLUTION.read_text(encoding="utf-8")
    tree = ast.parse(text)
    [node] = [node for node in tree.body if getattr(node, "name", None) == name]
    source = ast.get_source_segment(text, node)
    assert source is not None
    if planted:
        _, old, new = PLANTED[planted]
        assert source.count(old) == 1, f"{name} must hold {old!r} once"
        source = source.replace(old, new)
    return source
