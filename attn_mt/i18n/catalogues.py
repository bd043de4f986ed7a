"""The message catalogues: one .po file per language under locale/, English as the source.

Python reads them through its own `gettext` (each .po compiled in memory by Babel, so no binary .mo is
kept beside it); the pages get the same entries as JSON (`catalogue_json`). The language in force is a
context variable: a command sets it once, a web request in its own context.
"""

from __future__ import annotations

import functools
import gettext as gnu_gettext
import io
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import get_decimal_symbol, get_group_symbol

from attn_mt.i18n.languages import BABEL_LOCALE, HTML_LANG, LANGUAGES, SOURCE

DOMAIN = "attn_mt"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
CONTEXT_SEPARATOR = "\x04"  # between msgctxt and msgid in a key, as GNU .mo files and the JSON write it
PLURAL_RULES = {"0": "one-form", "(n != 1)": "n-not-1"}  # Plural-Forms expressions the pages' helper knows

_active: ContextVar[str] = ContextVar("attn_mt_language")  # unset: English, none was put in force


def catalogue_path(lang: str) -> Path:
    """The .po file of `lang` (locale/LANG/LC_MESSAGES/attn_mt.po, the layout pybabel uses)."""
    return LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


def translated_languages() -> list[str]:
    """Every language but the source, each of which has a catalogue."""
    return [lang for lang in LANGUAGES if lang != SOURCE]


@functools.cache
def read_catalogue(lang: str) -> Catalog:
    """The parsed .po file of `lang` (read once per process)."""
    with catalogue_path(lang).open("rb") as po:
        return read_po(po, locale=BABEL_LOCALE[lang], domain=DOMAIN)


@functools.cache
def translations(lang: str) -> gnu_gettext.NullTranslations:
    """Python's gettext object for `lang`; English (the source) translates nothing."""
    if lang == SOURCE:
        return gnu_gettext.NullTranslations()
    compiled = io.BytesIO()
    write_mo(compiled, read_catalogue(lang), use_fuzzy=False)  # a fuzzy entry is not a translation yet
    compiled.seek(0)
    return gnu_gettext.GNUTranslations(compiled)


def current_language() -> str:
    """The language in force in this context."""
    return _active.get(SOURCE)


def chosen_language() -> str | None:
    """The language put in force in this context (`use_language`, `in_language`), or None where none was."""
    return _active.get(None)


def use_language(lang: str) -> None:
    """Put `lang` in force for the rest of this context (a command calls it once, at its start)."""
    if lang not in LANGUAGES:
        raise ValueError(f"no catalogue for {lang!r}: {', '.join(LANGUAGES)}")
    _active.set(lang)


@contextmanager
def in_language(lang: str) -> Iterator[None]:
    """`lang` in force inside the block, the language before it after."""
    if lang not in LANGUAGES:
        raise ValueError(f"no catalogue for {lang!r}: {', '.join(LANGUAGES)}")
    token = _active.set(lang)
    try:
        yield
    finally:
        _active.reset(token)


def gettext(message: str) -> str:
    """`message` (English) in the language in force."""
    return translations(current_language()).gettext(message)


_ = gettext


def ngettext(singular: str, plural: str, n: int) -> str:
    """The form of `singular`/`plural` that fits the count `n`, in the language in force."""
    return translations(current_language()).ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    """`message` as meant in `context` (for an English word with two meanings), in the language in force."""
    return translations(current_language()).pgettext(context, message)


def N_(message: str) -> str:  # noqa: N802 (gettext's name for it)
    """Mark `message` for the catalogues without translating it yet (a constant, translated where shown)."""
    return message


def format_number(value: float, digits: int = 2, grouping: bool = False) -> str:
    """`value` with `digits` decimals as the language in force writes it: 1,234.5 in en and zh, 1.234,5 in vi.

    The digits are Python's own rounding in every language; only the separators differ.
    """
    text = f"{value:,.{digits}f}" if grouping else f"{value:.{digits}f}"
    locale = BABEL_LOCALE[current_language()]
    symbols = {",": get_group_symbol(locale), ".": get_decimal_symbol(locale)}
    return text.translate(str.maketrans(symbols))


def html_lang() -> str:
    """The <html lang> value of the language in force."""
    return HTML_LANG[current_language()]


def plural_rule(lang: str) -> str:
    """The name of `lang`'s plural rule for the pages' helper (i18n.js); raises for one it does not know."""
    if lang == SOURCE:
        return PLURAL_RULES["(n != 1)"]
    expression = read_catalogue(lang).plural_expr
    if expression not in PLURAL_RULES:
        raise ValueError(f"{catalogue_path(lang)}: plural rule {expression!r} is not one i18n.js knows")
    return PLURAL_RULES[expression]


def message_key(msgid: str, context: str | None) -> str:
    """An entry's key in the JSON: the msgid, after its context and CONTEXT_SEPARATOR when it has one."""
    return msgid if context is None else f"{context}{CONTEXT_SEPARATOR}{msgid}"


@functools.cache
def catalogue_json(lang: str) -> dict[str, Any]:
    """What a page needs to speak `lang`: its translated entries (msgid -> text, or the plural forms),
    its plural rule, its <html lang>, and the languages there are, each named in itself."""
    if lang not in LANGUAGES:
        raise ValueError(f"no catalogue for {lang!r}: {', '.join(LANGUAGES)}")
    messages: dict[str, str | list[str]] = {}
    if lang != SOURCE:
        for message in read_catalogue(lang):
            if not message.id or message.fuzzy:
                continue
            msgid = message.id[0] if isinstance(message.id, tuple) else message.id
            if isinstance(message.string, tuple):
                if all(message.string):
                    messages[message_key(msgid, message.context)] = list(message.string)
            elif message.string:
                messages[message_key(msgid, message.context)] = message.string
    return {
        "lang": lang,
        "html_lang": HTML_LANG[lang],
        "plural": plural_rule(lang),
        "languages": dict(LANGUAGES),
        "messages": messages,
    }
