# ruff: noqa: SIM108  (as the learner wrote it)
"""A learner's masked softmax written with masked_fill rather than the book's sequence_mask, with an
off-by-one: it masks the positions > valid_len, keeping one padding key too many. What `attn-mt check`
must name as the off-by-one in every block that calls it; not part of attn_mt."""

import math

import torch
from torch import nn


def masked_softmax(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None, None]
    else:
        valid_lens = valid_lens[:, :, None]
    positions = torch.arange(X.shape[-1], device=X.device)
    X = X.masked_fill(positions > valid_lens, -1e6)
    return torch.softmax(X, dim=-1)


class DotProductAttention(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])
        self.attention_weights = masked_softmax(scores, valid_lens)
        return self.dropout(self.attention_weights) @ values
