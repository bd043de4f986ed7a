"""The torch engine: prepared sentences in batches by length, greedy or beam search, attention maps.

It implements decoding/engine.py's `Engine`; `translate_with` there prepares and detokenizes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attn_mt.config import Config
from attn_mt.data.encode import encode_sources
from attn_mt.data.vocab import BOS, EOS, Vocab
from attn_mt.decoding.attention import SentenceAttention, collect_attention, merge_words, word_groups
from attn_mt.decoding.engine import Forced, Found, call_settings, check_attention, translate_with
from attn_mt.decoding.outputs import (
    Sampling,
    Translation,
    max_source_tokens,
    never_output_ids,
    position_limit,
)
from attn_mt.decoding.search import Sampler, beam_search, forced_log_probs, greedy_search
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.models.base import EncoderDecoder


def group_labels(vocab: Vocab, ids: list[int], groups: list[list[int]]) -> list[str]:
    """One label per group of ids: the detokenised word, or the special token's name (<eos>, ...)."""
    labels = []
    for group in groups:
        group_ids = [ids[p] for p in group]
        word = vocab.detokenize(group_ids)
        labels.append(word if word else " ".join(vocab.decode(group_ids)))
    return labels


def in_words(
    pieces: SentenceAttention, src_vocab: Vocab, tgt_vocab: Vocab, src_ids: list[int], out: list[int]
) -> SentenceAttention:
    """Subword-level maps of source `src_ids` and output `out` (no <eos>) merged into words."""
    out_ids = [*out, tgt_vocab.eos_id]
    src_groups = word_groups(src_vocab.word_starts(src_ids))
    out_groups = word_groups(tgt_vocab.word_starts(out_ids))
    return merge_words(
        pieces,
        src_groups,
        out_groups,
        group_labels(src_vocab, src_ids, src_groups),
        group_labels(tgt_vocab, out_ids, out_groups),
    )


