"""The book's model equations written out by hand, reading weights by the book's state-dict key names.

Shapes: B batch, S source steps, T target steps, E embedding, H hidden, h heads, d = H / h, L layers.
These references use plain tensor operations and per-head / per-step loops, and share no code with
attn_mt.models, so the model tests compare two independent computations. The Bahdanau reference is
d2l.ai section 11.4 (query = previous last-layer hidden state, GRU input = [context, embedding]);
the Transformer one is section 11.7 (post-norm blocks, embeddings scaled by sqrt(H), sinusoidal
positions), decoding causally as the book's decoder does in training.
"""

from __future__ import annotations

import math

import torch

State = dict[str, torch.Tensor]
LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which the book uses


def book_softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The book's masked softmax: disallowed scores set to -1e6 before the softmax."""
    return torch.softmax(scores.masked_fill(~allowed, -1e6), dim=-1)


def gru_cell(x: torch.Tensor, h: torch.Tensor, sd: State, prefix: str, layer: int) -> torch.Tensor:
    """One GRU layer step, torch's gate order (reset, update, new): x (B, In), h (B, H) -> (B, H)."""
    gi = x @ sd[f"{prefix}.weight_ih_l{layer}"].T + sd[f"{prefix}.bias_ih_l{layer}"]  # (B, 3H)
    gh = h @ sd[f"{prefix}.weight_hh_l{layer}"].T + sd[f"{prefix}.bias_hh_l{layer}"]  # (B, 3H)
    H = h.shape[1]
    reset = torch.sigmoid(gi[:, :H] + gh[:, :H])
    update = torch.sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
    new = torch.tanh(gi[:, 2 * H :] + reset * gh[:, 2 * H :])
    return (1 - update) * new + update * h


def gru_step(x: torch.Tensor, hidden: list[torch.Tensor], sd: State, prefix: str) -> list[torch.Tensor]:
    """All layers for one step; returns the new per-layer hidden states."""
    new_hidden = []
    for layer, h in enumerate(hidden):
        x = gru_cell(x, h, sd, prefix, layer)
        new_hidden.append(x)
    return new_hidden


def bahdanau_logits(
    sd: State, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor, num_layers: int
) -> torch.Tensor:
    """Logits (B, T, V) of the book's GRU encoder + Bahdanau decoder, teacher-forced."""
    B, S = src.shape
    H = sd["encoder.rnn.weight_hh_l0"].shape[1]
    src_emb = sd["encoder.embedding.weight"][src]  # (B, S, E)
    hidden = [torch.zeros(B, H) for _ in range(num_layers)]
    enc_outputs = []
    for s in range(S):  # the book's encoder reads every step, <pad> included
        hidden = gru_step(src_emb[:, s], hidden, sd, "encoder.rnn")
        enc_outputs.append(hidden[-1])
    keys = torch.stack(enc_outputs, dim=1)  # (B, S, H)
    allowed = torch.arange(S).unsqueeze(0) < src_lens.unsqueeze(1)  # (B, S)
    W_q, W_k = sd["decoder.attention.W_q.weight"], sd["decoder.attention.W_k.weight"]
    w_v = sd["decoder.attention.w_v.weight"][0]  # (H,)
    tgt_emb = sd["decoder.embedding.weight"][tgt_in]  # (B, T, E)
    outputs = []
    for t in range(tgt_in.shape[1]):
        query = hidden[-1] @ W_q.T  # (B, H)
        features = torch.tanh(query.unsqueeze(1) + keys @ W_k.T)  # (B, S, H)
        weights = book_softmax(features @ w_v, allowed)  # (B, S)
        context = (weights.unsqueeze(2) * keys).sum(1)  # (B, H)
        hidden = gru_step(torch.cat([context, tgt_emb[:, t]], dim=1), hidden, sd, "decoder.rnn")
        outputs.append(hidden[-1])
    out = torch.stack(outputs, dim=1)  # (B, T, H)
    return out @ sd["decoder.dense.weight"].T + sd["decoder.dense.bias"]


