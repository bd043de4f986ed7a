"""GRU encoder and Bahdanau-attention GRU decoder (Bahdanau et al. 2014; book section 11.4).

Shapes: B batch, S source steps, T target steps, E embedding size, H hidden, L layers,
V target vocabulary.
Module and parameter names are the book's (`encoder.rnn`, `decoder.attention.W_k`, ...), so the
book's state dict loads key for key.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attn_mt.models.attention import AdditiveAttention, AttentionMask
from attn_mt.models.base import DecoderState, EncoderDecoder
from attn_mt.models.dropout import dropout
from attn_mt.models.recurrence import LoopWeights, decoder_loop, encoder_loop

CROSS = "cross"


def _gru(input_size: int, num_hiddens: int, num_layers: int, dropout: float) -> nn.GRU:
    """A batch-first GRU; dropout between layers only when there is more than one layer."""
    return nn.GRU(
        input_size, num_hiddens, num_layers, dropout=dropout if num_layers > 1 else 0.0, batch_first=True
    )


def gru_weights(rnn: nn.GRU) -> list[torch.Tensor]:
    """An nn.GRU's parameters W_ih, W_hh, b_ih, b_hh of each layer, in layer order (for encoder_loop)."""
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    return [getattr(rnn, f"{name}_l{layer}") for layer in range(rnn.num_layers) for name in names]


