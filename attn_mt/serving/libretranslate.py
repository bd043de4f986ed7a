"""LibreTranslate's API on attn-mt's server, so that clients written for LibreTranslate work unchanged.

Self-hosted translation clients (Mastodon, Open WebUI, browser extensions, LibreTranslate's own
Python bindings) take a LibreTranslate URL. `attn-mt serve` answers them on the same routes:

- `POST /translate` with LibreTranslate's fields, as JSON or as a form (what the Python bindings
  send; a form's fields may also come in the URL's query, as LibreTranslate reads them); a body with
  `sentences` is attn-mt's own, any other LibreTranslate's. The fields are read as LibreTranslate's
  handler reads them (`read_translate`), with its statuses and wording: `q` (a text or a list of
  texts; each line is split into sentences for the source language, as `attn-mt translate` splits
  it, and the translations joined back with the line's spacing; a text of emoji and punctuation
  alone comes back unchanged), `source` (the model's source code in any case, or `auto`, taken as
  that code: no detection runs), `target`, `format` (`text`, `html`: serving/markup.py; null or
  empty is text), `alternatives` (the next entries of the n-best list, sentence by sentence; none
  for html), `api_key` (serving/access.py checks it). Other fields are ignored.
- `GET /languages`: the model's source language with its target, and the target language.
- `POST /detect`, `GET /frontend/settings`, `POST /translate_file`, `POST /suggest`, `GET /spec`:
  serving/libretranslate_routes.py.
Errors come as LibreTranslate's do: status 400 and a JSON object whose `error` says what is wrong.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from attn_mt.config import Config
from attn_mt.data.sentences import SplitLine
from attn_mt.serving.markup import Markup, ParserMissingError, UnreadableMarkupError, parse_markup
from attn_mt.serving.schemas import (
    MAX_ALTERNATIVES,
    MAX_CHARS,
    MAX_SENTENCES,
    MAX_SPLIT_SENTENCES,
    MAX_TEXT_CHARS,
    DetectedLanguage,
    Language,
    LibreTranslateResponse,
    SentenceResult,
)

# English names of the languages Tatoeba pairs with English most often; other codes show as themselves.
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "he": "Hebrew",
    "hu": "Hungarian",
    "it": "Italian",
    "ja": "Japanese",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ru": "Russian",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}
FORMATS = ("text", "html")
INVALID_JSON = "Invalid JSON format"  # LibreTranslate's answer to a JSON body that is not an object
SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate: JSON can escape one, no text holds one


@dataclass(frozen=True)
class LibreTranslateCall:
    """A LibreTranslate translate request, its fields read and checked as LibreTranslate reads them."""

    q: str | list[str]
    source: str  # lower case: the model's source code, or "auto"
    target: str  # lower case
    format: str  # "text" or "html"
    alternatives: int  # 0 to MAX_ALTERNATIVES


class LibreTranslateError(Exception):
    """A request LibreTranslate would refuse with 400; the message is its `error`."""


def model_languages(config: Config) -> tuple[str, str]:
    """The model's (source, target) language codes, from data.direction (e.g. `en-fr`)."""
    source, target = config.data.direction.split("-")
    return source, target


def languages(config: Config) -> list[Language]:
    """GET /languages: what the model translates from, and to."""
    source, target = model_languages(config)
    return [
        Language(code=source, name=LANGUAGE_NAMES.get(source, source), targets=[target]),
        Language(code=target, name=LANGUAGE_NAMES.get(target, target), targets=[]),
    ]


@dataclass(frozen=True)
class Plan:
    """A request's texts as pieces of lines of sentences, and the sentences to translate, in order.

    A plain text is one piece; an HTML text (`format: html`) has a piece per text node to translate.
    """

    texts: list[list[SplitLine]]  # per piece, per line
    pieces: list[int]  # pieces per text of q
    markups: list[Markup | None]  # per text of q: its HTML, or None for plain text
    sentences: list[str]
    one_text: bool  # q was a string, not a list


def as_lines(text: str) -> str:
    """A text with its line breaks as LF: CRLF and a lone CR become LF, as LibreTranslate reads a form."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def missing(name: str) -> LibreTranslateError:
    """LibreTranslate's refusal of a request without `name`."""
    return LibreTranslateError(f"Invalid request: missing {name} parameter")


