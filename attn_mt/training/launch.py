"""`attn-mt train` for one process of the job: the run directory, the data, the Trainer, the run summary.

Under torchrun every process runs `train`; rank 0 alone writes the run directory, by the rules of
run/run_dir_rules.py (what may be started, resumed or replaced). The training algorithm itself is
`Trainer.fit` (training/trainer.py).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attn_mt.config import Config, load_config, save_config
from attn_mt.data.dataset import NMTData, load_data
from attn_mt.data.report import format_report
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.run.device import setup_device
from attn_mt.run.run_dir import (
    RunPaths,
    load_vocabs,
    read_metrics,
    read_parent,
    truncate_metrics,
)
from attn_mt.run.run_dir_rules import (
    auto_resume_choice,
    prepare_run_dir,
    refuse_existing,
    resume_state,
    unmade_on_refusal,
)
from attn_mt.training.checkpointing import restore_trainer
from attn_mt.training.distributed import DistContext, init_distributed, rank_device, shutdown_distributed
from attn_mt.training.init_from import Parent, fine_tuning_parent, refuse_own_parent, start_from
from attn_mt.training.logs import detach_log_file, setup_logging
from attn_mt.training.resume import record_config_changes, resolve_resume_config
from attn_mt.training.run_state import STEADY_AFTER, TrainResult
from attn_mt.training.speed import kernels_apply
from attn_mt.training.stopping import StopReason
from attn_mt.training.tensorboard import TensorBoardLog, require_tensorboard
from attn_mt.training.trainer import Trainer
from attn_mt.training.validation import spread_subset

log = logging.getLogger("attn_mt")


def train(
    cfg: Config | None,
    run_dir: Path,
    *,
    overrides: list[str] | None = None,
    data_path: str | None = None,
    device: str = "auto",
    resume: bool = False,
    overwrite: bool = False,
    auto_resume: bool = False,
    init_from: str | None = None,
    keep_optimizer: bool = False,
    quiet: bool = False,
    on_validation: Callable[[Trainer], None] | None = None,
) -> TrainResult:
    """`attn-mt train`: prepare the run directory, load data, build the model, train, save.

    Without `resume`, `cfg` is the run's config (None: the default one with `overrides`); with it,
    `cfg` and `overrides` may change the train.* and decode.* keys of the saved config.
    `auto_resume` resumes when the run directory has a last.pt, else starts a new run; `init_from`
    (RUN_DIR[:CHECKPOINT]) fine-tunes a trained run (training/init_from.py; `keep_optimizer`).
    Under torchrun every process calls this; rank 0 alone writes the run directory.
    """
    ctx = init_distributed(device)
    flag = "--auto-resume" if auto_resume else "--resume"  # what refusals of a resumed run name
    try:
        paths = RunPaths(run_dir)
        setup_logging(None, quiet or not ctx.is_main)
        refuse_own_parent(init_from, paths.root)
        if auto_resume:
            resume, overwrite = choose_auto_resume(paths, ctx)
        cfg, saved_cfg = resolve_config(paths, cfg, overrides or [], resume, overwrite, ctx.is_main, flag)
        parent = None if resume or init_from is None else fine_tuning_parent(init_from, cfg, keep_optimizer)
        dev = training_device(cfg, device, ctx)
        data = load_run_data(cfg, data_path, paths, resume, parent)
        check_valid_positions(cfg, data)
        resumed = resume_state(paths, cfg, data, flag) if resume else None
        # every refusal found before training is above: the run directory is created, replaced or
        # written only from here on, and a refusal met later removes a new run that saved nothing
        made = not run_dir.exists()
        if ctx.is_main and not resume:
            prepare_run_dir(run_dir, overwrite)
        ctx.barrier()
        with unmade_on_refusal(paths, ctx.is_main and not resume, made, detach_log_file):
            setup_logging(paths.log if ctx.is_main else None, quiet or not ctx.is_main)
            log_start(paths, resume, dev, ctx)
            write_run_files(paths, cfg, data, ctx, resume)
            trainer = Trainer(cfg, paths, data, dev, quiet, ctx)
            if on_validation is not None:
                trainer.on_validation.append(on_validation)
            start_trainer(trainer, saved_cfg, resumed, flag)
            if parent is not None:
                start_from(trainer, parent, keep_optimizer, ctx.is_main)
            if ctx.rank > 0:
                torch.manual_seed(cfg.train.seed + 7919 * ctx.rank + trainer.progress.step)
            log.info("model %s with %s parameters", cfg.model.type, f"{count_parameters(trainer.model):,}")
            return fit_and_report(trainer, paths, ctx)
    finally:
        detach_log_file()
        shutdown_distributed()


def log_start(paths: RunPaths, resume: bool, device: torch.device, ctx: DistContext) -> None:
    """The log's first lines: the run directory, and the device, threads and processes it trains on."""
    log.info("run directory %s (%s)", paths.root, "resuming" if resume else "new run")
    log.info("device %s, %d CPU threads, %d process(es)", device, torch.get_num_threads(), ctx.world_size)


