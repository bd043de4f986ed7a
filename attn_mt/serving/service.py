"""The loaded run behind the server: decoding options, translation into API results, and model facts.

Translation goes through the same translator (torch's, or CTranslate2 over an exported folder) and
the same run loading as `attn-mt translate`, so the server answers with what that command prints
for the same sentences and options.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attn_mt.data.sentences import SplitLine
from attn_mt.decoding.alignments import WordAlignment, alignment_of, joined
from attn_mt.decoding.attention import SentenceAttention
from attn_mt.decoding.engine import Engine, prefix_ids
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.lines import line_warnings, plan_lines, split_for
from attn_mt.decoding.outputs import Sampling, Translation, prepare_sentence
from attn_mt.decoding.scoring import score_lines
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.run.opened import LoadedRun
from attn_mt.serving.schemas import (
    MAX_BEAM,
    MAX_BODY_BYTES,
    MAX_CHARS,
    MAX_LENGTH_PENALTY,
    MAX_SAMPLES,
    MAX_SENTENCES,
    MAX_SPLIT_SENTENCES,
    MAX_TEMPERATURE,
    Alignment,
    AttentionMaps,
    Candidate,
    Info,
    PairScore,
    ScoreRequest,
    SentenceResult,
    TranslateRequest,
)

WEIGHT_DECIMALS = 5  # attention weights are rounded to this many decimals in answers


class RequestError(ValueError):
    """A request that is well-formed JSON of the right types but asks for something impossible."""


@dataclass(frozen=True)
class DecodeOptions:
    """Everything that decides how a sentence is decoded; requests with equal options share batches."""

    settings: DecodeSettings  # the search, resolved and checked once (decoding/settings.py)
    attention: bool
    alignments: bool = False

    @property
    def beam(self) -> int:
        """The beam size the answer reports (1 for sampling)."""
        return self.settings.beam_size

    @property
    def length_penalty(self) -> float:
        """The length penalty alpha the answer reports."""
        return self.settings.length_penalty

    @property
    def outputs(self) -> int:
        """How many outputs each sentence gets: its n-best list, or its samples."""
        return self.settings.outputs


Item = str | tuple[str, str]  # a sentence to translate, or a sentence and the prefix its output starts with


@dataclass(frozen=True)
class ScoreOptions:
    """How pairs are scored; the decoding worker batches score requests with equal options together."""

    length_penalty: float
    split: bool = True
    alignments: bool = False


def attention_json(attention: SentenceAttention, description: str | None = None) -> AttentionMaps:
    """Every map as [layer][head][query][key] (the Bahdanau alignment, or CTranslate2's one averaged
    map, as one layer of one head; `description` says which)."""
    maps = {}
    for name, weights in attention.maps.items():
        grid = weights if weights.ndim == 4 else weights.reshape(1, 1, *weights.shape)  # (L, h, Q, K)
        maps[name] = np.round(grid.astype(np.float64), WEIGHT_DECIMALS).tolist()
    return AttentionMaps(
        source_tokens=attention.source_tokens,
        output_tokens=attention.output_tokens,
        decoder_input_tokens=attention.decoder_input_tokens,
        maps=maps,
        description=description,
    )


def alignment_json(alignment: WordAlignment) -> Alignment:
    """A word alignment as the API returns it."""
    return Alignment(
        pairs=alignment.pharaoh(), source_words=alignment.source_words, target_words=alignment.target_words
    )


def joined_alignment(parts: list[SentenceResult]) -> Alignment | None:
    """The entry's alignment from its sentences' (None unless they were asked for)."""
    if any(p.alignment is None for p in parts):
        return None
    return alignment_json(
        joined(
            [
                WordAlignment(
                    p.alignment.source_words,
                    p.alignment.target_words,
                    [tuple(map(int, pair.split("-"))) for pair in p.alignment.pairs.split()],
                )
                for p in parts
                if p.alignment is not None
            ]
        )
    )


def entry_result(
    entry: str, plan: SplitLine, notes: list[str], parts: list[SentenceResult]
) -> SentenceResult:
    """An entry's result from its sentences': their translations and n-best texts joined with the
    entry's spacing, n-best scores added; the parts themselves in `sentences` when there are several."""
    if len(parts) == 1 and plan.gaps == ["", ""] and not notes:
        return parts[0]
    nbest = [
        Candidate(
            text=plan.join([p.nbest[k].text for p in parts]),
            tokens=[t for p in parts for t in p.nbest[k].tokens],
            score=sum(p.nbest[k].score for p in parts),
            log_prob=sum(p.nbest[k].log_prob for p in parts),
        )
        for k in range(min((len(p.nbest) for p in parts), default=0))
    ]
    return SentenceResult(
        source=entry,
        source_tokens=[t for p in parts for t in p.source_tokens],
        translation=plan.join([p.translation for p in parts]),
        nbest=nbest,
        warnings=line_warnings(notes, [p.warnings for p in parts]),
        attention=parts[0].attention if len(parts) == 1 else None,
        alignment=joined_alignment(parts),
        sentences=parts if len(parts) > 1 else None,
    )


