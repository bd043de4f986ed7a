"""Hand-written fake models implementing the EncoderDecoder step contract, and the toy sentences and tiny
real models that the search, ensemble and prefix/sampling tests share (no test imports another test).

Shapes: B batch, N decoder rows, S source steps, T target steps, V vocabulary, H hidden,
L layers, h heads.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_mt.config import ModelConfig
from attn_mt.models.base import DecoderState, EncoderDecoder
from attn_mt.models.build import build_model

PAD, BOS, EOS = 0, 1, 2


class TableModel(EncoderDecoder):
    """Next-token probabilities looked up by (first source id, target prefix) in a hand-written table.

    `tables[src_id][prefix]` maps token ids to probabilities; tokens left out get probability 0.
    A prefix missing from the table ends the sentence (all mass on <eos>).
    """

    def __init__(self, tables: dict[int, dict[tuple[int, ...], dict[int, float]]], vocab_size: int):
        super().__init__()
        self.tables, self.vocab_size = tables, vocab_size
        self.rows_per_step: list[int] = []

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        return {"key": src[:, 0].clone()}

    def init_state(self, enc: DecoderState) -> DecoderState:
        key = enc["key"]
        return {"key": key, "fed": torch.zeros(key.shape[0], 0, dtype=torch.long, device=key.device)}

    def step(self, tokens, state, need_attention=False):
        self.rows_per_step.append(int(tokens.shape[0]))
        fed = torch.cat([state["fed"], tokens.unsqueeze(1)], dim=1)  # (N, t + 1): <bos> and the prefix
        probs = torch.zeros(tokens.shape[0], self.vocab_size)  # (N, V)
        for row, (key, seq) in enumerate(zip(state["key"].tolist(), fed.tolist(), strict=True)):
            dist = self.tables.get(key, {}).get(tuple(seq[1:]), {EOS: 1.0})
            for token, p in dist.items():
                probs[row, token] = p
        return probs.log(), {"key": state["key"], "fed": fed}, {}

    def reorder_state(self, state, index):
        return {name: value.index_select(0, index) for name, value in state.items()}


class ToyAttentionModel(EncoderDecoder):
    """A tiny seeded recurrent decoder with masked dot-product attention over source embeddings.

    `heads == 0` gives Bahdanau-shaped attention ("cross": (N, S) per step); otherwise
    Transformer-shaped maps with `layers` x `heads` ((N, L, h, S) per step). The <eos> logit grows
    with the step number, so outputs end at varied lengths. Padding never changes a result.
    """

    def __init__(
        self,
        vocab_size: int = 11,
        hidden: int = 8,
        heads: int = 0,
        layers: int = 1,
        eos_growth: float = 0.7,
        seed: int = 0,
    ):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.src_emb = nn.Parameter(torch.randn(vocab_size, hidden, generator=gen))
        self.tgt_emb = nn.Parameter(torch.randn(vocab_size, hidden, generator=gen))
        self.mix = nn.Parameter(torch.randn(3 * hidden, hidden, generator=gen) / math.sqrt(hidden))
        self.out = nn.Parameter(torch.randn(hidden, vocab_size, generator=gen))
        self.scales = torch.linspace(0.5, 1.5, max(heads * layers, 1)).view(max(layers, 1), max(heads, 1))
        self.heads, self.layers, self.eos_growth = heads, layers, eos_growth
        self.rows_per_step: list[int] = []

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        mask = torch.arange(src.shape[1], device=src.device).unsqueeze(0) < src_lens.unsqueeze(1)  # (B, S)
        memory = self.src_emb[src] * mask.unsqueeze(2)  # (B, S, H)
        return {"memory": memory, "mask": mask}

    def init_state(self, enc: DecoderState) -> DecoderState:
        mask = enc["mask"]
        hidden = enc["memory"].sum(1) / mask.sum(1, keepdim=True)  # (B, H)
        steps = torch.zeros(mask.shape[0], device=mask.device)  # (B,)
        return {"memory": enc["memory"], "mask": mask, "hidden": hidden, "steps": steps}

    def _attend(self, query: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked softmax weights (N, L, h, S) of `query` (N, H) over `memory` (N, S, H)."""
        scores = torch.einsum("nh,nsh->ns", query, memory) / math.sqrt(query.shape[1])  # (N, S)
        scores = scores[:, None, None, :] * self.scales[None, :, :, None]  # (N, L, h, S)
        scores = scores.masked_fill(~mask[:, None, None, :], -math.inf)
        return torch.softmax(scores, dim=-1)

    def step(self, tokens, state, need_attention=False):
        self.rows_per_step.append(int(tokens.shape[0]))
        x = self.tgt_emb[tokens]  # (N, H)
        weights = self._attend(state["hidden"] + x, state["memory"], state["mask"])  # (N, L, h, S)
        context = torch.einsum("ns,nsh->nh", weights[:, 0, 0], state["memory"])  # (N, H)
        hidden = torch.tanh(torch.cat([x, context, state["hidden"]], dim=1) @ self.mix)  # (N, H)
        logits = hidden @ self.out  # (N, V)
        logits[:, EOS] += self.eos_growth * state["steps"] - 1.0
        logits[:, PAD] = -math.inf
        logits[:, BOS] = -math.inf
        new_state = {**state, "hidden": hidden, "steps": state["steps"] + 1}
        attention = {}
        if need_attention:
            attention["cross"] = weights[:, 0, 0] if self.heads == 0 else weights  # (N, S) or (N, L, h, S)
        return logits, new_state, attention

    def reorder_state(self, state, index):
        return {name: value.index_select(0, index) for name, value in state.items()}

    def _per_head(self, scores: torch.Tensor) -> torch.Tensor:
        """(B, Q, K) scores -> (B, L, h, Q, K), one temperature per layer and head."""
        return scores[:, None, None] * self.scales[None, :, :, None, None]

    def attention_maps(self, src, src_lens, tgt_in):
        """Teacher-forced maps; padded query rows hold junk (uniform over every key) for trimming to drop."""
        state = self.init_state(self.encode(src, src_lens))
        steps = []
        for t in range(tgt_in.shape[1]):
            _, state, attention = self.step(tgt_in[:, t], state, need_attention=True)
            steps.append(attention["cross"])
        cross = torch.stack(steps, dim=-2)  # (B, T, S) or (B, L, h, T, S)
        if self.heads == 0:
            return {"cross": cross}
        src_mask = state["mask"]  # (B, S)
        emb = self.src_emb[src]  # (B, S, H)
        enc_scores = self._per_head(torch.einsum("bqh,bkh->bqk", emb, emb))  # (B, L, h, S, S)
        enc_scores = enc_scores.masked_fill(~src_mask[:, None, None, None, :], -math.inf)
        encoder_self = torch.softmax(enc_scores, dim=-1)  # (B, L, h, S, S)
        encoder_self = torch.where(src_mask[:, None, None, :, None], encoder_self, 1.0 / src.shape[1])
        temb = self.tgt_emb[tgt_in]  # (B, T, H)
        dec_scores = self._per_head(torch.einsum("bqh,bkh->bqk", temb, temb))  # (B, L, h, T, T)
        causal = torch.ones(tgt_in.shape[1], tgt_in.shape[1], dtype=torch.bool).tril()  # (T, T)
        decoder_self = torch.softmax(dec_scores.masked_fill(~causal, -math.inf), dim=-1)  # (B, L, h, T, T)
        return {"encoder_self": encoder_self, "decoder_self": decoder_self, "cross": cross}