def sinusoids(steps: int, H: int) -> torch.Tensor:
    """(steps, H): sin at even columns, cos at odd, frequency 10000^(-2j/H), from Python's math."""
    table = [
        [
            math.sin(i / 10000 ** (c / H)) if c % 2 == 0 else math.cos(i / 10000 ** ((c - 1) / H))
            for c in range(H)
        ]
        for i in range(steps)
    ]
    return torch.tensor(table)


def multi_head(
    sd: State, prefix: str, queries: torch.Tensor, keys: torch.Tensor, allowed: torch.Tensor, num_heads: int
) -> torch.Tensor:
    """Multi-head attention one head at a time: queries (B, Q, H), keys = values (B, K, H) -> (B, Q, H)."""
    Q = queries @ sd[f"{prefix}.W_q.weight"].T  # (B, Q, H)
    K = keys @ sd[f"{prefix}.W_k.weight"].T  # (B, K, H)
    V = keys @ sd[f"{prefix}.W_v.weight"].T  # (B, K, H)
    d = Q.shape[-1] // num_heads
    heads = []
    for i in range(num_heads):
        part = slice(i * d, (i + 1) * d)
        scores = Q[..., part] @ K[..., part].transpose(1, 2) / math.sqrt(d)  # (B, Q, K)
        heads.append(book_softmax(scores, allowed) @ V[..., part])  # (B, Q, d)
    return torch.cat(heads, dim=-1) @ sd[f"{prefix}.W_o.weight"].T


