"""A line of running text split into sentences for translation, and the translations joined back.

The models learn from single short Tatoeba sentences, so a line that holds a paragraph is translated
as one long sentence and comes out mangled. `split_line` cuts a line into sentences with sentencex
(a maintained rule-based segmenter with abbreviation lists for some 300 languages: "M. Dupont",
"D.C." and "..." do not end a sentence) and keeps the spaces between them, so `SplitLine.join` puts
the translations back with the line's own spacing: one output line per input line, blank lines and
leading or trailing spaces kept. `cut_long` cuts a sentence the model cannot read whole at its
clause punctuation (commas, semicolons, colons, dashes) into parts it can.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sentencex

# Letters, digits, spaces, commas, quotes, hyphens and brackets: nothing a segmenter ends a sentence at.
ONE_SENTENCE_INSIDE = re.compile(r"[\w ,'\"()\u2018\u2019\u201c\u201d\u00ab\u00bb-]*")
CLAUSE_MARK = re.compile(r"[,;:\u2013\u2014-]")  # a character CLAUSE_END may cut after
SENTENCE_TAIL = ".!?\u2026\"'\u201d\u00bb) "  # what may close the line's one sentence
CLAUSE_END = re.compile(r"[,;:\u2013\u2014](?=\s)|\s[\u2013\u2014-](?=\s)")  # ", " "; " ": " " — " " - "


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


def holds_one_sentence(line: str) -> bool:
    """Whether `line` is surely one sentence: before its closing punctuation it holds only letters,
    digits, spaces, commas, quotes, hyphens and brackets, nothing a segmenter could end a sentence at.

    Most lines are one short sentence; this check costs a tenth of sentencex's (tests/test_sentences.py
    shows sentencex agrees on every such line of the corpus, English and French).
    """
    return ONE_SENTENCE_INSIDE.fullmatch(line.strip().rstrip(SENTENCE_TAIL)) is not None


def split_line(line: str, language: str) -> SplitLine:
    """Cut `line` into the sentences sentencex finds for `language` (an ISO 639 code such as "en");
    a line that `holds_one_sentence` is taken whole without asking it."""
    if holds_one_sentence(line):
        return whole_line(line)
    return segmented(line, language)


def segmented(line: str, language: str) -> SplitLine:
    """`line` cut where sentencex ends a sentence for `language`, whatever the line holds."""
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


def clauses(sentence: str) -> SplitLine:
    """The sentence cut after each clause punctuation mark that white space follows, spacing kept."""
    parts, gaps, start = [], [""], 0
    for mark in CLAUSE_END.finditer(sentence):
        end = mark.end()
        rest = sentence[end:]
        space = len(rest) - len(rest.lstrip())
        if sentence[start:end].strip() and rest.strip():
            parts.append(sentence[start:end].strip())
            gaps.append(sentence[end : end + space])
            start = end + space
    parts.append(sentence[start:].strip())
    gaps.append("")
    return SplitLine(parts, gaps)


def cut_long(split: SplitLine, fits: Callable[[str], bool]) -> tuple[SplitLine, list[int]]:
    """`split` with each sentence that does not `fit` cut at clause punctuation into the fewest parts
    that do, joining neighbouring clauses while they fit; the indices of the sentences cut.

    A clause that does not fit alone stays whole (the model then reads its beginning and says so).
    """
    if all(CLAUSE_MARK.search(sentence) is None for sentence in split.sentences):
        return split, []  # most lines: no clause punctuation, so nothing to cut and nothing to measure
    sentences, gaps, cut = [], [split.gaps[0]], []
    for k, sentence in enumerate(split.sentences):
        pieces = clauses(sentence)
        if len(pieces.sentences) == 1 or fits(sentence):  # one clause: nothing to cut, nothing to measure
            sentences.append(sentence)
            gaps.append(split.gaps[k + 1])
            continue
        cut.append(k)
        current = pieces.sentences[0]
        for piece, gap in zip(pieces.sentences[1:], pieces.gaps[1:-1], strict=True):
            if fits(current + gap + piece):
                current += gap + piece
            else:
                sentences.append(current)
                gaps.append(gap)
                current = piece
        sentences.append(current)
        gaps.append(split.gaps[k + 1])
    return SplitLine(sentences, gaps), cut