def training_device(cfg: Config, device: str, ctx: DistContext) -> torch.device:
    """This process's device, set up (threads, TF32), with the kernels choice checked and the seed set."""
    dev = rank_device(device, ctx)
    setup_device(dev, cfg.train.threads, cfg.train.tf32)
    kernels_apply(cfg.train.kernels, dev, cfg.train.compile)  # refuses a choice the device cannot run
    torch.manual_seed(cfg.train.seed)
    return dev


def fit_and_report(trainer: Trainer, paths: RunPaths, ctx: DistContext) -> TrainResult:
    """Train, then (rank 0) draw the curves and write run_summary.json; log how the run ended."""
    started = time.time()
    result = trainer.fit()
    if ctx.is_main:
        plot_curves(paths)
        write_run_summary(paths.summary, trainer, result, started)
    log_result(result, paths)
    return result


def load_run_data(
    cfg: Config, data_path: str | None, paths: RunPaths, resume: bool, parent: Parent | None
) -> NMTData:
    """The corpus, encoded with the vocabularies `run_vocabs` names (the data report says whose)."""
    data = load_data(cfg.data, data_path, run_vocabs(paths, cfg, resume, parent))
    if parent is not None:
        data.report["vocab_from"] = str(parent.root)
    return data


def check_valid_positions(cfg: Config, data: NMTData) -> None:
    """Refuse a learned position table shorter than a sentence validation reads (the training sentences
    are bounded by the config check, config.py's `_check_positions`; the valid split's are not)."""
    model = cfg.model
    if model.type != "transformer" or model.positional_encoding != "learned":
        return
    longest, text = 0, ""
    for example in spread_subset(data.valid, cfg.train.valid_max_sentences):
        sides = [(data.src_vocab, example.src), *((data.tgt_vocab, ref) for ref in example.refs)]
        for vocab, sentence in sides:
            positions = len(vocab.encode_text(sentence)) + 1  # with <eos> (source) or <bos> (target)
            if positions > longest:
                longest, text = positions, sentence
    if longest > model.max_positions:
        raise UserError(
            f"model.max_positions = {model.max_positions}: the valid split holds {text[:60]!r}, "
            f"{longest} positions with <eos> or <bos>, longer than the learned position table; raise "
            f"model.max_positions to {longest}"
        )


def run_vocabs(
    paths: RunPaths, cfg: Config, resume: bool, parent: Parent | None
) -> tuple[Vocab, Vocab] | None:
    """The vocabularies the corpus is encoded with, when not learned on it: a fine-tuned run's parent's,
    and on resume the run's own sentencepiece models (or a fine-tuned run's word lists)."""
    if parent is not None:
        return parent.src_vocab, parent.tgt_vocab
    if resume and (cfg.data.tokenizer == "sentencepiece" or paths.parent.exists()):
        return load_vocabs(paths, cfg)
    return None


def choose_auto_resume(paths: RunPaths, ctx: DistContext) -> tuple[bool, bool]:
    """Rank 0's `auto_resume_choice` on every rank, so that all of them resume or all start anew."""
    choice = ctx.broadcast(auto_resume_choice(paths) if ctx.is_main else None)
    if isinstance(choice, str):
        raise UserError(choice)
    return choice


def write_run_files(paths: RunPaths, cfg: Config, data: NMTData, ctx: DistContext, resume: bool) -> None:
    """Write a new run's config, vocabularies and data report (rank 0); log the data report."""
    if ctx.is_main and not resume:
        save_config(cfg, paths.config)
        data.src_vocab.save(paths.src_vocab)
        data.tgt_vocab.save(paths.tgt_vocab)
        paths.data_report.write_text(json.dumps(data.report, indent=2), encoding="utf-8")
    for line in format_report(data.report).splitlines():
        log.info("%s", line)


def resolve_config(
    paths: RunPaths,
    cfg: Config | None,
    overrides: list[str],
    resume: bool,
    overwrite: bool,
    is_main: bool,
    flag: str = "--resume",
) -> tuple[Config, Config | None]:
    """The run's config and, on resume, the one saved in the run directory; refuses what cannot start."""
    saved_cfg = None
    if resume:
        if not paths.last.exists():
            raise UserError(f"{flag}: {paths.last} does not exist (nothing to resume in {paths.root})")
        saved_cfg = load_config(paths.config, saved=True)
        cfg = resolve_resume_config(paths, cfg, overrides, flag)
    else:
        if is_main or not overwrite:  # with --overwrite rank 0 may be deleting the directory meanwhile
            refuse_existing(paths.root, overwrite)
        cfg = cfg if cfg is not None else load_config(None, overrides)
    if cfg.train.tensorboard:
        require_tensorboard()  # before the data is loaded: a missing extra is a clear error at once
    return cfg, saved_cfg


