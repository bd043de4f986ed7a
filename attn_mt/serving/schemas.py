"""The JSON bodies of the server's API, with the limits every request is checked against.

Types are strict (a number where text is expected, or "3" where a number is, is an error, not a
conversion) and unknown fields are refused, so no request can carry anything the server does not
read, such as a file name. A count such as `nbest` takes any JSON number that is a whole number
(`9` or `9.0`), as JSON Schema's "integer" does, and refuses `9.5`, `true` and `"9"`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictStr,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from attn_mt.limits import (  # the bounds of every entry point
    MAX_BEAM,
    MAX_LENGTH_PENALTY,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_TEMPERATURE,
    MAX_TOP_K,
)

MAX_SENTENCES = 64  # sentences in one request
MAX_CHARS = 1000  # characters in one sentence
MAX_BODY_BYTES = 1 << 20  # request bodies longer than this are refused before they are read
MAX_REQUEST_CHARS = MAX_SENTENCES * MAX_CHARS  # characters of one request's texts together
# sentences one request may split into: its characters at 20 a sentence (fewer than most sentences
# have, so the character limit is reachable with any ordinary text)
MAX_SPLIT_SENTENCES = MAX_REQUEST_CHARS // 20

# a character that is not white space by Python's rules (str.isspace: \x1c-\x1f and \x85 too, which JSON
# Schema's \S leaves out), so the schema and the server's blank check (str.strip) agree on what is blank
NOT_BLANK = r"[^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
Sentence = Annotated[StrictStr, Field(max_length=MAX_CHARS)]
NonBlank = Annotated[StrictStr, Field(max_length=MAX_CHARS, pattern=NOT_BLANK)]  # a sentence to score


def whole_number(value: Any) -> Any:
    """A JSON number with no fractional part as an int (9.0 -> 9); anything else is left for the int check."""
    if isinstance(value, (bool, str)):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    if isinstance(value, float) and not value.is_integer():
        raise PydanticCustomError(
            "int_from_float", "Input should be a valid integer, got a fractional number"
        )
    return int(value) if isinstance(value, float) else value


def count(low: int, high: int) -> Any:
    """A whole number from `low` to `high`; the bounds sit on the integer, so the JSON schema shows them."""
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(whole_number)]


BeamSize = count(1, MAX_BEAM)


class TranslateRequest(BaseModel):
    """What to translate and how; options left out take the run's decode settings."""

    model_config = ConfigDict(extra="forbid")

    sentences: list[Sentence] = Field(
        min_length=1,
        max_length=MAX_SENTENCES,
        description="Texts to translate (a sentence, or several in a line), one translation each.",
    )
    beam: BeamSize | None = Field(
        None, description="Beam size (default: the run's decode.beam_size); 1 is greedy."
    )
    nbest: BeamSize = Field(1, description="How many outputs per sentence, best first.")
    length_penalty: StrictFloat | None = Field(
        None, ge=0, le=MAX_LENGTH_PENALTY, description="GNMT length penalty alpha (default: the run's)."
    )
    attention: StrictBool = Field(False, description="Also return the attention maps of each best output.")
    split: StrictBool = Field(
        True,
        description="Translate each entry sentence by sentence and join the translations with its spacing "
        "(false: each entry as one sentence).",
    )
    prefix: Sentence | list[Sentence] | None = Field(
        None,
        description="Target text each translation must start with, decoding continuing after it: one "
        "text for every entry, or a list of one per entry ('' for none). An entry with a prefix is "
        "translated whole (not split).",
    )
    sample: count(1, MAX_SAMPLES) | None = Field(
        None,
        description="Draw this many translations per entry from the model's distribution instead of "
        "searching (no beam); the n-best list holds them in the order drawn.",
    )
    temperature: StrictFloat | None = Field(
        None, gt=0, le=MAX_TEMPERATURE, description="With sample: divide the logits by it (default 1)."
    )
    top_k: count(0, MAX_TOP_K) | None = Field(
        None, description="With sample: draw from the k most probable tokens only (default 0: all)."
    )
    top_p: StrictFloat | None = Field(
        None,
        gt=0,
        le=1,
        description="With sample: draw from the fewest top tokens whose probability reaches it (default 1).",
    )
    seed: count(0, MAX_SEED) | None = Field(
        None, description="With sample: the random seed (default 0); a seed draws the same samples."
    )
    alignments: StrictBool = Field(
        False, description="Also return the word alignment of each best output, from its cross-attention."
    )
    timeout: StrictFloat | None = Field(
        None,
        ge=1,
        description="Seconds to wait for the answer, from 1, before the server gives up with 503 (default "
        "and maximum: GET /info's limits.request_timeout_s and max_request_timeout_s).",
    )


