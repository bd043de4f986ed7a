"""The Transformer's training pass shaped for a GPU: `train.kernels: gpu` (training/speed.py).

Shapes: B batch rows, S source steps, T target steps, H hidden, h heads, d = H / h, V target
vocabulary, M real target tokens.
The book's Transformer (models/transformer.py) launches many small kernels a step and feeds
`scaled_dot_product_attention` boolean masks that rule out its fastest kernels. `GpuTransformer`
computes the same teacher-forced pass from the same parameters, read by name (checkpoints keep
the book's names and load either way), in fewer and larger steps:
- one matrix product for Q, K and V of a self-attention (and one for K and V of the
  encoder-decoder attention), from the book's W_q, W_k and W_v concatenated;
- the decoder's self-attention with `is_causal` and no mask: padding is at the end of a row, so
  a real query's causal window never reaches a padded key; the encoder's and the cross attention
  share one additive bias (B, 1, 1, S) built once per batch, and no `masked_fill` runs (every
  source has at least one real token, so no query is left without a key);
- the residual stream in the autocast dtype (see `embed`), layer norms with their weights in that
  dtype, accumulating in float32 (see `layer_norm`).
`token_loss` scores only the real target positions, gathered by an index the host computed while
collating (`prepare_batch`), so the output layer and the loss never see a padded position.
For CUDA graphs (a compile mode that captures them, training/speed.py's GpuPath), `prepare_batch`
also rounds the shapes up to a few sizes (`bucket_shape`), so the step is compiled and captured
once per shape; measured on configs/transformer-gpu.yaml's lengths that pads an epoch's 113
batches to 21 shapes and makes real tokens 66% of the cells instead of 96%
(scripts/profile_step.py prints the share).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attn_mt.data.batch import Batch
from attn_mt.kernels.gpu.smoothed_loss import smoothed_cross_entropy_sum
from attn_mt.kernels.kernel_backed import KernelBacked
from attn_mt.models.attention import MultiHeadAttention
from attn_mt.models.transformer import AddNorm, DecoderBlock, EncoderBlock, PositionWiseFFN, Transformer

LENGTH_MULTIPLE = 8  # source and target widths are padded to a multiple of this for CUDA graphs
BIAS_ALIGNMENT = 16  # columns of the attention bias's rows in memory (see source_bias)
ROW_SIZES_PER_OCTAVE = 4  # batch rows are padded to one of this many sizes between two powers of two


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= value."""
    return -(-value // multiple) * multiple


def bucket_rows(rows: int, per_octave: int = ROW_SIZES_PER_OCTAVE) -> int:
    """`rows` rounded up to one of `per_octave` sizes an octave (8, 16, 20, 24, 28, 32, 40, ...)."""
    if rows <= 8:
        return 8
    octave = 1 << ((rows - 1).bit_length() - 1)  # the power of two below rows
    return round_up(rows, max(1, octave // per_octave))


def bucket_shape(rows: int, src_width: int, tgt_width: int) -> tuple[int, int, int]:
    """The (B, S, T) a batch of this shape is padded to for CUDA graphs."""
    return bucket_rows(rows), round_up(src_width, LENGTH_MULTIPLE), round_up(tgt_width, LENGTH_MULTIPLE)


@dataclass
class PreparedBatch(Batch):
    """A batch with its real target positions listed, shaped on the host before it reaches the device.

    Rows added by bucketing have one source token (a length of 1) and no target token (length 0).
    """

    real: torch.Tensor = None  # type: ignore[assignment]  # (M,) long: flat indices of real (B, T) cells

    def to(self, device: torch.device | str) -> PreparedBatch:
        """Move every tensor to `device`."""
        fields = (self.src, self.src_lens, self.tgt, self.tgt_lens, self.real)
        return PreparedBatch(*(t.to(device, non_blocking=True) for t in fields))

    def pinned(self) -> PreparedBatch:
        """The same batch in page-locked host memory."""
        fields = (self.src, self.src_lens, self.tgt, self.tgt_lens, self.real)
        return PreparedBatch(*(t.pin_memory() for t in fields))

    def trimmed(self, source: bool = True) -> PreparedBatch:
        """The batch itself: `prepare_batch` trimmed it already and may have padded it on purpose."""
        return self


def prepare_batch(batch: Batch, pad_id: int | None, trim_source: bool, bucket: bool) -> PreparedBatch:
    """`batch` trimmed, padded to its bucket's shape when `bucket`, with its real target positions.

    Called where the batch is collated (on the host, or on the device in tests). `pad_id`, the
    vocabulary's <pad>, fills the rows and columns bucketing adds (unused without `bucket`).
    """
    batch = batch.trimmed(source=trim_source)
    src, src_lens, tgt, tgt_lens = batch.src, batch.src_lens, batch.tgt, batch.tgt_lens
    if bucket:
        rows, src_width, tgt_width = bucket_shape(src.shape[0], src.shape[1], tgt.shape[1])
        extra = rows - src.shape[0]
        src = F.pad(src, (0, src_width - src.shape[1], 0, extra), value=pad_id)  # (B', S')
        tgt = F.pad(tgt, (0, tgt_width - tgt.shape[1], 0, extra), value=pad_id)  # (B', T')
        src_lens = F.pad(src_lens, (0, extra), value=1)  # (B',): one (padding) token to attend to
        tgt_lens = F.pad(tgt_lens, (0, extra), value=0)  # (B',): no loss
    positions = torch.arange(tgt.shape[1], device=tgt.device)  # (T,)
    real = (positions[None, :] < tgt_lens[:, None]).flatten().nonzero().squeeze(1)  # (M,)
    return PreparedBatch(src, src_lens, tgt, tgt_lens, real)


def compute_dtype(x: torch.Tensor, fallback: torch.dtype) -> torch.dtype:
    """The autocast dtype where autocast is on for `x`'s device, else `fallback` (the weights' dtype)."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else fallback


def source_bias(src_lens: torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention bias (B, 1, 1, S): 0 on real source keys, -inf on padding.

    Its rows are allocated BIAS_ALIGNMENT columns wide and sliced to S, so every stride but the last
    is a multiple of that alignment: the memory-efficient attention kernel then takes it as it is,
    where a row of S columns would be padded and copied again by every attention call (recent
    torch's preprocess_mask checks the strides; releases that checked the last size instead copy
    it unless S is a multiple of 16: tests/support/cuda_rules.py).
    """
    columns = round_up(width, BIAS_ALIGNMENT)
    positions = torch.arange(columns, device=src_lens.device)  # (S',)
    zero = torch.zeros((), dtype=dtype, device=src_lens.device)
    blocked = torch.full((), float("-inf"), dtype=dtype, device=src_lens.device)
    bias = torch.where(positions < src_lens[:, None, None, None], zero, blocked)  # (B, 1, 1, S')
    return bias[..., :width]


def layer_norm(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """`norm` applied in `x`'s dtype, its weight and bias cast to that dtype: (..., H) -> (..., H).

    CUDA's layer norm kernel reads the weight and bias as the input's type and refuses float32 ones
    on a bfloat16 input (the CPU's kernel accepts the mix; tests/support/cuda_rules.py holds the CPU to
    CUDA's rule). So the parameters are cast to the stream's dtype, not the stream to float32:
    either way the kernel accumulates the mean and variance in float32 (its accumulation type),
    but casting two (H,) vectors is free, where widening the (B, N, H) stream and narrowing the
    output again would add two passes over it each way in eager mode. The weight's and bias's
    gradients are summed in float32 inside the kernel and rounded once to the stream's dtype, as
    autocast already does for every matrix product's weight. Autocast is off here because it would
    widen the input to float32 and return float32.
    """
    weight, bias = norm.weight.to(x.dtype), norm.bias.to(x.dtype)  # (H,), (H,)
    with torch.autocast(x.device.type, enabled=False):
        return F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)


def add_norm(block: AddNorm, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """The book's AddNorm, LayerNorm(X + dropout(Y)), in X's dtype: (B, N, H)."""
    return layer_norm(block.ln, block.dropout(Y).to(X.dtype) + X)


def joined(*layers: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights (and biases, if any) of `layers` stacked: one (n x out, in) projection."""
    weight = torch.cat([layer.weight for layer in layers])  # (n H, H)
    has_bias = layers[0].bias is not None
    bias = torch.cat([layer.bias for layer in layers]) if has_bias else None  # (n H,)
    return weight, bias


def split_heads(projected: torch.Tensor, parts: int, heads: int) -> tuple[torch.Tensor, ...]:
    """(B, N, parts x H) -> `parts` tensors (B, h, N, d)."""
    batch, steps, _ = projected.shape
    return projected.view(batch, steps, parts, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


def merge_heads(X: torch.Tensor) -> torch.Tensor:
    """(B, h, N, d) -> (B, N, H)."""
    batch, _, steps, _ = X.shape
    return X.transpose(1, 2).reshape(batch, steps, -1)


def attention_dropout(mha: MultiHeadAttention) -> float:
    """The attention weights' dropout probability in training, 0 in evaluation."""
    dropout = mha.attention.dropout
    return dropout.p if dropout.training else 0.0


def self_attention(
    mha: MultiHeadAttention, X: torch.Tensor, bias: torch.Tensor | None, causal: bool
) -> torch.Tensor:
    """Multi-head self-attention of X (B, N, H) with one Q/K/V product: (B, N, H)."""
    queries, keys, values = split_heads(F.linear(X, *joined(mha.W_q, mha.W_k, mha.W_v)), 3, mha.num_heads)
    output = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=bias, dropout_p=attention_dropout(mha), is_causal=causal
    )  # (B, h, N, d)
    return mha.W_o(merge_heads(output))


def cross_attention(
    mha: MultiHeadAttention, Y: torch.Tensor, memory: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Queries Y (B, T, H) over memory (B, S, H), one K/V product: (B, T, H)."""
    (queries,) = split_heads(mha.W_q(Y), 1, mha.num_heads)  # (B, h, T, d)
    keys, values = split_heads(F.linear(memory, *joined(mha.W_k, mha.W_v)), 2, mha.num_heads)  # (B, h, S, d)
    output = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=bias, dropout_p=attention_dropout(mha)
    )  # (B, h, T, d)
    return mha.W_o(merge_heads(output))


def feed_forward(ffn: PositionWiseFFN, X: torch.Tensor) -> torch.Tensor:
    """The book's position-wise FFN: (B, N, H) -> (B, N, H)."""
    return ffn.dense2(F.relu(ffn.dense1(X)))


def encoder_block(block: EncoderBlock, X: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One encoder block: (B, S, H) -> (B, S, H)."""
    Y = add_norm(block.addnorm1, X, self_attention(block.attention, X, bias, causal=False))
    return add_norm(block.addnorm2, Y, feed_forward(block.ffn, Y))


def decoder_block(
    block: DecoderBlock, X: torch.Tensor, memory: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """One teacher-forced decoder block: (B, T, H) over memory (B, S, H) -> (B, T, H)."""
    Y = add_norm(block.addnorm1, X, self_attention(block.attention1, X, None, causal=True))
    Z = add_norm(block.addnorm2, Y, cross_attention(block.attention2, Y, memory, bias))
    return add_norm(block.addnorm3, Z, feed_forward(block.ffn, Z))


def embed(layer: nn.Module, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """dropout(sqrt(H) embedding + positions) (B, N, H), in `dtype`: the start of the residual stream.

    In bfloat16 the residual stream is safe: each block's stream is a layer norm's output, of unit
    scale, so its 8-bit mantissa rounds no worse than the bfloat16 inputs autocast already feeds
    every matrix product; the additions are of two terms of that scale, and the layer norms' means
    and variances, where rounding would accumulate, are summed in float32 inside the kernel. The
    parameters, their gradients, the optimiser and the loss stay in float32.
    """
    X = (layer.embedding(ids) * math.sqrt(layer.num_hiddens)).to(dtype)  # (B, N, H)
    return layer.pos_encoding(X)


class GpuTransformer(KernelBacked):
    """The book's Transformer with a teacher-forced training pass built for a GPU; decoding is the book's."""

    model: Transformer

    def forward(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor, features: bool = False
    ) -> torch.Tensor:
        """Teacher-forced logits (B, T, V), or with `features` the last decoder block's output (B, T, H)."""
        encoder, decoder = self.model.encoder, self.model.decoder
        dtype = compute_dtype(src, encoder.embedding.weight.dtype)
        bias = source_bias(src_lens, src.shape[1], dtype)  # (B, 1, 1, S), shared by every layer
        memory = embed(encoder, src, dtype)  # (B, S, H)
        for block in encoder.blks.values():
            memory = encoder_block(block, memory, bias)
        X = embed(decoder, tgt_in, dtype)  # (B, T, H)
        for block in decoder.blks.values():
            X = decoder_block(block, X, memory, bias)
        return X if features else self.model.output_layer(X)


def token_loss(
    net: nn.Module,
    batch: PreparedBatch,
    tgt_in: torch.Tensor,
    label_smoothing: float,
    through_output_layer: bool,
    cross_entropy: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] = smoothed_cross_entropy_sum,
) -> torch.Tensor:
    """Summed, label-smoothed cross-entropy of `batch`'s real target tokens (float32 accumulation).

    With `through_output_layer` the output layer scores the M real positions only; otherwise (DDP,
    which synchronises the gradients through the forward) the forward's logits (B, T, V) are
    gathered at them. `cross_entropy` is smoothed_cross_entropy_sum, or its compiled form.
    """
    target = batch.tgt.flatten().index_select(0, batch.real)  # (M,)
    if through_output_layer:
        hidden = net(batch.src, batch.src_lens, tgt_in, features=True)  # (B, T, H)
        logits = net.output_layer(hidden.flatten(0, 1).index_select(0, batch.real))  # (M, V)
    else:
        logits = net(batch.src, batch.src_lens, tgt_in).flatten(0, 1).index_select(0, batch.real)  # (M, V)
    return cross_entropy(logits, target, label_smoothing)


GPU_MODELS: dict[type[nn.Module], type[KernelBacked]] = {Transformer: GpuTransformer}
