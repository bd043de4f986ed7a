"""LibreTranslate's API on attn-mt's server, so that clients written for LibreTranslate work unchanged.

Self-hosted translation clients (Mastodon, Open WebUI, browser extensions, LibreTranslate's own
Python bindings) take a LibreTranslate URL. `attn-mt serve` answers them on the same routes:

- `POST /translate` with LibreTranslate's fields, as JSON or as a form (what the Python bindings
  send); a body with `q` is LibreTranslate's, one with `sentences` attn-mt's own.
  Honoured: `q` (a text or a list of texts; each line is split into sentences for the source
  language, as `attn-mt translate` splits it, and the translations joined back with the line's
  spacing), `source` (the model's source
  code, or `auto`, taken as that code: no detection runs), `target` (the model's target code),
  `format` (`text`, or `html`: serving/markup.py), `alternatives` (the next entries of the n-best
  list, sentence by sentence).
  `api_key` is accepted and ignored: the server has no keys. Other fields are ignored.
- `GET /languages`: the model's source language with its target, and the target language.
Errors come as LibreTranslate's do: status 400 and a JSON object whose `error` says what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs

from attn_mt.config import Config
from attn_mt.data.sentences import SplitLine
from attn_mt.serving.markup import Markup, ParserMissingError, UnreadableMarkupError, parse_markup
from attn_mt.serving.schemas import (
    MAX_CHARS,
    MAX_SPLIT_SENTENCES,
    MAX_TEXT_CHARS,
    DetectedLanguage,
    Language,
    LibreTranslateRequest,
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
COUNT_FIELDS = ("alternatives",)  # form fields that carry a number


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


def plan(request: LibreTranslateRequest, config: Config, split: Callable[[str], SplitLine]) -> Plan:
    """Check the language pair and the sizes, and `split` every line of every text into sentences."""
    source, target = model_languages(config)
    if request.source not in (source, "auto"):
        raise LibreTranslateError(
            f"{request.source} is not supported: this model translates {source} to {target}"
        )
    if request.target != target:
        raise LibreTranslateError(
            f"{request.target} is not supported: this model translates {source} to {target}"
        )
    entries = [as_lines(text) for text in ([request.q] if isinstance(request.q, str) else request.q)]
    if sum(len(text) for text in entries) > MAX_TEXT_CHARS:
        raise LibreTranslateError(f"Invalid request: the texts are longer than {MAX_TEXT_CHARS} characters")
    try:
        markups = [parse_markup(text) if request.format == "html" else None for text in entries]
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
    return Plan(lines, [len(entry) for entry in pieces], markups, sentences, isinstance(request.q, str))


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
    request: LibreTranslateRequest, work: Plan, results: Sequence[SentenceResult], config: Config
) -> LibreTranslateResponse:
    """LibreTranslate's answer for the plan's texts, given one result per sentence in order."""
    per_piece, at = [], 0
    for lines in work.texts:
        count = sum(len(line.sentences) for line in lines)
        per_piece.append((lines, results[at : at + count]))
        at += count
    texts, alternatives, first = [], [], 0
    for count, markup in zip(work.pieces, work.markups, strict=True):
        mine = per_piece[first : first + count]
        first += count
        best = written(mine, markup, 0)
        texts.append(best)
        others = (written(mine, markup, k) for k in range(1, request.alternatives + 1))
        alternatives.append(distinct(others, best))
    detected = None
    if request.source == "auto":
        found = [DetectedLanguage(language=model_languages(config)[0], confidence=100.0) for _ in texts]
        detected = found[0] if work.one_text else found
    return LibreTranslateResponse(
        translatedText=texts[0] if work.one_text else texts,
        alternatives=(alternatives[0] if work.one_text else alternatives) if request.alternatives else None,
        detectedLanguage=detected,
    )


def form_as_json(body: bytes) -> bytes | None:
    """A LibreTranslate form (it has `q`) as the same JSON object; None for any other body."""
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        return None
    if "q" not in fields:
        return None
    values: dict[str, object] = {}
    for name, given in fields.items():
        value: object = given[0]  # a field sent twice is its first value, as LibreTranslate reads a form
        if (
            name in COUNT_FIELDS
            and isinstance(value, str)
            and value.strip().isascii()
            and value.strip().isdigit()
        ):
            value = int(value)
        values[name] = value
    return json.dumps(values).encode("utf-8")