def add_norm(sd: State, prefix: str, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """LayerNorm(X + Y) with the block's own scale and shift."""
    Z = X + Y
    mean = Z.mean(-1, keepdim=True)
    var = Z.var(-1, unbiased=False, keepdim=True)
    return (Z - mean) / torch.sqrt(var + LN_EPS) * sd[f"{prefix}.ln.weight"] + sd[f"{prefix}.ln.bias"]


def ffn(sd: State, prefix: str, X: torch.Tensor) -> torch.Tensor:
    """dense2(relu(dense1(X)))."""
    hidden = torch.relu(X @ sd[f"{prefix}.dense1.weight"].T + sd[f"{prefix}.dense1.bias"])
    return hidden @ sd[f"{prefix}.dense2.weight"].T + sd[f"{prefix}.dense2.bias"]


def transformer_logits(
    sd: State,
    src: torch.Tensor,
    src_lens: torch.Tensor,
    tgt_in: torch.Tensor,
    num_layers: int,
    num_heads: int,
) -> torch.Tensor:
    """Logits (B, T, V) of the book's Transformer, teacher-forced with a causal decoder."""
    S, T = src.shape[1], tgt_in.shape[1]
    H = sd["encoder.embedding.weight"].shape[1]
    X = sd["encoder.embedding.weight"][src] * math.sqrt(H) + sinusoids(S, H)  # (B, S, H)
    src_allowed = (torch.arange(S).unsqueeze(0) < src_lens.unsqueeze(1)).unsqueeze(1)  # (B, 1, S)
    for i in range(num_layers):
        p = f"encoder.blks.block{i}"
        X = add_norm(sd, f"{p}.addnorm1", X, multi_head(sd, f"{p}.attention", X, X, src_allowed, num_heads))
        X = add_norm(sd, f"{p}.addnorm2", X, ffn(sd, f"{p}.ffn", X))
    Y = sd["decoder.embedding.weight"][tgt_in] * math.sqrt(H) + sinusoids(T, H)  # (B, T, H)
    causal = torch.ones(T, T, dtype=torch.bool).tril().unsqueeze(0)  # (1, T, T)
    for i in range(num_layers):
        p = f"decoder.blks.block{i}"
        Y = add_norm(sd, f"{p}.addnorm1", Y, multi_head(sd, f"{p}.attention1", Y, Y, causal, num_heads))
        Y = add_norm(sd, f"{p}.addnorm2", Y, multi_head(sd, f"{p}.attention2", Y, X, src_allowed, num_heads))
        Y = add_norm(sd, f"{p}.addnorm3", Y, ffn(sd, f"{p}.ffn", Y))
    return Y @ sd["decoder.dense.weight"].T + sd["decoder.dense.bias"]


def book_bahdanau_shapes(
    src_vocab: int, tgt_vocab: int, E: int, H: int, L: int
) -> dict[str, tuple[int, ...]]:
    """Each key and shape of the book's EncoderDecoder(Seq2SeqEncoder, Seq2SeqAttentionDecoder)."""
    shapes: dict[str, tuple[int, ...]] = {"encoder.embedding.weight": (src_vocab, E)}
    for i in range(L):
        shapes |= {
            f"encoder.rnn.weight_ih_l{i}": (3 * H, E if i == 0 else H),
            f"encoder.rnn.weight_hh_l{i}": (3 * H, H),
            f"encoder.rnn.bias_ih_l{i}": (3 * H,),
            f"encoder.rnn.bias_hh_l{i}": (3 * H,),
        }
    shapes |= {
        "decoder.attention.W_k.weight": (H, H),
        "decoder.attention.W_q.weight": (H, H),
        "decoder.attention.w_v.weight": (1, H),
        "decoder.embedding.weight": (tgt_vocab, E),
    }
    for i in range(L):
        shapes |= {
            f"decoder.rnn.weight_ih_l{i}": (3 * H, E + H if i == 0 else H),
            f"decoder.rnn.weight_hh_l{i}": (3 * H, H),
            f"decoder.rnn.bias_ih_l{i}": (3 * H,),
            f"decoder.rnn.bias_hh_l{i}": (3 * H,),
        }
    return shapes | {"decoder.dense.weight": (tgt_vocab, H), "decoder.dense.bias": (tgt_vocab,)}


def book_transformer_shapes(
    src_vocab: int, tgt_vocab: int, H: int, F: int, L: int
) -> dict[str, tuple[int, ...]]:
    """Each key and shape of the book's EncoderDecoder(TransformerEncoder, TransformerDecoder)."""

    def attention(prefix: str) -> dict[str, tuple[int, ...]]:
        return {f"{prefix}.{name}.weight": (H, H) for name in ("W_q", "W_k", "W_v", "W_o")}

    def norm(prefix: str) -> dict[str, tuple[int, ...]]:
        return {f"{prefix}.ln.weight": (H,), f"{prefix}.ln.bias": (H,)}

    def feed_forward(prefix: str) -> dict[str, tuple[int, ...]]:
        return {
            f"{prefix}.dense1.weight": (F, H),
            f"{prefix}.dense1.bias": (F,),
            f"{prefix}.dense2.weight": (H, F),
            f"{prefix}.dense2.bias": (H,),
        }

    shapes: dict[str, tuple[int, ...]] = {"encoder.embedding.weight": (src_vocab, H)}
    for i in range(L):
        p = f"encoder.blks.block{i}"
        shapes |= attention(f"{p}.attention") | norm(f"{p}.addnorm1") | feed_forward(f"{p}.ffn")
        shapes |= norm(f"{p}.addnorm2")
    shapes["decoder.embedding.weight"] = (tgt_vocab, H)
    for i in range(L):
        p = f"decoder.blks.block{i}"
        shapes |= attention(f"{p}.attention1") | norm(f"{p}.addnorm1") | attention(f"{p}.attention2")
        shapes |= norm(f"{p}.addnorm2") | feed_forward(f"{p}.ffn") | norm(f"{p}.addnorm3")
    return shapes | {"decoder.dense.weight": (tgt_vocab, H), "decoder.dense.bias": (tgt_vocab,)}


def random_state(shapes: dict[str, tuple[int, ...]], seed: int, scale: float = 0.4) -> State:
    """A state dict with the given keys; LayerNorm scales near 1, everything else N(0, scale^2)."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in shapes.items():
        values = torch.randn(shape, generator=gen) * scale
        state[key] = values + 1.0 if key.endswith("ln.weight") else values
    return state
