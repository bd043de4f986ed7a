"""The book's models with their training passes on the CPU kernels; everything else is the book's code.

Shapes: B batch, S source steps, T target steps, E embedding size, H hidden, L layers, h heads.
Each class wraps a book model (models/) and reads its parameters by name; `CpuSpeedups.wrap`
(kernels/cpu/__init__.py) puts one around the model of a `train.kernels: cpu` run. A kernel runs only
where it applies (CPU, no autocast, not under torch.compile, and the conditions below); anywhere
else the book model's own method runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_mt.kernels.cpu.packed_attention import keys_first
from attn_mt.kernels.cpu.recurrence import LoopWeights, decoder_loop, encoder_loop, gru_weights
from attn_mt.kernels.cpu.transformer_blocks import decoder_block, encoder_block
from attn_mt.kernels.kernel_backed import KernelBacked
from attn_mt.models.attention import AttentionMask
from attn_mt.models.bahdanau import BahdanauDecoder, GRUBahdanau
from attn_mt.models.base import DecoderState, EncoderDecoder, check_source
from attn_mt.models.transformer import Transformer

PACKED_MAX_HEAD_SIZE = 16  # heads this small are overhead-bound on the CPU: the block kernels train them


def plain_cpu(x: torch.Tensor) -> bool:
    """Whether `x` is on the CPU outside autocast and outside torch.compile's tracing."""
    return (
        x.device.type == "cpu" and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()
    )


def loop_weights(decoder: BahdanauDecoder) -> LoopWeights:
    """The decoder's parameters, by name, in the form `decoder_loop` takes."""
    rnn, size = decoder.rnn, decoder.rnn.hidden_size
    top = rnn.num_layers - 1

    def layer(name: str, index: int) -> torch.Tensor:
        return getattr(rnn, f"{name}_l{index}")

    return LoopWeights(
        context=rnn.weight_ih_l0[:, :size],  # (3H, H): the context comes first in the GRU's input
        top=torch.cat([layer("weight_hh", top), decoder.attention.W_q.weight]),  # (4H, H)
        top_bias=F.pad(layer("bias_hh", top), (0, size)),  # (4H,): W_q has no bias
        score=decoder.attention.w_v.weight[0] * 2,  # (H,)
        hh=[(layer("weight_hh", i), layer("bias_hh", i)) for i in range(top)],
        ih=[(layer("weight_ih", i), layer("bias_ih", i)) for i in range(1, top + 1)],
    )


class GRUBahdanauKernels(KernelBacked):
    """GRUBahdanau with `encoder_loop` (unpacked encoder, training) and `decoder_loop` (teacher forcing)."""

    model: GRUBahdanau

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """The book's encode, with the GRU as `encoder_loop` when training an unpacked encoder."""
        encoder = self.model.encoder
        if encoder.pack_padded or not torch.is_grad_enabled() or not plain_cpu(src):
            return self.model.encode(src, src_lens)
        check_source(src, src_lens)
        dropout = encoder.rnn.dropout if encoder.training else 0.0
        memory, hidden = encoder_loop(encoder.embedding(src), gru_weights(encoder.rnn), dropout)
        return self.model.encoded(memory, hidden, src_lens)  # memory (B, S, H), hidden (L_enc, B, H)

    def decode_features(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """Teacher-forced top-layer states (B, T, H) through `decoder_loop`."""
        memory = enc["memory"]  # (B, S, H)
        if not plain_cpu(memory):
            return self.model.decode_features(tgt_in, enc)
        decoder = self.model.decoder
        rnn = decoder.rnn
        embed_weight = rnn.weight_ih_l0[:, rnn.hidden_size :]  # (3H, E): the embedding's columns
        emb_gates = F.linear(decoder.embedding(tgt_in), embed_weight, rnn.bias_ih_l0)  # (B, T, 3H)
        keys = decoder.attention.W_k(memory) * 2  # (B, S, H), for the sigmoid form of the score
        training = decoder.training
        return decoder_loop(
            emb_gates,
            memory,
            keys,
            enc["hidden"],
            enc["src_mask"],
            loop_weights(decoder),
            decoder.attention.dropout.p if training else 0.0,
            rnn.dropout if training else 0.0,
        )


class TransformerKernels(KernelBacked):
    """Transformer whose encoder and decoder blocks train as one autograd function each."""

    model: Transformer

    def _applies(self, x: torch.Tensor) -> bool:
        """Training on the plain CPU with small bias-free heads (where the block kernels pay)."""
        attention = self.model.encoder.blks.block0.attention if len(self.model.encoder.blks) else None
        return (
            attention is not None
            and attention.W_q.bias is None
            and attention.W_q.out_features // attention.num_heads <= PACKED_MAX_HEAD_SIZE
            and torch.is_grad_enabled()
            and plain_cpu(x)
        )

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """The book's encode with each block as `encoder_block`."""
        if not self._applies(src):
            return self.model.encode(src, src_lens)
        check_source(src, src_lens)
        src_mask = AttentionMask.from_valid_lens(src_lens, 1, src.shape[1]).with_heads()  # (B, 1, 1, S)
        masks = keys_first(src_mask)
        X = self.model.encoder.embed(src)  # (B, S, H)
        for block in self.model.encoder.blks.values():
            X = encoder_block(block, X, masks)
        return {"memory": X, "src_mask": src_mask}

    def decode_features(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """The book's teacher-forced decoder with each block as `decoder_block`: (B, T, H)."""
        memory = enc["memory"]  # (B, S, H)
        if not self._applies(memory):
            return self.model.decode_features(tgt_in, enc)
        decoder = self.model.decoder
        self_masks = keys_first(AttentionMask.causal(tgt_in.shape[1], tgt_in.device).with_heads())
        src_masks = keys_first(enc["src_mask"])
        X = decoder.embed(tgt_in)  # (B, T, H)
        for block in decoder.blks.values():
            X = decoder_block(block, X, memory, self_masks, src_masks)
        return X


KERNEL_MODELS: dict[type[EncoderDecoder], type[KernelBacked]] = {
    GRUBahdanau: GRUBahdanauKernels,
    Transformer: TransformerKernels,
}