class Candidate(BaseModel):
    """One output of the n-best list."""

    text: str = Field(description="The translation, as `attn-mt translate` prints it.")
    tokens: list[str] = Field(description="Its target tokens, without <bos> and <eos>.")
    score: float = Field(description="Length-normalised log-probability (what `--nbest` prints).")
    log_prob: float = Field(description="Raw log-probability of the tokens and the closing <eos>.")


class AttentionMaps(BaseModel):
    """Every attention map of a sentence's best output; each is [layer][head][query][key].

    The GRU + Bahdanau model has one alignment, given as one layer with one head. The Transformer
    adds `encoder_self` (queries and keys: source tokens) and `decoder_self` (queries: output
    tokens; keys: decoder input tokens, <bos> first) to `cross` (queries: output tokens; keys:
    source tokens).
    """

    source_tokens: list[str] = Field(description="Source labels, ending with <eos>.")
    output_tokens: list[str] = Field(description="What each target position predicts, ending with <eos>.")
    decoder_input_tokens: list[str] = Field(description="What each target position reads, from <bos>.")
    maps: dict[str, list[list[list[list[float]]]]] = Field(description="Map name -> weights.")
    description: str | None = Field(
        None,
        description="What the maps are when they are not every layer and head (a CTranslate2 folder "
        "returns one layer's cross-attention, averaged over its heads); null otherwise.",
    )


class Alignment(BaseModel):
    """Which source word each word of the best output comes from (docs/translating.md)."""

    pairs: str = Field(description="Pharaoh pairs `i-j`: source word i, output word j, from 0.")
    source_words: list[str] = Field(description="The source words the indices i count.")
    target_words: list[str] = Field(description="The output words the indices j count.")


class SentenceResult(BaseModel):
    """The translation of one input sentence."""

    source: str = Field(description="The sentence as sent.")
    source_tokens: list[str] = Field(description="The sentence after the training data's preprocessing.")
    translation: str = Field(description="The best output ('' for a blank sentence).")
    nbest: list[Candidate] = Field(description="The best outputs, best first (empty for a blank sentence).")
    warnings: list[str] = Field(description="Unknown words and truncation, as `translate` reports them.")
    attention: AttentionMaps | None = Field(
        None, description="When asked for, for non-blank input of one sentence (else in `sentences`)."
    )
    alignment: Alignment | None = Field(
        None, description="When asked for: the best output's word alignment (the entry's, when split)."
    )
    sentences: list[SentenceResult] | None = Field(
        None,
        description="Each sentence's own result when the entry was split into several (then the entry's "
        "n-best entries join the sentences' and add their scores); null otherwise.",
    )


class TranslateResponse(BaseModel):
    """One result per input sentence, in order, and the decoding options used."""

    results: list[SentenceResult]
    beam: int
    nbest: int = Field(description="Outputs per sentence: the n-best list's length, or the samples drawn.")
    length_penalty: float


class Info(BaseModel):
    """The model behind the server."""

    model: str
    parameters: int
    engine: str = Field(description="torch, or ctranslate2 with its weights and threads (exported folder).")
    attention: str = Field(description='Which attention maps `"attention": true` returns.')
    config: dict[str, Any]
    source_vocab_size: int
    target_vocab_size: int
    checkpoint: str
    step: int
    device: str
    eval_scores: dict[str, dict[str, Any]] = Field(
        description="The latest scores.json of each evaluated split (`attn-mt eval`), by split."
    )
    limits: dict[str, float]
    batching: dict[str, float]


class ScorePair(BaseModel):
    """A source sentence and a translation of it to score."""

    model_config = ConfigDict(extra="forbid")

    source: NonBlank = Field(description="The source sentence (not blank).")
    target: str = Field(
        max_length=MAX_CHARS,
        description="Its translation, to score; an empty one scores the model ending at once (<eos> alone).",
    )


class ScoreRequest(BaseModel):
    """Translations to score: the model's probability of each target given its source."""

    model_config = ConfigDict(extra="forbid")

    pairs: list[ScorePair] = Field(min_length=1, max_length=MAX_SENTENCES, description="What to score.")
    length_penalty: StrictFloat | None = Field(
        None,
        ge=0,
        le=MAX_LENGTH_PENALTY,
        description="GNMT length penalty alpha of `score` (default: the run's).",
    )
    split: StrictBool = Field(
        True,
        description="Score each pair sentence by sentence, split as `translate` splits, and add the "
        "sentences' numbers up (false: each pair as one sentence).",
    )
    alignments: StrictBool = Field(
        False,
        description="Also return each target's word alignment to its source, read from the "
        "cross-attention while the target is forced (what `attn-mt score --alignments` writes).",
    )
    timeout: StrictFloat | None = Field(
        None,
        ge=1,
        description="Seconds to wait for the answer, from 1, before the server gives up with 503 (default "
        "and maximum: GET /info's limits.request_timeout_s and max_request_timeout_s).",
    )


