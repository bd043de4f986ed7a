"""GRU encoder and Bahdanau-attention GRU decoder (Bahdanau et al. 2014; book section 11.4).

Shapes: B batch, S source steps, T target steps, E embedding size, H hidden, L layers (the
decoder's; L_enc the encoder's), V target vocabulary.
Module and parameter names are the book's (`encoder.rnn`, `decoder.attention.W_k`, ...), so the
book's state dict loads key for key.

Precision under autocast: ATen registers one autocast wrapper for cuDNN's RNN kernel
(aten/src/ATen/cudnn/AutocastRNN.cpp, `_cudnn_rnn_cast_reflatten`), and it casts the input, the
hidden state and the weights to float16 whatever dtype autocast was asked for. Under bf16 autocast
the GRUs would then run in fp16 with no gradient scaler, where small gradients flush to zero; so
there `run_gru` runs them outside autocast, in float32 (they are a small part of a step). Under
fp16 autocast they run in fp16 as ATen casts them, with the scaler that fp16 training has. On the
CPU no such wrapper exists and nothing changes.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from attn_mt.models.attention import AdditiveAttention, AttentionMask, UnprojectedDotProductAttention
from attn_mt.models.base import DecoderState, EncoderDecoder, check_source, split_layers

CROSS = "cross"


def _gru(input_size: int, num_hiddens: int, num_layers: int, dropout: float) -> nn.GRU:
    """A batch-first GRU; dropout between layers only when there is more than one layer."""
    return nn.GRU(
        input_size, num_hiddens, num_layers, dropout=dropout if num_layers > 1 else 0.0, batch_first=True
    )


def gru_in_float32(device_type: str) -> bool:
    """Whether a GRU called now leaves autocast for float32: under bf16 autocast on CUDA only."""
    return (
        device_type == "cuda"
        and torch.is_autocast_enabled(device_type)
        and torch.get_autocast_dtype(device_type) == torch.bfloat16
    )


def run_gru(
    rnn: nn.GRU, inputs: torch.Tensor | PackedSequence, hidden: torch.Tensor | None = None
) -> tuple[torch.Tensor | PackedSequence, torch.Tensor]:
    """`rnn(inputs, hidden)`, in float32 outside autocast where `gru_in_float32` says so."""
    data = inputs.data if isinstance(inputs, PackedSequence) else inputs
    if not gru_in_float32(data.device.type):
        return rnn(inputs, hidden)
    with torch.autocast(data.device.type, enabled=False):
        if isinstance(inputs, torch.Tensor):
            inputs = inputs.float()
        return rnn(inputs, None if hidden is None else hidden.float())


class GRUEncoder(nn.Module):
    """Embedding and a multi-layer GRU over the source (the book's Seq2SeqEncoder, section 10.7).

    With `pack_padded` the GRU skips the <pad> steps, so each sentence's final hidden state is the
    one at its last real token; without it the GRU reads the <pad> steps too, as the book's does.
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
            return run_gru(self.rnn, embedded)
        packed = pack_padded_sequence(embedded, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        packed_outputs, hidden = run_gru(self.rnn, packed)
        outputs, _ = pad_packed_sequence(
            packed_outputs, batch_first=True, total_length=src.shape[1]
        )  # (B, S, H)
        return outputs, hidden


class BahdanauDecoder(nn.Module):
    """GRU decoder that attends over the encoder outputs at every step (the book's Seq2SeqAttentionDecoder).

    Each step (book section 11.4.2): 1. the query is the previous step's last-layer hidden state,
    keys = values = the encoder outputs; 2. the context is concatenated before the embedded input
    token; 3. the GRU advances one step on that; the dense layer maps its output to logits.
    `scoring="dot"` (the chapter's exercise) scores by scaled dot product instead of the book's
    additive attention.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float,
        scoring: str = "additive",
    ):
        super().__init__()
        self.attention: AdditiveAttention | UnprojectedDotProductAttention = (
            UnprojectedDotProductAttention(dropout)
            if scoring == "dot"
            else AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        )
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = _gru(embed_size + num_hiddens, num_hiddens, num_layers, dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, memory: torch.Tensor, hidden: torch.Tensor, src_mask: AttentionMask) -> DecoderState:
        """State before the first step; the keys are projected once here, not at every step (efficiency)."""
        return {
            "memory": memory,  # (B, S, H) keys = values
            "keys": self.attention.W_k(memory),  # (B, S, H)
            "src_mask": src_mask,  # (B, 1, S)
            "hidden": hidden,  # (L, B, H)
        }

    def step(self, x: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """One step from the embedded input token x (B, E): the top layer's output (B, H) and the new state.

        The step's attention weights (B, 1, S) are left in `attention.attention_weights`.
        """
        hidden = state["hidden"]  # (L, B, H)
        query = hidden[-1].unsqueeze(1)  # (B, 1, H)
        context = self.attention.attend(query, state["keys"], state["memory"], state["src_mask"])  # (B, 1, H)
        rnn_input = torch.cat((context, x.unsqueeze(1)), -1)  # (B, 1, H + E)
        output, hidden = run_gru(self.rnn, rnn_input, hidden)  # (B, 1, H), (L, B, H)
        return output.squeeze(1), {**state, "hidden": hidden}

    def hidden_states(
        self, tgt_in: torch.Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced decoding of (B, T) from `state`: top-layer outputs (B, T, H), weights (B, T, S).

        The weights are None unless `need_weights`.
        """
        outputs, weights = [], []
        for x in self.embedding(tgt_in).unbind(1):  # T x (B, E)
            output, state = self.step(x, state)
            outputs.append(output)
            if need_weights:
                weights.append(self.attention.attention_weights)
        return torch.stack(outputs, dim=1), torch.cat(weights, dim=1) if need_weights else None

    def forward(
        self, tgt_in: torch.Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced decoding of (B, T) from `state`: logits (B, T, V) and weights (B, T, S) or None."""
        hidden, weights = self.hidden_states(tgt_in, state, need_weights)  # (B, T, H)
        return self.dense(hidden), weights


class GRUBahdanau(EncoderDecoder):
    """The book's GRU encoder-decoder with Bahdanau attention (Bahdanau et al. 2014; book section 11.4).

    The decoder starts from the encoder's final hidden state.
    """

    direct_weight_layers = ("decoder.attention.W_q", "decoder.attention.w_v")

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int | tuple[int, int],
        dropout: float,
        pack_padded: bool,
        scoring: str = "additive",
    ):
        """`num_layers`: the GRU layers of each side, or (encoder layers, decoder layers) with the
        decoder no deeper than the encoder (it starts from the encoder's top layers' final states).
        `scoring`: the decoder's attention, additive (the book's) or dot."""
        super().__init__()
        encoder_layers, decoder_layers = split_layers(num_layers)
        if decoder_layers > encoder_layers:
            raise ValueError(
                f"the decoder's {decoder_layers} GRU layers start from the encoder's top layers, but it "
                f"has {encoder_layers}"
            )
        self.encoder = GRUEncoder(
            src_vocab_size, embed_size, num_hiddens, encoder_layers, dropout, pack_padded
        )
        self.decoder = BahdanauDecoder(
            tgt_vocab_size, embed_size, num_hiddens, decoder_layers, dropout, scoring
        )

    @property
    def reads_source_padding(self) -> bool:
        """The book's unpacked GRU reads the padding into its final state; a packed one stops before."""
        return not self.encoder.pack_padded

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """Encoder outputs (B, S, H), the decoder's start (L, B, H) and the source mask (B, 1, S)."""
        check_source(src, src_lens)
        memory, hidden = self.encoder(src, src_lens)
        return self.encoded(memory, hidden, src_lens)

    def encoded(self, memory: torch.Tensor, hidden: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """encode()'s state from the encoder's outputs (B, S, H) and final states (L_enc, B, H).

        The decoder's L layers start from the final states of the encoder's top L layers (all of them
        when the two are equally deep, as in the book).
        """
        return {
            "memory": memory,
            "hidden": hidden[hidden.shape[0] - self.decoder.rnn.num_layers :],  # (L, B, H)
            "src_mask": AttentionMask.from_valid_lens(src_lens, 1, memory.shape[1]),
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
        return self.decoder.hidden_states(tgt_in, self.init_state(enc))[0]

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """Previous tokens (B,) -> logits (B, V), new state, {"cross": (B, S)} when asked."""
        output, state = self.decoder.step(self.decoder.embedding(tokens), state)  # (B, H)
        weights = self.decoder.attention.attention_weights  # (B, 1, S)
        attention = {CROSS: weights.squeeze(1)} if need_attention and weights is not None else {}
        return self.decoder.dense(output), state, attention

    def attention_maps(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """{"cross": (B, T, S)} of a teacher-forced pass."""
        enc = self.encode(src, src_lens)
        _, weights = self.decoder.hidden_states(tgt_in, self.init_state(enc), need_weights=True)
        assert weights is not None
        return {CROSS: weights}

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """Select batch rows; the hidden state's batch axis is its second."""
        return {
            "memory": state["memory"].index_select(0, index),
            "keys": state["keys"].index_select(0, index),
            "src_mask": state["src_mask"].index_select(index),
            "hidden": state["hidden"].index_select(1, index),
        }