def request_words(message: str) -> str:
    """A command-line refusal in the API's words: `--top-k` is the field `top_k`, `--sample` is `sample`."""
    for option, field in (("--sample", "sample"), ("--beam", "beam"), ("--nbest", "nbest")):
        message = message.replace(option, field)
    for option in ("--temperature", "--top-k", "--top-p", "--seed"):
        message = message.replace(option, option[2:].replace("-", "_"))
    return message


def request_sampling(request: TranslateRequest) -> Sampling | None:
    """The request's sampling settings, None without `sample`; a sampling field without it is refused."""
    named = {"temperature": request.temperature, "top_k": request.top_k, "top_p": request.top_p}
    if request.sample is None:
        given = [name for name, value in {**named, "seed": request.seed}.items() if value is not None]
        if given:
            raise UserError(f"{given[0]} applies to sampling; add sample (how many samples per entry)")
        return None
    settings = {name: value for name, value in {**named, "seed": request.seed}.items() if value is not None}
    return Sampling(samples=request.sample, **settings)


def entry_prefixes(request: TranslateRequest) -> list[str] | None:
    """One prefix per entry (a text given for all, or the list), None when the request gives none."""
    if request.prefix is None:
        return None
    if isinstance(request.prefix, str):
        return [request.prefix] * len(request.sentences)
    if len(request.prefix) != len(request.sentences):
        raise UserError(
            f"prefix: {len(request.prefix)} prefixes for {len(request.sentences)} sentences; give one "
            "text for all or one per sentence"
        )
    return list(request.prefix)


