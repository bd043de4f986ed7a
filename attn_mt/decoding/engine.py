"""The engine interface: what translate, eval, serve and `attn_mt.load` ask of the engine that runs a
model, and the steps every engine shares (no torch, so CTranslate2 runs without it).

Two engines implement `Engine`: `Translator` (torch, translator.py) and `Ctranslate2Translator`
(ctranslate2_engine.py). `translate_with` is their `translate`: it takes the call's `DecodeSettings`
(settings.py, resolved and checked there once), prepares each sentence as the training data was,
leaves blank sentences blank, hands the others to the engine's `search` and detokenizes what comes
back. What an engine cannot do is a capability the caller reads before asking (`search_attention`,
`all_attention_maps`, `search_prefix`, `search_sampling`), not an error half-way.

A target prefix is given as text and prepared as the training data's target side was (the same
preprocessing, tokenizer and subword pieces, `prefix_ids`); the search then forces those ids first
(decoding/search.py). Its words must all be in the target vocabulary (a word it lacks would be
<unk>), it may not hold a token no output holds (<pad>, <bos>: outputs.py's `never_output_ids`) or
<eos>, and it must leave room for the <eos> within the sentence's output length limit; a blank
prefix is no prefix. No engine's output, searched or sampled, holds <pad> or <bos> either; <unk> is a
training target (the corpus's rare words), so an output may hold it and a prefix may force it when
written as `<unk>` (a word the vocabulary lacks is refused: the model would read it as <unk>).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from attn_mt.config import Config
from attn_mt.data.vocab import UNK, Vocab
from attn_mt.decoding.outputs import (
    PROGRESS_DELAY_S,
    Hypothesis,
    Sampling,
    Translation,
    never_output_ids,
    output_length_limits,
    position_limit,
    prepare_sentence,
)
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.progress_bars import progress_bar

if TYPE_CHECKING:
    from attn_mt.decoding.attention import SentenceAttention


@dataclass
class Found:
    """What an engine's search found for one prepared sentence: its n-best outputs and input warnings."""

    hypotheses: list[Hypothesis]
    warnings: list[str]


@dataclass
class Forced:
    """A prepared sentence scored along a given output: each target token's log-probability, then <eos>'s."""

    log_probs: list[float]
    warnings: list[str]


@runtime_checkable
class Engine(Protocol):
    """A model that translates prepared sentences, greedy or beam search, and shows its attention."""

    name: str  # torch or ctranslate2
    cfg: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    search_attention: bool  # translate(need_attention=True) gives each hypothesis its cross-attention
    all_attention_maps: bool  # attention() shows every map of the model, else what attention_description says
    search_prefix: bool  # search(prefixes=...) forces each sentence's output to start with given ids
    search_sampling: bool  # search(sampling=...) draws its outputs instead of searching

    def search(
        self,
        sources: list[list[str]],
        settings: DecodeSettings,
        need_attention: bool,
        advance: Callable[[int], object],
        prefixes: list[list[int]] | None = None,
    ) -> list[Found]:
        """Each non-empty prepared sentence's outputs as `settings` asks (its `sampling`: draw
        `sampling.samples` outputs per sentence, in the order drawn); `advance(n)` after each n sentences.

        `prefixes[i]`: target ids sentence i's outputs start with ([]: none)."""
        ...

    def translate(
        self,
        sentences: list[str],
        beam_size: int | None = None,
        nbest: int = 1,
        need_attention: bool = False,
        progress: bool = False,
        prefix: list[str] | None = None,
        sampling: Sampling | None = None,
        settings: DecodeSettings | None = None,
    ) -> list[Translation]:
        """Translate every sentence (blank ones give blank outputs): `translate_with(self, ...)` with
        `settings`, or with `call_settings` of the shorthand `beam_size`, `nbest` and `sampling`."""
        ...

    def force(
        self, sources: list[list[str]], targets: list[list[int]], advance: Callable[[int], object]
    ) -> list[Forced]:
        """Score each prepared sentence along its target ids (no <bos>/<eos>); `advance` as in search."""
        ...

    def source_ids(self, tokens: list[str]) -> tuple[list[int], int]:
        """The ids the engine reads for one prepared sentence, and how many are not padding."""
        ...

    def attention(self, translation: Translation, words: bool = False) -> SentenceAttention:
        """The attention maps of a translated sentence's best output (words: subwords merged)."""
        ...

    def attention_description(self) -> str:
        """Which maps `attention` shows, for /info and the explorer page."""
        ...

    def description(self) -> str:
        """Which engine runs the model and how, for scores.json, /info and the explorer page."""
        ...

    def parameter_count(self) -> int:
        """How many parameters the model has."""
        ...


def check_attention(translation: Translation) -> None:
    """Refuse to show attention for a sentence with no output (a blank input), for every engine alike."""
    if not translation.hypotheses:
        raise UserError(f"no attention to show for {translation.source!r}: it has no output (blank input)")


