"""What a resumed run trains with: the saved config, with the train and decode changes allowed.

A resumed run keeps its data and model; a CONFIG or `--set` may change train and decode keys,
except those the optimiser and schedule state in last.pt hold (and train.timeline_probes while the
run's timeline.jsonl holds points of the old probes). Every change is written back to
config.yaml (which eval, translate and report read) and appended to config_history.jsonl.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from attn_mt.config import Config, bounded_decode, load_config, save_config, with_overrides
from attn_mt.errors import UserError
from attn_mt.run.run_dir import RunPaths

log = logging.getLogger("attn_mt")


def resolve_resume_config(
    paths: RunPaths, cfg: Config | None, overrides: list[str], flag: str = "--resume"
) -> Config:
    """The saved config with a given CONFIG's train/decode sections or `--set` applied (not data or model).

    `flag` is the option the user gave (--resume or --auto-resume), which refusals name.
    """
    saved = load_config(paths.config, saved=True)
    if cfg is not None:
        for section in ("data", "model"):
            if getattr(cfg, section) != getattr(saved, section):
                raise UserError(
                    f"{flag}: the {section} section of the given config differs from the one saved in "
                    f"{paths.config}; resume without a config (or with the same one)"
                )
        refuse_fixed_changes(saved, cfg, flag)
        refuse_probe_change(paths, saved, cfg, flag)
        return cfg
    resumed = with_overrides(bounded_decode(saved)[0], overrides, str(paths.config))
    for section in ("data", "model"):
        if getattr(saved, section) != getattr(resumed, section):
            raise UserError(f"{flag}: --set may not change the {section} section of an existing run")
    refuse_fixed_changes(saved, resumed, flag)
    refuse_probe_change(paths, saved, resumed, flag)
    return resumed


# train keys held by the optimiser and schedule state in last.pt, or meaningless mid-run: a resumed
# run cannot take a new value for them
FIXED_ON_RESUME = (
    "optimizer",
    "lr",
    "adam_betas",
    "weight_decay",
    "schedule",
    "plateau_factor",
    "plateau_patience",
    "init",
    "best_metric",
)


def refuse_fixed_changes(before: Config, after: Config, flag: str = "--resume") -> None:
    """A resumed run may change train and decode keys, except those in FIXED_ON_RESUME."""
    fixed = [f"train.{k}" for k in FIXED_ON_RESUME if getattr(before.train, k) != getattr(after.train, k)]
    if fixed:
        raise UserError(
            f"{flag}: {', '.join(fixed)} cannot change in a resumed run (the optimiser and schedule state "
            "in last.pt hold it, or best.pt was chosen by it); start a new run with --run-dir or --overwrite"
        )


def refuse_probe_change(paths: RunPaths, before: Config, after: Config, flag: str = "--resume") -> None:
    """Refuse other train.timeline_probes while timeline.jsonl holds points of the old ones (its header
    names them, and every point holds one entry per probe)."""
    old, new = before.train.timeline_probes, after.train.timeline_probes
    if old != new and paths.timeline.exists():
        raise UserError(
            f"{flag}: train.timeline_probes cannot change in a resumed run ({old!r} -> {new!r}): "
            f"{paths.timeline} holds points of the old probes; keep them, or move {paths.timeline.name} "
            "away to record a new timeline from the resumed step"
        )


def config_changes(before: Config, after: Config) -> dict[str, list[Any]]:
    """`section.key` -> [old, new] for every key whose value differs."""
    changes = {}
    for section, values in after.to_dict().items():
        old_values = before.to_dict()[section]
        for key, value in values.items():
            if old_values[key] != value:
                changes[f"{section}.{key}"] = [old_values[key], value]
    return changes


def record_config_changes(
    paths: RunPaths, before: Config, after: Config, step: int, flag: str = "--resume"
) -> None:
    """On --resume with other train/decode values: rewrite config.yaml, append to its history, say so."""
    changes = config_changes(before, after)
    if not changes:
        return
    save_config(after, paths.config)
    with paths.config_history.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"step": step, "changes": changes}) + "\n")
    listed = "; ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())
    log.warning(
        "%s: from step %d the run uses %s (config.yaml updated; %s lists every change)",
        flag,
        step,
        listed,
        paths.config_history.name,
    )
