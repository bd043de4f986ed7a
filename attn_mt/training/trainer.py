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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from attn_mt.config import Config, load_config, save_config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import NMTData, load_data
from attn_mt.data.report import format_report
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.models.build import build_model
from attn_mt.training.checkpoint import load_checkpoint, save_checkpoint
from attn_mt.training.device import (
    autocast_context,
    effective_amp,
    keep_freed_memory,
    limit_kernel_cache,
    pick_device,
    release_freed_memory,
)
from attn_mt.training.distributed import DistContext, init_distributed, shutdown_distributed
from attn_mt.training.kept_checkpoints import keep_checkpoint
from attn_mt.training.logs import setup_logging
from attn_mt.training.loss import masked_cross_entropy
from attn_mt.training.optim import FlatParameters, Schedule, build_optimizer, xavier_init_
from attn_mt.training.run_dir import RunPaths, check_fits, load_vocabs
from attn_mt.training.validation import Validator

log = logging.getLogger("attn_mt")
HIGHER_IS_BETTER = {"valid_bleu": True, "valid_loss": False, "train_loss": False}


class TrainingDivergedError(UserError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_value: float | None = None
    bad_validations: int = 0
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


def refuse_existing(run_dir: Path, overwrite: bool) -> None:
    """An existing, non-empty run directory is an error unless --overwrite."""
    if not overwrite and run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(
            f"run directory {run_dir} already exists; pass --resume to continue it, "
            "--overwrite to start it again, or --run-dir for a new one"
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


def resolve_resume_config(paths: RunPaths, cfg: Config | None, overrides: list[str]) -> Config:
    """On --resume the run's saved config rules; only train.* and decode.* may be changed by --set."""
    saved = load_config(paths.config, overrides)
    if cfg is not None:
        for section in ("data", "model"):
            if getattr(cfg, section) != getattr(saved, section):
                raise UserError(
                    f"--resume: the {section} section of the given config differs from the one saved in "
                    f"{paths.config}; resume without a config (or with the same one)"
                )
    original = load_config(paths.config)
    for section in ("data", "model"):
        if getattr(original, section) != getattr(saved, section):
            raise UserError(f"--resume: --set may not change the {section} section of an existing run")
    return saved


class Trainer:
    """Trains one model on one dataset, writing everything into a run directory."""

    fuse_output_loss = True  # False: logits (B, T, V) then masked_cross_entropy everywhere (tests, A/B)
    # batches whose float32 logits would be smaller than this take the plain path: at the book's
    # sizes (64 x 10 x ~200) the chunked function's extra steps cost ~4% of the step and save nothing
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
        self.forward: torch.nn.Module = torch.compile(self.model) if tc.compile else self.model
        if self.dist.enabled:
            ids = [device.index] if device.type == "cuda" else None
            self.forward = DistributedDataParallel(self.forward, device_ids=ids)
        params = [p for p in self.model.parameters() if p.requires_grad]
        # one flat tensor for the optimiser on a single CPU process; DDP and CUDA keep their own layouts
        self.flat = FlatParameters(params) if device.type == "cpu" and not self.dist.enabled else None
        self.trained = [self.flat.flat] if self.flat is not None else params
        # a single CPU process scores the output layer chunk by chunk (LinearCrossEntropy)
        self.fused_loss = (
            self.fuse_output_loss and device.type == "cpu" and not self.dist.enabled and not tc.compile
        )
        self.optimizer = build_optimizer(self.trained, tc)
        self.schedule = Schedule(self.optimizer, tc)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == "fp16")
        self.progress = Progress()
        self.validator = Validator(self.model, data, cfg, device) if data.valid else None
        self.bos_id = data.tgt_vocab.bos_id
        self.tgt_vocab_size = len(data.tgt_vocab)
        self._interrupted = False
        self._best_state: dict[str, Any] | None = None
        self.on_validation: list[Callable[[Trainer], None]] = []
        self.hook_s = 0.0  # seconds spent in on_validation hooks, left out of the training clock
        self._last_save = time.monotonic()

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
        check_fits(state, self.cfg, len(self.data.src_vocab), len(self.data.tgt_vocab), path)
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
        if self.flat is not None:
            self.flat.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        loss_sum, tokens = 0.0, 0
        for i, batch in enumerate(batches):
            width = batch.tgt.shape[1]  # the book averages each sentence's loss over the padded width
            batch = batch.trimmed(source=not self.model.reads_source_padding).to(self.device)
            sync = i == len(batches) - 1 or not self.dist.enabled
            context = contextlib.nullcontext() if sync else self.forward.no_sync()
            bos = torch.full((batch.tgt.shape[0], 1), self.bos_id, dtype=batch.tgt.dtype, device=self.device)
            tgt_in = torch.cat([bos, batch.tgt[:, :-1]], dim=1)  # (B, T)
            logits_bytes = 4 * batch.tgt.numel() * self.tgt_vocab_size
            fused = self.fused_loss and logits_bytes >= self.fuse_min_logits_bytes
            with context:
                loss_args = (batch.tgt, batch.tgt_lens, tc.loss_average, tc.label_smoothing, width)
                with autocast_context(self.device, self.amp):
                    out = self.forward(batch.src, batch.src_lens, tgt_in, features=fused)
                    if fused:  # out: (B, T, H)
                        layer = self.model.output_layer
                        objective, total = masked_cross_entropy(out, *loss_args, output_layer=layer)
                if not fused:  # out: (B, T, V)
                    objective, total = masked_cross_entropy(out, *loss_args)
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

    # ----- the loop -----
    def _on_signal(self, signum: int, frame: Any) -> None:
        """First Ctrl-C / SIGTERM: finish the current step, save, stop. Second: stop at once."""
        if self._interrupted:
            raise KeyboardInterrupt
        self._interrupted = True

    def _record(self, record: dict[str, Any]) -> None:
        """Append one metrics line (rank 0 only)."""
        if not self.dist.is_main:
            return
        with self.paths.metrics.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def _validate_and_checkpoint(self, train_loss: float) -> bool:
        """Validate (split mode), save last/best, update early stopping; True when patience ran out."""
        tc, pr = self.cfg.train, self.progress
        scores: dict[str, float] = {"train_loss": train_loss}
        if self.validator is not None:
            scores.update(self.dist.broadcast(self.validator.run() if self.dist.is_main else None))
            self.schedule.after_validation(scores["valid_loss"])
            self._record(
                {
                    "step": pr.step,
                    "epoch": pr.epoch,
                    "lr": self.schedule.lr,
                    "elapsed_s": round(pr.elapsed_s, 2),
                    **{k: round(v, 4) for k, v in scores.items()},
                }
            )
            log.info("step %d: %s", pr.step, ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        elif self.schedule.kind == "plateau":
            self.schedule.after_validation(train_loss)
        value = scores[tc.best_metric]
        better = pr.best_value is None or (
            value > pr.best_value if HIGHER_IS_BETTER[tc.best_metric] else value < pr.best_value
        )
        if better:
            pr.best_value, pr.bad_validations = value, 0
            if self.dist.is_main:
                self._best_state = snapshot(self.state())
        else:
            pr.bad_validations += 1
        self.save(force=False)
        self._keep_checkpoint(scores)
        if self.validator is not None and self.device.type == "cpu" and not self.dist.enabled:
            # the heap holes left by the steps and the validation's decoding; one process only, so no
            # collective's threads allocate while glibc walks the heap
            release_freed_memory()
        hooks_started = time.perf_counter()
        for callback in self.on_validation:
            callback(self)
        self.hook_s += time.perf_counter() - hooks_started
        return bool(tc.patience) and pr.bad_validations >= tc.patience

    def fit(self) -> TrainResult:
        """Train until the epochs, step limit, time limit or patience run out, or the user interrupts."""
        tc, pr = self.cfg.train, self.progress
        seed = tc.seed
        per_step = tc.accum_steps * self.dist.world_size
        steps_per_epoch = math.ceil(len(self.data.train.plan(0, seed)) / per_step)
        total = tc.epochs * steps_per_epoch
        if tc.max_steps:
            total = min(total, tc.max_steps)
        self.schedule.total_steps = total
        limit_s = tc.time_limit_minutes * 60
        old_int = signal.signal(signal.SIGINT, self._on_signal)
        old_term = signal.signal(signal.SIGTERM, self._on_signal)
        bar = tqdm(
            total=total,
            initial=pr.step,
            disable=self.quiet,
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
            desc="train",
        )
        start = time.perf_counter() - pr.elapsed_s - self.hook_s
        win_start = time.perf_counter()
        win_run_tokens = 0
        run_tokens, run_start = 0, time.perf_counter()
        stop = ""
        last_loss = float("nan")
        self.model.train()
        try:
            while not stop and pr.epoch < tc.epochs:
                plan = self.data.train.plan(pr.epoch, seed)
                while pr.batch_in_epoch < len(plan):
                    mine = self.rank_batches(plan, pr.batch_in_epoch)
                    used = (time.perf_counter() - start - self.hook_s) / limit_s if limit_s else 0.0
                    stop_asked = self._interrupted or used >= 1.0
                    loss_sum, tokens, any_stop = self.train_step(
                        [self.data.train.collate(ix) for ix in mine], stop_asked, used
                    )
                    pr.batch_in_epoch += per_step
                    pr.step += 1
                    pr.elapsed_s = time.perf_counter() - start - self.hook_s
                    pr.window_loss, pr.window_tokens = pr.window_loss + loss_sum, pr.window_tokens + tokens
                    pr.epoch_loss, pr.epoch_tokens = pr.epoch_loss + loss_sum, pr.epoch_tokens + tokens
                    run_tokens += tokens
                    win_run_tokens += tokens
                    bar.update(1)
                    if pr.step % tc.log_every == 0:
                        now = time.perf_counter()
                        last_loss = pr.window_loss / max(pr.window_tokens, 1)
                        tps = win_run_tokens / max(now - win_start, 1e-9)
                        self._record(
                            {
                                "step": pr.step,
                                "epoch": pr.epoch,
                                "loss": round(last_loss, 5),
                                "tokens_per_s": round(tps, 1),
                                "lr": self.schedule.lr,
                                "elapsed_s": round(pr.elapsed_s, 2),
                            }
                        )
                        bar.set_postfix(loss=f"{last_loss:.4f}", tok_s=f"{tps:.0f}")
                        pr.window_loss, pr.window_tokens = 0.0, 0
                        win_start, win_run_tokens = now, 0
                    if tc.valid_every and pr.step % tc.valid_every == 0:
                        if self._validate_and_checkpoint(pr.epoch_loss / max(pr.epoch_tokens, 1)):
                            stop = "patience"
                        self.model.train()
                    if tc.max_steps and pr.step >= tc.max_steps:
                        stop = stop or "max_steps"
                    if any_stop:
                        stop = (
                            "interrupted" if self._interrupted or not tc.time_limit_minutes else "time_limit"
                        )
                    if stop:
                        break
                if pr.batch_in_epoch >= len(plan):
                    epoch_loss = pr.epoch_loss / max(pr.epoch_tokens, 1)
                    self._record(
                        {
                            "step": pr.step,
                            "epoch": pr.epoch,
                            "epoch_loss": round(epoch_loss, 5),
                            "lr": self.schedule.lr,
                            "elapsed_s": round(pr.elapsed_s, 2),
                        }
                    )
                    pr.epoch, pr.batch_in_epoch = pr.epoch + 1, 0
                    last_loss, pr.epoch_loss, pr.epoch_tokens = epoch_loss, 0.0, 0
                    if not tc.valid_every:
                        if self._validate_and_checkpoint(epoch_loss):
                            stop = stop or "patience"
                        self.model.train()
            if not stop:
                stop = "epochs"
            if stop in ("time_limit", "max_steps", "epochs") and tc.valid_every and pr.step % tc.valid_every:
                # the last steps since the previous validation (where a decaying lr ends) get scored too
                self._validate_and_checkpoint(pr.epoch_loss / max(pr.epoch_tokens, 1) if pr.epoch_tokens
                                              else last_loss)
            self.save()
        finally:
            bar.close()
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
        wall = time.perf_counter() - run_start
        if self.dist.is_main:
            self._plot()
        return TrainResult(
            self.paths.root, pr.step, pr.epoch, last_loss, run_tokens / max(wall, 1e-9), wall, stop
        )

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


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file (none if it does not exist)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    return records


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines written after `step` (work a crash lost and a resume will redo)."""
    kept = [r for r in read_metrics(path) if r.get("step", 0) <= step]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")


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
            ctx, cfg, run_dir, overrides or [], data_path, device, resume, overwrite, quiet, on_validation
        )
    finally:
        shutdown_distributed()


def _train(
    ctx: DistContext,
    cfg: Config | None,
    run_dir: Path,
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
        cfg = resolve_resume_config(paths, cfg, overrides)
    else:
        refuse_existing(run_dir, overwrite)
        cfg = cfg if cfg is not None else load_config(None, overrides)
    dev = (
        torch.device("cuda", ctx.local_rank)
        if ctx.enabled and torch.cuda.is_available()
        else pick_device(device)
    )
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if dev.type == "cpu":
        keep_freed_memory()
        limit_kernel_cache()
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
        log.info("resumed at step %d (epoch %d)", trainer.progress.step, trainer.progress.epoch)
    if ctx.rank > 0:
        torch.manual_seed(cfg.train.seed + 7919 * ctx.rank + trainer.progress.step)
    log.info("model %s with %s parameters", cfg.model.type, f"{count_parameters(trainer.model):,}")
    result = trainer.fit()
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
