"""attn-mt check's stand-in for `from d2l import torch as d2l`: the d2l names the attention chapter's code
calls, written for attn-mt from their documented behaviour (d2l.ai, both the 1.0 edition and the older
one that the Chinese and Vietnamese editions follow), so a learner's file copied from the chapter runs
under `attn-mt check` without the d2l package (which pins an old torch).

`standin.py` gives it to the check's child process as the module `d2l.torch`, and only when the real
d2l is not installed. The classes take either edition's constructor arguments and name their layers
as the book does (`W_q`, `dense1`, `ln`, `rnn`, ...), so a learner's block built on them gets attn-mt's
parameters like the book's would. `try_gpu` gives the CPU, where the check runs its cases, and the
plotting helpers draw nothing. A name the chapter's blocks do not need (`load_data_nmt`, `train_seq2seq`,
...) raises AttributeError saying so.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MASK_VALUE = -1e6  # what the book writes over masked scores: exp() of it is 0, and a row of it is uniform

# the older edition's aliases of torch functions (d2l.tensor, d2l.reshape, ...)
tensor = torch.tensor
normal = torch.normal
ones = torch.ones
zeros = torch.zeros
arange = torch.arange
reshape = torch.reshape
matmul = torch.matmul
bmm = torch.bmm
exp = torch.exp
sin = torch.sin
cos = torch.cos
tanh = torch.tanh
concat = torch.cat
stack = torch.stack
float32 = torch.float32
int32 = torch.int32


def numpy(x: torch.Tensor) -> object:
    """The tensor as a NumPy array (the older edition's d2l.numpy)."""
    return x.detach().cpu().numpy()


def try_gpu(i: int = 0) -> torch.device:
    """The CPU: the check runs its cases there, whatever accelerator the machine has."""
    return torch.device("cpu")


def try_all_gpus() -> list[torch.device]:
    """The CPU alone, as try_gpu."""
    return [torch.device("cpu")]


def show_heatmaps(*args: object, **kwargs: object) -> None:
    """Draws nothing: the check has no screen."""


def plot(*args: object, **kwargs: object) -> None:
    """Draws nothing: the check has no screen."""


def set_figsize(*args: object, **kwargs: object) -> None:
    """Does nothing: the check draws no figure."""


def use_svg_display() -> None:
    """Does nothing: the check draws no figure."""


class Animator:
    """Draws nothing: the check has no screen (the book's d2l.Animator plots a curve as training goes)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.points: list[tuple[object, object]] = []

    def add(self, x: object, y: object) -> None:
        """Keeps the point, draws nothing."""
        self.points.append((x, y))


def sequence_mask(X: torch.Tensor, valid_len: torch.Tensor, value: float = 0) -> torch.Tensor:
    """Write `value` over each row's entries at positions >= its valid length; X (N, K), valid_len (N,).

    As the book's, it writes into X itself and returns it."""
    positions = torch.arange(X.shape[1], device=X.device)  # (K,)
    X[positions.unsqueeze(0) >= valid_len.unsqueeze(1)] = value
    return X


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis of X (B, Q, K), keys at or past each valid length (B,) or (B, Q) masked."""
    if valid_lens is None:
        return F.softmax(X, dim=-1)
    lens = valid_lens.reshape(-1, 1, 1) if valid_lens.dim() == 1 else valid_lens.unsqueeze(-1)
    padding = torch.arange(X.shape[-1], device=X.device) >= lens  # (B, 1|Q, K)
    return F.softmax(X.masked_fill(padding, MASK_VALUE), dim=-1)


def linear(size_in: int | None, size_out: int, bias: bool = True) -> nn.Module:
    """nn.Linear when the input size is given (the older edition), else nn.LazyLinear (1.0)."""
    return nn.LazyLinear(size_out, bias=bias) if size_in is None else nn.Linear(size_in, size_out, bias=bias)


def editions(args: tuple, kwargs: dict, older: tuple[str, ...], newer: tuple[str, ...]) -> dict:
    """The constructor's arguments by name, read in the edition whose argument list they fit."""
    names = older if len(args) > len(newer) or any(name in kwargs for name in older[:1]) else newer
    arguments = dict(zip(names, args, strict=False))
    arguments.update(kwargs)
    return arguments


class DotProductAttention(nn.Module):
    """Scaled dot-product attention, dropout on the weights (book section 11.3)."""

    def __init__(self, dropout: float, **kwargs: object) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, Q, d), (B, K, d), (B, K, v) -> (B, Q, v); the weights kept as attention_weights."""
        scores = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])
        self.attention_weights = masked_softmax(scores, valid_lens)
        return self.dropout(self.attention_weights) @ values


class AdditiveAttention(nn.Module):
    """Additive attention w_v^T tanh(W_q q + W_k k) (book section 11.3); (num_hiddens, dropout) or the
    older (key_size, query_size, num_hiddens, dropout)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__()
        sizes = editions(
            args, kwargs, ("key_size", "query_size", "num_hiddens", "dropout"), ("num_hiddens", "dropout")
        )
        hidden = int(sizes["num_hiddens"])
        self.W_k = linear(sizes.get("key_size"), hidden, bias=False)
        self.W_q = linear(sizes.get("query_size"), hidden, bias=False)
        self.w_v = linear(hidden, 1, bias=False)
        self.dropout = nn.Dropout(float(sizes["dropout"]))

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid_lens: torch.Tensor | None
    ) -> torch.Tensor:
        """(B, Q, q), (B, K, k), (B, K, v) -> (B, Q, v); the weights kept as attention_weights."""
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))  # (B, Q, K, H)
        self.attention_weights = masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return self.dropout(self.attention_weights) @ values


