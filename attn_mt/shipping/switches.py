"""The export formats that express the book's architecture only refuse a model with exercise switches."""

from __future__ import annotations

from attn_mt.config import ModelConfig
from attn_mt.errors import UserError


def refuse_switches(model: ModelConfig, what: str) -> None:
    """A UserError naming the exercise switches of `model` that `what` (an export format) cannot express."""
    if model.switches:
        listed = ", ".join(f"{key}: {value}" for key, value in model.switches.items())
        raise UserError(
            f"{what} expresses the book's architecture only, but this run has {listed} "
            "(export it with --format pt)"
        )
