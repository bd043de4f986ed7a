"""Fine-tuning: a new run that starts from a trained run's weights and keeps its vocabularies.

`attn-mt train CONFIG --init-from PARENT[:CHECKPOINT]` reads the parent run directory: its
vocabularies (word lists or sentencepiece models) encode the new corpus, the checkpoint's weights
replace the new model's initial ones, and the optimiser and schedule start afresh (the parent's
per-parameter optimiser state with --keep-optimizer). The model section must equal the parent's
(dropout aside), and so must the tokenizer and direction that the vocabularies stand for; the rest
of the data section and the train section may change. The parent is recorded in parent.json,
which run_summary.json, `attn-mt runs` and `attn-mt report` show.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_mt.config import Config, load_config
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.run_dir import (
    RunPaths,
    check_fits,
    check_run_dir,
    load_vocabs,
    read_metrics,
    resolve_checkpoint,
)

FREE_MODEL_KEYS = ("dropout",)  # model keys a fine-tuned run may set anew: they change no weight
VOCAB_DATA_KEYS = ("tokenizer", "direction")  # data keys the parent's vocabularies stand for

if TYPE_CHECKING:
    from attn_mt.training.trainer import Trainer

log = logging.getLogger("attn_mt")


@dataclass
class Parent:
    """The trained run a fine-tuned run starts from."""

    root: Path
    checkpoint: Path
    cfg: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    state: dict[str, Any]


def split_spec(spec: str) -> tuple[Path, str]:
    """RUN_DIR[:CHECKPOINT] as (run directory, checkpoint name); the checkpoint defaults to best."""
    if Path(spec).is_dir() or ":" not in spec:
        return Path(spec), "best"
    root, which = spec.rsplit(":", 1)
    return Path(root), which or "best"


def open_parent(spec: str) -> Parent:
    """The parent run named by --init-from; a missing run or checkpoint, or a damaged one, is a UserError."""
    root, which = split_spec(spec)
    try:
        paths = check_run_dir(root)
        cfg = load_config(paths.config, saved=True)
        src_vocab, tgt_vocab = load_vocabs(paths, cfg)
        checkpoint = resolve_checkpoint(paths.root, which)
        state = load_checkpoint(checkpoint, map_location="cpu")
        check_fits(state, cfg, src_vocab.idx_to_token, tgt_vocab.idx_to_token, checkpoint)
    except UserError as exc:
        raise UserError(f"--init-from {spec}: {exc}") from None
    return Parent(paths.root, checkpoint, cfg, src_vocab, tgt_vocab, state)


def check_same_model(parent: Parent, cfg: Config, keep_optimizer: bool = False) -> None:
    """Refuse a config whose model, tokenizer or direction differs from the parent's; name each difference.

    With `keep_optimizer` the optimiser must be the parent's too.
    """
    differences = [
        f"model.{key} is {value!r} in {parent.root} but {getattr(cfg.model, key)!r} here"
        for key, value in vars(parent.cfg.model).items()
        if key not in FREE_MODEL_KEYS and getattr(cfg.model, key) != value
    ]
    for key in VOCAB_DATA_KEYS:
        theirs, ours = getattr(parent.cfg.data, key), getattr(cfg.data, key)
        if theirs != ours:
            differences.append(f"data.{key} is {theirs!r} in {parent.root} but {ours!r} here")
    if keep_optimizer and parent.cfg.train.optimizer != cfg.train.optimizer:
        raise UserError(
            f"--keep-optimizer: the parent run trained with train.optimizer {parent.cfg.train.optimizer!r}, "
            f"this config has {cfg.train.optimizer!r}; drop --keep-optimizer to start a new optimiser"
        )
    if differences:
        raise UserError(
            "--init-from: the model must be the parent run's (its weights and vocabularies are reused): "
            + "; ".join(differences)
        )


def fine_tuning_parent(spec: str, cfg: Config, keep_optimizer: bool) -> Parent:
    """The parent named by --init-from, checked to hold the model `cfg` describes (see `check_same_model`)
    and, with `keep_optimizer`, an optimiser state to keep."""
    parent = open_parent(spec)
    check_same_model(parent, cfg, keep_optimizer)
    if keep_optimizer and "optimizer" not in parent.state:
        raise UserError(
            f"--keep-optimizer: {parent.checkpoint} holds no optimiser state (a checkpoint kept at a "
            f"validation or written by `attn-mt average`); start from {parent.root}:last or "
            f"{parent.root}:best, or drop --keep-optimizer"
        )
    return parent


def refuse_own_parent(spec: str | None, run_dir: Path) -> None:
    """Refuse a --run-dir that is the --init-from run or holds it: the new run would replace its parent
    (`spec` None: no --init-from, nothing to refuse)."""
    if spec is None:
        return
    root = split_spec(spec)[0].resolve()
    if run_dir.resolve() in (root, *root.parents):
        raise UserError(
            f"--init-from {spec}: --run-dir {run_dir} is the parent run or holds it; a fine-tuned run is a "
            "new run beside its parent: give another --run-dir"
        )


def parent_record(parent: Parent, keep_optimizer: bool) -> dict[str, Any]:
    """What parent.json records: where the weights came from, their step and the parent's scores there."""
    step = int(parent.state.get("step", 0))
    validations = [
        r for r in read_metrics(RunPaths(parent.root).metrics) if "train_loss" in r and r["step"] <= step
    ]
    scores = {k: v for k, v in validations[-1].items() if k.startswith("valid_")} if validations else {}
    return {
        "run_dir": str(parent.root.resolve()),
        "checkpoint": parent.checkpoint.name,
        "step": step,
        "scores": scores,
        "optimizer": "kept" if keep_optimizer else "new",
    }


def write_parent(path: Path, record: dict[str, Any]) -> None:
    """Write parent.json."""
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def start_from(trainer: Trainer, parent: Parent, keep_optimizer: bool, is_main: bool) -> None:
    """Fine-tuning: the new run takes the parent's weights (and with `keep_optimizer` its per-parameter
    optimiser state, such as Adam's moments); learning rate, schedule and step count start afresh.
    The main process records the parent in the run directory."""
    trainer.model.load_state_dict(parent.state["model"])
    if keep_optimizer:
        saved = trainer.params.from_checkpoint(parent.state["optimizer"])
        fresh = trainer.optimizer.state_dict()
        trainer.optimizer.load_state_dict({"state": saved["state"], "param_groups": fresh["param_groups"]})
    if is_main:
        write_parent(trainer.paths.parent, parent_record(parent, keep_optimizer))
    log.info("fine-tuning from %s (step %d)", parent.checkpoint, int(parent.state.get("step", 0)))
