"""Lines split into sentences with sentencex and joined back with their own spacing."""

from __future__ import annotations

import pytest

from attn_mt.data.sentences import SplitLine, clauses, cut_long, split_line, whole_line

PARAGRAPH = (
    "I went to the market yesterday. It was raining, so I bought an umbrella.  "
    "Then I came home and made dinner for my family."
)


def test_a_paragraph_gives_its_sentences_and_joins_back_with_its_spacing():
    split = split_line("  " + PARAGRAPH + " ", "en")
    assert split.sentences == [
        "I went to the market yesterday.",
        "It was raining, so I bought an umbrella.",
        "Then I came home and made dinner for my family.",
    ]
    assert split.gaps == ["  ", " ", "  ", " "]
    assert split.join(split.sentences) == "  " + PARAGRAPH + " "
    assert split.join(["A.", "B.", "C."]) == "  A. B.  C. "


@pytest.mark.parametrize(
    ("language", "line", "count"),
    [
        ("en", "Mr. Smith went to Washington D.C. yesterday.", 1),  # abbreviations end no sentence
        ("en", 'He said "Hi!" and left... Then what?', 2),
        ("en", "Go.", 1),
        ("fr", "Il pleuvait ! Ensuite, M. Dupont est venu.", 2),  # French spacing before "!"
    ],
)
def test_abbreviations_and_quotes_follow_the_language_rules(language, line, count):
    split = split_line(line, language)
    assert len(split.sentences) == count and split.join(split.sentences) == line


@pytest.mark.parametrize("line", ["", "   ", "\t"])
def test_blank_lines_hold_no_sentence_and_stay_as_they_were(line):
    for split in (split_line(line, "en"), whole_line(line)):
        assert split.sentences == [] and split.join([]) == line


def test_the_whole_line_is_one_sentence_with_its_spaces_apart():
    split = whole_line("  " + PARAGRAPH + "\t")
    assert split == SplitLine([PARAGRAPH], ["  ", "\t"])
    assert split.join(["Une phrase."]) == "  Une phrase.\t"


def test_joining_the_wrong_number_of_translations_is_an_error():
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        split_line(PARAGRAPH, "en").join(["a", "b"])


def test_clauses_end_after_punctuation_that_space_follows_and_keep_the_spacing():
    sentence = "It rained, so we stayed; then,  at last: home - tired."
    split = clauses(sentence)
    assert split.sentences == ["It rained,", "so we stayed;", "then,", "at last:", "home -", "tired."]
    assert split.join(split.sentences) == sentence and split.gaps[2] == " " and split.gaps[3] == "  "
    assert clauses("3,5 km: 1,000 m.").sentences == ["3,5 km:", "1,000 m."]  # no cut inside a number


def test_cut_long_joins_neighbouring_clauses_while_they_fit():
    line = "Go. One two, three four five, six; seven eight nine ten eleven, twelve."
    words = lambda text: len(text.split())  # noqa: E731
    split, cut = cut_long(split_line(line, "en"), lambda text: words(text) <= 5)
    assert split.sentences == [
        "Go.",
        "One two, three four five,",
        "six;",
        "seven eight nine ten eleven,",
        "twelve.",
    ]
    assert cut == [1] and split.join(split.sentences) == line
    unchanged, none = cut_long(split_line(line, "en"), lambda text: True)
    assert unchanged == split_line(line, "en") and none == []
    alone, which = cut_long(split_line("One two three four five six seven.", "en"), lambda text: False)
    assert alone.sentences == ["One two three four five six seven."] and which == []  # no clause to cut at


def test_lines_taken_for_one_sentence_without_sentencex_are_one_for_it_too(corpus_path):
    """The shortcut of `split_line` agrees with sentencex on every corpus line it takes, both languages
    (every third line, to keep the test short); most lines take it."""
    import sentencex

    from attn_mt.data.corpus import read_pairs
    from attn_mt.data.sentences import holds_one_sentence

    pairs = read_pairs(corpus_path)[::3]
    for side, language in ((0, "en"), (1, "fr")):
        lines = [pair[side] for pair in pairs]
        taken = [line for line in lines if holds_one_sentence(line)]
        assert len(taken) > 0.9 * len(lines)
        for line in taken:
            pieces = [p for p in sentencex.segment(language, line) if p.strip()]
            assert len(pieces) == 1, (language, line)
    assert not holds_one_sentence("It rained. We stayed home.")
    assert not holds_one_sentence("Wait! What?")
    assert holds_one_sentence('  Mr Smith said "yes, of course" (twice)!  ')


TRICKY_LINES = [
    "Go.",
    "Hi!",
    "  Really?!  ",
    "Wait...",
    'He said "stop!" and left',
    '"Is it you?" she asked.',
    "Tom's here, isn't he?",
    "I paid 3.50 for it.",
    "Mr. Smith arrived.",
    "Mr Smith arrived. Then he left.",
    "Call me at 5 p.m. tomorrow.",
    "It's the U.S. Army.",
    "Yes - no - maybe.",
    "\u00ab Bonjour \u00bb, dit-il.",
    "(Really.)",
    "Who? Me?",
    "I know\u2026 I know.",
    "One; two: three.",
    "e.g. this one",
    "\tTabbed line.\t",
    "1984 was a year.",
    "A line with no end",
    "\u2018Quoted\u2019 words \u201chere\u201d.",
]


@pytest.mark.parametrize("language", ["en", "fr"])
def test_the_one_sentence_shortcut_gives_what_sentencex_gives(language):
    """On lines the shortcut takes, `split_line` equals the segmenter's own split, spacing included;
    lines it leaves to the segmenter get the segmenter's split unchanged."""
    from attn_mt.data.sentences import holds_one_sentence, segmented

    taken = [line for line in TRICKY_LINES if holds_one_sentence(line)]
    assert 10 < len(taken) < len(TRICKY_LINES)  # both paths are exercised
    for line in TRICKY_LINES:
        assert split_line(line, language) == segmented(line, language), line
