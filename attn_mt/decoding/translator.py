"""From raw sentences to translations: preprocess, encode, batch by length, search, detokenise."""

from __future__ import annotations

import torch

from attn_mt.config import Config
from attn_mt.data.encode import encode_sources
from attn_mt.data.vocab import BOS, EOS, Vocab
from attn_mt.decoding.attention import SentenceAttention, collect_attention, merge_words, word_groups
from attn_mt.decoding.outputs import PROGRESS_DELAY_S, Translation, max_source_tokens, prepare_sentence
from attn_mt.decoding.search import beam_search, greedy_search
from attn_mt.models.base import EncoderDecoder
from attn_mt.progress import progress_bar


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
    """Translates batches of sentences with one trained model, greedy or beam search."""

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

    def detokenize(self, ids: list[int]) -> str:
        """Target ids -> text: book tokens joined by spaces, or sentencepiece's natural text."""
        return self.tgt_vocab.detokenize(ids)

    def prepare(self, sentence: str) -> list[str]:
        """Preprocess and tokenize a user sentence exactly as the training data was."""
        return prepare_sentence(self.cfg, self.src_vocab, sentence)

    @torch.inference_mode()
    def translate(
        self,
        sentences: list[str],
        beam_size: int | None = None,
        nbest: int = 1,
        need_attention: bool = False,
        progress: bool = False,
    ) -> list[Translation]:
        """Translate every sentence (blank ones give blank outputs), longest-first in batches.

        With `progress`, stderr counts the sentences done: a bar on a terminal, a line now and then in a file.
        """
        dc = self.cfg.decode
        beam = dc.beam_size if beam_size is None else beam_size
        was_training = self.model.training
        self.model.eval()
        results = [Translation(s, self.prepare(s)) for s in sentences]
        todo = [i for i, r in enumerate(results) if r.source_tokens]
        todo.sort(key=lambda i: -len(results[i].source_tokens))
        bar = progress_bar(
            len(todo), "translating", " sentences", enabled=progress, leave=False, delay=PROGRESS_DELAY_S
        )
        for start in range(0, len(todo), dc.batch_size):
            chunk = todo[start : start + dc.batch_size]
            encoded = encode_sources(
                [results[i].source_tokens for i in chunk], self.src_vocab, max_len=self.max_src
            )
            for i, warning in zip(chunk, encoded.warnings, strict=True):
                results[i].warnings.extend(warning)
            src, src_lens = self._pad(encoded.src).to(self.device), encoded.src_lens.to(self.device)
            common = dict(
                bos_id=self.tgt_vocab.bos_id,
                eos_id=self.tgt_vocab.eos_id,
                max_len_a=dc.max_len_a,
                max_len_b=dc.max_len_b,
                need_attention=need_attention,
            )
            if beam == 1 and nbest == 1:
                per_sentence = [[h] for h in greedy_search(self.model, src, src_lens, **common)]
            else:
                per_sentence = beam_search(
                    self.model,
                    src,
                    src_lens,
                    beam_size=beam,
                    nbest=nbest,
                    length_penalty=dc.length_penalty,
                    **common,
                )
            for i, hyps in zip(chunk, per_sentence, strict=True):
                results[i].hypotheses = hyps
                results[i].outputs = [self.detokenize(h.tokens) for h in hyps]
            bar.update(len(chunk))
        bar.close()
        self.model.train(was_training)
        return results
