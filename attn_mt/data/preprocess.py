"""Text normalisation and tokenisation, exactly as the book's `preprocess_nmt` / `tokenize_nmt`.

d2l.ai section 10.5 (Machine Translation and the Dataset). The same two functions prepare the
corpus and the sentences a user types at translate time.
"""

from __future__ import annotations

import re

NARROW_NO_BREAK_SPACE = "\u202f"
NO_BREAK_SPACE = "\xa0"
TYPOGRAPHIC_APOSTROPHES = ("\u2019", "\u2018")
# The empty position between a non-space character and one of , . ! ? (never at the start of the text).
BEFORE_UNSPACED_PUNCT = re.compile(r"(?<=[^ ])(?=[,.!?])")


def preprocess(text: str, normalize_apostrophes: bool = False) -> str:
    """Book normalisation: U+202F/U+00A0 to spaces, lowercase, a space before , . ! ? not already after one.

    With `normalize_apostrophes` (not in the book) the typographic ’ and ‘ become '. The function is
    idempotent, so preprocessed text may safely be preprocessed again.
    """
    text = text.replace(NARROW_NO_BREAK_SPACE, " ").replace(NO_BREAK_SPACE, " ")
    if normalize_apostrophes:
        for apostrophe in TYPOGRAPHIC_APOSTROPHES:
            text = text.replace(apostrophe, "'")
    return BEFORE_UNSPACED_PUNCT.sub(" ", text.lower())


def tokenize(text: str) -> list[str]:
    """Split preprocessed text on single spaces as the book does, dropping empty tokens.

    The book's `split(" ")` turns repeated, leading or trailing spaces into empty-string tokens; we
    drop those, so "" gives [] and "a  b" gives ["a", "b"]. For the book's 601 pairs this changes
    nothing (their text has no repeated spaces); in the full corpus it removes the empty tokens that
    17 lines like "fille\\xa0 ?" would otherwise produce. Other whitespace (tab, U+2009) stays inside
    tokens, as in the book.
    """
    tokens = text.split(" ")
    return [token for token in tokens if token] if "" in tokens else tokens


def clean_text(text: str, normalize_apostrophes: bool = False) -> str:
    """`preprocess`, then its tokens joined by single spaces: the canonical form of a sentence."""
    text = preprocess(text, normalize_apostrophes)
    if "  " in text or text[:1] == " " or text[-1:] == " ":
        return " ".join(tokenize(text))
    return text