# ----- the search tests' shared inputs: toy sentences and the tiny real models -----

TOY_SENTENCES = [[3, 4, 5, 6, 7, 8], [6, 7], [8, 9, 10], [4], [5, 5, 9, 3]]


def toy_batch(sentences: list[list[int]] = TOY_SENTENCES) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids (B, S) of `sentences`, each ended by EOS and padded, and their lengths (B,)."""
    width = max(len(s) for s in sentences) + 1
    src = torch.full((len(sentences), width), PAD)
    for i, s in enumerate(sentences):
        src[i, : len(s) + 1] = torch.tensor([*s, EOS])
    return src, torch.tensor([len(s) + 1 for s in sentences])


TOY_MODELS = {"bahdanau_like": dict(heads=0), "transformer_like": dict(heads=2, layers=2)}

REAL_VOCAB = 24
REAL_KINDS = ["gru_bahdanau", "transformer"]
REAL_LIMITS = dict(max_len_a=1.0, max_len_b=2)  # varied per-sentence limits, so rows leave at different steps


def tiny_real_model(kind: str) -> EncoderDecoder:
    """A real model of `kind` (REAL_KINDS), tiny, untrained and seeded, in eval mode."""
    torch.manual_seed(0)
    # pack_padded: without it the GRU encoder reads <pad> steps (the book's behaviour), so padding
    # changes a Bahdanau sentence's result and batched decoding could not equal one-at-a-time.
    cfg = ModelConfig(
        type=kind,
        embed_size=8,
        num_hiddens=8,
        num_layers=2,
        num_heads=2,
        ffn_num_hiddens=16,
        dropout=0.0,
        pack_padded=True,
    )
    return build_model(cfg, REAL_VOCAB, REAL_VOCAB).eval()
