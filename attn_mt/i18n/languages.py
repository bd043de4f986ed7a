"""The languages attn-mt speaks to a learner, and which one a command or a page uses.

A command takes `--lang`, then $ATTN_MT_LANG, then the locale ($LC_ALL, $LC_MESSAGES, $LANG, as the C
library reads them); a page takes its switch (remembered in the browser), then Accept-Language. English
is the source every catalogue translates, and what anything unknown falls back to.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

SOURCE = "en"
LANGUAGES: dict[str, str] = {"en": "English", "zh": "中文（简体）", "vi": "Tiếng Việt"}  # each in itself
HTML_LANG = {"en": "en", "zh": "zh-Hans", "vi": "vi"}  # the <html lang> of a page in each
BABEL_LOCALE = {"en": "en", "zh": "zh_Hans_CN", "vi": "vi"}  # the CLDR locale of numbers in each
ENV_VAR = "ATTN_MT_LANG"
LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG")
_QUALITY = re.compile(r"^q=([01](?:\.\d{0,3})?)$")


class UnknownLanguageError(ValueError):
    """A language asked for by name (--lang, $ATTN_MT_LANG) that attn-mt has no catalogue for."""


def language_of(tag: str) -> str | None:
    """The catalogue language of a tag (zh-CN, zh_CN.UTF-8, zh-Hans, vi, en-GB), or None."""
    primary = re.split(r"[-_.@]", tag.strip(), maxsplit=1)[0].lower()
    return primary if primary in LANGUAGES else None


def resolve_language(flag: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """--lang's value, else $ATTN_MT_LANG, else the locale's language, else English.

    A flag or $ATTN_MT_LANG naming no catalogue raises UnknownLanguageError (it was asked for); a locale
    without one (C, POSIX, de_DE) falls back to English.
    """
    environ = os.environ if environ is None else environ
    for source, value in (("--lang", flag), (f"${ENV_VAR}", environ.get(ENV_VAR))):
        if value:
            found = language_of(value)
            if found is None:
                raise UnknownLanguageError(f"{source} {value!r}: choose one of {', '.join(LANGUAGES)}")
            return found
    for name in LOCALE_VARS:
        value = environ.get(name)
        if value:  # the first one set decides, as in the C library, even when it is C or POSIX
            return language_of(value) or SOURCE
    return SOURCE


def pick_language(accept_language: str | None) -> str:
    """The catalogue language the browser prefers most (HTTP Accept-Language with q-values), else English."""
    best, best_quality = SOURCE, 0.0
    for item in (accept_language or "").split(","):
        tag, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            match = _QUALITY.match(param.replace(" ", ""))
            if match:
                quality = float(match.group(1))
        found = language_of(tag) if tag and tag != "*" else None
        if found is not None and quality > best_quality:  # ties keep the earlier tag
            best, best_quality = found, quality
    return best