class PairScore(BaseModel):
    """How probable the model finds one target for its source (what `attn-mt score` writes)."""

    source: str
    target: str
    source_tokens: list[str] = Field(description="The source after the training data's preprocessing.")
    target_tokens: list[str] = Field(description="The target as the model reads it, without <eos>.")
    token_log_probs: list[float] = Field(description="Log-probability of each target token, then of <eos>.")
    log_prob: float = Field(description="Their sum: the log-probability of the whole target.")
    score: float = Field(description="log_prob / GNMT length penalty: what beam search ranks outputs by.")
    warnings: list[str] = Field(description="Unknown words, truncation, and an empty target scored as <eos>.")
    alignment: Alignment | None = Field(
        None, description="When asked for: the target's word alignment (the pair's, when split)."
    )


class ScoreResponse(BaseModel):
    """One score per pair, in order, and the length penalty used."""

    results: list[PairScore]
    length_penalty: float


# ----- LibreTranslate's API (serving/libretranslate.py) -----

MAX_TEXT_CHARS = MAX_REQUEST_CHARS  # characters in one LibreTranslate request's texts together
Text = Annotated[StrictStr, Field(max_length=MAX_TEXT_CHARS)]


FORMAT_SCHEMA = {"anyOf": [{"type": "string", "enum": ["text", "html", ""]}, {"type": "null"}]}
MAX_ALTERNATIVES = MAX_BEAM - 1  # the n-best list is at most MAX_BEAM long, the translation first


def documented(schema: dict[str, Any]) -> Any:
    """A LibreTranslate field taken as sent (serving/libretranslate.py reads it by LibreTranslate's
    rules and wording), documented with `schema`."""
    return Annotated[Any, WithJsonSchema(schema)]


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's translate request, as its clients send it (JSON, or a form with the same fields).

    The fields are not validated here: LibreTranslate's own checks and wording apply
    (serving/libretranslate.py `read_translate`); the schema documents what is taken.
    """

    model_config = ConfigDict(
        extra="ignore",  # clients may send fields of newer LibreTranslate versions
        json_schema_extra={"required": ["q", "source", "target"]},
    )

    q: documented(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS},
                {
                    "type": "array",
                    "items": {"type": "string", "maxLength": MAX_TEXT_CHARS},
                    "minItems": 1,
                    "maxItems": MAX_SENTENCES,
                },
            ]
        }
    ) = Field(
        None, description="A text, or a list of texts; each line is split into sentences and translated."
    )
    source: documented({"type": "string", "minLength": 1}) = Field(
        None, description='The model\'s source language code (any case), or "auto".'
    )
    target: documented({"type": "string", "minLength": 1}) = Field(
        None, description="The model's target language code (any case)."
    )
    format: documented(FORMAT_SCHEMA) = Field(
        None,
        description='"text" (also null or empty), or "html": the text nodes are translated, the tags kept.',
    )
    alternatives: documented(
        {
            "anyOf": [
                {"type": "number", "exclusiveMaximum": MAX_ALTERNATIVES + 1},  # int() of it: 0 to 15
                {"type": "string"},  # its digits; other texts are refused with LibreTranslate's words
            ]
        }
    ) = Field(
        0,
        description="How many alternative translations, from the n-best list (a number, or its digits; "
        f"below 0 is 0, at most {MAX_ALTERNATIVES}).",
    )
    api_key: documented({}) = Field(  # any value: LibreTranslate ignores one it does not need
        None, description="An API key (a text), when the server was started with --api-keys."
    )


class DetectedLanguage(BaseModel):
    """The source language (the model's own: no detection runs)."""

    language: str
    confidence: float


class LibreTranslateResponse(BaseModel):
    """LibreTranslate's answer: one text (or a list, as q was), alternatives when asked for."""

    translatedText: str | list[str]  # noqa: N815 (LibreTranslate's field names)
    alternatives: list[str] | list[list[str]] | None = None
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = None  # noqa: N815


class Language(BaseModel):
    """One language the server translates from or to (GET /languages)."""

    code: str
    name: str
    targets: list[str]
