"""What every decoding engine returns, and the rules they share; no torch, so CTranslate2 runs without it.

`Translator` (torch, translator.py) and `Ctranslate2Translator` (ctranslate2_engine.py) both turn
sentences into `Translation`s of `Hypothesis`es, prepare a user's sentence as the training data was,
cap sources at `max_source_tokens` and outputs at `output_length_limits`, and rank beam outputs
with GNMT's length penalty (search.py states the conventions).
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attn_mt.config import Config
from attn_mt.data.preprocess import preprocess, tokenize
from attn_mt.data.subword import prepare_text
from attn_mt.data.vocab import Vocab
from attn_mt.decoding import display
from attn_mt.errors import UserError
from attn_mt.i18n import _
from attn_mt.limits import MAX_SAMPLES, MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K

if TYPE_CHECKING:
    import torch

PROGRESS_DELAY_S = 1.0  # a progress bar appears only when translating takes longer than this


@dataclass
class Hypothesis:
    """One finished output: tokens without <bos>/<eos>, raw and length-normalised log-probability."""

    tokens: list[int]
    score: float
    norm_score: float
    attention: torch.Tensor | None = None  # (steps incl. <eos>, ..., src_len) cross-attention, on CPU


@dataclass
class Translation:
    """One input sentence's n-best outputs (best first) and any warnings about its input."""

    source: str
    source_tokens: list[str]
    outputs: list[str] = field(default_factory=list)
    hypotheses: list[Hypothesis] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The best translation ('' for a blank input)."""
        return self.outputs[0] if self.outputs else ""

    def _repr_html_(self) -> str:
        """Jupyter's view: the source, its tokens and every output with its scores (`translation_html`)."""
        return translation_html(self)


def translation_html(translation: Translation) -> str:
    """The source, its tokens, each n-best output with its scores, and any warnings."""
    rows = [
        [str(rank), html.escape(text), f"{hyp.score:.4f}", f"{hyp.norm_score:.4f}", str(len(hyp.tokens))]
        for rank, (text, hyp) in enumerate(
            zip(translation.outputs, translation.hypotheses, strict=True), start=1
        )
    ]
    header = [_("rank"), _("output"), _("log-prob"), _("length-normalised"), _("tokens")]
    parts = [
        f"<p><b>{html.escape(_('source'))}</b> {html.escape(translation.source)}</p>",
        f"<p><b>{html.escape(_('source tokens'))}</b> {display.tokens_html(translation.source_tokens)}</p>",
        display.table_html(header, rows)
        if rows
        else f"<p>{html.escape(_('(no output: a blank input)'))}</p>",
    ]
    warning = html.escape(_("warning"))
    parts += [f"<p><b>{warning}</b> {html.escape(text)}</p>" for text in translation.warnings]
    return f"<div>{''.join(parts)}</div>"


@dataclass(frozen=True)
class Sampling:
    """Decode by sampling: `samples` outputs per sentence, each drawn token by token from the model's
    distribution divided by `temperature`, cut to its `top_k` most probable tokens (0: all) and to the
    fewest whose probability reaches `top_p` (1.0: all).

    Sample j of a sentence is seeded from `seed`, j and the sentence's prepared tokens (`seed_for`), so
    it is the same whatever else is translated with it, in whichever batch.
    """

    samples: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.samples <= MAX_SAMPLES:
            raise UserError(f"--sample must be from 1 to {MAX_SAMPLES}, got {self.samples}")
        if self.temperature == 0:
            raise UserError(
                "--temperature 0 would always take the most probable token: that is greedy search "
                "(leave out --sample, with --beam 1)"
            )
        if not 0 < self.temperature <= MAX_TEMPERATURE:
            raise UserError(
                f"--temperature must be a number above 0 and at most {MAX_TEMPERATURE:g}, "
                f"got {self.temperature}"
            )
        if not 0 <= self.top_k <= MAX_TOP_K:
            raise UserError(f"--top-k must be 0 (every token) to {MAX_TOP_K}, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise UserError(f"--top-p must be above 0 and at most 1 (every token), got {self.top_p}")
        if not 0 <= self.seed <= MAX_SEED:
            raise UserError(f"--seed must be from 0 to {MAX_SEED}, got {self.seed}")

    def seed_for(self, source_tokens: Sequence[str], sample: int) -> int:
        """The random seed of sample `sample` of the sentence prepared as `source_tokens` (63 bits)."""
        text = "\x1f".join([str(self.seed), str(sample), *source_tokens]).encode("utf-8")
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def never_output_ids(vocab: Vocab) -> tuple[int, ...]:
    """The target ids no engine's output may hold, greedy, beam or sampled: <pad> and <bos>, which are
    never a training target (decoding/search.py). <unk> is one (the corpus's rare words), <eos> ends."""
    return (vocab.pad_id, vocab.bos_id)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty ((5 + length) / 6) ** alpha; `length` counts the <eos>."""
    return ((5.0 + length) / 6.0) ** alpha


def output_length_limits(
    src_lens: Sequence[int], max_len_a: float, max_len_b: float, positions: int | None = None
) -> list[int]:
    """floor(max_len_a * src_len + max_len_b) per sentence, at most `positions` when given
    (`position_limit`): the target-token budget incl. <eos>."""
    limits = [math.floor(float(n) * max_len_a + max_len_b) for n in src_lens]
    if positions is not None:
        limits = [min(limit, positions) for limit in limits]
    if limits and min(limits) < 1:
        shortest = src_lens[limits.index(min(limits))]
        raise UserError(
            f"max_len_a = {max_len_a} and max_len_b = {max_len_b} allow no output token for a source of "
            f"{int(shortest)} tokens; raise decode.max_len_b"
        )
    return limits


def position_limit(cfg: Config) -> int | None:
    """The most output tokens, <eos> included, the decoder has positions for: a learned position table's
    model.max_positions (the decoder reads <bos> and all but the last token); None for other models."""
    model = cfg.model
    learned = model.type == "transformer" and model.positional_encoding == "learned"
    return model.max_positions if learned else None


def max_source_tokens(cfg: Config) -> int:
    """Longest source (tokens incl. <eos>) a run translates: the book's num_steps, else 4 x data.max_len,
    and never more than a learned position table holds (`position_limit`); a longer one is cut, with
    a warning."""
    longest = cfg.data.num_steps if cfg.data.mode == "book" else 4 * cfg.data.max_len
    table = position_limit(cfg)
    return longest if table is None else min(longest, table)


def prepare_sentence(cfg: Config, src_vocab: Vocab, sentence: str) -> list[str]:
    """A user sentence preprocessed and tokenized exactly as the training data was."""
    if cfg.data.tokenizer == "book":
        return tokenize(preprocess(sentence, cfg.data.normalize_apostrophes))
    return src_vocab.tokenize(prepare_text(sentence, cfg.data.normalize_apostrophes))