def lower_code(value: Any) -> Any:
    """A language code as LibreTranslate reads it: in lower case (anything else unchanged)."""
    return value.lower() if isinstance(value, str) else value


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate (U+D800 to U+DFFF, which JSON's \\u escapes can name but no UTF-8 text
    holds) in a text or a list of texts, or None."""
    texts = value if isinstance(value, list) else [value]
    for text in texts:
        found = SURROGATE.search(text) if isinstance(text, str) else None
        if found is not None:
            return found.group()
    return None


def refuse_lone_surrogate(name: str, value: Any) -> None:
    """Refuse field `name` when its text (or list of texts) holds a lone surrogate, naming the code point."""
    found = lone_surrogate(value)
    if found is not None:
        raise LibreTranslateError(
            f"Invalid request: {name} holds a lone surrogate (U+{ord(found):04X}), which is not text"
        )


def alternatives_count(value: Any) -> int:
    """`alternatives` as LibreTranslate reads it: a whole number or its digits, negatives as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LibreTranslateError("Invalid request: alternatives parameter is not a number")
    try:
        count = max(0, int(value))
    except (ValueError, OverflowError):
        raise LibreTranslateError("Invalid request: alternatives parameter is not a number") from None
    if count > MAX_ALTERNATIVES:
        raise LibreTranslateError(f"Invalid request: alternatives parameter must be <= {MAX_ALTERNATIVES}")
    return count


def check_size(characters: int) -> None:
    """Refuse a request of more than MAX_TEXT_CHARS characters of text, in LibreTranslate's words."""
    if characters > MAX_TEXT_CHARS:
        raise LibreTranslateError(
            f"Invalid request: request ({characters}) exceeds text limit ({MAX_TEXT_CHARS})"
        )


def read_translate(fields: dict[str, Any]) -> LibreTranslateCall:
    """A translate request's fields (a JSON object, or a form's) checked in LibreTranslate's order,
    with its wording: the first missing one of q, source, target, then alternatives, sizes, format."""
    q = fields.get("q")
    if not q:
        raise missing("q")
    source, target = lower_code(fields.get("source")), lower_code(fields.get("target"))
    if not source:
        raise missing("source")
    if not target:
        raise missing("target")
    for name in ("q", "source", "target", "format"):
        refuse_lone_surrogate(name, fields.get(name))
    alternatives = alternatives_count(fields.get("alternatives", 0))
    texts = [q] if isinstance(q, str) else q
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise LibreTranslateError("Invalid request: q parameter must be a text or a list of texts")
    if not isinstance(source, str) or not isinstance(target, str):
        raise LibreTranslateError("Invalid request: source and target parameters must be texts")
    if len(texts) > MAX_SENTENCES:
        raise LibreTranslateError(
            f"Invalid request: request ({len(texts)}) exceeds text limit ({MAX_SENTENCES})"
        )
    check_size(sum(len(text) for text in texts))
    text_format = fields.get("format")
    if text_format is None or text_format == "":  # as LibreTranslate reads them; other non-texts are refused
        text_format = "text"
    if text_format not in FORMATS:
        raise LibreTranslateError(f"{text_format} format is not supported")
    return LibreTranslateCall(q, source, target, text_format, alternatives)


def translatable(text: str) -> bool:
    """Whether a text has anything to translate: a letter or a digit (not emoji and punctuation alone)."""
    return any(unicodedata.category(ch)[0] in "LN" for ch in text)


def check_pair(call: LibreTranslateCall, config: Config) -> None:
    """Refuse a language pair the model does not translate, in LibreTranslate's words."""
    source, target = model_languages(config)
    if call.source not in (source, "auto"):
        raise LibreTranslateError(f"{call.source} is not supported")
    if call.target != target:
        raise LibreTranslateError(f"{call.target} is not supported")


