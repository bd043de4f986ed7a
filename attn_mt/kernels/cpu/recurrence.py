"""The GRU recurrences of the Bahdanau model as autograd functions with hand-written backwards.

Replaces: `encoder_loop` the book's GRUEncoder.rnn (an nn.GRU read without packing), `decoder_loop`
the teacher-forced loop of BahdanauDecoder.forward (models/bahdanau.py).

Shapes: B batch, S source steps, T steps, H hidden, L layers, E embedding size.
At the book's sizes (B = 64, H = 32) a training step is bound by the cost of each small operation,
not by arithmetic: recorded step by step, a recurrence builds dozens of autograd nodes per step,
and every weight used inside it gets its own gradient product and accumulation at every step.
Here the forward runs without recording and writes what the backward needs into (T, ...) buffers;
the backward walks the steps in reverse doing only the sequential part (gradients of hidden states,
gates and attention), and each weight gradient is then one matrix product over all steps. The
equations are torch's GRU and the book's additive attention, whose w_v^T tanh(x) is computed as
2 w_v^T sigmoid(2x) - sum(w_v) without the constant (tanh(x) = 2 sigmoid(2x) - 1, and the softmax
ignores a constant), because torch's CPU sigmoid is several times faster than its tanh; gates are
split with torch.split_with_sizes, whose call costs half of Tensor.split's Python wrapper. Dropout
masks are drawn as the book modules draw theirs (see kernels/cpu/dropout.py), so tests check values
and gradients against them from the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attn_mt.kernels.cpu.dropout import draw_keep_masks, gru_keep_masks
from attn_mt.models.attention import NEG_INF, AttentionMask


def _steps(buffer: torch.Tensor) -> list[torch.Tensor]:
    """Views of a (T, ...) buffer, one per step, made once instead of indexed at every step."""
    return list(buffer.unbind(0))


class _Cells:
    """What the backward of T GRU cell updates needs, in (T, B, .) buffers, with per-step views.

    Torch's equations with gate order reset, update, new: rz = sigmoid(i_rz + h_rz),
    n = tanh(i_n + r h_n), h' = n + z (h - n). The forward keeps only what it computes anyway;
    the backward derives the sigmoid and tanh slopes for all steps at once.
    """

    names = ("rz", "new", "diff")

    def __init__(self, steps: int, batch: int, size: int, like: torch.Tensor):
        new_buffer = like.new_empty
        self.size = size
        self.rz_all = new_buffer(steps, batch, 2 * size)  # reset and update gates
        self.new_all = new_buffer(steps, batch, size)  # candidate states
        self.diff_all = new_buffer(steps, batch, size)  # previous state minus candidate
        self.hidden_new: list[torch.Tensor] = []  # per step h_n (B, H), a view of the hidden gates
        self.rz, self.new, self.diff = (_steps(x) for x in (self.rz_all, self.new_all, self.diff_all))

    def saved(self) -> list[torch.Tensor]:
        """The buffers, for ctx.save_for_backward (the h_n views travel on ctx)."""
        return [self.rz_all, self.new_all, self.diff_all]

    @classmethod
    def for_backward(cls, tensors: list[torch.Tensor], hidden_new: list[torch.Tensor]) -> _Cells:
        """Rebuild from `saved()` and the h_n views, with the slopes of every step."""
        cells = cls.__new__(cls)
        cells.rz_all, cells.new_all, cells.diff_all = tensors
        cells.size = cells.new_all.shape[2]
        cells.hidden_new = hidden_new
        cells.rz, cells.diff = _steps(cells.rz_all), _steps(cells.diff_all)
        rz_slope = torch.addcmul(cells.rz_all, cells.rz_all, cells.rz_all, value=-1)  # rz (1 - rz)
        new_slope = torch.addcmul(torch.ones_like(cells.new_all), cells.new_all, cells.new_all, value=-1)
        cells.rz_slope, cells.new_slope = _steps(rz_slope), _steps(new_slope)  # 1 - n^2 for the latter
        return cells

    def forward(
        self,
        t: int,
        input_gates: torch.Tensor,
        hidden_gates: torch.Tensor,
        prev: torch.Tensor,
        out: torch.Tensor,
    ) -> torch.Tensor:
        """One update from input gates (B, 3H), hidden gates (B, 3H) and state (B, H) into `out` (B, H)."""
        H = self.size
        input_rz, input_new = torch.split_with_sizes(input_gates, [2 * H, H], dim=1)
        hidden_rz, hidden_new = torch.split_with_sizes(hidden_gates, [2 * H, H], dim=1)
        gate = torch.add(input_rz, hidden_rz, out=self.rz[t]).sigmoid_()  # (B, 2H)
        reset, update = torch.split_with_sizes(gate, [H, H], dim=1)
        self.hidden_new.append(hidden_new)
        cand = torch.addcmul(input_new, reset, hidden_new, out=self.new[t]).tanh_()  # (B, H)
        torch.sub(prev, cand, out=self.diff[t])
        return torch.addcmul(cand, update, self.diff[t], out=out)

    def backward(
        self, t: int, grad: torch.Tensor, d_input: torch.Tensor, d_hidden_gates: torch.Tensor
    ) -> torch.Tensor:
        """Gradient `grad` (B, H) of the update's output -> d input gates and d hidden gates (written
        into the given (B, 3H) tensors) and the direct gradient of the previous state (B, H)."""
        H = self.size
        reset, update = torch.split_with_sizes(self.rz[t], [H, H], dim=1)
        d_prev = grad * update  # (B, H)
        d_pre_r, d_pre_z, d_pre_n = torch.split_with_sizes(d_input, [H, H, H], dim=1)
        torch.mul(grad - d_prev, self.new_slope[t], out=d_pre_n)
        torch.mul(d_pre_n, self.hidden_new[t], out=d_pre_r)
        torch.mul(grad, self.diff[t], out=d_pre_z)
        d_input[:, : 2 * H].mul_(self.rz_slope[t])
        d_hidden_gates.copy_(d_input)
        d_hidden_gates[:, 2 * H :].mul_(reset)
        return d_prev


def _weight_grad(d_outputs: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Sum over steps and rows of d_output^T input: (T, B, out), (T, B, in) -> (out, in)."""
    return d_outputs.reshape(-1, d_outputs.shape[-1]).t().mm(inputs.reshape(-1, inputs.shape[-1]))