def start_trainer(
    trainer: Trainer, saved_cfg: Config | None, state: dict[str, Any] | None, flag: str = "--resume"
) -> None:
    """Open train.tensorboard's event files (rank 0) and, on resume, continue from last.pt's `state`."""
    paths = trainer.paths
    if saved_cfg is None or state is None:
        if trainer.cfg.train.tensorboard and trainer.dist.is_main:
            trainer.tensorboard = TensorBoardLog.for_run(paths)
        return
    restore_trainer(trainer, state)
    if trainer.cfg.train.tensorboard and trainer.dist.is_main:  # before metrics.jsonl is truncated
        trainer.tensorboard = TensorBoardLog.for_run(paths, trainer.progress.step)
    if trainer.dist.is_main:
        for stale in paths.checkpoints.glob(".*.tmp"):
            stale.unlink(missing_ok=True)  # left by a process killed while writing
        truncate_metrics(paths.metrics, trainer.progress.step)
        if paths.timeline.exists():
            truncate_metrics(paths.timeline, trainer.progress.step)
        record_config_changes(paths, saved_cfg, trainer.cfg, trainer.progress.step, flag)
    log.info("resumed at step %d (epoch %d)", trainer.progress.step, trainer.progress.epoch)


def log_result(result: TrainResult, paths: RunPaths) -> None:
    """The run's last log line: how to resume an interrupted run, or how a finished one ended."""
    if result.stopped_because is StopReason.INTERRUPTED:
        log.warning(
            "interrupted at step %d; last.pt saved. Resume with: attn-mt train --resume --run-dir %s",
            result.step,
            paths.root,
        )
    else:
        if result.steady_tokens_per_s is not None:
            mfu = "" if result.steady_mfu is None else f", MFU {result.steady_mfu:.1%}"
            log.info(
                "the training steps alone, after the first %d: %.0f target tokens/s%s",
                STEADY_AFTER,
                result.steady_tokens_per_s,
                mfu,
            )
        log.info(
            "done after %d steps (%s): loss %.4f, %.0f target tokens/s, %.1f s",
            result.step,
            result.stopped_because,
            result.final_loss,
            result.tokens_per_s,
            result.wall_s,
        )


def plot_curves(paths: RunPaths) -> None:
    """Draw the training curves from the metrics history."""
    from attn_mt.evaluation.plots import plot_training_curves

    records = read_metrics(paths.metrics)
    if records:
        plot_training_curves(records, paths.curves)


def write_run_summary(path: Path, trainer: Trainer, result: TrainResult, started: float) -> None:
    """run_summary.json: the model, where it trained and how the session ended (read by `attn-mt report`)."""
    steady = result.steady_tokens_per_s
    summary = {
        "model": trainer.cfg.model.type,
        "parameters": count_parameters(trainer.model),
        "device": str(trainer.device),
        "threads": torch.get_num_threads(),
        "processes": trainer.dist.world_size,
        "kernels": trainer.speed.name,
        "amp": trainer.amp,
        "peak_gpu_mb": peak_gpu_mb(trainer.device),
        "steps": result.step,
        "epochs": result.epoch,
        "final_loss": None if math.isnan(result.final_loss) else round(result.final_loss, 5),
        "tokens_per_s": round(result.tokens_per_s, 1),
        "steady_tokens_per_s": None if steady is None else round(steady, 1),
        # the same steps' real-token FLOPs over the card's dense bf16 peak (training/flops.py), or None
        "steady_mfu": None if result.steady_mfu is None else round(result.steady_mfu, 4),
        "wall_s": round(result.wall_s, 2),
        "hooks_s": round(trainer.hook_s, 2),  # the timeline's recording and other hooks, off the clock
        "compile_s": round(trainer.compile_s, 2),
        "stop_reason": result.stopped_because.value,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    parent = read_parent(trainer.paths.parent)
    if parent is not None:
        summary["parent"] = parent
    tuned = previous_summary(path).get("tuned_decode")
    if tuned is not None:  # `attn-mt tune --write`'s record stays beside the session it tuned
        summary["tuned_decode"] = tuned
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def previous_summary(path: Path) -> dict[str, Any]:
    """The run_summary.json an earlier session wrote ({} when there is none or it is damaged)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def peak_gpu_mb(device: torch.device) -> int | None:
    """The most memory this process's tensors held on a CUDA `device`, in MiB (None elsewhere)."""
    return round(torch.cuda.max_memory_allocated(device) / 2**20) if device.type == "cuda" else None


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