class Translator:
    """Translates batches of sentences with one trained torch model, greedy or beam search (an `Engine`)."""

    name = "torch"
    search_attention = True  # the search returns each hypothesis's cross-attention when asked
    all_attention_maps = True
    search_prefix = True
    search_sampling = True

    def __init__(
        self,
        model: EncoderDecoder,
        src_vocab: Vocab,
        tgt_vocab: Vocab,
        cfg: Config,
        device: torch.device | str = "cpu",
    ):
        self.model, self.src_vocab, self.tgt_vocab, self.cfg = model, src_vocab, tgt_vocab, cfg
        self.device = torch.device(device)
        self.max_src = max_source_tokens(cfg)

    def _pad(self, src: torch.Tensor) -> torch.Tensor:
        """Book mode pads every source to num_steps like the book's predict_seq2seq (its GRU reads pads)."""
        if self.cfg.data.mode != "book" or src.shape[1] >= self.max_src:
            return src
        fill = torch.full((src.shape[0], self.max_src - src.shape[1]), self.src_vocab.pad_id, dtype=src.dtype)
        return torch.cat([src, fill], dim=1)  # (B, num_steps)

    def source_ids(self, tokens: list[str]) -> tuple[list[int], int]:
        """The ids the model reads for one prepared sentence, as in translate, and how many are not padding.

        The ids end with <eos> unless the sentence was truncated; book mode pads them to num_steps.
        """
        encoded = encode_sources([tokens], self.src_vocab, max_len=self.max_src)
        return self._pad(encoded.src)[0].tolist(), int(encoded.src_lens[0])

    def attention(self, translation: Translation, words: bool = False) -> SentenceAttention:
        """Every attention map of the model for one translated sentence and its best output.

        The maps come from the source exactly as `translate` fed it (book mode's padding included).
        With `words`, subword pieces are merged into words (see `merge_words`); book tokens already are.
        """
        check_attention(translation)
        fed, src_len = self.source_ids(translation.source_tokens)
        ids = fed[:src_len]
        out = translation.hypotheses[0].tokens
        pieces = collect_attention(
            self.model,
            fed,
            out,
            bos_id=self.tgt_vocab.bos_id,
            source_tokens=self.src_vocab.labels(ids),
            output_tokens=[*self.tgt_vocab.labels(out), EOS],
            bos_token=BOS,
            src_len=src_len,
            source_ends_with_eos=ids[-1] == self.src_vocab.eos_id,
        )
        return in_words(pieces, self.src_vocab, self.tgt_vocab, ids, out) if words else pieces

    def attention_description(self) -> str:
        """Which maps `attention` shows, for /info and the explorer page."""
        if self.cfg.model.type == "transformer":
            return "every map: encoder_self, decoder_self and cross, each layer and head"
        return "the Bahdanau alignment (cross), as one layer of one head"

    def description(self) -> str:
        """Which engine runs the model, for scores.json, /info and the explorer page."""
        return "torch"

    def parameter_count(self) -> int:
        """How many parameters the model has."""
        return sum(p.numel() for p in self.model.parameters())

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
        """Translate every sentence (a blank one stays blank); see `translate_with` and `call_settings`."""
        chosen = call_settings(self, settings, beam_size, nbest, sampling)
        return translate_with(self, sentences, chosen, need_attention, progress, prefix)

    def search_arguments(self, need_attention: bool) -> dict[str, object]:
        """The keyword arguments greedy and beam search share: special ids (and those no output may
        hold), length limits (a learned position table's size too), attention."""
        dc = self.cfg.decode
        return dict(
            bos_id=self.tgt_vocab.bos_id,
            eos_id=self.tgt_vocab.eos_id,
            never=never_output_ids(self.tgt_vocab),
            max_len_a=dc.max_len_a,
            max_len_b=dc.max_len_b,
            positions=position_limit(self.cfg),
            need_attention=need_attention,
        )

    @torch.inference_mode()
    def search(
        self,
        sources: list[list[str]],
        settings: DecodeSettings,
        need_attention: bool,
        advance: Callable[[int], object],
        prefixes: list[list[int]] | None = None,
    ) -> list[Found]:
        """Each prepared sentence's n-best outputs (or samples), decoded longest-first in batches of
        decode.batch_size sentences (with sampling, of decode.batch_size rows of samples)."""
        dc, sampling = self.cfg.decode, settings.sampling
        was_training = self.model.training
        self.model.eval()
        found: list[Found] = [Found([], []) for _ in sources]
        order = sorted(range(len(sources)), key=lambda k: -len(sources[k]))
        size = dc.batch_size if sampling is None else max(1, dc.batch_size // sampling.samples)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            encoded = encode_sources([sources[k] for k in chunk], self.src_vocab, max_len=self.max_src)
            src, src_lens = self._pad(encoded.src).to(self.device), encoded.src_lens.to(self.device)
            common = self.search_arguments(need_attention)
            prefix = None if prefixes is None else [prefixes[k] for k in chunk]
            if sampling is not None:
                per_sentence = self._sample(
                    src, src_lens, [sources[k] for k in chunk], prefix, sampling, common
                )
            elif settings.beam_size == 1 and settings.nbest == 1:
                per_sentence = [
                    [h] for h in greedy_search(self.model, src, src_lens, prefix=prefix, **common)
                ]
            else:
                per_sentence = beam_search(
                    self.model,
                    src,
                    src_lens,
                    beam_size=settings.beam_size,
                    nbest=settings.nbest,
                    length_penalty=settings.length_penalty,
                    prefix=prefix,
                    stop_at_k_finished=self.cfg.decode.beam_stop == "k_finished",
                    **common,
                )
            for k, hyps, warnings in zip(chunk, per_sentence, encoded.warnings, strict=True):
                found[k] = Found(hyps, list(warnings))
            advance(len(chunk))
        self.model.train(was_training)
        return found

    def _sample(
        self,
        src: torch.Tensor,
        src_lens: torch.Tensor,
        sources: list[list[str]],
        prefix: list[list[int]] | None,
        sampling: Sampling,
        common: dict[str, object],
    ) -> list[list]:
        """`sampling.samples` drawn outputs of each sentence of (B, S) `src`, in the order drawn."""
        n = sampling.samples
        seeds = tuple(sampling.seed_for(tokens, j) for tokens in sources for j in range(n))
        sampler = Sampler(sampling.temperature, sampling.top_k, sampling.top_p, seeds)
        drawn = greedy_search(
            self.model,
            src.repeat_interleave(n, dim=0),  # (B*n, S): each sentence's rows side by side
            src_lens.repeat_interleave(n, dim=0),
            prefix=None if prefix is None else [ids for ids in prefix for _ in range(n)],
            sampler=sampler,
            **common,
        )
        return [drawn[i * n : (i + 1) * n] for i in range(len(sources))]

    @torch.inference_mode()
    def force(
        self, sources: list[list[str]], targets: list[list[int]], advance: Callable[[int], object]
    ) -> list[Forced]:
        """Each prepared sentence scored along its target, in batches of decode.batch_size, longest first."""
        was_training = self.model.training
        self.model.eval()
        scored: list[Forced] = [Forced([], []) for _ in sources]
        order = sorted(range(len(sources)), key=lambda k: -len(sources[k]))
        for start in range(0, len(order), self.cfg.decode.batch_size):
            chunk = order[start : start + self.cfg.decode.batch_size]
            encoded = encode_sources([sources[k] for k in chunk], self.src_vocab, max_len=self.max_src)
            src, src_lens = self._pad(encoded.src).to(self.device), encoded.src_lens.to(self.device)
            rows = forced_log_probs(
                self.model,
                src,
                src_lens,
                [targets[k] for k in chunk],
                bos_id=self.tgt_vocab.bos_id,
                eos_id=self.tgt_vocab.eos_id,
            )
            for k, row, warnings in zip(chunk, rows, encoded.warnings, strict=True):
                scored[k] = Forced(row, list(warnings))
            advance(len(chunk))
        self.model.train(was_training)
        return scored
