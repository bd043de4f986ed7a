"""The CTranslate2 engine: an exported folder translates with the interface (decoding/engine.py's
`Engine`) and the results of `Translator`.

CTranslate2 runs its own greedy and beam search (Klein et al., OpenNMT's C++ engine). Four rules
make its output attn-mt's (decoding/search.py states attn-mt's conventions):
  1. Length limit per sentence: attn-mt allows floor(max_len_a * src_len + max_len_b) tokens,
     <eos> included; CTranslate2 takes one `max_decoding_length` per call, so sentences are
     grouped by their limit (for the Transformer, by source length) and each group is one call.
  2. `min_decoding_length=0`: attn-mt may end a sentence at once (CTranslate2 forbids <eos> first
     by default).
  3. Scores: CTranslate2 returns raw log-probabilities (greedy: `length_penalty=0`; beam: a
     penalty of 1e-6, whose factor is undone, since with exactly 0 its beam search stops at the
     first finished hypothesis instead of at K); attn-mt's GNMT length penalty ranks the K
     finished hypotheses, which come with their <eos>.
  4. At the length limit attn-mt forces <eos>; CTranslate2 stops there without it, so such a
     hypothesis is scored again with its <eos> (`score_batch`), giving attn-mt's score.
Beam search still differs in four cases. The best output is the same except in the first, the
fourth and, rarely, the third:
  * which hypotheses count as finished and when the search stops: CTranslate2 stops at K finished
    hypotheses where attn-mt's goes on while a live one can still beat them (search.py), and it may
    go on after attn-mt's search has stopped, or not count one that attn-mt's does, and so return
    another output (0 to 2 of 120 sentences at beams 2 to 4 on the tests' tiny subword runs of
    seeds 0-3; none on the whole-corpus model's 2,000 test sentences at beam 4);
  * n-best lists: when more than K hypotheses have finished by the step the search stops, attn-mt
    keeps the K best by the length penalty, CTranslate2 the K with the highest log-probabilities;
    the best by the length penalty is in both, the rest can differ.
  * at the length limit attn-mt closes the best K candidates that do not end, CTranslate2 the best
    K of all candidates.
  * <pad> or <bos> among the best 2K candidates of a step (only an undertrained model ranks them so
    high): attn-mt's search never keeps them, CTranslate2's keeps them as live hypotheses unless an
    output ends up holding one (see below), so the others can differ (at beam 3 on 300 sentences,
    2 n-best lists of the tests' tiny word-level Transformer, none of its subword run).

A target prefix goes to CTranslate2 as `target_prefix`, which forces it through the same steps;
every prefixed hypothesis is scored again with `score_batch`, so its score includes the prefix's
log-probabilities as attn-mt's does (and every sample, so it is scored under the model's own
distribution, as the torch engine scores samples). Sampling maps onto `sampling_topk` (0: every token),
`sampling_topp` and `sampling_temperature`, `num_hypotheses` samples per sentence; CTranslate2 draws
with its own generator, seeded once per process (`set_random_seed`), not per sentence, so its
samples differ from the torch engine's and may change with the batch a sentence is drawn in.
CTranslate2 refuses settings the torch engine reads without trouble, so they are mapped to what
they mean: a top-k at least the vocabulary's size keeps every token (0), and a top-p or temperature
that float32 rounds to 0 becomes float32's smallest normal number (the most probable token alone).

No output holds <pad> or <bos> (outputs.py's `never_output_ids`). CTranslate2's `suppress_sequences`
leaves them out by renormalising over the other tokens, which would change the scores of greedy and
beam search, so those run without it and a sentence whose answer holds one is decoded again with it
and scored again with `score_batch` (its score is then the model's own); samples always use it.

Batches go to `workers` single-thread CTranslate2 translators at once (asynchronous calls), which
beats one translator with several OpenMP threads (docs/shipping.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attn_mt.config import Config
from attn_mt.data.encode import source_rows
from attn_mt.data.vocab import BOS, EOS, Vocab
from attn_mt.decoding.engine import Forced, Found, call_settings, check_attention, translate_with
from attn_mt.decoding.outputs import (
    Hypothesis,
    Sampling,
    Translation,
    gnmt_length_penalty,
    max_source_tokens,
    never_output_ids,
    output_length_limits,
)
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.run.ctranslate2_folder import Ctranslate2Model, import_ctranslate2

if TYPE_CHECKING:
    from attn_mt.decoding.attention import SentenceAttention

BEAM_LENGTH_PENALTY = 1e-6  # nonzero: CTranslate2's beam stops at K finished hypotheses, not at the first
SMALLEST_FLOAT32 = float(np.finfo(np.float32).tiny)  # what a top-p or temperature that rounds to 0 becomes


def sampling_options(sampling: Sampling | None, vocab_size: int) -> dict[str, object]:
    """CTranslate2's sampling options for `sampling` (none without it: its search takes the arg-max),
    mapped into the ranges CTranslate2 accepts as the module docstring says."""
    if sampling is None:
        return {}
    return dict(
        sampling_topk=0 if sampling.top_k >= vocab_size else sampling.top_k,
        sampling_topp=max(sampling.top_p, SMALLEST_FLOAT32),
        sampling_temperature=max(sampling.temperature, SMALLEST_FLOAT32),
    )


def answer_of(pending: object) -> object:
    """The result of one asynchronous CTranslate2 call; a CUDA library it cannot load is a UserError."""
    try:
        return pending.result()
    except RuntimeError as exc:
        if "cannot be loaded" not in str(exc):
            raise
        raise UserError(
            f"CTranslate2 cannot run on this GPU: {exc}. Its pip wheels are built for one CUDA major "
            "version (CUDA 12 for ctranslate2 4.x); install that version's libraries (for example "
            "`pip install nvidia-cublas-cu12`, which attn-mt loads from site-packages), or translate "
            "with --device cpu, or translate the run itself rather than its CTranslate2 export"
        ) from None


@dataclass
class _Call:
    """One CTranslate2 call in flight: which sentences (indices into the work list) and their answers."""

    members: list[int]
    answers: list  # ctranslate2 AsyncTranslationResult or AsyncScoringResult, one per member


class Ctranslate2Translator:
    """Translates batches of sentences with an exported CTranslate2 folder, greedy or beam search."""

    name = "ctranslate2"
    search_attention = False  # CTranslate2's search returns no attention; attention() decodes again for it
    all_attention_maps = False  # one averaged cross-attention map (attention_description)
    search_prefix = True  # target_prefix
    search_sampling = True  # sampling_topk, sampling_topp, sampling_temperature (docstring: its seeding)

    def __init__(self, model: Ctranslate2Model, src_vocab: Vocab, tgt_vocab: Vocab, cfg: Config):
        self.model, self.src_vocab, self.tgt_vocab, self.cfg = model, src_vocab, tgt_vocab, cfg
        self.device = model.device
        self.max_src = max_source_tokens(cfg)
        self.never = set(never_output_ids(tgt_vocab))
        self.suppressed = [[token] for token in tgt_vocab.decode(sorted(self.never))]

    def attention_description(self) -> str:
        """What `attention` can show, for /info and the explorer page."""
        layers, heads = self.cfg.model.depths.decoder, self.cfg.model.num_heads
        return (
            f"cross-attention of decoder layer {self.model.attention_layer + 1} of {layers}, averaged "
            f"over its {heads} heads: CTranslate2 returns no other map (no encoder or decoder "
            "self-attention, other layers or single heads)"
        )

    def description(self) -> str:
        """Which engine runs the model and how, for scores.json, /info and the explorer page."""
        model = self.model
        weights = f"{model.weights} weights" + (f" ({model.int8_bits} bits)" if model.int8_bits else "")
        where = model.device if model.device == "cpu" else f"{model.device}:{model.device_index}"
        return (
            f"ctranslate2 {import_ctranslate2().__version__} on {where}, {weights} computed in "
            f"{model.compute_type}, {model.workers} worker(s) x {model.threads_per_worker} thread(s)"
        )

    def parameter_count(self) -> int:
        """How many parameters the model has (counted at export)."""
        return self.model.num_parameters

    def source_ids(self, tokens: list[str]) -> tuple[list[int], int]:
        """The ids CTranslate2 reads for a prepared sentence (<eos> last unless truncated), and how many."""
        rows, _ = source_rows([tokens], self.src_vocab, max_len=self.max_src)
        return rows[0], len(rows[0])

    def _submit(
        self,
        sources: list[list[str]],
        limits: list[int],
        members: list[int],
        beam_size: int,
        nbest: int,
        prefixes: list[list[str]] | None = None,
        sampling: Sampling | None = None,
        suppress: bool = False,
    ) -> list[_Call]:
        """Queue the sentences `members`, grouped by length limit, in batches of decode.batch_size;
        `prefixes` (target tokens), `sampling` and `suppress` (<pad> and <bos>: samples always) as the
        module docstring says."""
        groups: dict[int, list[int]] = {}
        for k in members:
            groups.setdefault(limits[k], []).append(k)
        calls = []
        size = self.cfg.decode.batch_size
        for limit in sorted(groups, reverse=True):
            group = groups[limit]
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                if limit == 1:  # only <eos> is allowed: an empty output, scored in _finish
                    calls.append(_Call(chunk, [None] * len(chunk)))
                    continue
                answers = self.model.translator.translate_batch(
                    [sources[k] for k in chunk],
                    None if prefixes is None else [prefixes[k] or None for k in chunk],
                    asynchronous=True,
                    beam_size=beam_size,
                    num_hypotheses=beam_size if beam_size > 1 else sampling.samples if sampling else nbest,
                    length_penalty=BEAM_LENGTH_PENALTY if beam_size > 1 else 0.0,
                    min_decoding_length=0,
                    max_decoding_length=limit - 1,
                    max_input_length=0,
                    return_scores=True,
                    return_end_token=True,
                    suppress_sequences=self.suppressed if suppress or sampling else None,
                    **sampling_options(sampling, len(self.tgt_vocab)),
                )
                calls.append(_Call(chunk, answers))
        return calls

    def _hypotheses(self, answer: object, penalty: float) -> list[tuple[list[int], float, bool]]:
        """(ids, raw log-probability, ended with <eos>) of each hypothesis of one CTranslate2 answer."""
        if answer is None:
            return [([], 0.0, False)]
        result = answer_of(answer)
        found = []
        for tokens, score in zip(result.hypotheses, result.scores, strict=True):
            ended = bool(tokens) and tokens[-1] == EOS
            raw = score * len(tokens) ** penalty if tokens else score  # CTranslate2 divided by len ** penalty
            ids = [self.tgt_vocab.token_to_idx[t] for t in (tokens[:-1] if ended else tokens)]
            found.append((ids, raw, ended))
        return found

    def _rescore(self, sources: list[list[str]], cut: list[tuple[int, int, list[int]]]) -> list[float]:
        """Log-probabilities of hypotheses cut at the length limit, closed with <eos> as attn-mt does,
        of prefixed ones, prefix included, and of samples."""
        if not cut:
            return []
        size = self.cfg.decode.batch_size
        answers = []
        for start in range(0, len(cut), size):
            chunk = cut[start : start + size]
            answers += self.model.translator.score_batch(
                [sources[k] for k, _, _ in chunk],
                [self.tgt_vocab.decode(ids) for _, _, ids in chunk],
                asynchronous=True,
                max_input_length=0,
            )
        return [float(np.sum(answer_of(answer).log_probs, dtype=np.float64)) for answer in answers]

    def force(
        self, sources: list[list[str]], targets: list[list[int]], advance: Callable[[int], object]
    ) -> list[Forced]:
        """Each prepared sentence scored along its target with CTranslate2's score_batch (<eos> last)."""
        rows, infos = source_rows(sources, self.src_vocab, max_len=self.max_src)
        size = self.cfg.decode.batch_size
        scored: list[Forced] = []
        for start in range(0, len(rows), size):
            answers = self.model.translator.score_batch(
                [self.src_vocab.decode(row) for row in rows[start : start + size]],
                [self.tgt_vocab.decode(ids) for ids in targets[start : start + size]],
                asynchronous=True,
                max_input_length=0,
            )
            for answer, info in zip(answers, infos[start : start + size], strict=True):
                scored.append(Forced([float(p) for p in answer_of(answer).log_probs], info.warnings))
            advance(len(answers))
        return scored

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

    def search(
        self,
        sources: list[list[str]],
        settings: DecodeSettings,
        need_attention: bool,
        advance: Callable[[int], object],
        prefixes: list[list[int]] | None = None,
    ) -> list[Found]:
        """Each prepared sentence's n-best outputs: CTranslate2's search under the rules of the docstring."""
        if not sources:
            return []
        beam_size, nbest, sampling = settings.beam_size, settings.nbest, settings.sampling
        dc = self.cfg.decode
        rows, infos = source_rows(sources, self.src_vocab, max_len=self.max_src)
        texts = [self.src_vocab.decode(row) for row in rows]
        limits = output_length_limits([len(row) for row in rows], dc.max_len_a, dc.max_len_b)
        penalty = BEAM_LENGTH_PENALTY if beam_size > 1 else 0.0
        if sampling is not None:
            import_ctranslate2().set_random_seed(sampling.seed)
        forced = None if prefixes is None else [self.tgt_vocab.decode(ids) for ids in prefixes]
        found: list[list[tuple[list[int], float, bool]]] = [[] for _ in sources]
        calls = self._submit(texts, limits, list(range(len(sources))), beam_size, nbest, forced, sampling)
        for call in calls:
            for k, answer in zip(call.members, call.answers, strict=True):
                found[k] = self._hypotheses(answer, penalty)
            advance(len(call.members))
        again = [k for k, hyps in enumerate(found) if any(self.never.intersection(ids) for ids, _, _ in hyps)]
        for call in self._submit(texts, limits, again, beam_size, nbest, forced, sampling, suppress=True):
            for k, answer in zip(call.members, call.answers, strict=True):
                found[k] = self._hypotheses(answer, penalty)
        rescore = set(again)
        cut = [
            (k, h, ids)
            for k, hyps in enumerate(found)
            for h, (ids, _, ended) in enumerate(hyps)
            if not ended or sampling is not None or (prefixes is not None and prefixes[k]) or k in rescore
        ]
        for (k, h, ids), score in zip(cut, self._rescore(texts, cut), strict=True):
            found[k][h] = (ids, score, True)
        results = []
        for hyps_found, info in zip(found, infos, strict=True):
            hyps = []
            for ids, score, _ in hyps_found:
                norm = (
                    score / gnmt_length_penalty(len(ids) + 1, settings.length_penalty)
                    if beam_size > 1
                    else score
                )
                hyps.append(Hypothesis(ids, score, norm))
            if sampling is None:
                hyps = sorted(hyps, key=lambda h: -h.norm_score)[:nbest]  # samples keep the order drawn
            results.append(Found(hyps, list(info.warnings)))
        return results

    def attention(self, translation: Translation, words: bool = False) -> SentenceAttention:
        """The cross-attention CTranslate2 returns for a translated sentence's best output (see
        `attention_description`): a (T, S) map, from a decode forced along that output."""
        check_attention(translation)
        from attn_mt.decoding.attention import SentenceAttention  # torch: only the attention views need it
        from attn_mt.decoding.translator import in_words

        ids, _ = self.source_ids(translation.source_tokens)
        out = translation.hypotheses[0].tokens
        answer = self.model.translator.translate_batch(
            [self.src_vocab.decode(ids)],
            target_prefix=[self.tgt_vocab.decode(out)],
            beam_size=1,
            min_decoding_length=0,
            max_decoding_length=len(out) + 1,
            max_input_length=0,
            return_attention=True,
            return_end_token=True,
        )[0]
        cross = np.asarray(answer.attention[0], dtype=np.float32)[: len(out) + 1]  # (T, S)
        outputs = [*self.tgt_vocab.labels(out), EOS]
        pieces = SentenceAttention(
            {"cross": cross},
            self.src_vocab.labels(ids),
            outputs,
            [BOS, *outputs[:-1]],
            ids[-1] == self.src_vocab.eos_id,
        )
        return in_words(pieces, self.src_vocab, self.tgt_vocab, ids, out) if words else pieces