def latest_eval_scores(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The scores.json of each split `attn-mt eval` has written in the run, by split name."""
    found = {}
    for path in sorted((run_dir / "eval").glob("*/scores.json")):
        try:
            found[path.parent.name] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a file being rewritten or damaged is left out rather than failing /info
    return found


class TranslationService:
    """One trained run, loaded once in eval mode, translating batches of sentences into API results."""

    def __init__(self, run: LoadedRun, run_dir: Path, max_batch: int, max_wait_s: float):
        self.run, self.run_dir = run, Path(run_dir)
        self.max_batch, self.max_wait_s = max_batch, max_wait_s

    def options(self, request: TranslateRequest) -> DecodeOptions:
        """The request's options with the run's defaults filled in; refuses a search the model cannot run."""
        try:
            sampling = request_sampling(request)
            settings = DecodeSettings.resolve(
                self.run.config.decode,
                request.beam,
                request.nbest,
                request.length_penalty,
                sampling,
                vocab_size=len(self.run.tgt_vocab),
            )
            engine = translator_for(self.run)
            if sampling is not None and not engine.search_sampling:
                raise UserError(f"the {engine.name} engine cannot sample")
        except UserError as exc:
            raise RequestError(request_words(str(exc))) from None
        return DecodeOptions(settings, request.attention, request.alignments)

    def items(self, request: TranslateRequest, plans: list[tuple[SplitLine, list[str]]]) -> list[Item]:
        """The sentences to decode, each with its entry's prefix when the request gives one; refuses a
        prefix the model cannot force (as `translate` does) before anything is decoded."""
        sentences = [s for plan, _ in plans for s in plan.sentences]
        prefixes = entry_prefixes(request)
        if prefixes is None:
            return list(sentences)
        per_sentence = [p for (plan, _), p in zip(plans, prefixes, strict=True) for _ in plan.sentences]
        engine = translator_for(self.run)
        try:
            if not engine.search_prefix:
                raise UserError(f"the {engine.name} engine cannot force a target prefix")
            tokens = [prepare_sentence(self.run.config, self.run.src_vocab, s) for s in sentences]
            prefix_ids(engine, tokens, per_sentence)
        except UserError as exc:
            raise RequestError(request_words(str(exc))) from None
        return list(zip(sentences, per_sentence, strict=True))

    def score_options(self, request: ScoreRequest) -> ScoreOptions:
        """The score request's length penalty (the run's when it gives none) and sentence splitting."""
        alpha = (
            self.run.config.decode.length_penalty
            if request.length_penalty is None
            else request.length_penalty
        )
        return ScoreOptions(float(alpha), request.split, request.alignments)

    def decode(
        self, items: list[Any], options: DecodeOptions | ScoreOptions
    ) -> list[SentenceResult] | list[PairScore]:
        """Translate a batch of sentences, or score a batch of (source, target) pairs, with one set of
        options (runs on the decoding worker)."""
        if isinstance(options, ScoreOptions):
            return self.score(items, options)
        return self.translate(items, options)

    def score(self, pairs: list[tuple[str, str]], options: ScoreOptions) -> list[PairScore]:
        """Each pair's score (decoding/scoring.py, split as `attn-mt score` splits) as the API returns it."""
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        scored = score_lines(
            translator_for(self.run),
            sources,
            targets,
            options.split,
            options.length_penalty,
            alignments=options.alignments,
        )
        return [
            PairScore(
                source=p.source,
                target=p.target,
                source_tokens=p.source_tokens,
                target_tokens=p.target_tokens,
                token_log_probs=p.token_log_probs,
                log_prob=p.log_prob,
                score=p.score,
                warnings=p.warnings,
                alignment=None if p.alignment is None else alignment_json(p.alignment),
            )
            for p in scored
        ]

    def translate(self, items: list[Item], options: DecodeOptions) -> list[SentenceResult]:
        """Translate a batch of sentences (some with a prefix) with one set of options."""
        translator = translator_for(self.run)
        sentences = [item if isinstance(item, str) else item[0] for item in items]
        prefixes = None
        if any(not isinstance(item, str) for item in items):
            prefixes = ["" if isinstance(item, str) else item[1] for item in items]
        translations = translator.translate(sentences, prefix=prefixes, settings=options.settings)
        return [self.result(translator, t, options.attention, options.alignments) for t in translations]

    def result(
        self, translator: Engine, translation: Translation, attention: bool, alignments: bool = False
    ) -> SentenceResult:
        """One sentence's answer: the n-best list with scores and tokens, its attention and word
        alignment if asked."""
        decode = self.run.tgt_vocab.decode
        nbest = [
            Candidate(text=text, tokens=decode(h.tokens), score=h.norm_score, log_prob=h.score)
            for text, h in zip(translation.outputs, translation.hypotheses, strict=True)
        ]
        maps = None
        if attention and translation.hypotheses:
            described = None if translator.all_attention_maps else translator.attention_description()
            maps = attention_json(translator.attention(translation), described)
        return SentenceResult(
            source=translation.source,
            source_tokens=translation.source_tokens,
            translation=translation.text,
            nbest=nbest,
            warnings=translation.warnings,
            attention=maps,
            alignment=alignment_json(alignment_of(translator, translation)) if alignments else None,
        )

    def split(self, line: str) -> SplitLine:
        """The line's sentences as `translate` splits them (long ones cut at clause punctuation)."""
        return split_for(self.run.config, self.run.src_vocab, line)[0]

    def plan(self, request: TranslateRequest) -> list[tuple[SplitLine, list[str]]]:
        """Each entry's sentences (split unless the request says not to, or gives the entry a prefix)
        and notes on the splitting."""
        try:
            prefixes = entry_prefixes(request)
        except UserError as exc:
            raise RequestError(str(exc)) from None
        plans = plan_lines(translator_for(self.run), request.sentences, request.split, prefixes)
        count = sum(len(plan.sentences) for plan, _ in plans)
        if count > MAX_SPLIT_SENTENCES:
            raise RequestError(
                f"sentences: {count} sentences once split, more than {MAX_SPLIT_SENTENCES} in one request"
            )
        return plans

    def combine(
        self, entries: list[str], plans: list[tuple[SplitLine, list[str]]], results: list[SentenceResult]
    ) -> list[SentenceResult]:
        """One result per entry from its sentences' results (in order), as `entry_result` joins them."""
        combined, at = [], 0
        for entry, (plan, notes) in zip(entries, plans, strict=True):
            count = len(plan.sentences)
            combined.append(entry_result(entry, plan, notes, results[at : at + count]))
            at += count
        return combined

    def info(self) -> Info:
        """The model, its config and vocabularies, the checkpoint, the latest eval scores and the limits."""
        run = self.run
        engine = translator_for(run)
        return Info(
            model=run.config.model.type,
            parameters=engine.parameter_count(),
            engine=engine.description(),
            attention=engine.attention_description(),
            config=run.config.to_dict(),
            source_vocab_size=len(run.src_vocab),
            target_vocab_size=len(run.tgt_vocab),
            checkpoint=run.checkpoint.name,
            step=run.step,
            device=run.device,
            eval_scores=latest_eval_scores(self.run_dir),
            limits={
                "max_sentences": MAX_SENTENCES,
                "max_chars": MAX_CHARS,
                "max_beam": MAX_BEAM,
                "max_length_penalty": MAX_LENGTH_PENALTY,
                "max_samples": MAX_SAMPLES,
                "max_temperature": MAX_TEMPERATURE,
                "max_body_bytes": MAX_BODY_BYTES,
            },
            batching={"max_batch": self.max_batch, "max_wait_ms": self.max_wait_s * 1000},
        )
