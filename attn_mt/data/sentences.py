"""A line of running text split into sentences for translation, and the translations joined back.

The models learn from single short Tatoeba sentences, so a line that holds a paragraph is translated
as one long sentence and comes out mangled. `split_line` cuts a line into sentences with sentencex
(a maintained rule-based segmenter with abbreviation lists for some 300 languages: "M. Dupont",
"D.C." and "..." do not end a sentence) and keeps the spaces between them, so `SplitLine.join` puts
the translations back with the line's own spacing: one output line per input line, blank lines and
leading or trailing spaces kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sentencex


@dataclass(frozen=True)
class SplitLine:
    """A line as its sentences and the spacing around them: gaps[0] s[0] gaps[1] ... s[-1] gaps[-1]."""

    sentences: list[str]  # each without surrounding white space; none is empty
    gaps: list[str]  # len(sentences) + 1 runs of white space (the whole line when it holds no sentence)

    def join(self, translations: Sequence[str]) -> str:
        """The line with each sentence replaced by its translation, the spacing kept."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        parts = [self.gaps[0]]
        for translation, gap in zip(translations, self.gaps[1:], strict=True):
            parts += [translation, gap]
        return "".join(parts)


def whole_line(line: str) -> SplitLine:
    """The line as one sentence (no splitting), its leading and trailing white space kept apart."""
    core = line.strip()
    if not core:
        return SplitLine([], [line])
    start = line.index(core)
    return SplitLine([core], [line[:start], line[start + len(core) :]])


def split_line(line: str, language: str) -> SplitLine:
    """Cut `line` into the sentences sentencex finds for `language` (an ISO 639 code such as "en")."""
    sentences: list[str] = []
    gaps: list[str] = [""]
    for piece in sentencex.segment(language, line):
        core = piece.strip()
        if not core:
            gaps[-1] += piece
            continue
        start = piece.index(core)
        gaps[-1] += piece[:start]
        sentences.append(core)
        gaps.append(piece[start + len(core) :])
    split = SplitLine(sentences, gaps)
    if split.join(sentences) != line:  # the segmenter dropped or changed characters: keep the line whole
        return whole_line(line)
    return split
