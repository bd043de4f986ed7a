"""Every learner-facing English string, found in the code where it is marked, and the catalogues kept in
step with them (`make catalogues`, which runs `python -m attn_mt.i18n.extract`).

Marked are: in Python (the notebooks' code cells too), the first arguments of a call by name (not as an
attribute) of `_`, `gettext`, `N_`, `ngettext` (two) and `pgettext` (context, message); in the pages'
JavaScript, of `t`, `nt` (two) and `pt` (context, message); in their HTML, the text of each element
with a `data-i18n` attribute (i18n.js translates it in the page); in the English notebooks, each
heading and paragraph of their Markdown cells (notebooks.py builds their translated copies from them);
in the package's data files of DATA_MESSAGES, the strings of the fields it names (the code translates
them where it shows them, `_(entry["question"])`).
A marked call whose message is not a string literal is a mistake the extraction reports, but for
`_(name)` or `gettext(name)` of a constant marked with `N_` where it is defined.
"""

from __future__ import annotations

import ast
import io
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from importlib.metadata import version
from pathlib import Path

import yaml
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_javascript
from babel.messages.pofile import read_po, write_po

from attn_mt.i18n.catalogues import DOMAIN, catalogue_path, translated_languages
from attn_mt.i18n.languages import BABEL_LOCALE
from attn_mt.i18n.notebooks import cell_text, markdown_units, source_notebooks

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent
PYTHON_CALLS = {"_": ("message",), "gettext": ("message",), "N_": ("message",)}
PYTHON_CALLS |= {"ngettext": ("message", "plural"), "pgettext": ("context", "message")}
CONSTANT_NODES = (ast.Name, ast.Attribute, ast.Subscript, ast.Call)  # _(TITLES[name]): marked with N_
JS_KEYWORDS = {"t": None, "nt": (1, 2), "pt": ((1, "c"), 2)}
PO_WIDTH = 110
DATA_MESSAGES = {  # a data file of the package: the fields (at any depth) whose strings are learner-facing
    "lab/exercises.yaml": ("section", "question", "choices", "reading"),
    "lab/measured.yaml": ("machine", "columns"),
}
YAML_STRING = "tag:yaml.org,2002:str"


@dataclass(frozen=True)
class Marked:
    """One marked string: its msgid (and plural and context, where it has them) and where it is."""

    msgid: str
    plural: str | None
    context: str | None
    where: str


