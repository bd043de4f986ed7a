"""The chapter's terms once per language (glossary.yaml), and the entries of a catalogue that use
another word for one of them."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from babel.messages.catalog import Catalog

GLOSSARY = Path(__file__).resolve().parent / "glossary.yaml"
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


@dataclass(frozen=True)
class Term:
    """One term: the English forms a message may use and what each language calls it."""

    english: tuple[str, ...]
    translations: dict[str, str]

    def used_in(self, text: str) -> bool:
        """Whether `text` (English) uses one of the term's forms as whole words, any letter case."""
        return any(
            re.search(rf"(?<!\w){re.escape(form)}(?!\w)", text, re.IGNORECASE) for form in self.english
        )


@functools.cache
def terms() -> tuple[Term, ...]:
    """The glossary's terms, in the file's order."""
    entries = yaml.safe_load(GLOSSARY.read_text(encoding="utf-8"))
    return tuple(
        Term(tuple(entry["en"]), {lang: text for lang, text in entry.items() if lang in ("zh", "vi")})
        for entry in entries
    )


def glossary_problems(catalog: Catalog, lang: str) -> list[str]:
    """One line per translated entry of `catalog` that uses a glossary term and not the term's `lang` word."""
    problems = []
    for message in catalog:
        if not message.id or not message.string:
            continue
        english = " ".join(message.id) if isinstance(message.id, tuple) else message.id
        english = PLACEHOLDER.sub(" ", english)  # {values} names a placeholder, not the chapter's values
        forms = message.string if isinstance(message.string, tuple) else (message.string,)
        for term in terms():
            word = term.translations[lang]
            if term.used_in(english) and not all(
                word.casefold() in form.casefold() for form in forms if form
            ):
                problems.append(f"{english!r} uses {term.english[0]!r}: its {lang} text must say {word!r}")
    return problems
