"""A learner's positional encoding and add & norm, correct in their numbers but each adding into the
caller's X in place (`X += ...`): the positional encoding's caller sees its X changed, and the add &
norm's X += fails a backward pass in a network. What `attn-mt check` must name; not part of attn_mt."""

import torch
from torch import nn


class PositionalEncoding(nn.Module):
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len).unsqueeze(1).float()
        steps = torch.arange(0, num_hiddens, 2).float()
        frequencies = torch.exp(-steps * (torch.log(torch.tensor(10000.0)) / num_hiddens))
        table = torch.zeros(max_len, num_hiddens)
        table[:, 0::2] = torch.sin(position * frequencies)
        table[:, 1::2] = torch.cos(position * frequencies)
        self.register_buffer("P", table.unsqueeze(0), persistent=False)

    def forward(self, X):
        X += self.P[:, : X.shape[1]]
        return self.dropout(X)


class AddNorm(nn.Module):
    def __init__(self, norm_shape, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape)

    def forward(self, X, Y):
        X += self.dropout(Y)
        return self.ln(X)
