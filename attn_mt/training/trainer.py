"""The training loop: teacher forcing, checkpoints, validation, exact resume and clean interruption.

Shapes: B batch, S source steps, T target steps, V target vocabulary.
`Trainer.fit` is the loop; training/launch.py prepares the process and the run directory around it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from attn_mt.config import Config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import NMTData
from attn_mt.data.prefetch import batch_feed
from attn_mt.models.build import build_model
from attn_mt.run.checkpoint import snapshot
from attn_mt.run.device import autocast_context, effective_amp
from attn_mt.run.kept_checkpoints import keep_checkpoint
from attn_mt.run.run_dir import RunPaths
from attn_mt.training.best_metric import note_validation
from attn_mt.training.checkpointing import save_trainer, trainer_state
from attn_mt.training.compiling import compiled, net_compile_options, prepare_compile, warm_up
from attn_mt.training.distributed import DistContext, ddp_options
from attn_mt.training.flops import ModelFlops, card_peak_tflops, step_flops
from attn_mt.training.loss_totals import Loss, loss_totals
from attn_mt.training.optim import Schedule, build_optimizer, xavier_init_
from attn_mt.training.precision import auto_amp
from attn_mt.training.progress_display import TrainingDisplay, training_display
from attn_mt.training.run_state import Progress, Session, TrainResult
from attn_mt.training.speed import choose_speed
from attn_mt.training.stopping import StopReason, StopSignals
from attn_mt.training.tensorboard import TensorBoardLog, sample_translations
from attn_mt.training.timeline import Timeline
from attn_mt.training.validation import Validator
from attn_mt.training.whole_step import WholeStep, build_whole_step, run_whole_step

log = logging.getLogger("attn_mt")


class Trainer:
    """Trains one model on one dataset, writing everything into a run directory.

    `model` is the model being trained: its parameters, its checkpoints, what validation scores.
    `net` is the module a training step calls: `model` itself, or `model` with the CPU kernels
    behind it (train.kernels), wrapped for DDP when there are several processes (`ddp`) and
    compiled (train.compile); every one of these shares `model`'s parameters. Under
    train.compile_scope: step, `whole_step` (training/whole_step.py) runs each step instead.

    On CUDA a step does not wait for the GPU: batches come pinned from a thread (data/prefetch.py),
    the loss is summed on the device and read at log lines and checkpoints (training/loss_totals.py).
    """

    def __init__(
        self,
        cfg: Config,
        paths: RunPaths,
        data: NMTData,
        device: torch.device,
        quiet: bool = False,
        dist_ctx: DistContext | None = None,
    ):
        self.cfg, self.paths, self.data, self.device = cfg, paths, data, device
        self.dist = dist_ctx or DistContext()
        self.quiet = quiet or not self.dist.is_main
        tc = cfg.train
        self.amp = effective_amp(device, tc.amp)
        self.model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab)).to(device)
        if tc.init == "xavier":
            xavier_init_(self.model)
        # the kernels run the book's architecture only: a model with an exercise switch trains on plain torch
        kernels = "reference" if cfg.model.switches else tc.kernels
        if tc.compile:
            prepare_compile()  # before any torch.compile, which fixes inductor's cache folder
        self.speed = choose_speed(kernels, device, tc.compile, self.dist.world_size)
        self.params = self.speed.parameters(self.model)  # laid out before DDP reads them
        net = self.speed.wrap(self.model)
        self.ddp = DistributedDataParallel(net, **ddp_options(net, device)) if self.dist.enabled else None
        net = self.ddp if self.ddp is not None else net
        # DDP itself is compiled: Dynamo splits it at DDP's buckets (torch/_dynamo/config.py, optimize_ddp)
        self.compile_options = net_compile_options(self.speed.compile_options, cfg.data.batch_shapes)
        self.net: torch.nn.Module = compiled(net, self.compile_options, tc)
        self.compile_s = 0.0  # seconds of this session's warm-up (compiling), outside the training clock
        self.whole_step: WholeStep | None = None  # train.compile_scope: step, built by start()
        self.optimizer = build_optimizer(self.params.tensors, tc)
        self.schedule = Schedule(self.optimizer, tc)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == "fp16")
        self.progress = Progress()
        self.peak_tflops = card_peak_tflops(
            device
        )  # MFU is reported only on a listed card (training/flops.py)
        self.model_flops = ModelFlops.of(self.model)
        self.totals = loss_totals(device, self.dist.enabled, paths.last, self.progress)
        self.prefetch = tc.prefetch_batches if device.type == "cuda" else 0  # steps of batches made ahead
        self.validator = Validator(self.model, data, cfg, device) if data.valid else None
        self.signals = StopSignals()
        self.best_state: dict[str, Any] | None = None
        self.on_validation: list[Callable[[Trainer], None]] = []
        self.timeline = (
            Timeline(self.model, data, cfg, device, paths.timeline)
            if tc.timeline and self.dist.is_main
            else None
        )
        self.hook_s = 0.0  # seconds in the timeline and on_validation hooks, left out of the training clock
        self.last_save = time.monotonic()
        self.session = Session(training_start=time.perf_counter())  # fit starts the real one
        self.tensorboard: TensorBoardLog | None = None  # train.tensorboard (training/launch.py opens it)
        self.grad_norm: torch.Tensor | None = None  # of the last step's gradients, when train.grad_clip > 0

    # ----- the loop -----
    def fit(self) -> TrainResult:
        """Train until the epochs, step limit, time limit or patience run out, or a signal stops it.

        for each epoch (a resumed run starts where it stopped, at progress.batch_in_epoch):
            for each step's batches of the epoch's shuffled plan:
                forward, backward, clip and update (_step)
                every train.log_every steps: log the loss and speed
                every train.valid_every steps: validate and checkpoint
                stop on patience, train.max_steps, the time limit or a signal
            end the epoch: record its loss; validate and checkpoint here unless every N steps
        score the steps since the last validation, save last.pt.
        """
        tc, pr = self.cfg.train, self.progress
        self.start()
        stop: StopReason | None = None
        with (
            self.signals,
            training_display(self.cfg.train, self._steps_per_epoch(), self.progress, self.quiet) as bar,
        ):
            while stop is None and pr.epoch < tc.epochs:
                plan = self.data.train.plan(pr.epoch, tc.seed)
                with self.epoch_feed(plan) as feed:
                    while stop is None and pr.batch_in_epoch < len(plan):
                        time_used = self._time_used()
                        asked = self.signals.caught or time_used >= 1.0
                        any_asked = self.train_step(feed, bar, asked, time_used)
                        due = tc.valid_every and pr.step % tc.valid_every == 0
                        if due and self._validate_and_checkpoint(self._epoch_loss()):
                            stop = StopReason.PATIENCE
                        if tc.max_steps and pr.step >= tc.max_steps:
                            stop = stop or StopReason.MAX_STEPS
                        if any_asked:
                            by_clock = tc.time_limit_minutes and not self.signals.caught
                            stop = StopReason.TIME_LIMIT if by_clock else StopReason.INTERRUPTED
                if pr.batch_in_epoch >= len(plan) and self._end_epoch():
                    stop = stop or StopReason.PATIENCE
            stop = stop or StopReason.EPOCHS
            if stop.budget_spent and tc.valid_every and pr.step % tc.valid_every:
                # the last steps since the previous validation (where a decaying lr ends) get scored too
                last_loss = self._epoch_loss() if pr.epoch_tokens else self.session.last_loss
                self._validate_and_checkpoint(last_loss, final=True)
            if math.isnan(self.session.last_loss) and pr.epoch_tokens:  # stopped before its first log line
                self.session.last_loss = self._epoch_loss()
            self.save()
        if self.tensorboard is not None:
            self.tensorboard.close()
        return self.session.result(self.paths.root, pr, stop, self.hook_s, self.peak_tflops)

    def start(self) -> None:
        """Record the untrained timeline point, plan the schedule, settle train.amp=auto, compile
        (train.compile), start this session's clocks."""
        tc = self.cfg.train
        if self.timeline is not None and self.progress.step == 0:  # the untrained model, before the clock
            self.timeline.record(0, 0, 0.0, {})
        total = tc.epochs * self._steps_per_epoch()
        self.schedule.total_steps = min(total, tc.max_steps) if tc.max_steps else total
        self.model.train()
        if self.amp == "auto":  # train.amp=auto on a CPU with native bf16: the faster of float32 and bf16
            self.amp = auto_amp(self, self.data.train.plan(self.progress.epoch, tc.seed))
        if ((tc.compile and tc.compile_scope == "step") or tc.capture_step) and self.whole_step is None:
            self.whole_step = build_whole_step(self)
        warm_up(self)
        self.session = Session(training_start=time.perf_counter() - self.progress.elapsed_s - self.hook_s)

    # ----- one optimiser step -----
    def epoch_feed(
        self, plan: Sequence[Sequence[int]]
    ) -> contextlib.AbstractContextManager[Iterator[list[Batch]]]:
        """This rank's steps of an epoch's `plan` from where the epoch stands, collated (a thread on CUDA)."""
        steps = self.dist.step_batches(plan, self.progress.batch_in_epoch, self.cfg.train.accum_steps)
        return batch_feed(steps, self.collate, self.prefetch, pin=True)

    def train_step(
        self, feed: Iterator[list[Batch]], bar: TrainingDisplay, stop_asked: bool, time_used: float
    ) -> bool:
        """One step of `fit`: the next batches of `feed` trained on and counted; logged every log_every steps.

        The step is timed from taking its batches to the update (Session.time_step). Returns whether
        any rank asked to stop. scripts/gpu.py profile times this same method.
        """
        pr = self.progress
        step_started = time.perf_counter()
        batches = next(feed)
        flops = step_flops(self.model_flops, self.peak_tflops, batches)
        loss_sum, tokens, any_asked = self._step(batches, stop_asked, time_used)
        self.session.time_step(time.perf_counter() - step_started, tokens, flops)
        taken = len(batches) * self.dist.world_size  # batches of the plan, over all ranks
        pr.count_step(taken, tokens, self._training_seconds())
        self.totals.add(loss_sum, pr.step)
        self.session.count(tokens)
        bar.step(pr.step, pr.elapsed_s)
        if pr.step % self.cfg.train.log_every == 0:
            self._log_window(bar)
        return any_asked

    def _step(self, batches: list[Batch], stop_asked: bool, time_used: float) -> tuple[Loss, int, bool]:
        """Forward, backward and update over this rank's batches (gradient accumulation).

        Returns the loss sum (as self.totals keeps it) and target tokens of the step over all ranks,
        and whether any rank asked to stop. Under DDP the gradients are averaged over ranks, so the
        book's summed loss is scaled by the world size to match one process accumulating every
        rank's batches. `time_used` (the spent fraction of the time limit) is averaged over ranks
        for the schedule, so every replica steps with the same learning rate.
        """
        tc = self.cfg.train
        if self.whole_step is not None:
            return run_whole_step(self, batches[0], stop_asked, time_used)
        self.params.zero_grad()
        loss_sum, tokens = self.totals.zero(), 0
        for i, batch in enumerate(batches):
            with self._grad_sync(i == len(batches) - 1):
                objective, loss = self._objective(batch, self.amp)
                if tc.loss_average == "token":
                    objective = objective / len(batches)
                else:
                    objective = objective * self.dist.world_size
                self.scaler.scale(objective).backward()
            loss_sum = loss_sum + loss
            tokens += batch.num_tgt_tokens  # the batch is still in host memory: no wait for the device
        self.params.gather_grads()
        if self.dist.enabled:
            summed = self.dist.sum([float(loss_sum), float(tokens), float(stop_asked), time_used])
            loss_sum, tokens, stop_asked = self.totals.scalar(summed[0]), int(summed[1]), summed[2] > 0
            time_used = summed[3]
        if tc.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            self.grad_norm = torch.nn.utils.clip_grad_norm_(self.params.tensors, tc.grad_clip, foreach=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.schedule.after_step(time_used / self.dist.world_size)
        return loss_sum, tokens, stop_asked

    def on_device(self, batch: Batch) -> Batch:
        """`batch` without the all-padding columns the model may skip, on the training device."""
        return batch.trimmed(source=not self.model.reads_source_padding).to(self.device)

    def _objective(self, batch: Batch, amp: str) -> tuple[torch.Tensor, Loss]:
        """Teacher-forced loss of one batch: the objective to differentiate, and its loss for the logs.

        `book` averages each sentence's loss over the batch's padded width, as the book's
        MaskedSoftmaxCELoss (padding counts as zero), and logs that sum; `token` averages over the
        real target tokens and logs their summed loss (kept as self.totals keeps it: no wait).
        """
        tc = self.cfg.train
        width, tokens = batch.tgt.shape[1], batch.num_tgt_tokens  # read before the batch leaves the host
        batch = self.on_device(batch)
        bos = torch.full_like(batch.tgt[:, :1], self.data.tgt_vocab.bos_id)  # (B, 1)
        tgt_in = torch.cat([bos, batch.tgt[:, :-1]], dim=1)  # (B, T): <bos>, then the targets shifted right
        with autocast_context(self.device, amp):
            total = self.speed.loss(self.net, batch, tgt_in, tc.label_smoothing)
        logged = self.totals.scalar(total.detach())
        if tc.loss_average == "book":
            return total / width, logged / width
        return total / max(tokens, 1), logged

    def collate(self, indices: Sequence[int]) -> Batch:
        """The training batch of `indices`, as the step's speed object shapes it on the host."""
        return self.speed.prepare(self.data.train.collate(indices), not self.model.reads_source_padding)

    def _grad_sync(self, sync: bool) -> contextlib.AbstractContextManager:
        """Under DDP, unless `sync`: accumulate this backward's gradients locally (no all-reduce)."""
        return contextlib.nullcontext() if sync or self.ddp is None else self.ddp.no_sync()

    def untraced_passes(self, batches: list[Batch], amp: str) -> None:
        """Forward and backward on `batches` leaving no trace: no all-reduce, no update, gradients cleared."""
        with self._grad_sync(False):
            for batch in batches:
                self._objective(batch, amp)[0].backward()
        self.params.zero_grad()

    # ----- logging, validation and checkpoints -----
    def _time_used(self) -> float:
        """The spent fraction of train.time_limit_minutes (0 without a limit)."""
        limit_s = self.cfg.train.time_limit_minutes * 60
        return self._training_seconds() / limit_s if limit_s else 0.0

    def _training_seconds(self) -> float:
        """Training time of the whole run so far, without the on_validation hooks."""
        return time.perf_counter() - self.session.training_start - self.hook_s

    def _epoch_loss(self) -> float:
        """Mean token loss of the current epoch so far."""
        self.read_totals()
        return self.progress.epoch_loss / max(self.progress.epoch_tokens, 1)

    def read_totals(self) -> None:
        """Bring the loss sums into `progress` (on a GPU: wait for it, and check them)."""
        self.progress.window_loss, self.progress.epoch_loss = self.totals.read()

    def _steps_per_epoch(self) -> int:
        """Optimiser steps in one epoch: the plan's batches over train.accum_steps and the processes."""
        tc = self.cfg.train
        return math.ceil(len(self.data.train.plan(0, tc.seed)) / (tc.accum_steps * self.dist.world_size))

    def _log_window(self, bar: TrainingDisplay) -> None:
        """Record the loss and speed of the steps since the last log line."""
        pr = self.progress
        self.read_totals()
        loss = pr.window_loss / max(pr.window_tokens, 1)
        tokens_per_s = self.session.close_window()
        self.session.last_loss = loss
        norm = {} if self.grad_norm is None else {"grad_norm": round(float(self.grad_norm), 4)}
        self._record(loss=round(loss, 5), tokens_per_s=round(tokens_per_s, 1), **norm)
        at = dict(step=pr.step, epoch=pr.epoch, lr=self.schedule.lr, elapsed_s=pr.elapsed_s)
        bar.window(loss=loss, tokens_per_s=tokens_per_s, **at)
        pr.window_loss, pr.window_tokens = 0.0, 0
        self.totals.clear_window()

    def _end_epoch(self) -> bool:
        """Record the finished epoch and start the next; validate here when not every N steps.

        True when early stopping's patience ran out.
        """
        pr = self.progress
        loss = self._epoch_loss()
        self._record(epoch_loss=round(loss, 5))
        pr.epoch, pr.batch_in_epoch = pr.epoch + 1, 0
        self.session.last_loss, pr.epoch_loss, pr.epoch_tokens = loss, 0.0, 0
        self.totals.clear_epoch()
        return not self.cfg.train.valid_every and self._validate_and_checkpoint(loss)

    def _record(self, **values: float | bool) -> None:
        """Append one metrics.jsonl line: step, epoch, `values`, lr and training time (rank 0 only)."""
        if not self.dist.is_main:
            return
        pr = self.progress
        record = {"step": pr.step, "epoch": pr.epoch, **values}
        record.update(lr=self.schedule.lr, elapsed_s=round(pr.elapsed_s, 2))
        with self.paths.metrics.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            self.tensorboard.scalars(pr.step, record)

    def _validate_and_checkpoint(self, train_loss: float, final: bool = False) -> bool:
        """Validate (split mode), save last/best, update early stopping; True when patience ran out.

        A `final` validation scores a run stopping between two scheduled ones: it is recorded (marked
        "final") and may write best.pt, but leaves the schedule and patience as they were, so a run
        resumed from there follows the uninterrupted run exactly (which never validates at that step).
        The model is back in training mode afterwards.
        """
        tc, pr = self.cfg.train, self.progress
        scores: dict[str, float] = {"train_loss": train_loss}
        if self.validator is not None:
            scores.update(self.dist.from_main(self.validator.run))
            if not final:
                self.schedule.after_validation(scores["valid_loss"])
            self._record(**{k: round(v, 4) for k, v in scores.items()}, **({"final": True} if final else {}))
            log.info("step %d: %s", pr.step, ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
            if self.tensorboard is not None:
                samples = sample_translations(self.validator.translator, self.validator.examples)
                self.tensorboard.validation(pr.step, *samples)
        elif self.schedule.kind == "plateau" and not final:
            self.schedule.after_validation(train_loss)
        if note_validation(pr, tc.best_metric, scores[tc.best_metric], final) and self.dist.is_main:
            self.best_state = snapshot(self.state())
        self.save(force=not self.paths.last.exists())  # the first always: no step-N.pt without last.pt
        if tc.keep_checkpoints and self.dist.is_main:  # this validation's weights as step-STEP.pt
            keep_checkpoint(self.paths.checkpoints, self.state(), scores, tc.keep_checkpoints)
        self.dist.wait_for_main()  # the others wait on Gloo, not in NCCL, while rank 0 writes checkpoints
        if self.validator is not None:  # the holes left by the steps and the validation's decoding
            self.speed.tidy_heap()
        hooks_started = time.perf_counter()
        if self.timeline is not None and (final or self.timeline.due(pr.step, pr.epoch)):
            self.timeline.record(pr.step, pr.epoch, pr.elapsed_s, scores, final)
        for callback in self.on_validation:
            callback(self)
        self.hook_s += time.perf_counter() - hooks_started
        self.model.train()
        return bool(tc.patience) and pr.bad_validations >= tc.patience

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly (training/checkpointing.py's trainer_state)."""
        return trainer_state(self)

    def save(self, *, force: bool = True) -> None:
        """Write last.pt (and a pending best.pt) atomically; unforced, at most every checkpoint_minutes."""
        save_trainer(self, force)