def shown(path: Path) -> str:
    """`path` relative to the checkout when it is in it (as the catalogues' locations name files)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


class MarkingError(ValueError):
    """A marked call whose message cannot be extracted (an f-string, a variable, a concatenation)."""


def python_marked(path: Path) -> Iterator[Marked]:
    """The marked strings of one Python file."""
    yield from code_marked(path.read_text(encoding="utf-8"), shown(path))


def code_marked(code: str, name: str) -> Iterator[Marked]:
    """The marked strings of Python `code`, located in the file `name`."""
    tree = ast.parse(code, filename=name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        roles = PYTHON_CALLS.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if roles is None:
            continue
        where = f"{name}:{node.lineno}"
        values: dict[str, str] = {}
        for role, argument in zip(roles, node.args, strict=False):
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                values[role] = argument.value
            elif node.func.id in ("_", "gettext") and isinstance(argument, CONSTANT_NODES):
                break  # a constant marked with N_ where it is defined, translated here
            else:
                raise MarkingError(f"{where}: the {role} of a marked call must be a string literal")
        if len(values) == len(roles):
            yield Marked(values["message"], values.get("plural"), values.get("context"), where)
        elif values or len(node.args) < len(roles):
            raise MarkingError(f"{where}: a marked call without its {roles[len(values)]}")


def javascript_marked(path: Path) -> Iterator[Marked]:
    """The marked strings of one page script (Babel's JavaScript extractor)."""
    with path.open("rb") as script:
        for lineno, _funcname, messages, _comments in extract_javascript(script, JS_KEYWORDS, [], {}):
            where = f"{shown(path)}:{lineno}"
            parts = messages if isinstance(messages, tuple) else (messages,)
            if any(part is None for part in parts):
                raise MarkingError(f"{where}: the message of a marked call must be a string literal")
            if _funcname == "pt":
                yield Marked(parts[1], None, parts[0], where)
            elif _funcname == "nt":
                yield Marked(parts[0], parts[1], None, where)
            else:
                yield Marked(parts[0], None, None, where)


class _MarkedElements(HTMLParser):
    """Collects the text of every element that has a data-i18n attribute."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, int]] = []
        self._open: list[tuple[str, list[str], int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if any(name == "data-i18n" for name, _value in attrs):
            self._open.append((tag, [], self.getpos()[0]))
        elif self._open:
            raise MarkingError(f"line {self.getpos()[0]}: a data-i18n element holds a <{tag}>; mark its text")

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            _tag, parts, line = self._open.pop()
            self.found.append((" ".join("".join(parts).split()), line))


def html_marked(path: Path) -> Iterator[Marked]:
    """The text of each data-i18n element of one page, its whitespace collapsed as i18n.js reads it."""
    parser = _MarkedElements()
    try:
        parser.feed(path.read_text(encoding="utf-8"))
    except MarkingError as exc:
        raise MarkingError(f"{shown(path)}: {exc}") from None
    for text, line in parser.found:
        yield Marked(text, None, None, f"{shown(path)}:{line}")


def notebook_marked(path: Path) -> Iterator[Marked]:
    """The headings and paragraphs of one notebook's Markdown cells and the marked strings of its code
    cells; a location names the cell (its number from 1)."""
    for number, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"], start=1):
        if cell["cell_type"] == "markdown":
            for _prefix, message in markdown_units(cell_text(cell)):
                yield Marked(message, None, None, f"{shown(path)}:{number}")
        elif cell["cell_type"] == "code":
            for marked in code_marked(cell_text(cell), shown(path)):
                yield Marked(marked.msgid, marked.plural, marked.context, f"{shown(path)}:{number}")


def _strings(node: yaml.Node) -> Iterator[yaml.ScalarNode]:
    """The string scalars of a YAML node: itself, a list's items or a mapping's values, at any depth."""
    if isinstance(node, yaml.ScalarNode):
        if node.tag == YAML_STRING:
            yield node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _strings(item)
    elif isinstance(node, yaml.MappingNode):
        for _key, value in node.value:
            yield from _strings(value)


def _fields(node: yaml.Node, fields: Sequence[str]) -> Iterator[yaml.ScalarNode]:
    """The string scalars under the mapping keys named `fields`, wherever they are in the document."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value in fields:
                yield from _strings(value)
            else:
                yield from _fields(value, fields)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _fields(item, fields)


def yaml_marked(path: Path) -> Iterator[Marked]:
    """The learner-facing strings of one data file of DATA_MESSAGES, as YAML loads them (folded)."""
    fields = DATA_MESSAGES[path.relative_to(PACKAGE).as_posix()] if path.is_relative_to(PACKAGE) else ()
    document = yaml.compose(path.read_text(encoding="utf-8"))
    for node in _fields(document, fields) if document is not None else ():
        yield Marked(node.value, None, None, f"{shown(path)}:{node.start_mark.line + 1}")


def source_files(package: Path = PACKAGE) -> Iterator[Path]:
    """The package's Python files (but the catalogue machinery's own), its pages' scripts and HTML and the
    data files of DATA_MESSAGES."""
    yield from sorted(p for p in package.rglob("*.py") if p.parent.name != "i18n")
    yield from sorted(p for p in package.rglob("*.js") if "page" in p.parts or p.parent.name == "i18n")
    yield from sorted(p for p in package.rglob("*.html") if "page" in p.parts)
    if package == PACKAGE:
        yield from (package / name for name in DATA_MESSAGES)
    if package == PACKAGE:  # the English notebooks beside the package (their copies translate them)
        yield from source_notebooks()


def marked_strings(package: Path = PACKAGE) -> list[Marked]:
    """Every marked string of the package, file by file."""
    readers = {
        ".py": python_marked,
        ".js": javascript_marked,
        ".html": html_marked,
        ".ipynb": notebook_marked,
        ".yaml": yaml_marked,
    }
    return [marked for path in source_files(package) for marked in readers[path.suffix](path)]


def template(package: Path = PACKAGE) -> Catalog:
    """A catalogue of every marked string without translations (what a .pot file holds)."""
    catalog = Catalog(domain=DOMAIN, project="attn-mt", fuzzy=False)
    for marked in marked_strings(package):
        msgid = marked.msgid if marked.plural is None else (marked.msgid, marked.plural)
        path, line = marked.where.rsplit(":", 1)
        catalog.add(msgid, locations=[(path, int(line))], context=marked.context)
    return catalog


def update_catalogues() -> list[Path]:
    """Add each new marked string to every catalogue (untranslated), drop those no code marks any more."""
    fresh = template()
    written = []
    for lang in translated_languages():
        path = catalogue_path(lang)
        with path.open("rb") as po:
            catalog = read_po(po, locale=BABEL_LOCALE[lang], domain=DOMAIN)
        catalog.update(fresh, no_fuzzy_matching=True)
        catalog.project, catalog.version = "attn-mt", version("attn-mt")
        catalog.obsolete.clear()
        out = io.BytesIO()
        write_po(out, catalog, width=PO_WIDTH, include_lineno=False, sort_by_file=True)
        path.write_bytes(out.getvalue())
        written.append(path)
    return written


def main() -> None:
    """Update the catalogues and say which were written."""
    for path in update_catalogues():
        sys.stdout.write(f"updated {shown(path)}\n")


if __name__ == "__main__":
    main()