@dataclass
class LoopWeights:
    """The Bahdanau decoder's parameters in the form `decoder_loop` uses (views of the module's)."""

    context: torch.Tensor  # (3H, H): the context columns of layer 0's W_ih
    top: torch.Tensor  # (4H, H): [W_hh of the top layer; W_q of the attention]
    top_bias: torch.Tensor  # (4H,): b_hh of the top layer, then zeros (W_q has no bias)
    score: torch.Tensor  # (H,): 2 w_v, for the sigmoid form of the additive score
    hh: list[tuple[torch.Tensor, torch.Tensor]]  # (W_hh, b_hh) of layers 0 .. L-2
    ih: list[tuple[torch.Tensor, torch.Tensor]]  # (W_ih, b_ih) of layers 1 .. L-1


def decoder_loop(
    emb_gates: torch.Tensor,
    memory: torch.Tensor,
    keys: torch.Tensor,
    hidden: torch.Tensor,
    mask: AttentionMask,
    weights: LoopWeights,
    attention_dropout: float,
    layer_dropout: float,
) -> torch.Tensor:
    """Top-layer hidden states (B, T, H) of teacher-forced Bahdanau decoding.

    `emb_gates` (B, T, 3H) is the embedding share of layer 0's input gates (with b_ih), `memory`
    (B, S, H) the encoder outputs, `keys` (B, S, H) the prepared keys 2 W_k memory, `hidden`
    (L, B, H) the initial state and `mask` the source mask (B, 1, S). Dropout probabilities apply
    to the attention weights and between layers; pass 0 outside training. The masks are drawn
    step by step as BahdanauDecoder.forward draws them: the attention weights' (B, 1, S) by the
    installed Dropout, then nn.GRU's (1, B, H) below each upper layer.
    """
    B, T, _ = emb_gates.shape
    L, _, H = hidden.shape
    S = memory.shape[1]
    att_keep = memory.new_empty(T, B, S) if attention_dropout > 0 else None
    layer_keep = memory.new_empty(L - 1, T, B, H) if layer_dropout > 0 and L > 1 else None
    for t in range(T if att_keep is not None or layer_keep is not None else 0):
        if att_keep is not None:
            att_keep[t] = draw_keep_masks((B, 1, S), attention_dropout, memory).view(B, S)
        for layer in range(L - 1 if layer_keep is not None else 0):
            layer_keep[layer, t] = gru_keep_masks((1, B, H), layer_dropout, memory).view(B, H)
    blocked = mask.blocked.reshape(B, S)
    empty = None if mask.empty is None else mask.empty.reshape(B, 1)
    flat = [tensor for pair in weights.hh + weights.ih for tensor in pair]
    return _DecoderLoop.apply(
        (L, blocked, empty, att_keep, layer_keep),
        emb_gates,
        memory,
        keys,
        hidden,
        weights.context,
        weights.top,
        weights.top_bias,
        weights.score,
        *flat,
    )


