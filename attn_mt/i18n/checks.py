"""What tests/test_languages.py asks of a catalogue against the strings the code marks: every one
translated (no fuzzy entry, every plural form), none that no code marks, every placeholder kept."""

from __future__ import annotations

import string

from babel.messages.catalog import Catalog, Message

FILLER = "X"


def placeholders(text: str) -> set[str]:
    """The str.format fields of `text` as written, conversion and format spec included ({name!r}, {x:.2f})."""
    fields = set()
    for _literal, name, spec, conversion in string.Formatter().parse(text):
        if name is not None:
            fields.add(
                "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            )
    return fields


def _key(message: Message) -> tuple[str | None, str]:
    msgid = message.id[0] if isinstance(message.id, tuple) else message.id
    return message.context, msgid


def _english(message: Message) -> str:
    return " / ".join(message.id) if isinstance(message.id, tuple) else message.id


def missing_translations(template: Catalog, catalog: Catalog) -> list[str]:
    """The marked strings `catalog` does not translate (absent, empty, fuzzy, a plural form short)."""
    entries = {_key(m): m for m in catalog if m.id}
    problems = []
    for marked in template:
        if not marked.id:
            continue
        entry = entries.get(_key(marked))
        forms = (
            entry.string
            if entry is not None and isinstance(entry.string, tuple)
            else (entry and entry.string,)
        )
        if entry is None or entry.fuzzy or not all(forms):
            problems.append(f"untranslated: {_english(marked)!r} ({marked.locations[0][0]})")
        elif isinstance(marked.id, tuple) != isinstance(entry.id, tuple):
            problems.append(f"plural forms: {_english(marked)!r} is marked with ngettext only on one side")
        elif isinstance(entry.string, tuple) and len(entry.string) != catalog.num_plurals:
            problems.append(
                f"plural forms: {_english(marked)!r} has {len(entry.string)}, not {catalog.num_plurals}"
            )
    return problems


def stale_entries(template: Catalog, catalog: Catalog) -> list[str]:
    """The entries of `catalog` that no code marks any more."""
    marked = {_key(m) for m in template if m.id}
    return [f"no code marks {_english(m)!r}" for m in catalog if m.id and _key(m) not in marked]


def placeholder_problems(catalog: Catalog) -> list[str]:
    """The translations that lost, added or mangled a placeholder of their English, or that str.format
    cannot fill (a stray brace)."""
    problems = []
    for message in catalog:
        if not message.id or not message.string:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        wanted = set().union(*(placeholders(text) for text in ids))
        forms = message.string if isinstance(message.string, tuple) else (message.string,)
        for form in forms:
            try:
                found = placeholders(form)
                names = {field.strip("{}").split("!")[0].split(":")[0] for field in found}
                form.format(**dict.fromkeys(names, FILLER))
            except (ValueError, KeyError, IndexError) as exc:
                problems.append(f"{_english(message)!r}: {form!r} cannot be filled ({exc})")
                continue
            if found != wanted:
                problems.append(
                    f"{_english(message)!r}: {form!r} has {sorted(found)}, the English {sorted(wanted)}"
                )
    return problems