def prefix_ids(engine: Engine, sources: list[list[str]], prefixes: list[str]) -> list[list[int]]:
    """Each prefix text prepared as the training targets were, as target ids ([] for a blank one, and
    for a blank sentence, which stays blank).

    A prefix is refused (UserError naming it, 1-based) when a word or piece of it is not in the target
    vocabulary, when it holds a special token, or when it leaves no room for the <eos> within the
    output length limit of its source sentence (prepared tokens `sources[i]`).
    """
    if len(prefixes) != len(sources):
        raise UserError(f"{len(prefixes)} prefixes for {len(sources)} sentences: give one per sentence")
    cfg, vocab = engine.cfg, engine.tgt_vocab
    never = {*never_output_ids(vocab), vocab.eos_id}
    found = []
    for number, (source, text) in enumerate(zip(sources, prefixes, strict=True), start=1):
        tokens = prepare_sentence(cfg, vocab, text) if text.strip() and source else []
        ids = vocab.encode(tokens)
        lacking = [t for t, i in zip(tokens, ids, strict=True) if i == vocab.unk_id and t != UNK]
        if lacking:
            raise UserError(
                f"prefix {number} ({text[:40]!r}) holds what the target vocabulary lacks: "
                f"{' '.join(dict.fromkeys(lacking))}; a prefix can only force tokens the model can output"
            )
        special = [t for t, i in zip(tokens, ids, strict=True) if i in never]
        if special:
            raise UserError(
                f"prefix {number} ({text[:40]!r}) holds {' '.join(dict.fromkeys(special))}: no output holds "
                "<pad> or <bos>, and <eos> ends it; a prefix can only force tokens the model can output"
            )
        if ids:
            dc = cfg.decode
            limit = output_length_limits(
                [engine.source_ids(source)[1]], dc.max_len_a, dc.max_len_b, position_limit(cfg)
            )
            if len(ids) >= limit[0]:
                raise UserError(
                    f"prefix {number} ({text[:40]!r}) has {len(ids)} target tokens, but the output of its "
                    f"sentence may hold at most {limit[0] - 1} (decode.max_len_a and max_len_b): shorten it"
                )
        found.append(ids)
    return found


@contextmanager
def collections_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused inside (reference counting still frees); nothing
    changes where it was already off (a caller's pause, or the caller's own choice).

    A search makes no reference cycles, but the collector's full passes walked every object made
    since start-up, torch's included: a tenth of `attn-mt translate`'s time on 20,000 short lines
    (docs/benchmarks.md). What exists on entry is frozen (not walked) until the block ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def call_settings(
    engine: Engine,
    settings: DecodeSettings | None,
    beam_size: int | None = None,
    nbest: int = 1,
    sampling: Sampling | None = None,
) -> DecodeSettings:
    """The settings an engine's `translate` decodes with: those given, else the shorthand `beam_size`,
    `nbest` and `sampling` resolved against the run's decode config (not both)."""
    if settings is None:
        return DecodeSettings.resolve(engine.cfg.decode, beam_size, nbest, sampling=sampling)
    if beam_size is not None or nbest != 1 or sampling is not None:
        raise TypeError("give DecodeSettings or beam_size/nbest/sampling, not both")
    return settings


def translate_with(
    engine: Engine,
    sentences: list[str],
    settings: DecodeSettings | None = None,
    need_attention: bool = False,
    progress: bool = False,
    prefix: list[str] | None = None,
) -> list[Translation]:
    """Translate every sentence with `engine` (see the module docstring) as `settings` asks (None: the
    run's decode settings).

    `prefix[i]`: the text sentence i's outputs must start with; `settings.sampling`: draw the outputs
    (`Sampling`), `sampling.samples` of them per sentence in the order drawn, each scored with its
    log-probability. With `progress`, stderr counts the sentences done: a bar on a terminal, a line
    now and then in a file.
    """
    settings = DecodeSettings.resolve(engine.cfg.decode) if settings is None else settings
    if need_attention and not engine.search_attention:
        raise UserError(
            f"the {engine.name} engine returns no attention from its search: ask attention() "
            "for a translated sentence instead"
        )
    if prefix is not None and not engine.search_prefix:
        raise UserError(f"the {engine.name} engine cannot force a target prefix")
    if settings.sampling is not None and not engine.search_sampling:
        raise UserError(f"the {engine.name} engine cannot sample")
    with collections_paused():
        results = [Translation(s, prepare_sentence(engine.cfg, engine.src_vocab, s)) for s in sentences]
        todo = [i for i, r in enumerate(results) if r.source_tokens]
        sources = [results[i].source_tokens for i in todo]
        forced = None
        if prefix is not None:
            forced = prefix_ids(engine, [r.source_tokens for r in results], prefix)
            forced = [forced[i] for i in todo] if any(forced) else None
        bar = progress_bar(
            len(todo), "translating", " sentences", enabled=progress, leave=False, delay=PROGRESS_DELAY_S
        )
        found = engine.search(sources, settings, need_attention, bar.update, prefixes=forced)
        bar.close()
        for i, sentence in zip(todo, found, strict=True):
            results[i].warnings.extend(sentence.warnings)
            results[i].hypotheses = sentence.hypotheses
            results[i].outputs = [engine.tgt_vocab.detokenize(h.tokens) for h in sentence.hypotheses]
    return results
