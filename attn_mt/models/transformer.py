"""The Transformer encoder-decoder (Vaswani et al. 2017; book section 11.7), post-norm as the book.

Shapes: B batch, S source steps, T target steps, t target steps so far, H hidden, h heads,
d = H / h, L layers (the encoder's in encoder maps, the decoder's elsewhere), V target vocabulary.
Module and parameter names are the book's (`encoder.blks.block0.attention.W_q`, `addnorm1.ln`,
`ffn.dense1`, ...), so the book's state dict loads key for key. The source and causal masks are
built once per batch and shared by every layer.
Incremental decoding caches each layer's projected self-attention keys and values, and projects
the encoder output for the encoder-decoder attention once, in `init_state`.
Two of the chapter's exercises change the book's model through keyword arguments whose defaults are
the book's: `positions` (model.positional_encoding: sinusoidal, learned or none) and `norm`
(model.norm: layer or batch, in every add & norm).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_mt.models.attention import AttentionMask, MultiHeadAttention
from attn_mt.models.base import DecoderState, EncoderDecoder, check_source, split_layers
from attn_mt.models.positional import positional_encoding

KeyValues = tuple[torch.Tensor, torch.Tensor]  # per-head keys and values, each (B, h, N, d)


def attention_dtype(device_type: str, weights: torch.dtype) -> torch.dtype:
    """The dtype queries reach the attention in: autocast's where it is on, else the weights'."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weights


class PositionWiseFFN(nn.Module):
    """Two dense layers with a ReLU between, applied at every position (book section 11.7.2)."""

    def __init__(self, ffn_num_input: int, ffn_num_hiddens: int, ffn_num_outputs: int):
        super().__init__()
        self.dense1 = nn.Linear(ffn_num_input, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """(B, N, H) -> (B, N, H)."""
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    """Residual connection then layer normalisation, LayerNorm(X + dropout(Y)) (book section 11.7.3).

    `norm="batch"` (the chapter's exercise) normalises with BatchNorm1d over the H features instead,
    its statistics taken over every (sentence, position) row of the batch; in eval mode it uses the
    running statistics, so one decoding step is normalised as the whole sentence would be.
    """

    def __init__(self, normalized_shape: int, dropout: float, norm: str = "layer"):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        if norm == "batch":
            self.bn = nn.BatchNorm1d(normalized_shape)
        else:
            self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """X, Y (B, N, H) -> (B, N, H)."""
        if hasattr(self, "bn"):
            # No mask: the <pad> rows count in the batch's mean and variance (and in the running
            # statistics), so a batch with more padding is normalised differently.
            Z = self.dropout(Y) + X  # (B, N, H)
            return self.bn(Z.flatten(0, 1)).view_as(Z)  # BatchNorm1d over the (B * N, H) rows
        return self.ln(self.dropout(Y) + X)


def _self_attention(num_hiddens: int, num_heads: int, dropout: float) -> MultiHeadAttention:
    """Multi-head attention with every size = num_hiddens and no bias, as the book's Transformer."""
    return MultiHeadAttention(
        num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, dropout, bias=False
    )


class EncoderBlock(nn.Module):
    """Self-attention and FFN, each followed by add & norm (book section 11.7.4)."""

    def __init__(
        self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float, norm: str = "layer"
    ):
        super().__init__()
        self.attention = _self_attention(num_hiddens, num_heads, dropout)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm)

    def forward(
        self, X: torch.Tensor, src_mask: AttentionMask, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """X (B, S, H) -> (B, S, H) and self-attention weights (B, h, S, S) or None."""
        keys, values = self.attention.project_keys_values(X, X)  # (B, h, S, d) each
        attended, weights = self.attention.attend(X, keys, values, src_mask, need_weights)  # (B, S, H)
        Y = self.addnorm1(X, attended)
        return self.addnorm2(Y, self.ffn(Y)), weights


class DecoderBlock(nn.Module):
    """Causal self-attention, encoder-decoder attention and FFN, each with add & norm (book 11.7.5)."""

    def __init__(
        self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float, norm: str = "layer"
    ):
        super().__init__()
        self.attention1 = _self_attention(num_hiddens, num_heads, dropout)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm)
        self.attention2 = _self_attention(num_hiddens, num_heads, dropout)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens)
        self.addnorm3 = AddNorm(num_hiddens, dropout, norm)

    def forward(
        self,
        X: torch.Tensor,
        past: KeyValues | None,
        self_mask: AttentionMask | None,
        cross: KeyValues,
        src_mask: AttentionMask,
        need_weights: bool,
    ) -> tuple[torch.Tensor, KeyValues, torch.Tensor | None, torch.Tensor | None]:
        """New steps X (B, T, H) after `past` cached steps -> (B, T, H), all self keys/values, weights.

        The weights are (B, h, T, t) for self-attention and (B, h, T, S) for cross-attention, or None.
        """
        keys, values = self.attention1.project_keys_values(X, X)  # (B, h, T, d) each
        if past is not None:
            keys = torch.cat((past[0], keys), dim=2)  # (B, h, t, d)
            values = torch.cat((past[1], values), dim=2)  # (B, h, t, d)
        attended, self_weights = self.attention1.attend(X, keys, values, self_mask, need_weights)  # (B, T, H)
        Y = self.addnorm1(X, attended)
        attended, cross_weights = self.attention2.attend(
            Y, cross[0], cross[1], src_mask, need_weights
        )  # (B, T, H)
        Z = self.addnorm2(Y, attended)
        return self.addnorm3(Z, self.ffn(Z)), (keys, values), self_weights, cross_weights


