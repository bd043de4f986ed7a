"""Per-line warnings on stderr that stay readable over a long file (`translate`, `score`).

Every warning names its input line (1-based). Unknown words are the one kind that can touch most lines
of a file (a model trained on a small vocabulary, a file from another domain), so they are digested:
the first `SHOWN_LINES` lines that have them are printed as they are, then one summary line per kind
says on how many lines they were, how many distinct words and which came most often. Every other
warning is printed for its line. With `verbose`, every warning of every line is printed.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from attn_mt.data.encode import UNKNOWN_SOURCE
from attn_mt.decoding.scoring import UNKNOWN_TARGET

DIGESTED = (UNKNOWN_SOURCE, UNKNOWN_TARGET)  # warnings "<kind>: word word ..." summed up over lines
SHOWN_LINES = 5  # lines printed in full per digested kind before its summary
MOST_FREQUENT = 5  # unknown words named in a summary
SENTENCE_PREFIX = "sentence "  # decoding/lines.py's `line_warnings` names the sentence of a split line


def digested_words(warning: str) -> tuple[str, list[str]] | None:
    """(kind, words) of an unknown-words warning (after a `sentence k: ` prefix), None for other warnings."""
    if warning.startswith(SENTENCE_PREFIX):
        number, _, rest = warning[len(SENTENCE_PREFIX) :].partition(": ")
        if number.isdigit():
            warning = rest
    for kind in DIGESTED:
        if warning.startswith(f"{kind}: "):
            return kind, warning[len(kind) + 2 :].split(" ")
    return None


@dataclass
class _Kind:
    """What one digested kind has seen: the lines it was on and how many lines each word was on."""

    lines: int = 0
    words: Counter[str] = field(default_factory=Counter)


def print_line_warnings(
    warnings: Sequence[Sequence[str]], verbose: bool = False, stream: TextIO | None = None
) -> None:
    """Print each line's `warnings` (`warnings[i]`: line i + 1's) on `stream` (stderr), digested as the
    module docstring says unless `verbose`."""
    stream = sys.stderr if stream is None else stream
    kinds: dict[str, _Kind] = {kind: _Kind() for kind in DIGESTED}
    for number, found in enumerate(warnings, start=1):
        on_line: dict[str, set[str]] = {}  # digested kind -> its words on this line (any sentence)
        for warning in found:
            digest = None if verbose else digested_words(warning)
            if digest is not None:
                kind, words = digest
                if kind not in on_line:
                    kinds[kind].lines += 1
                on_line.setdefault(kind, set()).update(words)
                if kinds[kind].lines > SHOWN_LINES:
                    continue
            print(f"attn-mt: warning: line {number}: {warning}", file=stream)
        for kind, words in on_line.items():
            kinds[kind].words.update(words)
    for kind, seen in kinds.items():
        if seen.lines > SHOWN_LINES:
            print(summary(kind, seen, len(warnings)), file=stream)


def summary(kind: str, seen: _Kind, lines: int) -> str:
    """One line for a digested kind: how many lines, how many distinct words, the most frequent ones (a
    word counts once per line)."""
    ranked = sorted(seen.words.items(), key=lambda item: (-item[1], item[0]))  # ties alphabetically
    common = ", ".join(f"{word} ({count})" for word, count in ranked[:MOST_FREQUENT])
    return (
        f"attn-mt: warning: {kind} on {seen.lines:,} of {lines:,} lines ({SHOWN_LINES} shown above): "
        f"{len(seen.words):,} distinct, most often {common}; --verbose prints every line"
    )