def transpose_qkv(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, H) -> (B * h, N, H / h), each head's columns together."""
    batch, steps, _ = X.shape
    return X.reshape(batch, steps, num_heads, -1).transpose(1, 2).reshape(batch * num_heads, steps, -1)


def transpose_output(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B * h, N, d) -> (B, N, h * d): undoes transpose_qkv."""
    _, steps, size = X.shape
    return X.reshape(-1, num_heads, steps, size).transpose(1, 2).reshape(-1, steps, num_heads * size)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (book section 11.5); (num_hiddens, num_heads, dropout, bias=False) or the older
    (key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias=False)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__()
        older = ("key_size", "query_size", "value_size", "num_hiddens", "num_heads", "dropout", "bias")
        sizes = editions(args, kwargs, older, ("num_hiddens", "num_heads", "dropout", "bias"))
        hidden, bias = int(sizes["num_hiddens"]), bool(sizes.get("bias", False))
        self.num_heads = int(sizes["num_heads"])
        self.attention = DotProductAttention(float(sizes["dropout"]))
        self.W_q = linear(sizes.get("query_size"), hidden, bias)
        self.W_k = linear(sizes.get("key_size"), hidden, bias)
        self.W_v = linear(sizes.get("value_size"), hidden, bias)
        self.W_o = linear(hidden if "value_size" in sizes else None, hidden, bias)

    def transpose_qkv(self, X: torch.Tensor) -> torch.Tensor:
        """The 1.0 edition's method: transpose_qkv with this module's heads."""
        return transpose_qkv(X, self.num_heads)

    def transpose_output(self, X: torch.Tensor) -> torch.Tensor:
        """The 1.0 edition's method: transpose_output with this module's heads."""
        return transpose_output(X, self.num_heads)

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid_lens: torch.Tensor | None
    ) -> torch.Tensor:
        """(B, Q, q), (B, K, k), (B, K, v) -> (B, Q, H)."""
        heads = [
            transpose_qkv(W(X), self.num_heads)
            for W, X in ((self.W_q, queries), (self.W_k, keys), (self.W_v, values))
        ]
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, self.num_heads, dim=0)
        output = self.attention(*heads, valid_lens)  # (B * h, Q, d)
        return self.W_o(transpose_output(output, self.num_heads))


class PositionalEncoding(nn.Module):
    """X + the sinusoid table P, then dropout (book section 11.6)."""

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        angles = torch.arange(max_len, dtype=torch.float32).unsqueeze(1) / torch.pow(
            10000.0, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
        )  # (max_len, ceil(H / 2))
        self.P = torch.zeros(1, max_len, num_hiddens)
        self.P[0, :, 0::2] = torch.sin(angles)
        self.P[0, :, 1::2] = torch.cos(angles[:, : num_hiddens // 2])

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X (B, T, H) -> dropout(X + P[:T])."""
        return self.dropout(X + self.P[:, : X.shape[1], :].to(X.device))


