"""Several trained models decoded as one: the `EncoderDecoder` step contract over a list of models.

Each member keeps its own encoder output and incremental state; a step runs every member on the
same previous tokens and returns the log of the mean of their next-token probabilities,

    log p(y | ...) = logsumexp_k(log p_k(y | ...)) - log K,

the mixture of the members' distributions (fairseq's ensembles average the same way). The mixture
is a normalised distribution, so search's scores stay log-probabilities comparable with a single
model's, and one member's near-zero probability for a token lowers the mean rather than vetoing it
as an average of log-probabilities (a product of the distributions) would. An ensemble of a model
with itself gives that model's distribution back. Members must share the source and target
vocabularies (decoding/ensembles.py checks); they may be of different types (a GRU and a
Transformer). Attention (the search's and `attention_maps`) is the first member's.

Shapes: N decoder rows, V target vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_mt.models.base import DecoderState, EncoderDecoder


class Ensemble(EncoderDecoder):
    """The mean of the members' next-token probabilities, each member with its own state (decoding only)."""

    def __init__(self, members: list[EncoderDecoder]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 models, got {len(members)}")
        self.members = nn.ModuleList(members)
        self.reads_source_padding = any(m.reads_source_padding for m in members)

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        return {"members": [m.encode(src, src_lens) for m in self.members]}

    def init_state(self, enc: DecoderState) -> DecoderState:
        return {"members": [m.init_state(e) for m, e in zip(self.members, enc["members"], strict=True)]}

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """Every member's step on `tokens` (N,); log of the mean probability (N, V), the first's attention."""
        log_probs, states, first_attention = [], [], {}
        for k, (member, member_state) in enumerate(zip(self.members, state["members"], strict=True)):
            logits, new_state, attention = member.step(tokens, member_state, need_attention and k == 0)
            log_probs.append(torch.log_softmax(logits.float(), dim=-1))  # (N, V)
            states.append(new_state)
            first_attention = attention if k == 0 else first_attention
        mean = torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(log_probs))  # (N, V)
        return mean, {"members": states}, first_attention

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        return {
            "members": [
                m.reorder_state(s, index) for m, s in zip(self.members, state["members"], strict=True)
            ]
        }

    def attention_maps(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The first member's maps (members may differ in shape: a GRU's and a Transformer's)."""
        return self.members[0].attention_maps(src, src_lens, tgt_in)
