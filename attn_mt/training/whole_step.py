"""`train.compile_scope: step`: the whole training step compiled, and on CUDA captured once per batch shape.

Shapes: B batch rows, S source steps, T target steps, V target vocabulary.
With `compile_scope: module` torch.compile wraps the model alone, and the loss, clipping, AdamW and
the schedule run eagerly, a few hundred small launches a step. Here one function does what
`Trainer._step` does for one batch, in order:

    1. teacher-forced logits of the book's model under autocast, torch's cross-entropy summed over
       the real target tokens (training/loss.py), divided as train.loss_average says;
    2. backward, into gradients the step allocates (the host sets them to None before it);
    3. the gradient norm clipped (foreach) and AdamW's step, its learning rate a device tensor that
       the host fills before each step, so a new rate is neither a recompile nor a new graph;

and returns the loss sum and the gradient norm as device tensors (nothing is read back). The
function is compiled by torch.compile (`train.compile_mode: default`: inductor, dynamo splitting it
at the backward), or compiled with CUDA graphs (`reduce-overhead`: torch.compile's own graph trees),
or compiled and then captured whole by `torch.cuda.graphs`, one graph a batch shape (`cuda-graphs`),
or captured as it runs, not compiled (`train.capture_step`: the GRU model, whose cuDNN GRUs torch.compile
leaves out of its graphs, with its packed encoder in the form a graph holds:
kernels/cuda/captured_bahdanau.py); the captures need the fixed batch shapes of data.batch_shapes.
`whole_step_refusal` names what it cannot run: several processes (DDP), gradient accumulation and
fp16's gradient scaler (which reads the gradients back every step); the trainer then logs it in one
line and compiles the module alone (or, under train.capture_step, runs the plain step). Where CUDA
refuses a capture, one log line says so and every step runs uncaptured.
Before the clock (`warm_up`) every shape is compiled (and captured) on a copy of the training state,
which is put back afterwards, so the run's numbers are those of a run that did not warm up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from attn_mt.config import Config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import NMTData
from attn_mt.run.device import autocast_context
from attn_mt.training.compiling import compile_options
from attn_mt.training.loss import masked_cross_entropy
from attn_mt.training.loss_totals import Loss, LossTotals
from attn_mt.training.optim import Schedule

log = logging.getLogger("attn_mt")

GRAPH_MODES = ("reduce-overhead", "cuda-graphs")  # compile modes of the whole step that capture CUDA graphs


def whole_step_refusal(tc: Any, device: torch.device, processes: int, amp: str, switches: bool) -> str | None:
    """Why the whole step cannot run this training (`tc`: the train section), or None when it can."""
    if processes > 1:
        return "DDP synchronises gradients inside the backward, between graphs"
    if tc.accum_steps > 1:
        return f"train.accum_steps = {tc.accum_steps} runs several backwards before one update"
    if amp == "fp16":
        return "fp16's gradient scaler reads the gradients back every step"
    if switches:
        return "a model with an exercise switch trains on the plain step"
    if tc.capture_step and device.type != "cuda":
        return f"train.capture_step captures CUDA graphs, but the device is {device.type}"
    if tc.compile and tc.compile_mode in GRAPH_MODES and device.type != "cuda":
        return f"train.compile_mode: {tc.compile_mode} captures CUDA graphs, but the device is {device.type}"
    return None


class WholeStep:
    """One optimiser step of one batch as one function: compiled, captured per shape, or both.

    Under train.capture_step the function runs as it is (on a CPU, where nothing is captured, that is
    the step a card captures, for tests); else torch.compile compiles it.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        params: Sequence[torch.Tensor],
        tc: Any,
        amp: str,
        bos_id: int,
        static_shapes: bool,
        compile_options: dict | None = None,
    ):
        self.model, self.optimizer, self.params = model, optimizer, list(params)
        self.grad_clip, self.label_smoothing, self.per_token = (
            tc.grad_clip,
            tc.label_smoothing,
            tc.loss_average == "token",
        )
        self.amp, self.bos_id = amp, bos_id
        self.device = self.params[0].device
        self.lr = torch.tensor(
            float(optimizer.param_groups[0]["lr"]), device=self.device
        )  # filled every step
        graphs = tc.capture_step or tc.compile_mode == "cuda-graphs"
        self.capture = graphs and self.device.type == "cuda"
        self.net = model
        if graphs:  # the GRU model without host lengths; a run that captures nothing never imports kernels/
            from attn_mt.kernels.cuda.captured_bahdanau import for_capture

            self.net = for_capture(model)
        for group in optimizer.param_groups:  # AdamW refuses a capture otherwise (after a resume too)
            group["capturable"] = group["capturable"] or self.capture
        mode = "reduce-overhead" if tc.compile_mode == "reduce-overhead" else None
        # fixed shapes (data.batch_shapes), all met in the warm-up: train.compile_shapes static compiles one
        # graph each, dynamic one graph with symbolic sizes for all (and a second where S is a multiple
        # of 16); without fixed shapes torch's automatic dynamic shapes (seen to recompile in a later epoch)
        dynamic = (tc.compile_shapes == "dynamic") if static_shapes else None
        options = {"mode": mode, "dynamic": dynamic} if compile_options is None else compile_options
        self.compiled = self.train if tc.capture_step else torch.compile(self.train, **options)
        self.graphs: dict[tuple[int, ...], CapturedStep] = {}
        self.pool = (
            torch.cuda.graph_pool_handle() if self.capture else None
        )  # one memory pool for every shape

    def train(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt: torch.Tensor, tgt_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 1-3 of the module docstring on src (B, S), tgt (B, T): the loss sum and the gradient norm."""
        bos = torch.full_like(tgt[:, :1], self.bos_id)  # (B, 1)
        tgt_in = torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, T): <bos>, then the targets shifted right
        with autocast_context(self.device, self.amp):
            logits = self.net(src, src_lens, tgt_in)  # (B, T, V)
        total = masked_cross_entropy(logits, tgt, tgt_lens, self.label_smoothing)
        divisor = tgt_lens.sum().clamp(min=1) if self.per_token else tgt.shape[1]
        (total / divisor).backward()
        grads = [p.grad for p in self.params]
        if self.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
        else:
            norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        self.optimizer.step()
        return total.detach(), norm

    def run(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on `batch` (already on the device) at the optimiser's current learning rate."""
        no_gradients(self.params)  # a first backward allocates them; none is added into (no add_ a tensor)
        group = self.optimizer.param_groups[0]
        rate = group["lr"]
        self.lr.fill_(rate)  # no wait: a fill kernel
        group["lr"] = self.lr
        try:
            if not self.capture:
                return self.compiled(*batch.tensors())
            key = shape_key(batch)
            if key not in self.graphs:
                try:
                    self.graphs[key] = CapturedStep(self.compiled, batch, self.params, self.pool)
                except RuntimeError as error:
                    self.refused(key, error)
                    return self.compiled(*batch.tensors())
            return self.graphs[key].replay(batch)
        finally:
            group["lr"] = rate  # the schedule and the checkpoints keep a float

    def refused(self, key: tuple[int, ...], error: RuntimeError) -> None:
        """CUDA refused to capture the step of shape `key`: one log line, and no capture from now on.

        An error the device keeps (an illegal memory access) is raised again by the synchronisation.
        """
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        log.warning(
            "CUDA refused to capture the training step of batch shape %s (%s): every step runs uncaptured",
            key,
            first,
        )
        self.capture, self.graphs = False, {}

    def warm_up(self, batches: Sequence[Batch]) -> None:
        """Compile (and capture) the step for each of `batches`' shapes, then put the training state back."""
        saved = TrainingState(self.params, self.optimizer)
        for batch in batches:
            self.run(batch)
        saved.restore()


def shape_key(batch: Batch) -> tuple[int, ...]:
    """(B, S, T) of a batch: what a captured graph is kept by."""
    return (*batch.src.shape, batch.tgt.shape[1])


class CapturedStep:
    """The compiled step of one batch shape captured as one CUDA graph, with its own input tensors.

    torch.cuda.graphs' whole-network capture: a few steps on a side stream first (they compile and
    allocate what the step keeps: AdamW's moments), then the capture, which runs nothing; every
    replay reads the batch copied into `inputs` and the learning rate tensor. Every gradient is None
    before each of those steps and before the capture, so the backward allocates its gradients
    (inside the graph's memory pool, for the capture) rather than adding into the last step's: each
    replay writes them anew.
    """

    def __init__(
        self, step: Any, batch: Batch, params: Sequence[torch.Tensor], pool: Any, warm_steps: int = 2
    ):
        self.inputs = [t.clone() for t in batch.tensors()]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warm_steps):
                no_gradients(params)
                step(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        no_gradients(params)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = step(*self.inputs)

    def replay(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy `batch` in, run the graph: the loss sum and gradient norm (overwritten by the next replay)."""
        for kept, new in zip(self.inputs, batch.tensors(), strict=True):
            kept.copy_(new, non_blocking=True)
        self.graph.replay()
        return self.outputs


def no_gradients(params: Sequence[torch.Tensor]) -> None:
    """Set every gradient to None: the next backward allocates them instead of adding into them."""
    for param in params:
        param.grad = None


class TrainingState:
    """A copy of the parameters, their gradients and the optimiser's state, put back in place (same tensors).

    AdamW's state that did not exist yet when the copy was taken is zeroed on `restore`, which is
    the state a first step starts from (zero moments, step 0).
    """

    def __init__(self, params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer):
        self.params, self.optimizer = list(params), optimizer
        self.values = [p.detach().clone() for p in self.params]
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        self.state = {
            id(p): {k: v.clone() for k, v in optimizer.state[p].items() if isinstance(v, torch.Tensor)}
            for p in self.params
            if p in optimizer.state
        }

    def restore(self) -> None:
        """Every parameter, gradient and optimiser tensor as it was when the copy was taken."""
        with torch.no_grad():
            for param, value, grad in zip(self.params, self.values, self.grads, strict=True):
                param.copy_(value)
                if param.grad is not None and grad is None:
                    param.grad.zero_()
                elif param.grad is not None:
                    param.grad.copy_(grad)
                saved = self.state.get(id(param), {})
                for name, tensor in self.optimizer.state.get(param, {}).items():
                    if isinstance(tensor, torch.Tensor) and name in saved:
                        tensor.copy_(saved[name])
                    elif isinstance(tensor, torch.Tensor):
                        tensor.zero_()


class StepOwner(Protocol):
    """What `build_whole_step` and `run_whole_step` read and write of a Trainer (training/trainer.py)."""

    cfg: Config
    data: NMTData
    device: torch.device
    amp: str
    model: Any
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    params: Any
    speed: Any
    dist: Any
    compile_options: dict
    schedule: Schedule
    totals: LossTotals
    whole_step: WholeStep | None
    grad_norm: Any

    def on_device(self, batch: Batch) -> Batch: ...


def build_whole_step(trainer: StepOwner) -> WholeStep | None:
    """The whole compiled step, or None where it cannot run: one log line, the model compiled alone."""
    tc = trainer.cfg.train
    why = whole_step_refusal(
        tc, trainer.device, trainer.dist.world_size, trainer.amp, bool(trainer.cfg.model.switches)
    )
    if why is None and trainer.speed.name != "reference":
        why = f"train.kernels: {trainer.speed.name} runs its own pass"
    if why is not None and tc.capture_step:
        log.info("train.capture_step: the step runs uncaptured: %s", why)
        return None
    if why is not None:
        log.info("train.compile_scope: step falls back to compiling the model alone: %s", why)
        trainer.net = torch.compile(trainer.net, **compile_options(trainer.compile_options, tc.compile_mode))
        return None
    shaped = bool(getattr(trainer.data.train, "shapes", None))
    return WholeStep(
        trainer.model,
        trainer.optimizer,
        trainer.params.tensors,
        tc,
        trainer.amp,
        trainer.data.tgt_vocab.bos_id,
        shaped,
    )


def run_whole_step(
    trainer: StepOwner, batch: Batch, stop_asked: bool, time_used: float
) -> tuple[Loss, int, bool]:
    """The trainer's step as one compiled function (train.compile_scope: step): one batch, one process."""
    tokens = batch.num_tgt_tokens  # read before the batch leaves the host
    batch = trainer.on_device(batch)
    assert trainer.whole_step is not None, "run_whole_step needs build_whole_step's step"
    total, norm = trainer.whole_step.run(batch)
    if trainer.cfg.train.grad_clip > 0:
        trainer.grad_norm = norm
    trainer.schedule.after_step(time_used)
    logged = trainer.totals.scalar(total)
    per_token = trainer.cfg.train.loss_average == "token"
    return (logged if per_token else logged / batch.tgt.shape[1]), tokens, stop_asked