class GRUEncoder(nn.Module):
    """Embedding and a multi-layer GRU over the source (the book's Seq2SeqEncoder, section 10.7).

    With `pack_padded` the GRU skips the <pad> steps, so each sentence's final hidden state is the
    one at its last real token; without it the GRU reads the <pad> steps too, as the book's does,
    and CPU training runs it as `encoder_loop` (torch's equations and dropout, hand-written backward).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float,
        pack_padded: bool,
    ):
        super().__init__()
        self.pack_padded = pack_padded
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = _gru(embed_size, num_hiddens, num_layers, dropout)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Source ids (B, S) -> outputs (B, S, H) of the last layer and final hidden states (L, B, H)."""
        embedded = self.embedding(src)  # (B, S, E)
        if not self.pack_padded:
            on_cpu = embedded.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
            if on_cpu and torch.is_grad_enabled():
                layer_dropout = self.rnn.dropout if self.training else 0.0
                return encoder_loop(embedded, gru_weights(self.rnn), layer_dropout)
            return self.rnn(embedded)
        packed = pack_padded_sequence(embedded, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        packed_outputs, hidden = self.rnn(packed)
        outputs, _ = pad_packed_sequence(
            packed_outputs, batch_first=True, total_length=src.shape[1]
        )  # (B, S, H)
        return outputs, hidden


def gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """One GRU update (torch's equations and gate order reset, update, new) from both gate projections.

    input_gates = W_ih x + b_ih and hidden_gates = W_hh h + b_hh are (B, 3H); hidden is (B, H).
    """
    size = hidden.shape[1]
    input_rz, input_new = input_gates.split([2 * size, size], dim=1)  # (B, 2H), (B, H)
    hidden_rz, hidden_new = hidden_gates.split([2 * size, size], dim=1)  # (B, 2H), (B, H)
    reset, update = torch.sigmoid(input_rz + hidden_rz).chunk(2, dim=1)  # (B, H) each
    new = torch.tanh(torch.addcmul(input_new, reset, hidden_new))  # (B, H)
    # (1 - update) * new + update * hidden; under autocast the state keeps its own precision
    return torch.lerp(new.to(hidden.dtype), hidden, update.to(hidden.dtype))


class BahdanauDecoder(nn.Module):
    """GRU decoder that attends over the encoder outputs at every step (the book's Seq2SeqAttentionDecoder).

    The query is the previous step's last-layer hidden state, keys = values = encoder outputs, and
    the context is concatenated before the target embedding as the GRU input (book section 11.4.2).
    `rnn` holds the GRU's parameters under the book's names; the step applies torch's GRU equations
    itself so that no work is repeated: the embedding half of the first layer's input projection is
    computed for all steps at once, and the top layer's hidden projection and the attention query
    projection (both of the previous top-layer state) are one matrix product.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int, dropout: float):
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = _gru(embed_size + num_hiddens, num_hiddens, num_layers, dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, memory: torch.Tensor, hidden: torch.Tensor, src_mask: AttentionMask) -> DecoderState:
        """State before the first step: the key projection and step weights are computed once per batch."""
        return {
            "memory": memory,  # (B, S, H) keys = values
            "keys": self.attention.prepare_keys(memory),  # (B, S, H)
            "src_mask": src_mask,  # (B, 1, S)
            "hidden": hidden,  # (L, B, H)
            "weights": self.step_weights(),  # shared by every row, not reordered
        }

    def _layer(self, name: str, layer: int) -> torch.Tensor:
        """One of the GRU's parameters, e.g. ("weight_hh", 1) -> rnn.weight_hh_l1."""
        return getattr(self.rnn, f"{name}_l{layer}")

    def embedding_gates(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids (B, ...) -> the embedding's share of layer 0's input gates (B, ..., 3H), with b_ih."""
        embed_weight = self.rnn.weight_ih_l0[:, self.rnn.hidden_size :]  # (3H, E)
        return F.linear(self.embedding(tokens), embed_weight, self.rnn.bias_ih_l0)

    def step_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-call weights: context part of W_ih_l0 (H, 3H) and [W_hh_top; W_q] (4H, H) with its bias."""
        top, size = self.rnn.num_layers - 1, self.rnn.hidden_size
        context_weight = self.rnn.weight_ih_l0[:, :size].t()  # (H, 3H)
        top_weight = torch.cat([self._layer("weight_hh", top), self.attention.W_q.weight])  # (4H, H)
        top_bias = F.pad(self._layer("bias_hh", top), (0, size))  # (4H,): W_q has no bias
        return context_weight, top_weight, top_bias

    def advance(
        self, embedding_gates: torch.Tensor, hidden: list[torch.Tensor], state: DecoderState
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """One step: embedding gates (B, 3H), per-layer hidden L x (B, H) -> new hidden, weights (B, 1, S)."""
        context_weight, top_weight, top_bias = state["weights"]
        size = self.rnn.hidden_size
        top_gates, query = F.linear(hidden[-1], top_weight, top_bias).split([3 * size, size], dim=1)
        attention = self.attention.weights(query.unsqueeze(1), state["keys"], state["src_mask"])  # (B, 1, S)
        context = (self.attention.dropout(attention).transpose(1, 2) * state["memory"]).sum(1)  # (B, H)
        input_gates = torch.addmm(embedding_gates, context, context_weight)  # (B, 3H)
        new_hidden: list[torch.Tensor] = []
        for layer, layer_hidden in enumerate(hidden):
            if layer > 0:
                below = dropout(new_hidden[-1], self.rnn.dropout, self.training)  # (B, H)
                input_gates = F.linear(below, self._layer("weight_ih", layer), self._layer("bias_ih", layer))
            if layer == len(hidden) - 1:
                hidden_gates = top_gates
            else:
                hidden_gates = F.linear(
                    layer_hidden, self._layer("weight_hh", layer), self._layer("bias_hh", layer)
                )
            new_hidden.append(gru_cell(input_gates, hidden_gates, layer_hidden))
        return new_hidden, attention

    def loop_weights(self) -> LoopWeights:
        """The parameters in the form `decoder_loop` takes."""
        context_weight, top_weight, top_bias = self.step_weights()
        layers = range(self.rnn.num_layers)
        return LoopWeights(
            context=context_weight.t(),
            top=top_weight,
            top_bias=top_bias,
            score=self.attention.w_v.weight[0] * 2,
            hh=[(self._layer("weight_hh", i), self._layer("bias_hh", i)) for i in layers[:-1]],
            ih=[(self._layer("weight_ih", i), self._layer("bias_ih", i)) for i in layers[1:]],
        )

    def forward(
        self, tgt_in: torch.Tensor, state: DecoderState, need_weights: bool = False, features: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced decoding of (B, T) from `state`: logits (B, T, V) and weights (B, T, S) or None.

        Without attention weights and outside autocast this runs `decoder_loop` (same equations,
        hand-written backward); otherwise the steps are recorded one by one. With `features` the
        first result is the top layer's hidden states (B, T, H), before the dense layer.
        """
        if not need_weights and not torch.is_autocast_enabled(tgt_in.device.type):
            outputs = decoder_loop(
                self.embedding_gates(tgt_in),
                state["memory"],
                state["keys"],
                state["hidden"],
                state["src_mask"],
                self.loop_weights(),
                self.attention.dropout.p if self.training else 0.0,
                self.rnn.dropout if self.training else 0.0,
            )  # (B, T, H)
            return outputs if features else self.dense(outputs), None
        hidden = list(state["hidden"].unbind(0))  # L x (B, H)
        outputs, attention = [], []
        for gates in self.embedding_gates(tgt_in).unbind(1):  # T x (B, 3H)
            hidden, step_attention = self.advance(gates, hidden, state)
            outputs.append(hidden[-1])
            if need_weights:
                attention.append(step_attention)
        hidden_states = torch.stack(outputs, dim=1)  # (B, T, H)
        out = hidden_states if features else self.dense(hidden_states)  # (B, T, H) or (B, T, V)
        return out, torch.cat(attention, dim=1) if need_weights else None


class GRUBahdanau(EncoderDecoder):
    """The book's GRU encoder-decoder with Bahdanau attention (Bahdanau et al. 2014; book section 11.4).

    The decoder starts from the encoder's final hidden state.
    """

    direct_weight_layers = ("decoder.attention.W_q", "decoder.attention.w_v")  # see step_weights, weights

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float,
        pack_padded: bool,
    ):
        super().__init__()
        self.encoder = GRUEncoder(src_vocab_size, embed_size, num_hiddens, num_layers, dropout, pack_padded)
        self.decoder = BahdanauDecoder(tgt_vocab_size, embed_size, num_hiddens, num_layers, dropout)

    @property
    def reads_source_padding(self) -> bool:
        """The book's unpacked GRU reads the padding into its final state; a packed one stops before."""
        return not self.encoder.pack_padded

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """Encoder outputs (B, S, H), final hidden states (L, B, H) and the source mask (B, 1, S)."""
        if src.dim() != 2 or src_lens.shape != (src.shape[0],):
            raise ValueError(
                f"expected src (B, S) and src_lens (B,), got {tuple(src.shape)} and {tuple(src_lens.shape)}"
            )
        memory, hidden = self.encoder(src, src_lens)
        return {
            "memory": memory,
            "hidden": hidden,
            "src_mask": AttentionMask.from_valid_lens(src_lens, 1, src.shape[1]),
        }

    def init_state(self, enc: DecoderState) -> DecoderState:
        """Decoder state: memory, projected keys, source mask and the encoder's final hidden state."""
        return self.decoder.init_state(enc["memory"], enc["hidden"], enc["src_mask"])

    @property
    def output_layer(self) -> nn.Linear:
        """The decoder's dense layer (H -> V)."""
        return self.decoder.dense

    def decode_features(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """Teacher-forced hidden states (B, T, H) of the top GRU layer."""
        return self.decoder(tgt_in, self.init_state(enc), features=True)[0]

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """Previous tokens (B,) -> logits (B, V), new state, {"cross": (B, S)} when asked."""
        gates = self.decoder.embedding_gates(tokens)  # (B, 3H)
        hidden = list(state["hidden"].unbind(0))  # L x (B, H)
        hidden, weights = self.decoder.advance(gates, hidden, state)
        logits = self.decoder.dense(hidden[-1])  # (B, V)
        attention = {CROSS: weights.squeeze(1)} if need_attention else {}
        return logits, {**state, "hidden": torch.stack(hidden)}, attention

    def attention_maps(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """{"cross": (B, T, S)} of a teacher-forced pass."""
        _, weights = self.decoder(tgt_in, self.init_state(self.encode(src, src_lens)), need_weights=True)
        assert weights is not None
        return {CROSS: weights}

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """Select batch rows; the hidden state's batch axis is its second."""
        return {
            "memory": state["memory"].index_select(0, index),
            "keys": state["keys"].index_select(0, index),
            "src_mask": state["src_mask"].index_select(index),
            "hidden": state["hidden"].index_select(1, index),
            "weights": state["weights"],
        }