def _layer_weights(
    flat: list[torch.Tensor] | tuple[torch.Tensor, ...], num_layers: int
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor] | None]]:
    """Unflatten (W_hh, b_hh) of layers 0 .. L-2 and (W_ih, b_ih) of layers 1 .. L-1 (None for layer 0)."""
    pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(2 * (num_layers - 1))]
    return pairs[: num_layers - 1], [None, *pairs[num_layers - 1 :]]


class _DecoderLoop(torch.autograd.Function):
    """Forward: the decoder recurrence without recording. Backward: reverse steps, then batched weights."""

    @staticmethod
    def forward(ctx, spec, emb_gates, memory, keys, hidden0, w_context, w_top, b_top, w_score, *flat):  # noqa: D102
        L, blocked, empty, att_keep, layer_keep = spec
        hh, ih = _layer_weights(flat, L)
        B, T, _ = emb_gates.shape
        S, H = memory.shape[1], memory.shape[2]
        new_buffer = memory.new_empty
        states = new_buffer(L, T + 1, B, H)  # every layer's state before and after each step
        states[:, 0] = hidden0
        below = new_buffer(L, T, B, H) if layer_keep is not None else None  # dropped inputs of layers > 0
        features = new_buffer(T, B, S, H)  # sigmoid features of the additive attention
        attn = new_buffer(T, B, S)  # attention weights
        dropped = new_buffer(T, B, S) if att_keep is not None else attn
        context = new_buffer(T, B, H)
        cells = [_Cells(T, B, H, memory) for _ in range(L)]
        w_top_t, w_context_t = w_top.t().contiguous(), w_context.t().contiguous()
        hh_t = [(w.t().contiguous(), b) for w, b in hh]
        ih_t = [None] + [(w.t().contiguous(), b) for w, b in ih[1:]]
        st = [_steps(x) for x in states.unbind(0)]  # [layer][t]
        below_v = [_steps(x) for x in below.unbind(0)] if below is not None else None
        keep_v = [_steps(x) for x in layer_keep.unbind(0)] if layer_keep is not None else None
        feat_v, attn_v, drop_v, ctx_v = (_steps(x) for x in (features, attn, dropped, context))
        att_keep_v = _steps(att_keep) if att_keep is not None else None
        for t, gates in enumerate(emb_gates.unbind(1)):  # T x (B, 3H)
            projected = torch.addmm(b_top, st[L - 1][t], w_top_t)  # (B, 4H)
            top_gates, query = torch.split_with_sizes(projected, [3 * H, H], dim=1)
            torch.add(keys, query.unsqueeze(1), alpha=2, out=feat_v[t]).sigmoid_()  # (B, S, H)
            scores = torch.matmul(feat_v[t], w_score).masked_fill_(blocked, NEG_INF)  # (B, S)
            torch.softmax(scores, dim=1, out=attn_v[t])
            if empty is not None:
                attn_v[t].masked_fill_(empty, 0.0)
            if att_keep_v is not None:
                torch.mul(attn_v[t], att_keep_v[t], out=drop_v[t])
            torch.sum(drop_v[t].unsqueeze(2) * memory, dim=1, out=ctx_v[t])  # (B, H)
            input_gates = torch.addmm(gates, ctx_v[t], w_context_t)  # (B, 3H)
            for layer in range(L):
                if layer > 0:
                    lower = st[layer - 1][t + 1]
                    if keep_v is not None:
                        lower = torch.mul(lower, keep_v[layer - 1][t], out=below_v[layer][t])
                    input_gates = torch.addmm(ih_t[layer][1], lower, ih_t[layer][0])  # (B, 3H)
                if layer == L - 1:
                    hidden_gates = top_gates
                else:
                    hidden_gates = torch.addmm(hh_t[layer][1], st[layer][t], hh_t[layer][0])  # (B, 3H)
                cells[layer].forward(t, input_gates, hidden_gates, st[layer][t], st[layer][t + 1])
        ctx.spec = spec
        ctx.hidden_new = [cell.hidden_new for cell in cells]
        extra = [] if below is None else [below]
        ctx.save_for_backward(
            memory,
            w_context,
            w_top,
            w_score,
            states,
            features,
            attn,
            dropped,
            context,
            *extra,
            *flat,
            *(tensor for cell in cells for tensor in cell.saved()),
        )
        return states[L - 1, 1:].transpose(0, 1)  # (B, T, H)

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        L, blocked, empty, att_keep, layer_keep = ctx.spec
        saved = list(ctx.saved_tensors)
        memory, w_context, w_top, w_score, states, features, attn, dropped, context = saved[:9]
        rest = saved[9:]
        below = rest.pop(0) if layer_keep is not None else None
        flat, cell_tensors = rest[: 4 * (L - 1)], rest[4 * (L - 1) :]
        hh, ih = _layer_weights(flat, L)
        cells = [_Cells.for_backward(cell_tensors[3 * i : 3 * i + 3], ctx.hidden_new[i]) for i in range(L)]
        T, B, S, H = features.shape
        new_buffer = memory.new_empty
        d_proj = new_buffer(T, B, 4 * H)  # gradients of [top hidden gates, query]
        d_input = new_buffer(L, T, B, 3 * H)  # gradients of each layer's input gates
        d_hidden_gates = new_buffer(L, T, B, 3 * H)  # gradients of each lower layer's hidden gates
        d_context = new_buffer(T, B, H)
        d_scores = new_buffer(T, B, S)
        grad_keys = torch.zeros_like(memory)  # (B, S, H)
        grad_hidden = [memory.new_zeros(B, H) for _ in range(L)]  # L x (B, H)
        grad_out_steps = grad_out.unbind(1)  # T x (B, H)
        d_in_v = [_steps(x) for x in d_input.unbind(0)]
        d_hg_v = [_steps(x) for x in d_hidden_gates.unbind(0)]
        keep_v = [_steps(x) for x in layer_keep.unbind(0)] if layer_keep is not None else None
        att_keep_v = _steps(att_keep) if att_keep is not None else None
        feat_v, attn_v, d_ctx_v, d_sc_v, d_proj_v = (
            _steps(x) for x in (features, attn, d_context, d_scores, d_proj)
        )
        w_score_h = w_score.reshape(1, 1, H)
        for t in range(T - 1, -1, -1):
            grad_hidden[L - 1] = grad_hidden[L - 1] + grad_out_steps[t]
            d_top_gates, d_query = torch.split_with_sizes(d_proj_v[t], [3 * H, H], dim=1)
            for layer in range(L - 1, -1, -1):
                d_gates = d_top_gates if layer == L - 1 else d_hg_v[layer][t]
                d_prev = cells[layer].backward(t, grad_hidden[layer], d_in_v[layer][t], d_gates)
                if layer < L - 1:
                    d_prev = torch.addmm(d_prev, d_gates, hh[layer][0])  # (B, H)
                if layer > 0:
                    d_lower = torch.mm(d_in_v[layer][t], ih[layer][0])  # (B, H)
                    if keep_v is not None:
                        d_lower.mul_(keep_v[layer - 1][t])
                    grad_hidden[layer - 1] = grad_hidden[layer - 1] + d_lower
                grad_hidden[layer] = d_prev
            torch.mm(d_in_v[0][t], w_context, out=d_ctx_v[t])  # (B, H)
            d_attn = torch.bmm(memory, d_ctx_v[t].unsqueeze(2)).squeeze(2)  # (B, S)
            if att_keep_v is not None:
                d_attn.mul_(att_keep_v[t])
            product = d_attn.mul_(attn_v[t])
            torch.addcmul(product, attn_v[t], product.sum(1, keepdim=True), value=-1, out=d_sc_v[t])
            scaled = d_sc_v[t].unsqueeze(2) * w_score_h * feat_v[t]  # (B, S, H)
            d_pre_att = torch.addcmul(scaled, scaled, feat_v[t], value=-1)  # through the sigmoid
            grad_keys += d_pre_att
            torch.sum(d_pre_att, dim=1, out=d_query).mul_(2)
            grad_hidden[L - 1] = torch.addmm(grad_hidden[L - 1], d_proj_v[t], w_top)  # (B, H)
        grad_flat = []
        for layer in range(L - 1):
            grad_flat += [
                _weight_grad(d_hidden_gates[layer], states[layer, :-1]),
                d_hidden_gates[layer].sum((0, 1)),
            ]
        for layer in range(1, L):
            lower = states[layer - 1, 1:] if below is None else below[layer]
            grad_flat += [_weight_grad(d_input[layer], lower), d_input[layer].sum((0, 1))]
        grad_memory = torch.bmm(dropped.permute(1, 2, 0), d_context.transpose(0, 1))  # (B, S, H)
        return (
            None,
            d_input[0].transpose(0, 1),  # (B, T, 3H)
            grad_memory,
            grad_keys,
            torch.stack(grad_hidden),  # (L, B, H)
            _weight_grad(d_input[0], context),  # (3H, H)
            _weight_grad(d_proj, states[L - 1, :-1]),  # (4H, H)
            d_proj.sum((0, 1)),  # (4H,)
            features.reshape(-1, H).t().mv(d_scores.reshape(-1)),  # (H,)
            *grad_flat,
        )


