"""LibreTranslate's `format: html`: the text nodes of an HTML fragment translated, its tags kept.

The fragment is parsed by lxml's HTML parser (the optional extra `html`: `pip install
'attn-mt[html]'`), never by regular expressions, with libxml2's `huge_tree` option: without it,
elements nested deeper than 255 levels lose their text. A fragment nested deeper than
`MAX_DEPTH` is refused (`UnreadableMarkupError`) rather than read with text missing. Its text
nodes (an element's text, and the text after each element up to the next tag) are translated one
by one, in document order; the text of
`<script>`, `<style>` and comments, and of any element marked `translate="no"`, is left as it is.
The fragment is written back with every tag and attribute it had, its text escaped as HTML.
"""

from __future__ import annotations

import copy
import html
from dataclasses import dataclass
from typing import Any

UNTRANSLATED = frozenset({"script", "style", "code", "pre", "textarea"})  # text that is not prose
MAX_DEPTH = 1000  # elements nested deeper are refused; libxml2 keeps ~2,000 levels with huge_tree
HTML_EXTRA = "format html needs the optional extra html: pip install 'attn-mt[html]'"


class ParserMissingError(Exception):
    """lxml, the HTML parser of the optional extra `html`, is not installed."""


class UnreadableMarkupError(ValueError):
    """A text lxml's HTML parser refuses."""


@dataclass(frozen=True)
class Markup:
    """An HTML fragment under a wrapper element, and where its text nodes to translate sit."""

    root: Any  # lxml.html.HtmlElement: a <div> around the fragment
    slots: tuple[tuple[int, str], ...]  # (element's index in root.iter(), "text" or "tail")

    def texts(self) -> list[str]:
        """The text nodes to translate, in document order."""
        elements = list(self.root.iter())
        return [getattr(elements[at], which) for at, which in self.slots]

    def filled(self, translations: list[str]) -> str:
        """The fragment with its text nodes replaced by `translations`, in order, as HTML."""
        from lxml import html as lxml_html

        root = copy.deepcopy(self.root)
        elements = list(root.iter())
        for (at, which), text in zip(self.slots, translations, strict=True):
            setattr(elements[at], which, text)
        inner = "".join(lxml_html.tostring(child, encoding="unicode") for child in root)
        return html.escape(root.text or "", quote=False) + inner


def nesting(root: Any) -> int:
    """How many levels deep the tree under `root` nests its elements (root alone: 0)."""
    from lxml import etree

    depth = deepest = 0
    for event, _ in etree.iterwalk(root, events=("start", "end")):
        depth += 1 if event == "start" else -1
        deepest = max(deepest, depth)
    return deepest - 1


def parse_markup(text: str) -> Markup:
    """An HTML fragment and its text nodes to translate; ParserMissingError without lxml."""
    try:
        from lxml import etree
        from lxml import html as lxml_html
    except ImportError:
        raise ParserMissingError(HTML_EXTRA) from None
    try:
        parser = lxml_html.HTMLParser(huge_tree=True)  # deep nesting keeps its text
        root = lxml_html.fragment_fromstring(text, create_parent="div", parser=parser)
    except (ValueError, etree.LxmlError) as exc:  # e.g. control characters, which HTML cannot hold
        raise UnreadableMarkupError(f"the HTML cannot be read: {exc}") from None
    if nesting(root) > MAX_DEPTH:
        raise UnreadableMarkupError(f"the HTML nests elements more than {MAX_DEPTH} levels deep")
    slots: list[tuple[int, str]] = []
    kept_as_is: set[Any] = set()  # elements whose text stays: untranslated tags, translate="no"
    for at, element in enumerate(root.iter()):
        parent = element.getparent()
        prose = isinstance(element.tag, str) and element.tag.lower() not in UNTRANSLATED
        if parent in kept_as_is or not prose or element.get("translate") == "no":
            kept_as_is.add(element)
        elif element.text and element.text.strip():
            slots.append((at, "text"))
        if at and parent not in kept_as_is and element.tail and element.tail.strip():
            slots.append((at, "tail"))
    return Markup(root, tuple(slots))
