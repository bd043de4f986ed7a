"""The chapter demos by the name `attn-mt demo NAME` takes: each run(out_dir, seed) writes PNGs and a JSON."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from attn_mt.demos import nadaraya_watson, positional_encoding, scoring
from attn_mt.errors import UserError
from attn_mt.i18n import _

Demo = Callable[[Path, int], dict[str, Any]]

DEMOS: dict[str, Demo] = {
    nadaraya_watson.NAME: nadaraya_watson.run,
    scoring.NAME: scoring.run,
    positional_encoding.NAME: positional_encoding.run,
}


def demo_named(name: str) -> Demo:
    """The demo called `name`, or a UserError listing the names there are."""
    if name not in DEMOS:
        raise UserError(
            _("unknown demo {name!r}: choose one of {names}").format(name=name, names=", ".join(DEMOS))
        )
    return DEMOS[name]
