"""The lab's panels by name, over the runs `attn-mt lab RUN_DIR ...` opened."""

from __future__ import annotations

from functools import partial
from typing import Any

from attn_mt.lab.app import Panel
from attn_mt.lab.complexity import complexity_panel
from attn_mt.lab.cues import cues_panel
from attn_mt.lab.exercises import exercises_panel
from attn_mt.lab.heads import split_merge_panel, trained_heads_panel
from attn_mt.lab.kernel_regression import nadaraya_watson_panel
from attn_mt.lab.own_translation import own_translation_panel
from attn_mt.lab.positions import positional_panel
from attn_mt.lab.scoring import key_size_panel, masked_softmax_panel, scoring_panel
from attn_mt.lab.self_attention import self_attention_panel
from attn_mt.lab.stepping import stepping_panel
from attn_mt.lab.timeline import timeline_panel
from attn_mt.lab.transformer import transformer_panel
from attn_mt.run.opened import LoadedRun


def lab_panels(runs: dict[str, LoadedRun]) -> dict[str, Panel]:
    """Name -> function of a panel's inputs; the panels over trained runs see `runs`."""
    return {
        "cues": cues_panel,
        "softmax": masked_softmax_panel,
        "scoring": scoring_panel,
        "keysize": key_size_panel,
        "positions": positional_panel,
        "heads": split_merge_panel,
        "self_attention": self_attention_panel,
        "complexity": complexity_panel,
        "transformer": partial(transformer_panel, runs),
        "trained_heads": partial(trained_heads_panel, runs),
        "nadaraya_watson": nadaraya_watson_panel,
        "decoding": partial(stepping_panel, runs),
        "own_translation": partial(own_translation_panel, runs),
        "exercises": partial(exercises_panel, runs),
        "timeline": partial(timeline_panel, runs),
    }


def description(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """What GET /api/panels answers: the panels and the runs (name, model type, checkpoint, step)."""
    return {
        "panels": list(lab_panels(runs)),
        "runs": [
            {
                "name": name,
                "model": run.config.model.type,
                "checkpoint": run.checkpoint.name,
                "step": run.step,
            }
            for name, run in runs.items()
        ],
    }
