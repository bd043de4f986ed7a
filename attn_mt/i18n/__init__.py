"""Learner-facing text in the learner's language: catalogues, the language in force, numbers and fonts.

A module marks an English string with `_("...")` (`ngettext`, `pgettext`; `N_` for a constant translated
where it is shown) and formats it after translating: `_("written to {folder}").format(folder=path)`.
"""

from attn_mt.i18n.catalogues import (
    N_,
    _,
    catalogue_json,
    current_language,
    format_number,
    gettext,
    html_lang,
    in_language,
    ngettext,
    pgettext,
    use_language,
)
from attn_mt.i18n.languages import LANGUAGES, SOURCE, UnknownLanguageError, pick_language, resolve_language

__all__ = [
    "LANGUAGES",
    "N_",
    "SOURCE",
    "UnknownLanguageError",
    "_",
    "catalogue_json",
    "current_language",
    "format_number",
    "gettext",
    "html_lang",
    "in_language",
    "ngettext",
    "pgettext",
    "pick_language",
    "resolve_language",
    "use_language",
]
