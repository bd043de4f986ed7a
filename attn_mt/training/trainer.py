"""The training loop: teacher forcing, checkpoints, validation, exact resume and clean interruption.

Shapes: B batch, S source steps, T target steps, V target vocabulary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from attn_mt.config import Config, improves, load_config, save_config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import NMTData, load_data
from attn_mt.data.report import format_report
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.kernels import uses_kernels, with_kernels
from attn_mt.models.build import build_model
from attn_mt.run.checkpoint import load_checkpoint, save_checkpoint
from attn_mt.run.device import autocast_context, effective_amp, setup_device, tidy_heap
from attn_mt.run.run_dir import (
    RunPaths,
    check_fits,
    describe_contents,
    is_run_dir,
    load_vocabs,
    read_metrics,
    truncate_metrics,
)
from attn_mt.training.distributed import DistContext, init_distributed, rank_device, shutdown_distributed
from attn_mt.training.kept_checkpoints import keep_checkpoint
from attn_mt.training.logs import setup_logging
from attn_mt.training.loss import masked_cross_entropy
from attn_mt.training.optim import FlatParameters, Schedule, build_optimizer, xavier_init_
from attn_mt.training.precision import faster_mode, time_modes
from attn_mt.training.resume import record_config_changes, resolve_resume_config
from attn_mt.training.validation import Validator

log = logging.getLogger("attn_mt")


class TrainingDivergedError(UserError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_value: float | None = None  # best train.best_metric of the scheduled validations (patience)
    bad_validations: int = 0
    best_saved_value: float | None = None  # train.best_metric of the weights in best.pt
    elapsed_s: float = 0.0
    window_loss: float = 0.0
    window_tokens: int = 0
    epoch_loss: float = 0.0
    epoch_tokens: int = 0


@dataclass
class TrainResult:
    """What a finished (or stopped) run reports back."""

    run_dir: Path
    step: int
    epoch: int
    final_loss: float
    tokens_per_s: float
    wall_s: float
    stopped_because: str


@dataclass
class Session:
    """This process's share of a run (a resumed run starts a new session): clocks, tokens, last loss."""

    training_start: float  # perf_counter value at which the whole run's training time was 0
    started: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    window_start: float = field(default_factory=time.perf_counter)
    window_tokens: int = 0
    last_loss: float = float("nan")

    def count(self, tokens: int) -> None:
        """Add one step's target tokens."""
        self.tokens += tokens
        self.window_tokens += tokens

    def close_window(self) -> float:
        """Target tokens per second since the last call (or the start), and start a new window."""
        now = time.perf_counter()
        rate = self.window_tokens / max(now - self.window_start, 1e-9)
        self.window_start, self.window_tokens = now, 0
        return rate

    def result(self, run_dir: Path, progress: Progress, stopped_because: str) -> TrainResult:
        """The session's TrainResult, ended now."""
        wall = time.perf_counter() - self.started
        return TrainResult(
            run_dir,
            progress.step,
            progress.epoch,
            self.last_loss,
            self.tokens / max(wall, 1e-9),
            wall,
            stopped_because,
        )


def refuse_existing(run_dir: Path, overwrite: bool) -> None:
    """An existing, non-empty run directory is an error unless --overwrite; other directories always are."""
    if not (run_dir.exists() and any(run_dir.iterdir())):
        return
    if not overwrite:
        raise UserError(
            f"run directory {run_dir} already exists; pass --resume to continue it, "
            "--overwrite to start it again, or --run-dir for a new one"
        )
    if not is_run_dir(run_dir):
        raise UserError(
            f"--overwrite: {run_dir} is not an attn-mt run directory (no valid config.yaml), so it is "
            f"not deleted; it holds {describe_contents(run_dir)}"
        )


def prepare_run_dir(run_dir: Path, resume: bool, overwrite: bool) -> RunPaths:
    """Create the run directory; never reuse an existing one without --resume or --overwrite."""
    paths = RunPaths(run_dir)
    if resume:
        for stale in paths.checkpoints.glob(".*.tmp"):
            stale.unlink(missing_ok=True)  # left by a process killed while writing
        if not paths.last.exists():
            raise UserError(f"--resume: {paths.last} does not exist (nothing to resume in {run_dir})")
        return paths
    refuse_existing(run_dir, overwrite)
    if run_dir.exists() and any(run_dir.iterdir()):
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return paths