def _blocks(block: type[nn.Module], num_layers: int, *args: object) -> nn.ModuleDict:
    """`num_layers` blocks named block0, block1, ... (the book's names)."""
    return nn.ModuleDict({f"block{i}": block(*args) for i in range(num_layers)})


class TransformerEncoder(nn.Module):
    """Embedding scaled by sqrt(H), sinusoidal positions, then L encoder blocks (book section 11.7.4)."""

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_layers: int,
        dropout: float,
        positions: str = "sinusoidal",
        max_positions: int = 256,
        norm: str = "layer",
    ):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = positional_encoding(positions, num_hiddens, dropout, max_positions)
        self.blks = _blocks(EncoderBlock, num_layers, num_hiddens, ffn_num_hiddens, num_heads, dropout, norm)

    def embed(self, src: torch.Tensor) -> torch.Tensor:
        """Source ids (B, S) -> dropout(sqrt(H) embedding + positions) (B, S, H), the blocks' input."""
        return self.pos_encoding(self.embedding(src) * math.sqrt(self.num_hiddens))

    def forward(
        self, src: torch.Tensor, src_mask: AttentionMask, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Source ids (B, S) -> memory (B, S, H) and, when asked, each layer's weights (B, h, S, S)."""
        X = self.embed(src)  # (B, S, H)
        weights = []
        for blk in self.blks.values():
            X, layer_weights = blk(X, src_mask, need_weights)
            if layer_weights is not None:
                weights.append(layer_weights)
        return X, weights


class TransformerDecoder(nn.Module):
    """Embedding scaled by sqrt(H), sinusoidal positions, L decoder blocks, a dense output layer (11.7.5)."""

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_layers: int,
        dropout: float,
        positions: str = "sinusoidal",
        max_positions: int = 256,
        norm: str = "layer",
    ):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = positional_encoding(positions, num_hiddens, dropout, max_positions)
        self.blks = _blocks(DecoderBlock, num_layers, num_hiddens, ffn_num_hiddens, num_heads, dropout, norm)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def project_memory(self, memory: torch.Tensor) -> list[KeyValues]:
        """Each layer's encoder-decoder keys and values of the memory (B, S, H), each (B, h, S, d)."""
        return [blk.attention2.project_keys_values(memory, memory) for blk in self.blks.values()]

    def embed(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Target ids (B, T) at positions offset.. -> dropout(sqrt(H) embedding + positions) (B, T, H)."""
        return self.pos_encoding(self.embedding(tgt) * math.sqrt(self.num_hiddens), offset)

    def hidden_states(
        self,
        tgt: torch.Tensor,
        cross: list[KeyValues],
        src_mask: AttentionMask,
        past: list[KeyValues] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[KeyValues], list[torch.Tensor], list[torch.Tensor]]:
        """Target ids (B, T) after `past` cached steps -> the last block's output (B, T, H), caches, weights.

        Without `past` the T steps attend causally to each other; with it the new steps (one at a
        time in incremental decoding) attend to every cached step and themselves.
        """
        offset = 0 if past is None else past[0][0].shape[2]
        X = self.embed(tgt, offset)  # (B, T, H)
        self_mask = None
        if past is None:  # the bias the fused kernels read, once a batch in the dtype attention computes in
            dtype = attention_dtype(tgt.device.type, self.embedding.weight.dtype)
            self_mask = (
                AttentionMask.causal(tgt.shape[1], tgt.device).with_heads().with_bias(dtype)
            )  # (1, 1, T, T)
        caches, self_weights, cross_weights = [], [], []
        for i, blk in enumerate(self.blks.values()):
            X, cache, layer_self, layer_cross = blk(
                X, None if past is None else past[i], self_mask, cross[i], src_mask, need_weights
            )
            caches.append(cache)
            if need_weights:
                self_weights.append(layer_self)
                cross_weights.append(layer_cross)
        return X, caches, self_weights, cross_weights

    def forward(
        self,
        tgt: torch.Tensor,
        cross: list[KeyValues],
        src_mask: AttentionMask,
        past: list[KeyValues] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[KeyValues], list[torch.Tensor], list[torch.Tensor]]:
        """Target ids (B, T) following `past` cached steps -> logits (B, T, V), the new caches, weights."""
        X, caches, self_weights, cross_weights = self.hidden_states(tgt, cross, src_mask, past, need_weights)
        return self.dense(X), caches, self_weights, cross_weights


class Transformer(EncoderDecoder):
    """The book's Transformer encoder-decoder (Vaswani et al. 2017; book section 11.7), always causal."""

    reads_source_padding = False  # padded source keys are masked everywhere, so trimming them is exact

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_layers: int | tuple[int, int],
        dropout: float,
        tie_embeddings: bool = False,
        tie_source_embedding: bool = False,
        embed_init: str = "book",
        positions: str = "sinusoidal",
        max_positions: int = 256,
        norm: str = "layer",
    ):
        """`num_layers`: the blocks of each side, or (encoder blocks, decoder blocks) as Kasai et al.
        (2021, "Deep Encoder, Shallow Decoder") give a deep encoder a shallow decoder. `positions`,
        `max_positions` and `norm`: the exercise switches (module docstring); the defaults are the book's."""
        super().__init__()
        encoder_layers, decoder_layers = split_layers(num_layers)
        switches = (positions, max_positions, norm)
        self.encoder = TransformerEncoder(
            src_vocab_size, num_hiddens, ffn_num_hiddens, num_heads, encoder_layers, dropout, *switches
        )
        self.decoder = TransformerDecoder(
            tgt_vocab_size, num_hiddens, ffn_num_hiddens, num_heads, decoder_layers, dropout, *switches
        )
        self.num_heads = num_heads
        # N(0, 1/H) as in Vaswani et al.: the sqrt(H)-scaled embeddings start near unit variance, the
        # scale of the positional encodings, where the book's nn.Embedding N(0, 1) starts sqrt(H) times larger
        if embed_init == "scaled":
            nn.init.normal_(self.encoder.embedding.weight, 0.0, num_hiddens**-0.5)
        if embed_init == "scaled" or tie_embeddings:
            nn.init.normal_(self.decoder.embedding.weight, 0.0, num_hiddens**-0.5)
        if tie_embeddings:
            # one (V, H) matrix embeds the target tokens and scores them (Press & Wolf 2017)
            self.decoder.dense.weight = self.decoder.embedding.weight
        if tie_source_embedding:
            # one vocabulary for both languages: the encoder embeds source pieces with the decoder's
            # matrix, so names, digits and shared pieces learn from both sides (fairseq's
            # share_all_embeddings)
            if src_vocab_size != tgt_vocab_size:
                raise ValueError(
                    f"tie_source_embedding needs one vocabulary, got sizes {src_vocab_size} "
                    f"and {tgt_vocab_size}"
                )
            self.encoder.embedding.weight = self.decoder.embedding.weight

    def _encode(
        self, src: torch.Tensor, src_lens: torch.Tensor, need_weights: bool
    ) -> tuple[DecoderState, list[torch.Tensor]]:
        """encode() plus, when asked, each encoder layer's self-attention weights (B, h, S, S)."""
        check_source(src, src_lens)
        # the bias the fused attention kernels read, once a batch in the dtype the attention computes in
        dtype = attention_dtype(src.device.type, self.encoder.embedding.weight.dtype)
        src_mask = AttentionMask.from_valid_lens(src_lens, 1, src.shape[1]).with_heads()  # (B, 1, 1, S)
        if not torch.onnx.is_in_onnx_export():  # an ONNX graph serves every length: no bias of one width
            src_mask = src_mask.with_bias(dtype)
        memory, weights = self.encoder(src, src_mask, need_weights)
        return {"memory": memory, "src_mask": src_mask}, weights

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """Memory (B, S, H) and the source mask (B, 1, 1, S), with its additive bias (B, 1, 1, S)."""
        return self._encode(src, src_lens, need_weights=False)[0]

    @property
    def output_layer(self) -> nn.Linear:
        """The decoder's dense layer (H -> V)."""
        return self.decoder.dense

    def decode_features(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """Teacher-forced hidden states (B, T, H) of the last decoder block, causal."""
        cross = self.decoder.project_memory(enc["memory"])
        return self.decoder.hidden_states(tgt_in, cross, enc["src_mask"])[0]

    def init_state(self, enc: DecoderState) -> DecoderState:
        """Cross-attention keys/values per layer, computed once, and empty self-attention caches."""
        memory = enc["memory"]
        head_size = self.decoder.num_hiddens // self.num_heads
        empty = memory.new_zeros(memory.shape[0], self.num_heads, 0, head_size)  # (B, h, 0, d)
        return {
            "src_mask": enc["src_mask"],  # (B, 1, 1, S)
            "cross": self.decoder.project_memory(memory),  # L x ((B, h, S, d), (B, h, S, d))
            "past": [(empty, empty)] * len(self.decoder.blks),  # L x ((B, h, t, d), (B, h, t, d))
        }

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """Previous tokens (B,) -> logits (B, V), new state, {"self": (B, L, h, t), "cross": (B, L, h, S)}."""
        logits, past, self_weights, cross_weights = self.decoder(
            tokens.unsqueeze(1), state["cross"], state["src_mask"], state["past"], need_attention
        )
        attention = {}
        if need_attention:
            attention = {
                "self": torch.stack(self_weights, dim=1).squeeze(3),  # (B, L, h, t)
                "cross": torch.stack(cross_weights, dim=1).squeeze(3),  # (B, L, h, S)
            }
        return logits.squeeze(1), {**state, "past": past}, attention

    def attention_maps(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """{"encoder_self": (B, L, h, S, S), "decoder_self": (B, L, h, T, T), "cross": (B, L, h, T, S)}."""
        return self.forward_with_attention(src, src_lens, tgt_in)[1]

    def forward_with_attention(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Teacher-forced logits (B, T, V) on the explicit path, with every attention map."""
        enc, encoder_self = self._encode(src, src_lens, need_weights=True)
        cross = self.decoder.project_memory(enc["memory"])
        logits, _, decoder_self, cross_weights = self.decoder(
            tgt_in, cross, enc["src_mask"], need_weights=True
        )
        maps = {
            "encoder_self": torch.stack(encoder_self, dim=1),  # (B, L, h, S, S)
            "decoder_self": torch.stack(decoder_self, dim=1),  # (B, L, h, T, T)
            "cross": torch.stack(cross_weights, dim=1),  # (B, L, h, T, S)
        }
        return logits, maps

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """Select batch rows of the source mask and of every cached key and value."""

        def select(pairs: list[KeyValues]) -> list[KeyValues]:
            return [(k.index_select(0, index), v.index_select(0, index)) for k, v in pairs]

        return {
            "src_mask": state["src_mask"].index_select(index),
            "cross": select(state["cross"]),
            "past": select(state["past"]),
        }
