"""The language a learner-facing command speaks: --lang, then $ATTN_MT_LANG, then the locale."""

from __future__ import annotations

import typer

from attn_mt.errors import UserError
from attn_mt.i18n import _, resolve_language, use_language
from attn_mt.i18n.fonts import cjk_family
from attn_mt.i18n.languages import UnknownLanguageError


def set_language(flag: str | None, figures: bool = False) -> str:
    """Put the command's language in force and return it; a command that draws `figures` in Chinese on a
    machine without a CJK font says so on stderr (its characters would show as boxes)."""
    try:
        lang = resolve_language(flag)
    except UnknownLanguageError as exc:
        raise UserError(str(exc)) from None
    use_language(lang)
    if figures and lang == "zh" and cjk_family() is None:
        typer.echo(
            _(
                "attn-mt: warning: no CJK font found, so the figures' Chinese text shows as boxes; "
                "install one (Debian: apt-get install fonts-noto-cjk, which `make browser` runs)"
            ),
            err=True,
        )
    return lang