class Trainer:
    """Trains one model on one dataset, writing everything into a run directory."""

    # with the CPU kernels, batches whose float32 logits would be smaller than this are scored through
    # the logits: at the book's sizes (64 x 10 x ~200) the chunked loss's extra steps cost more than
    # the logits they avoid
    fuse_min_logits_bytes = 8 << 20

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
        # the model as training runs it: the book model, or the same model with CPU kernels behind it
        self.net = with_kernels(self.model, tc.kernels, device, tc.compile)
        self.forward: torch.nn.Module = torch.compile(self.net) if tc.compile else self.net
        if self.dist.enabled:
            ids = [device.index] if device.type == "cuda" else None
            self.forward = DistributedDataParallel(self.forward, device_ids=ids)
        params = [p for p in self.model.parameters() if p.requires_grad]
        # one flat tensor for the optimiser on a single CPU process; DDP and CUDA keep their own layouts
        self.flat = FlatParameters(params) if device.type == "cpu" and not self.dist.enabled else None
        self.trained = [self.flat.flat] if self.flat is not None else params
        # with the kernels, a single process scores the output layer chunk by chunk (LinearCrossEntropy)
        self.fused_loss = uses_kernels(self.net) and not self.dist.enabled
        self.optimizer = build_optimizer(self.trained, tc)
        self.schedule = Schedule(self.optimizer, tc)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == "fp16")
        self.progress = Progress()
        self.validator = Validator(self.net, data, cfg, device) if data.valid else None
        self.bos_id = data.tgt_vocab.bos_id
        self.tgt_vocab_size = len(data.tgt_vocab)
        self._interrupted = False
        self._best_state: dict[str, Any] | None = None
        self.on_validation: list[Callable[[Trainer], None]] = []
        self.hook_s = 0.0  # seconds spent in on_validation hooks, left out of the training clock
        self._last_save = time.monotonic()
        self.session = Session(training_start=time.perf_counter())  # fit starts the real one

    # ----- checkpoints -----
    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly: weights, optimiser, schedule, RNG, position."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self._optimizer_state(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            "progress": vars(self.progress).copy(),
            "step": self.progress.step,
            "epoch": self.progress.epoch,
            "config": self.cfg.to_dict(),
            "src_vocab": list(self.data.src_vocab.idx_to_token),
            "tgt_vocab": list(self.data.tgt_vocab.idx_to_token),
        }

    def _optimizer_state(self) -> dict[str, Any]:
        """The optimiser's state_dict, per parameter whether or not the parameters are flattened."""
        state = self.optimizer.state_dict()
        return self.flat.per_parameter_state(state) if self.flat is not None else state

    def restore(self, path: Path) -> None:
        """Continue from a checkpoint written by `state`."""
        state = load_checkpoint(path, map_location="cpu")
        check_fits(state, self.cfg, self.data.src_vocab.idx_to_token, self.data.tgt_vocab.idx_to_token, path)
        self.model.load_state_dict(state["model"])
        optimizer_state = state["optimizer"]  # per parameter, see _optimizer_state
        if self.flat is not None:
            optimizer_state = self.flat.flat_state(optimizer_state)
        self.optimizer.load_state_dict(optimizer_state)
        self.schedule.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.progress = Progress(**state["progress"])

    def save(self, *, force: bool = True) -> None:
        """Write last.pt (and a pending best.pt) atomically; unforced, at most every checkpoint_minutes."""
        now = time.monotonic()
        minutes = self.cfg.train.checkpoint_minutes
        if not self.dist.is_main:
            return
        if not force and minutes and now - self._last_save < minutes * 60:
            return
        save_checkpoint(self.state(), self.paths.last)
        if self._best_state is not None:
            save_checkpoint(self._best_state, self.paths.best)
            self._best_state = None
        self._last_save = now

    def _keep_checkpoint(self, scores: dict[str, float]) -> None:
        """With train.keep_checkpoints = N, save this validation's weights as step-STEP.pt (N are kept)."""
        keep = self.cfg.train.keep_checkpoints
        if keep and self.dist.is_main:
            keep_checkpoint(self.paths.checkpoints, self.state(), scores, keep)

    # ----- one optimiser step -----
    def train_step(
        self, batches: list[Batch], stop_flag: bool = False, time_used: float = 0.0
    ) -> tuple[float, int, bool]:
        """Forward, backward and update over this rank's `batches` (gradient accumulation).

        Returns the loss sum and target tokens of the step over all ranks, and whether any rank
        asked to stop. Under DDP the gradients are averaged over ranks, so the book's summed loss is
        scaled by the world size to match one process accumulating every rank's batches.
        `time_used` (the spent fraction of the time limit) is averaged over ranks for the schedule,
        so every replica steps with the same learning rate.
        """
        tc = self.cfg.train
        self._zero_grad()
        loss_sum, tokens = 0.0, 0
        for i, batch in enumerate(batches):
            width = batch.tgt.shape[1]  # the book averages each sentence's loss over the padded width
            batch = batch.trimmed(source=not self.model.reads_source_padding).to(self.device)
            sync = i == len(batches) - 1 or not self.dist.enabled
            context = contextlib.nullcontext() if sync else self.forward.no_sync()
            with context:
                objective, total = self._objective(self.forward, batch, width, self.amp)
                if tc.loss_average == "token":
                    objective = objective / len(batches)
                else:
                    objective = objective * self.dist.world_size
                self.scaler.scale(objective).backward()
            loss_sum += float(total.detach()) / (width if tc.loss_average == "book" else 1)
            tokens += batch.num_tgt_tokens
        if self.flat is not None:
            self.flat.gather_grads()
        loss_sum, token_sum, stops, time_used = self.dist.sum(
            [loss_sum, float(tokens), float(stop_flag), time_used]
        )
        if not math.isfinite(loss_sum):
            raise TrainingDivergedError(
                f"the loss became {loss_sum} at step {self.progress.step + 1}; training stopped, "
                f"the last good checkpoint is kept at {self.paths.last}"
            )
        if tc.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.trained, tc.grad_clip, foreach=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.schedule.after_step(time_used / self.dist.world_size)
        return loss_sum, int(token_sum), stops > 0

    def _zero_grad(self) -> None:
        """Clear the gradients, in the flat tensor when the parameters are flattened."""
        if self.flat is not None:
            self.flat.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def _objective(
        self, forward: torch.nn.Module, batch: Batch, width: int, amp: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced loss of one trimmed batch: (objective to differentiate, summed loss)."""
        tc = self.cfg.train
        bos = torch.full((batch.tgt.shape[0], 1), self.bos_id, dtype=batch.tgt.dtype, device=self.device)
        tgt_in = torch.cat([bos, batch.tgt[:, :-1]], dim=1)  # (B, T)
        logits_bytes = 4 * batch.tgt.numel() * self.tgt_vocab_size
        fused = self.fused_loss and logits_bytes >= self.fuse_min_logits_bytes
        loss_args = (batch.tgt, batch.tgt_lens, tc.loss_average, tc.label_smoothing, width)
        with autocast_context(self.device, amp):
            out = forward(batch.src, batch.src_lens, tgt_in, features=fused)
            if fused:  # out: (B, T, H)
                return masked_cross_entropy(out, *loss_args, output_layer=self.model.output_layer)
        return masked_cross_entropy(out, *loss_args)  # out: (B, T, V)

    def settle_amp(self, probe_batches: int = 3) -> None:
        """train.amp=auto on a CPU with native bf16: time float32 and bf16 on real batches, keep the faster.

        The passes run forward and backward only (no update) with the RNG state restored afterwards,
        so the run's weights and random stream are those of a run without the probe.
        """
        if self.amp != "auto":
            return
        plan = self.data.train.plan(self.progress.epoch, self.cfg.train.seed)
        batches = []
        for ix in plan[:probe_batches]:
            batch = self.data.train.collate(ix)
            width = batch.tgt.shape[1]
            batches.append((batch.trimmed(source=not self.model.reads_source_padding).to(self.device), width))

        def run_pass(amp: str) -> None:
            for batch, width in batches:
                objective, _ = self._objective(self.net, batch, width, amp)
                objective.backward()

        with torch.random.fork_rng(devices=[]):
            seconds = time_modes(run_pass, ("none", "bf16"))
        self._zero_grad()
        if self.dist.enabled:  # every rank takes the same choice
            totals = self.dist.sum([seconds["none"], seconds["bf16"]])
            seconds = {"none": totals[0], "bf16": totals[1]}
        self.amp = faster_mode(seconds)
        log.info(
            "train.amp=auto: %s (%d batches forward and backward: float32 %.3f s, bf16 %.3f s)",
            "bf16" if self.amp == "bf16" else "float32",
            len(batches),
            seconds["none"],
            seconds["bf16"],
        )

    # ----- the loop -----
    def fit(self) -> TrainResult:
        """Train until the epochs, step limit, time limit or patience run out, or the user interrupts."""
        tc, pr = self.cfg.train, self.progress
        self.schedule.total_steps = self._planned_steps()
        self.model.train()
        self.settle_amp()
        self.session = Session(training_start=time.perf_counter() - pr.elapsed_s - self.hook_s)
        stop = ""
        with self._stop_on_signals(), self._progress_bar() as bar:
            while not stop and pr.epoch < tc.epochs:
                stop = self._train_epoch(bar)
            stop = stop or "epochs"
            if stop in ("time_limit", "max_steps", "epochs") and tc.valid_every and pr.step % tc.valid_every:
                # the last steps since the previous validation (where a decaying lr ends) get scored too
                last_loss = self._epoch_loss() if pr.epoch_tokens else self.session.last_loss
                self._validate_and_checkpoint(last_loss, final=True)
            self.save()
        result = self.session.result(self.paths.root, pr, stop)
        if self.dist.is_main:
            self._plot()
        return result

    def _planned_steps(self) -> int:
        """Optimiser steps of the whole run: the epochs' worth, capped by train.max_steps."""
        tc = self.cfg.train
        per_step = tc.accum_steps * self.dist.world_size
        total = tc.epochs * math.ceil(len(self.data.train.plan(0, tc.seed)) / per_step)
        return min(total, tc.max_steps) if tc.max_steps else total

    @contextlib.contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """While training, Ctrl-C and SIGTERM ask for a clean stop (see _on_signal)."""
        old_int = signal.signal(signal.SIGINT, self._on_signal)
        old_term = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)

    def _progress_bar(self) -> tqdm:
        """The step counter on stderr (off when quiet)."""
        return tqdm(
            total=self.schedule.total_steps,
            initial=self.progress.step,
            disable=self.quiet,
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
            desc="train",
        )

    def _on_signal(self, signum: int, frame: Any) -> None:
        """First Ctrl-C / SIGTERM: finish the current step, save, stop. Second: stop at once."""
        if self._interrupted:
            raise KeyboardInterrupt
        self._interrupted = True

    def _train_epoch(self, bar: tqdm) -> str:
        """The rest of the current epoch, then its end; returns why training stops, or ""."""
        pr = self.progress
        plan = self.data.train.plan(pr.epoch, self.cfg.train.seed)
        stop = ""
        while not stop and pr.batch_in_epoch < len(plan):
            stop = self._train_one_step(plan, bar)
        if pr.batch_in_epoch >= len(plan) and self._end_epoch():
            stop = stop or "patience"
        return stop

    def _train_one_step(self, plan: list[list[int]], bar: tqdm) -> str:
        """One optimiser step on the next batches of `plan`, then logging and validation as due.

        Returns why training stops after this step, or "".
        """
        tc, pr, session = self.cfg.train, self.progress, self.session
        limit_s = tc.time_limit_minutes * 60
        used = self._training_seconds() / limit_s if limit_s else 0.0
        batches = [self.data.train.collate(ix) for ix in self.rank_batches(plan, pr.batch_in_epoch)]
        loss_sum, tokens, any_stop = self.train_step(batches, self._interrupted or used >= 1.0, used)
        pr.batch_in_epoch += tc.accum_steps * self.dist.world_size
        pr.step += 1
        pr.elapsed_s = self._training_seconds()
        pr.window_loss, pr.window_tokens = pr.window_loss + loss_sum, pr.window_tokens + tokens
        pr.epoch_loss, pr.epoch_tokens = pr.epoch_loss + loss_sum, pr.epoch_tokens + tokens
        session.count(tokens)
        bar.update(1)
        if pr.step % tc.log_every == 0:
            self._log_window(bar)
        stop = ""
        due = tc.valid_every and pr.step % tc.valid_every == 0
        if due and self._validate_and_checkpoint(self._epoch_loss()):
            stop = "patience"
        if tc.max_steps and pr.step >= tc.max_steps:
            stop = stop or "max_steps"
        if any_stop:
            stop = "interrupted" if self._interrupted or not tc.time_limit_minutes else "time_limit"
        return stop

    def _training_seconds(self) -> float:
        """Training time of the whole run so far, without the on_validation hooks."""
        return time.perf_counter() - self.session.training_start - self.hook_s

    def _epoch_loss(self) -> float:
        """Mean token loss of the current epoch so far."""
        return self.progress.epoch_loss / max(self.progress.epoch_tokens, 1)

    def _log_window(self, bar: tqdm) -> None:
        """Record the loss and speed of the steps since the last log line."""
        pr = self.progress
        loss = pr.window_loss / max(pr.window_tokens, 1)
        tokens_per_s = self.session.close_window()
        self.session.last_loss = loss
        self._record(loss=round(loss, 5), tokens_per_s=round(tokens_per_s, 1))
        bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:.0f}")
        pr.window_loss, pr.window_tokens = 0.0, 0

    def _end_epoch(self) -> bool:
        """Record the finished epoch and start the next; validate here when not every N steps.

        True when early stopping's patience ran out.
        """
        pr = self.progress
        loss = self._epoch_loss()
        self._record(epoch_loss=round(loss, 5))
        pr.epoch, pr.batch_in_epoch = pr.epoch + 1, 0
        self.session.last_loss, pr.epoch_loss, pr.epoch_tokens = loss, 0.0, 0
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
            scores.update(self.dist.broadcast(self.validator.run() if self.dist.is_main else None))
            if not final:
                self.schedule.after_validation(scores["valid_loss"])
            self._record(**{k: round(v, 4) for k, v in scores.items()}, **({"final": True} if final else {}))
            log.info("step %d: %s", pr.step, ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        elif self.schedule.kind == "plateau" and not final:
            self.schedule.after_validation(train_loss)
        value = scores[tc.best_metric]
        saved = pr.best_value if pr.best_saved_value is None else pr.best_saved_value  # older checkpoints
        if not final:
            if improves(tc.best_metric, value, pr.best_value):
                pr.best_value, pr.bad_validations = value, 0
            else:
                pr.bad_validations += 1
        if improves(tc.best_metric, value, saved):
            pr.best_saved_value = value
            if self.dist.is_main:
                self._best_state = snapshot(self.state())
        self.save(force=False)
        self._keep_checkpoint(scores)
        if self.validator is not None:  # the holes left by the steps and the validation's decoding
            tidy_heap(self.device, self.dist.world_size)
        hooks_started = time.perf_counter()
        for callback in self.on_validation:
            callback(self)
        self.hook_s += time.perf_counter() - hooks_started
        self.model.train()
        return bool(tc.patience) and pr.bad_validations >= tc.patience

    def rank_batches(self, plan: list[list[int]], position: int) -> list[list[int]]:
        """This rank's batches of the step starting at `position` in the epoch's plan.

        A step takes accum_steps x world_size consecutive batches (wrapping round to the start of
        the plan at the end of an epoch, so every rank makes the same number of steps); rank r
        takes its accum_steps-long slice, so N ranks see what one process accumulating them would.
        """
        per_rank = self.cfg.train.accum_steps
        group = plan[position : position + per_rank * self.dist.world_size]
        while len(group) < per_rank * self.dist.world_size:
            group = group + plan[: per_rank * self.dist.world_size - len(group)]
        return group[self.dist.rank * per_rank : (self.dist.rank + 1) * per_rank]

    def _plot(self) -> None:
        """Draw the training curves from the metrics history."""
        from attn_mt.evaluation.plots import plot_training_curves

        records = read_metrics(self.paths.metrics)
        if records:
            plot_training_curves(records, self.paths.curves)


def snapshot(state: Any) -> Any:
    """A copy of a checkpoint state that later training cannot change: tensors cloned, containers copied.

    Strings and numbers are shared rather than copied (they are immutable), which makes this several
    times cheaper than copy.deepcopy when a book run keeps a new best state every epoch.
    """
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {key: snapshot(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(value) for value in state)
    return state


def write_run_summary(path: Path, trainer: Trainer, result: TrainResult, started: float) -> None:
    """run_summary.json: the model, where it trained and how the session ended (read by `attn-mt report`)."""
    summary = {
        "model": trainer.cfg.model.type,
        "parameters": count_parameters(trainer.model),
        "device": str(trainer.device),
        "threads": torch.get_num_threads(),
        "processes": trainer.dist.world_size,
        "kernels": "cpu" if uses_kernels(trainer.net) else "reference",
        "amp": trainer.amp,
        "peak_gpu_mb": (round(torch.cuda.max_memory_allocated(trainer.device) / 2**20)
                        if trainer.device.type == "cuda" else None),
        "steps": result.step,
        "epochs": result.epoch,
        "final_loss": None if math.isnan(result.final_loss) else round(result.final_loss, 5),
        "tokens_per_s": round(result.tokens_per_s, 1),
        "wall_s": round(result.wall_s, 2),
        "stop_reason": result.stopped_because,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train(
    cfg: Config | None,
    run_dir: Path,
    *,
    overrides: list[str] | None = None,
    data_path: str | None = None,
    device: str = "auto",
    resume: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
    on_validation: Callable[[Trainer], None] | None = None,
) -> TrainResult:
    """`attn-mt train`: prepare the run directory, load data, build the model, train, save.

    Under torchrun every process calls this; rank 0 alone writes the run directory.
    """
    ctx = init_distributed(device)
    try:
        return _train(
            ctx,
            cfg,
            run_dir,
            overrides=overrides or [],
            data_path=data_path,
            device=device,
            resume=resume,
            overwrite=overwrite,
            quiet=quiet,
            on_validation=on_validation,
        )
    finally:
        shutdown_distributed()


def _train(
    ctx: DistContext,
    cfg: Config | None,
    run_dir: Path,
    *,
    overrides: list[str],
    data_path: str | None,
    device: str,
    resume: bool,
    overwrite: bool,
    quiet: bool,
    on_validation: Callable[[Trainer], None] | None,
) -> TrainResult:
    """The body of `train` for one process of the job."""
    paths = RunPaths(run_dir)
    setup_logging(None, quiet or not ctx.is_main)
    if resume:
        prepare_run_dir(run_dir, resume, overwrite)
        saved_cfg = load_config(paths.config)
        cfg = resolve_resume_config(paths, cfg, overrides)
    else:
        refuse_existing(run_dir, overwrite)
        cfg = cfg if cfg is not None else load_config(None, overrides)
    dev = rank_device(device, ctx)
    setup_device(dev, cfg.train.threads)
    torch.manual_seed(cfg.train.seed)
    reused = load_vocabs(paths, cfg) if resume and cfg.data.tokenizer == "sentencepiece" else None
    data = load_data(cfg.data, data_path, reused)
    if ctx.is_main and not resume:
        prepare_run_dir(run_dir, resume, overwrite)
    ctx.barrier()
    setup_logging(paths.log if ctx.is_main else None, quiet or not ctx.is_main)
    log.info("run directory %s (%s)", paths.root, "resuming" if resume else "new run")
    log.info("device %s, %d CPU threads, %d process(es)", dev, torch.get_num_threads(), ctx.world_size)
    if resume:
        for name, vocab in (("src_vocab", data.src_vocab), ("tgt_vocab", data.tgt_vocab)):
            saved = Vocab.load(getattr(paths, name))
            if saved.idx_to_token != vocab.idx_to_token:
                raise UserError(f"--resume: the corpus gives a different {name} than {getattr(paths, name)}")
    elif ctx.is_main:
        save_config(cfg, paths.config)
        data.src_vocab.save(paths.src_vocab)
        data.tgt_vocab.save(paths.tgt_vocab)
        paths.data_report.write_text(json.dumps(data.report, indent=2), encoding="utf-8")
    for line in format_report(data.report).splitlines():
        log.info("%s", line)
    trainer = Trainer(cfg, paths, data, dev, quiet, ctx)
    if on_validation is not None:
        trainer.on_validation.append(on_validation)
    if resume:
        trainer.restore(paths.last)
        if ctx.is_main:
            truncate_metrics(paths.metrics, trainer.progress.step)
            record_config_changes(paths, saved_cfg, cfg, trainer.progress.step)
        log.info("resumed at step %d (epoch %d)", trainer.progress.step, trainer.progress.epoch)
    if ctx.rank > 0:
        torch.manual_seed(cfg.train.seed + 7919 * ctx.rank + trainer.progress.step)
    log.info("model %s with %s parameters", cfg.model.type, f"{count_parameters(trainer.model):,}")
    started = time.time()
    result = trainer.fit()
    if ctx.is_main:
        write_run_summary(paths.summary, trainer, result, started)
    if result.stopped_because == "interrupted":
        log.warning(
            "interrupted at step %d; last.pt saved. Resume with: attn-mt train --resume --run-dir %s",
            result.step,
            paths.root,
        )
    else:
        log.info(
            "done after %d steps (%s): loss %.4f, %.0f target tokens/s, %.1f s",
            result.step,
            result.stopped_because,
            result.final_loss,
            result.tokens_per_s,
            result.wall_s,
        )
    return result