def plan(call: LibreTranslateCall, config: Config, split: Callable[[str], SplitLine]) -> Plan:
    """Check the language pair, and `split` every line of every text into sentences; texts of emoji
    and punctuation alone (every one of them) are left as they are, as LibreTranslate leaves them."""
    check_pair(call, config)
    texts_of_q = [call.q] if isinstance(call.q, str) else call.q
    if not any(translatable(text) for text in texts_of_q):
        nothing = [[SplitLine([], [text])] for text in texts_of_q]
        return Plan(nothing, [1] * len(texts_of_q), [None] * len(texts_of_q), [], isinstance(call.q, str))
    entries = [as_lines(text) for text in texts_of_q]
    try:
        markups = [parse_markup(text) if call.format == "html" else None for text in entries]
    except (ParserMissingError, UnreadableMarkupError) as exc:
        raise LibreTranslateError(f"Invalid request: {exc}") from None
    pieces = [m.texts() if m is not None else [text] for m, text in zip(markups, entries, strict=True)]
    texts = [piece for entry in pieces for piece in entry]
    lines = [[split(line) for line in text.split("\n")] for text in texts]
    sentences = [s for text in lines for line in text for s in line.sentences]
    if len(sentences) > MAX_SPLIT_SENTENCES:
        raise LibreTranslateError(
            f"Invalid request: more than {MAX_SPLIT_SENTENCES} sentences in one request"
        )
    too_long = [s for s in sentences if len(s) > MAX_CHARS]
    if too_long:
        raise LibreTranslateError(f"Invalid request: a sentence is longer than {MAX_CHARS} characters")
    return Plan(lines, [len(entry) for entry in pieces], markups, sentences, isinstance(call.q, str))


def candidate_text(result: SentenceResult, rank: int) -> str:
    """The sentence's `rank`-th output (0 = best), or its best one when the n-best list is shorter."""
    return result.nbest[rank].text if rank < len(result.nbest) else result.translation


def rebuild(lines: Sequence[SplitLine], results: Sequence[SentenceResult], rank: int) -> str:
    """One text with each sentence replaced by its `rank`-th output, lines and spacing kept."""
    out, at = [], 0
    for line in lines:
        count = len(line.sentences)
        out.append(line.join([candidate_text(r, rank) for r in results[at : at + count]]))
        at += count
    return "\n".join(out)


def written(
    pieces: Sequence[tuple[Sequence[SplitLine], Sequence[SentenceResult]]], markup: Markup | None, rank: int
) -> str:
    """One text of q from its pieces' lines and results, each sentence its `rank`-th output; an HTML
    text is its markup with the pieces put back in its text nodes."""
    texts = [rebuild(lines, results, rank) for lines, results in pieces]
    return markup.filled(texts) if markup is not None else texts[0]


def distinct(candidates: Iterable[str], best: str) -> list[str]:
    """The alternatives as LibreTranslate gives them: no blank one, no repeat, not the translation itself."""
    kept: list[str] = []
    for text in candidates:
        if text.strip() and text != best and text not in kept:
            kept.append(text)
    return kept


def answer(
    call: LibreTranslateCall, work: Plan, results: Sequence[SentenceResult], config: Config
) -> LibreTranslateResponse:
    """LibreTranslate's answer for the plan's texts, given one result per sentence in order; html
    texts get no alternatives (LibreTranslate gives none for them either)."""
    per_piece, at = [], 0
    for lines in work.texts:
        count = sum(len(line.sentences) for line in lines)
        per_piece.append((lines, results[at : at + count]))
        at += count
    texts, alternatives, first = [], [], 0
    wanted = 0 if call.format == "html" else call.alternatives
    for count, markup in zip(work.pieces, work.markups, strict=True):
        mine = per_piece[first : first + count]
        first += count
        best = written(mine, markup, 0)
        texts.append(best)
        others = (written(mine, markup, k) for k in range(1, wanted + 1))
        alternatives.append(distinct(others, best))
    detected = None
    if call.source == "auto":
        confidence = 100.0 if work.sentences else 0.0  # nothing to translate: LibreTranslate's 0
        found = [DetectedLanguage(language=model_languages(config)[0], confidence=confidence) for _ in texts]
        detected = found[0] if work.one_text else found
    return LibreTranslateResponse(
        translatedText=texts[0] if work.one_text else texts,
        alternatives=(alternatives[0] if work.one_text else alternatives) if call.alternatives else None,
        detectedLanguage=detected,
    )


def form_fields(body: bytes, query: bytes) -> dict[str, str] | None:
    """A form's fields as LibreTranslate reads them: the URL query's first, then the body's, the first
    value of a field sent twice; None for a body that is not UTF-8."""
    values: dict[str, str] = {}
    for part in (query, body):
        try:
            fields = parse_qs(part.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            return None
        for name, given in fields.items():
            values.setdefault(name, given[0])
    return values


def form_as_json(body: bytes, query: bytes = b"") -> bytes | None:
    """A LibreTranslate form (and the URL query's fields) as the same JSON object, `q` always present
    (null when missing, so that the body still reads as LibreTranslate's); None for a non-UTF-8 body."""
    values = form_fields(body, query)
    if values is None:
        return None
    return json.dumps({"q": None, **values}).encode("utf-8")
