"""Several torch models opened as one ensemble (models/ensemble.py), refused where they cannot be averaged.

Members are averaged token by token, so they must read and write the same tokens: the same source
and target vocabularies, direction, data mode, tokenizer and preprocessing. Their architectures
may differ (a GRU and a Transformer). The first member's config decides the decoding settings
(beam, length penalty, length limits) and its folder is where `eval` writes. CTranslate2 folders
decode with their own search and cannot join an ensemble.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from attn_mt.decoding.outputs import max_source_tokens
from attn_mt.errors import UserError
from attn_mt.run.open import model_kind, open_model
from attn_mt.run.opened import LoadedRun

DATA_KEYS = ("direction", "mode", "tokenizer", "normalize_apostrophes")  # must match across members


def ensemble_difference(first: LoadedRun, other: LoadedRun) -> str | None:
    """What keeps `other` from being averaged with `first`, in words; None when nothing does."""
    for key in DATA_KEYS:
        mine, theirs = getattr(first.config.data, key), getattr(other.config.data, key)
        if mine != theirs:
            return f"data.{key} is {theirs!r}, not {mine!r}"
    if max_source_tokens(first.config) != max_source_tokens(other.config):
        return (
            f"it reads sources of up to {max_source_tokens(other.config)} tokens, not "
            f"{max_source_tokens(first.config)}"
        )
    for side, mine, theirs in (
        ("source", first.src_vocab, other.src_vocab),
        ("target", first.tgt_vocab, other.tgt_vocab),
    ):
        if mine != theirs:
            return f"its {side} vocabulary differs ({len(theirs)} entries against {len(mine)})"
    return None


def open_models(
    sources: list[Path], checkpoint: str = "best", device: str = "auto", quantize: str | None = None
) -> LoadedRun:
    """One model, or several opened as an `Ensemble` in the first one's `LoadedRun` (module docstring)."""
    if len(sources) == 1:
        return open_model(sources[0], checkpoint, device, quantize)
    for source in sources:
        if model_kind(source).engine == "ctranslate2":
            raise UserError(
                f"{source} is a CTranslate2 folder, which decodes with its own search and cannot join an "
                "ensemble: give run directories or export files"
            )
    from attn_mt.models.ensemble import Ensemble  # torch: a single CTranslate2 folder translates without it

    runs = [open_model(source, checkpoint, device, quantize) for source in sources]
    for source, run in zip(sources[1:], runs[1:], strict=True):
        difference = ensemble_difference(runs[0], run)
        if difference is not None:
            raise UserError(f"cannot ensemble {source} with {sources[0]}: {difference}")
    return replace(runs[0], model=Ensemble([run.model for run in runs]), members=list(sources))