class PositionWiseFFN(nn.Module):
    """dense2(relu(dense1(X))) (book section 11.7); (ffn_num_hiddens, ffn_num_outputs) or the older
    (ffn_num_input, ffn_num_hiddens, ffn_num_outputs)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__()
        older = ("ffn_num_input", "ffn_num_hiddens", "ffn_num_outputs")
        sizes = editions(args, kwargs, older, older[1:])
        self.dense1 = linear(sizes.get("ffn_num_input"), int(sizes["ffn_num_hiddens"]))
        self.relu = nn.ReLU()
        self.dense2 = linear(int(sizes["ffn_num_hiddens"]), int(sizes["ffn_num_outputs"]))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """(B, N, H) -> (B, N, outputs)."""
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    """LayerNorm(dropout(Y) + X) (book section 11.7)."""

    def __init__(self, norm_shape: int | list[int], dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape)

    def forward(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """(B, N, H), (B, N, H) -> (B, N, H)."""
        return self.ln(self.dropout(Y) + X)


class Encoder(nn.Module):
    """The encoder interface of the encoder-decoder (book section 10.6): forward(X, *args)."""

    def forward(self, X: torch.Tensor, *args: object) -> object:
        """What a subclass computes."""
        raise NotImplementedError


class Decoder(nn.Module):
    """The decoder interface (book section 10.6): init_state(enc_outputs, *args), forward(X, state)."""

    def init_state(self, enc_outputs: object, *args: object) -> object:
        """What a subclass computes."""
        raise NotImplementedError

    def forward(self, X: torch.Tensor, state: object) -> object:
        """What a subclass computes."""
        raise NotImplementedError


class AttentionDecoder(Decoder):
    """A decoder that keeps its attention weights (book section 11.4)."""

    @property
    def attention_weights(self) -> object:
        """What a subclass keeps."""
        raise NotImplementedError


class EncoderDecoder(nn.Module):
    """An encoder and a decoder: the decoder's state is made from the encoder's outputs."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, *args: object, **kwargs: object) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, enc_X: torch.Tensor, dec_X: torch.Tensor, *args: object) -> object:
        """Encode enc_X, then decode dec_X from the state made of the encoder's outputs."""
        enc_outputs = self.encoder(enc_X, *args)
        return self.decoder(dec_X, self.decoder.init_state(enc_outputs, *args))


class Seq2SeqEncoder(Encoder):
    """Embedding and a GRU (book section 10.7): ids (B, S) -> outputs (S, B, H), final states (L, B, H)."""

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0,
        **kwargs: object,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=dropout)

    def forward(self, X: torch.Tensor, *args: object) -> tuple[torch.Tensor, torch.Tensor]:
        """The GRU over the embedded ids, time-major as the book's."""
        return self.rnn(self.embedding(X).permute(1, 0, 2))


def __getattr__(name: str) -> object:
    """A d2l name the stand-in does not give: say so, in the check's language, rather than fail with a bare
    AttributeError."""
    from attn_mt.i18n import _  # here, so that d2l.torch's names stay the stand-in's own

    raise AttributeError(
        _(
            "attn-mt check's stand-in for d2l has no {name!r}: it gives only what the attention chapter's "
            "blocks call; leave calls such as training, data loading and plotting out of the file you check"
        ).format(name=name)
    )
