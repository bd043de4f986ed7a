"""The chapter's notebooks in every language: one English source per notebook (notebooks/*.ipynb, the
exercises notebooks/exercises/*.ipynb) and a copy of it per translated language (notebooks/zh/,
notebooks/vi/; the exercises' in notebooks/zh/exercises/, notebooks/vi/exercises/), built from the source
and the catalogues by `make notebooks` (`python -m attn_mt.i18n.notebooks`).

A copy differs from its source in two things only: each heading and paragraph of its Markdown cells is
the catalogue's translation (its relative links one folder further up, as the copy is one folder deeper),
and its language cell (the code cell that calls `use_language("en")`) puts the copy's language in force,
so that what the code prints and draws through `_()`, and what `check(...)` reports, speaks it too.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attn_mt.i18n.catalogues import translated_languages, translations
from attn_mt.i18n.languages import SOURCE

ROOT = Path(__file__).resolve().parent.parent.parent
COPIES_UNDER = "notebooks"  # each language's copies are in a folder named for it here
SOURCE_FOLDERS = ("notebooks", "notebooks/exercises")
LANGUAGE_CALL = 'use_language("{lang}")'
HEADING = re.compile(r"^(#{1,6} )")
RELATIVE_LINK = re.compile(r"(\]\()(?![a-zA-Z][a-zA-Z0-9+.-]*:|#|/)([^)\s]+\))")  # ](target) of a file here


def source_notebooks(root: Path = ROOT) -> list[Path]:
    """The English notebooks, folder by folder, in name order."""
    return [path for folder in SOURCE_FOLDERS for path in sorted((root / folder).glob("*.ipynb"))]


def copy_folder(folder: Path, lang: str, root: Path = ROOT) -> Path:
    """Where the `lang` copies of the notebooks in `folder` live: notebooks/LANG/, then the folder's own
    path under notebooks/ (notebooks/zh/exercises/ for notebooks/exercises/)."""
    top = root / COPIES_UNDER
    return top / lang / folder.relative_to(top)


def copy_path(source: Path, lang: str, root: Path = ROOT) -> Path:
    """Where the `lang` copy of `source` lives (copy_folder), under the source's own name."""
    return copy_folder(source.parent, lang, root) / source.name


def cell_text(cell: dict[str, Any]) -> str:
    """A cell's source as one string (a notebook file may hold it as a list of lines)."""
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def markdown_units(text: str) -> Iterator[tuple[str, str]]:
    """(heading marks, message) for each heading and paragraph of a Markdown cell, the message's lines
    joined by single spaces (the catalogue's msgid)."""
    for block in re.split(r"\n\s*\n", text.strip()):
        match = HEADING.match(block)
        prefix = match.group(1) if match else ""
        yield prefix, " ".join(block[len(prefix) :].split())


def translated_markdown(text: str, lang: str) -> str:
    """A Markdown cell with each heading and paragraph in `lang` (English where it has no translation)."""
    gettext = translations(lang).gettext
    return "\n\n".join(prefix + gettext(message) for prefix, message in markdown_units(text))


def relinked(text: str) -> str:
    """Markdown whose relative links (to the docs, to another notebook) reach one folder further up, as they
    must from a copy, which lies one folder deeper than its source."""
    return RELATIVE_LINK.sub(r"\1../\2", text)


def is_language_cell(cell: dict[str, Any]) -> bool:
    """Whether `cell` is a notebook's language cell (the code cell that puts English in force)."""
    return cell["cell_type"] == "code" and LANGUAGE_CALL.format(lang=SOURCE) in cell_text(cell)


def source_lines(text: str) -> list[str]:
    """A cell's source as nbformat stores it: lines, each but the last ending with its newline."""
    return text.splitlines(keepends=True)


def build_copy(notebook: dict[str, Any], lang: str) -> dict[str, Any]:
    """The `lang` copy of an English notebook (its JSON): Markdown translated, `lang` put in force."""
    built = copy.deepcopy(notebook)
    for cell in built["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = source_lines(relinked(translated_markdown(cell_text(cell), lang)))
        elif is_language_cell(cell):
            text = cell_text(cell).replace(LANGUAGE_CALL.format(lang=SOURCE), LANGUAGE_CALL.format(lang=lang))
            cell["source"] = source_lines(text)
    built["metadata"].setdefault("attn_mt", {})["language"] = lang
    return built


def notebook_json(notebook: dict[str, Any]) -> str:
    """A notebook's file text as Jupyter writes it (one-space indents, keys sorted, characters as such)."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def built_copies(root: Path = ROOT) -> dict[Path, str]:
    """Every copy's path and the text it should hold, from the sources and the catalogues as they are."""
    copies = {}
    for source in source_notebooks(root):
        notebook = json.loads(source.read_text(encoding="utf-8"))
        for lang in translated_languages():
            copies[copy_path(source, lang, root)] = notebook_json(build_copy(notebook, lang))
    return copies


def stored_copies(root: Path = ROOT) -> list[Path]:
    """The copies in the checkout now, built or stale."""
    return [
        path
        for folder in SOURCE_FOLDERS
        for lang in translated_languages()
        for path in sorted(copy_folder(root / folder, lang, root).glob("*.ipynb"))
    ]


def build(root: Path = ROOT) -> list[Path]:
    """Write every copy that differs from what it should hold, remove those without a source; return both."""
    wanted = built_copies(root)
    changed = [path for path in stored_copies(root) if path not in wanted]
    for path in changed:
        path.unlink()
    for path, text in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def main() -> None:
    """Build the copies and say which changed."""
    for path in build():
        sys.stdout.write(f"{'removed' if not path.exists() else 'built'} {path.relative_to(ROOT)}\n")


if __name__ == "__main__":
    main()
