"""The engine interface: what translate, eval, serve and `attn_mt.load` ask of the engine that runs a
model, and the steps every engine shares (no torch, so CTranslate2 runs without it).

Two engines implement `Engine`: `Translator` (torch, translator.py) and `Ctranslate2Translator`
(ctranslate2_engine.py). `translate_with` is their `translate`: it checks the beam and n-best,
prepares each sentence as the training data was, leaves blank sentences blank, hands the others to
the engine's `search` and detokenizes what comes back. What an engine cannot do is a capability
the caller reads before asking (`search_attention`, `all_attention_maps`), not an error half-way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from attn_mt.config import Config
from attn_mt.data.vocab import Vocab
from attn_mt.decoding.outputs import PROGRESS_DELAY_S, Hypothesis, Translation, prepare_sentence
from attn_mt.errors import UserError
from attn_mt.limits import MAX_BEAM
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

    def search(
        self,
        sources: list[list[str]],
        beam: int,
        nbest: int,
        need_attention: bool,
        advance: Callable[[int], object],
    ) -> list[Found]:
        """Each non-empty prepared sentence's outputs; `advance(n)` after each n sentences."""
        ...

    def translate(
        self,
        sentences: list[str],
        beam_size: int | None = None,
        nbest: int = 1,
        need_attention: bool = False,
        progress: bool = False,
    ) -> list[Translation]:
        """Translate every sentence (blank ones give blank outputs): `translate_with(self, ...)`."""
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


def check_search(beam: int, nbest: int, vocab_size: int | None = None) -> None:
    """Refuse a beam outside 1..MAX_BEAM (attn_mt/limits.py), an n-best outside 1..beam, and (given the
    target vocabulary's size) a beam whose 2 x beam candidates per step the vocabulary cannot fill, with
    the same words for every engine and entry point."""
    if beam < 1:
        raise UserError(f"beam must be at least 1, got {beam}")
    if beam > MAX_BEAM:
        raise UserError(f"beam must be at most {MAX_BEAM}, got {beam}")
    if nbest < 1:
        raise UserError(f"nbest must be at least 1, got {nbest}")
    if nbest > beam:
        raise UserError(f"nbest {nbest} needs a beam at least as large (the beam is {beam})")
    if vocab_size is not None and vocab_size < 2 * beam:
        raise UserError(
            f"beam size {beam} needs at least {2 * beam} target vocabulary entries, got {vocab_size}"
        )


def check_attention(translation: Translation) -> None:
    """Refuse to show attention for a sentence with no output (a blank input), for every engine alike."""
    if not translation.hypotheses:
        raise UserError(f"no attention to show for {translation.source!r}: it has no output (blank input)")


def translate_with(
    engine: Engine,
    sentences: list[str],
    beam_size: int | None = None,
    nbest: int = 1,
    need_attention: bool = False,
    progress: bool = False,
) -> list[Translation]:
    """Translate every sentence with `engine` (see the module docstring); `beam_size` None: the run's.

    With `progress`, stderr counts the sentences done: a bar on a terminal, a line now and then in a file.
    """
    beam = engine.cfg.decode.beam_size if beam_size is None else beam_size
    check_search(beam, nbest)
    if need_attention and not engine.search_attention:
        raise UserError(
            f"the {engine.name} engine returns no attention from its search: ask attention() "
            "for a translated sentence instead"
        )
    results = [Translation(s, prepare_sentence(engine.cfg, engine.src_vocab, s)) for s in sentences]
    todo = [i for i, r in enumerate(results) if r.source_tokens]
    bar = progress_bar(
        len(todo), "translating", " sentences", enabled=progress, leave=False, delay=PROGRESS_DELAY_S
    )
    found = engine.search([results[i].source_tokens for i in todo], beam, nbest, need_attention, bar.update)
    bar.close()
    for i, sentence in zip(todo, found, strict=True):
        results[i].warnings.extend(sentence.warnings)
        results[i].hypotheses = sentence.hypotheses
        results[i].outputs = [engine.tgt_vocab.detokenize(h.tokens) for h in sentence.hypotheses]
    return results