def gru_weights(rnn: torch.nn.GRU) -> list[torch.Tensor]:
    """An nn.GRU's parameters W_ih, W_hh, b_ih, b_hh of each layer, by name and in layer order."""
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    return [getattr(rnn, f"{name}_l{layer}") for layer in range(rnn.num_layers) for name in names]


def encoder_loop(
    embedded: torch.Tensor, weights: list[torch.Tensor], dropout: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs (B, S, H) of the top layer and final states (L, B, H) of a batch-first GRU from zeros.

    `embedded` is (B, S, E); `weights` holds W_ih, W_hh, b_ih and b_hh of each layer, in layer
    order (`gru_weights`). Between layers the outputs are dropped with probability `dropout` by
    masks drawn as torch's GRU draws them (one tensor (S, B, H) per lower layer, in layer order),
    so a seeded run takes the same masks on either path.
    """
    L = len(weights) // 4
    B, S, _ = embedded.shape
    H = weights[1].shape[1]
    keeps = []
    if dropout > 0:
        keeps = [gru_keep_masks((S, B, H), dropout, embedded) for _ in range(L - 1)]
    return _EncoderLoop.apply(keeps, embedded, *weights)


class _EncoderLoop(torch.autograd.Function):
    """Forward: layer by layer, all steps' input gates in one product, then the steps unrecorded.

    Backward: layer by layer from the top, the steps in reverse, then each weight's gradient and
    the gradient of the layer's input in one matrix product each.
    """

    @staticmethod
    def forward(ctx, keeps, embedded, *weights):  # noqa: D102
        L = len(weights) // 4
        B, S, _ = embedded.shape
        H = weights[1].shape[1]
        states = embedded.new_zeros(L, S + 1, B, H)  # every layer's state before and after each step
        layer_input = embedded.transpose(0, 1)  # (S, B, E)
        inputs, cells, hidden_new = [], [], []
        for layer in range(L):
            w_ih, w_hh, b_ih, b_hh = weights[4 * layer : 4 * layer + 4]
            if layer > 0:
                layer_input = states[layer - 1, 1:]  # (S, B, H)
                if keeps:
                    layer_input = layer_input * keeps[layer - 1]
            inputs.append(layer_input)
            size = layer_input.shape[2]
            input_gates = torch.addmm(b_ih, layer_input.reshape(S * B, size), w_ih.t()).view(S, B, 3 * H)
            w_hh_t = w_hh.t().contiguous()
            cell, st = _Cells(S, B, H, embedded), _steps(states[layer])
            for t, gates in enumerate(input_gates.unbind(0)):  # S x (B, 3H)
                cell.forward(t, gates, torch.addmm(b_hh, st[t], w_hh_t), st[t], st[t + 1])
            cells.append(cell)
            hidden_new.append(cell.hidden_new)
        ctx.keeps = keeps
        ctx.hidden_new = hidden_new
        ctx.save_for_backward(
            states, embedded, *weights, *inputs[1:], *(tensor for cell in cells for tensor in cell.saved())
        )
        return states[L - 1, 1:].transpose(0, 1), states[:, S].clone()  # (B, S, H), (L, B, H)

    @staticmethod
    def backward(ctx, grad_outputs, grad_hidden):  # noqa: D102
        saved = list(ctx.saved_tensors)
        states = saved[0]
        L, S1, B, H = states.shape
        S = S1 - 1
        embedded, weights = saved[1], saved[2 : 2 + 4 * L]
        inputs = [embedded.transpose(0, 1), *saved[2 + 4 * L : 1 + 5 * L]]  # (S, B, E), L - 1 x (S, B, H)
        cell_tensors = saved[1 + 5 * L :]
        grads: list[torch.Tensor | None] = [None] * (4 * L)
        grad_above = grad_outputs.transpose(0, 1)  # (S, B, H) of the top layer's outputs
        d_input = states.new_empty(S, B, 3 * H)  # gradients of one layer's input gates
        d_hidden_gates = states.new_empty(S, B, 3 * H)  # ... and of its hidden gates
        d_in_v, d_hg_v = _steps(d_input), _steps(d_hidden_gates)
        for layer in range(L - 1, -1, -1):
            w_ih, w_hh = weights[4 * layer], weights[4 * layer + 1]
            cell = _Cells.for_backward(cell_tensors[3 * layer : 3 * layer + 3], ctx.hidden_new[layer])
            above = grad_above.unbind(0)  # S x (B, H)
            carry = grad_hidden[layer]  # (B, H)
            for t in range(S - 1, -1, -1):
                d_prev = cell.backward(t, carry + above[t], d_in_v[t], d_hg_v[t])
                carry = torch.addmm(d_prev, d_hg_v[t], w_hh) if t else d_prev  # (B, H)
            layer_input = inputs[layer]  # (S, B, E or H)
            grads[4 * layer : 4 * layer + 4] = [
                _weight_grad(d_input, layer_input),  # (3H, E or H)
                _weight_grad(d_hidden_gates, states[layer, :-1]),  # (3H, H)
                d_input.sum((0, 1)),
                d_hidden_gates.sum((0, 1)),
            ]
            grad_below = d_input.reshape(S * B, 3 * H).mm(w_ih).view(S, B, -1)  # (S, B, E or H)
            if layer > 0 and ctx.keeps:
                grad_below.mul_(ctx.keeps[layer - 1])
            grad_above = grad_below
        return None, grad_above.transpose(0, 1), *grads
