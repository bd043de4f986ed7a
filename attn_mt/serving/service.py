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
from attn_mt.decoding.attention import SentenceAttention
from attn_mt.decoding.engine import Engine, check_search
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.lines import line_warnings, plan_lines, split_for
from attn_mt.decoding.outputs import Translation, with_length_penalty
from attn_mt.decoding.scoring import score_lines
from attn_mt.errors import UserError
from attn_mt.run.opened import LoadedRun
from attn_mt.serving.schemas import (
    MAX_BEAM,
    MAX_BODY_BYTES,
    MAX_CHARS,
    MAX_LENGTH_PENALTY,
    MAX_SENTENCES,
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

    beam: int
    nbest: int
    length_penalty: float
    attention: bool


@dataclass(frozen=True)
class ScoreOptions:
    """How pairs are scored; the decoding worker batches score requests with equal options together."""

    length_penalty: float
    split: bool = True


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
        sentences=parts if len(parts) > 1 else None,
    )


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
        decode = self.run.config.decode
        beam = decode.beam_size if request.beam is None else request.beam
        alpha = decode.length_penalty if request.length_penalty is None else request.length_penalty
        try:
            check_search(beam, request.nbest, len(self.run.tgt_vocab))
        except UserError as exc:
            raise RequestError(str(exc)) from None
        return DecodeOptions(beam, request.nbest, float(alpha), request.attention)

    def score_options(self, request: ScoreRequest) -> ScoreOptions:
        """The score request's length penalty (the run's when it gives none) and sentence splitting."""
        alpha = (
            self.run.config.decode.length_penalty
            if request.length_penalty is None
            else request.length_penalty
        )
        return ScoreOptions(float(alpha), request.split)

    def translator(self, options: DecodeOptions | ScoreOptions) -> Engine:
        """A translator over the loaded model with the options' length penalty."""
        return translator_for(self.run, with_length_penalty(self.run.config, options.length_penalty))

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
        scored = score_lines(self.translator(options), sources, targets, options.split)
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
            )
            for p in scored
        ]

    def translate(self, sentences: list[str], options: DecodeOptions) -> list[SentenceResult]:
        """Translate a batch of sentences with one set of options."""
        translator = self.translator(options)
        translations = translator.translate(sentences, beam_size=options.beam, nbest=options.nbest)
        return [self.result(translator, t, options.attention) for t in translations]

    def result(self, translator: Engine, translation: Translation, attention: bool) -> SentenceResult:
        """One sentence's answer: the n-best list with scores and tokens, and its attention if asked."""
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
        )

    def split(self, line: str) -> SplitLine:
        """The line's sentences as `translate` splits them (long ones cut at clause punctuation)."""
        return split_for(self.run.config, self.run.src_vocab, line)[0]

    def plan(self, request: TranslateRequest) -> list[tuple[SplitLine, list[str]]]:
        """Each entry's sentences (split unless the request says not to) and notes on the splitting."""
        return plan_lines(translator_for(self.run), request.sentences, request.split)

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
                "max_body_bytes": MAX_BODY_BYTES,
            },
            batching={"max_batch": self.max_batch, "max_wait_ms": self.max_wait_s * 1000},
        )
