"""Greedy and beam search over the models' incremental step interface, batched over sentences.

Shapes: B sentences, K beam size, S source steps, V target vocabulary, t output steps so far;
N rows the decoder runs: greedy, one per unfinished sentence; beam, n unfinished sentences times
w beams (w = 1 at step 0, then K).

Both searches only call `encode`, `init_state`, `step` and `reorder_state` (see
`attn_mt.models.base`), so they never ask which model they hold.

Conventions shared by both searches:
* A sentence may emit at most `max_len = floor(max_len_a * src_len + max_len_b)` target tokens,
  counting the closing <eos> (`src_len` counts the source <eos>, as `Batch.src_lens` does), and at
  most `positions` (a learned position table's size: outputs.py's `position_limit`) when given. At
  step `max_len` only <eos> is allowed, so every output ends with <eos> and holds at most
  `max_len - 1` real tokens.
* `Hypothesis.score` is the sum of the log-probabilities of its tokens and of the <eos>.
* The length penalty is GNMT's (Wu et al. 2016, sec. 7): `lp(n) = ((5 + n) / 6) ** alpha` with
  `n = len(tokens) + 1` (the <eos> counts), and `norm_score = score / lp(n)`; beam search's
  `length_penalty` argument is alpha. `alpha = 0` ranks by the raw log-probability sum; a larger
  alpha divides long outputs' (negative) scores by more, so it favours longer outputs. Greedy
  search has no ranking to make, so its `norm_score` equals its `score`.

Beam search (the book's section 10.8; Sutskever et al. 2014 sec. 3.2; the variant fairseq uses):
each sentence keeps K live hypotheses, ranked by raw score. At every step all K*V extensions are
ranked by raw score and the best 2K kept. An extension ending in <eos> that ranks among the best K
is finished (eos extensions ranked lower are dropped); the best K extensions not ending in <eos>
become the next live hypotheses. Each sentence keeps the K best finished hypotheses by `norm_score`
(a new one that beats the worst kept replaces it; of several finishing in one step, the better-ranked
come first). A sentence stops at its maximum length, or once K hypotheses have finished and no live
one can still beat the worst of them: log-probabilities are at most 0, so a live hypothesis of raw
score s, holding t tokens, can at best end with score s and length n in [t + 2, max_len], and its
normalised score is at most max(s / lp(t + 2), s / lp(max_len)) (`_best_reachable`; the bound that
transformers' `early_stopping="never"` uses). Stopping as soon as K have finished (fairseq's and
CTranslate2's rule, transformers' `early_stopping=True`; `stop_at_k_finished`, decode.beam_stop
k_finished) can drop a live hypothesis that was far better than every finished one: an early, short
<eos> among the top K ends the sentence. With K = 1 the search stops at its first
<eos>, as greedy search does: beam size 1 is greedy search. The finished hypotheses are then sorted
by `norm_score` and the best `nbest` returned. Finished sentences leave the batch, so they cost no
further compute, and step 0 runs one row per sentence (its K beams would be identical); the first
reorder makes K.

A prefix (`prefix[i]`: target ids for sentence i, no <bos>/<eos>) forces the first tokens of a
sentence's output: at step t < len(prefix[i]) the search takes prefix[i][t] whatever the model
prefers, through the same incremental steps as free decoding, and continues freely after it.
Scores include the prefix tokens' log-probabilities, so a prefix equal to the model's own greedy
output gives back that output and its score exactly. In beam search a forced step leaves one live
hypothesis per sentence (the others score -inf), so every n-best entry starts with the prefix. A
prefix must leave room for the <eos> (len(prefix[i]) < max_len) and holds no <eos>; an empty prefix
is no prefix.

Sampling (greedy search with `sampler`): each step draws the next token from the model's
distribution, reshaped by a temperature, top-k and top-p (nucleus, Holtzman et al. 2020), instead
of taking its arg-max. Each row has its own random stream (`Sampler.seeds`), so what a row draws
depends on its seed only, never on the other rows of the batch. A sample's score is its
log-probability under the model's own distribution (temperature 1, nothing cut), the number
`attn-mt score` gives for it.

Tokens no output may hold (`never`: the translator passes <pad> and <bos>, which are never a training
target, so they mean nothing as output) are left out of every choice, greedy, beam or drawn, but not
out of the normaliser: a score stays the log-probability under the model's whole distribution, the
number forced decoding gives. <unk> is a training target (it stands for the rare words of the corpus),
so an output may hold it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from attn_mt.decoding.outputs import Hypothesis, gnmt_length_penalty, output_length_limits
from attn_mt.decoding.stopping import check_stop
from attn_mt.errors import UserError
from attn_mt.models.base import DecoderState, EncoderDecoder

CROSS_ATTENTION = "cross"


def max_output_lengths(
    src_lens: torch.Tensor, max_len_a: float, max_len_b: float, positions: int | None = None
) -> torch.Tensor:
    """floor(max_len_a * src_len + max_len_b) per sentence (B,), at most `positions` when given: the
    target-token budget incl. <eos>."""
    limits = output_length_limits(src_lens.tolist(), max_len_a, max_len_b, positions)
    return torch.tensor(limits, dtype=torch.long)


def _check_inputs(src: torch.Tensor, src_lens: torch.Tensor) -> None:
    """Shape checks where the caller meets the search."""
    if src.dim() != 2:
        raise ValueError(f"src must be (B, S) token ids, got shape {tuple(src.shape)}")
    if src_lens.shape != (src.shape[0],):
        raise ValueError(f"src_lens must be ({src.shape[0]},) to match src, got {tuple(src_lens.shape)}")


def _step_logits(
    model: EncoderDecoder, tokens: torch.Tensor, state: DecoderState, need_attention: bool
) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
    """One decoder step -> logits (N, V) in float32, new state, cross-attention or None; first, the
    caller's stop check (decoding/stopping.py) may end the search here."""
    check_stop()
    logits, state, attention = model.step(tokens, state, need_attention)
    if logits.dim() != 2 or logits.shape[0] != tokens.shape[0]:
        raise ValueError(f"model.step must return logits ({tokens.shape[0]}, V), got {tuple(logits.shape)}")
    cross = None
    if need_attention:
        if CROSS_ATTENTION not in attention:
            raise ValueError(f"model.step(need_attention=True) returned no {CROSS_ATTENTION!r} attention")
        cross = attention[CROSS_ATTENTION].float()  # (N, ..., S)
    return logits.float(), state, cross


def _argmax_rows(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of (N, V): the largest value and the index of its first occurrence, as `max(dim=-1)`.

    torch's max with indices walks each row one element at a time; blocks of V taken with `amax`
    (vectorised) and then one block per row searched give the same answer in a quarter of the time
    for an 8k vocabulary (docs/shipping.md). Vocabularies with no divisor from 16 to 256 use `max`.
    """
    rows, vocab = scores.shape
    block = next((b for b in range(256, 15, -1) if vocab % b == 0), 0)
    if not block or rows == 0:
        return scores.max(dim=-1)
    blocks = scores.reshape(rows, vocab // block, block)  # (N, V/b, b)
    best, which = blocks.amax(dim=-1).max(dim=-1)  # (N,), (N,) first block holding the row's maximum
    inside = blocks[torch.arange(rows, device=scores.device), which].max(dim=-1).indices  # (N,)
    return best, which * block + inside


def greedy_pick(
    logits: torch.Tensor,
    at_limit: torch.Tensor | None,
    eos_id: int,
    forced: torch.Tensor | None = None,
    never: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, V) -> (log-probability, token) of each row's most probable token, both (N,).

    The same as `log_softmax(logits).max(-1)` (rows in `at_limit` may only take <eos>, scored under
    the whole distribution) without writing the (N, V) log-probabilities: the normaliser is one
    logsumexp per row and the arg-max is taken on the logits. Rows whose `forced` (N,) id is not -1
    take that token instead, scored the same way. The `never` ids (module docstring) are set to -inf
    in `logits` itself once the normaliser is taken.
    """
    normaliser = torch.logsumexp(logits, dim=-1)  # (N,)
    _leave_out(logits, never)
    if at_limit is not None:
        logits = _only_eos(logits, at_limit, eos_id)
    best, tokens = _argmax_rows(logits)  # (N,), (N,)
    if forced is not None:
        tokens, best = _take_forced(logits, forced, tokens, best)
    return best - normaliser, tokens


def _take_forced(
    scores: torch.Tensor, forced: torch.Tensor, tokens: torch.Tensor, best: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of (N, V) `scores` whose `forced` (N,) id is not -1 take that id and its score."""
    take = forced >= 0  # (N,)
    tokens = torch.where(take, forced, tokens)  # (N,)
    return tokens, torch.where(take, scores.gather(1, tokens.unsqueeze(1)).squeeze(1), best)


@dataclass(frozen=True)
class Sampler:
    """How greedy search samples instead of taking the arg-max: temperature, top-k, top-p, one seed per row.

    `top_k` 0 keeps every token; `top_p` 1.0 keeps every token. `seeds[i]` seeds sentence i's stream.
    """

    temperature: float
    top_k: int
    top_p: float
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise UserError(f"the sampling temperature must be above 0, got {self.temperature}")
        if self.top_k < 0 or not 0 < self.top_p <= 1:
            raise UserError(f"top-k must be 0 or more and top-p in (0, 1], got {self.top_k} and {self.top_p}")


def sample_pick(
    logits: torch.Tensor,
    at_limit: torch.Tensor | None,
    eos_id: int,
    sampler: Sampler,
    draws: torch.Tensor,
    forced: torch.Tensor | None = None,
    never: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, V) -> (log-probability, token) of a token drawn per row, both (N,).

    The logits are divided by the temperature; the top-k most probable tokens, then the fewest top
    tokens whose probability reaches top-p, are kept (always at least one); `draws` (N,) uniform in
    [0, 1) pick one of them by inverse transform. The log-probability is the model's own. The `never`
    ids are never drawn (set to -inf in `logits` itself, as `greedy_pick` does).
    """
    normaliser = torch.logsumexp(logits, dim=-1)  # (N,)
    _leave_out(logits, never)
    if at_limit is not None:
        logits = _only_eos(logits, at_limit, eos_id)
    shifted = logits - logits.amax(dim=-1, keepdim=True)  # (N, V) <= 0: no inf - inf at tiny temperatures
    temperature = max(sampler.temperature, torch.finfo(shifted.dtype).tiny)  # never 0 once in float32
    probs, order = torch.softmax(shifted / temperature, dim=-1).sort(dim=-1, descending=True)  # (N, V)
    before = probs.cumsum(dim=-1) - probs  # (N, V) probability of the tokens ranked above each
    keep = before < sampler.top_p  # (N, V)
    if sampler.top_k:
        keep[:, sampler.top_k :] = False
    keep[:, 0] = True
    probs = probs * keep  # (N, V)
    cdf = probs.cumsum(dim=-1)  # (N, V)
    position = torch.searchsorted(cdf, (draws.unsqueeze(1) * cdf[:, -1:]).contiguous(), right=True)  # (N, 1)
    last_kept = (keep & (probs > 0)).sum(dim=-1, keepdim=True) - 1  # (N, 1)
    tokens = order.gather(1, torch.minimum(position, last_kept.clamp(min=0))).squeeze(1)  # (N,)
    if forced is not None:
        tokens = torch.where(forced >= 0, forced, tokens)
    return logits.gather(1, tokens.unsqueeze(1)).squeeze(1) - normaliser, tokens


def _leave_out(scores: torch.Tensor, never: torch.Tensor | None) -> None:
    """-inf, in place, for the `never` (M,) ids of every row (N, V): no search may choose them."""
    if never is not None:
        scores.index_fill_(-1, never, -math.inf)


def _never_ids(never: tuple[int, ...], device: torch.device) -> torch.Tensor | None:
    """The ids no output may hold, as a (M,) tensor for `_leave_out`; None when there are none."""
    return torch.tensor(never, dtype=torch.long, device=device) if never else None


def _only_eos(log_probs: torch.Tensor, at_limit: torch.Tensor, eos_id: int) -> torch.Tensor:
    """-inf for every non-<eos> score (log-prob or logit) in rows (N, V) or groups (n, w, V) at a limit."""
    not_eos = torch.ones(log_probs.shape[-1], dtype=torch.bool, device=log_probs.device)  # (V,)
    not_eos[eos_id] = False
    rows = at_limit.view(-1, *([1] * (log_probs.dim() - 1)))  # (N, 1) or (n, 1, 1)
    return log_probs.masked_fill(rows & not_eos, -math.inf)


def _at_limit(limits: list[int], t: int, device: torch.device) -> torch.Tensor:
    """(n,) bool: which live sentences emit their last allowed token at step t."""
    return torch.tensor([limit == t + 1 for limit in limits], device=device)


def _forced_ids(
    prefix: list[list[int]] | None, limits: list[int], eos_id: int, device: torch.device
) -> torch.Tensor | None:
    """(B, P) prefix ids padded with -1, P the longest prefix; None when no sentence has one."""
    if prefix is None or not any(prefix):
        return None
    if len(prefix) != len(limits):
        raise ValueError(f"{len(prefix)} prefixes for {len(limits)} sentences")
    forced = torch.full((len(prefix), max(len(p) for p in prefix)), -1, dtype=torch.long)  # (B, P)
    for i, (ids, limit) in enumerate(zip(prefix, limits, strict=True)):
        if eos_id in ids:
            raise ValueError(f"prefix {i} holds <eos> (id {eos_id}): a prefix cannot end the output")
        if len(ids) >= limit:
            raise UserError(
                f"sentence {i + 1}'s prefix has {len(ids)} tokens, but its output may hold at most "
                f"{limit - 1} (decode.max_len_a and max_len_b, with the <eos>): shorten the prefix"
            )
        forced[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return forced.to(device)


def _forced_at(forced: torch.Tensor | None, t: int) -> torch.Tensor | None:
    """(N,) the ids forced at step t (-1: free), or None when no live row has a prefix that long."""
    if forced is None or t >= forced.shape[1]:
        return None
    return forced[:, t]


def _attention_buffer(cross: torch.Tensor, max_steps: int) -> torch.Tensor:
    """An empty (N, max_steps, ..., S) store for per-step cross-attention."""
    return cross.new_zeros(cross.shape[0], max_steps, *cross.shape[1:])


@torch.inference_mode()
def greedy_search(
    model: EncoderDecoder,
    src: torch.Tensor,
    src_lens: torch.Tensor,
    *,
    bos_id: int,
    eos_id: int,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    need_attention: bool = False,
    prefix: list[list[int]] | None = None,
    sampler: Sampler | None = None,
    never: tuple[int, ...] = (),
    positions: int | None = None,
) -> list[Hypothesis]:
    """Pick the most probable token at every step (with `sampler`, draw one); one Hypothesis per
    sentence, in input order. `prefix[i]` forces sentence i's first tokens; no output holds a `never`
    id (module docstring)."""
    _check_inputs(src, src_lens)
    batch, device = src.shape[0], src.device
    if batch == 0:
        return []
    limits = max_output_lengths(src_lens, max_len_a, max_len_b, positions).tolist()  # per live row
    forced = _forced_ids(prefix, limits, eos_id, device)  # (B, P) or None
    left_out = _never_ids(never, device)  # (M,) or None
    streams = None
    if sampler is not None:
        if len(sampler.seeds) != batch:
            raise ValueError(f"{len(sampler.seeds)} sampling seeds for {batch} sentences")
        streams = [random.Random(seed) for seed in sampler.seeds]
    src_len_list = src_lens.tolist()
    max_steps = max(limits)
    state = model.init_state(model.encode(src, src_lens))
    sentence = torch.arange(batch, device=device)  # (N,) which sentence each live row holds
    tokens = torch.full((batch,), bos_id, dtype=torch.long, device=device)  # (N,)
    scores = torch.zeros(batch, device=device)  # (N,)
    history = torch.full((batch, max_steps), eos_id, dtype=torch.long, device=device)  # (N, max_steps)
    attention_store: torch.Tensor | None = None
    results: list[Hypothesis | None] = [None] * batch
    for t in range(max_steps):
        logits, state, cross = _step_logits(model, tokens, state, need_attention)  # (N, V)
        at_limit = _at_limit(limits, t, device) if t + 1 == min(limits) else None
        if streams is None:
            best, tokens = greedy_pick(logits, at_limit, eos_id, _forced_at(forced, t), left_out)  # (N,)
        else:
            draws = torch.tensor([streams[i].random() for i in sentence.tolist()], device=device)  # (N,)
            best, tokens = sample_pick(
                logits, at_limit, eos_id, sampler, draws, _forced_at(forced, t), left_out
            )
        scores = scores + best
        history[:, t] = tokens
        if cross is not None:
            if attention_store is None:
                attention_store = _attention_buffer(cross, max_steps)  # (N, max_steps, ..., S)
            attention_store[:, t] = cross
        ended = tokens == eos_id  # (N,)
        ended_rows = ended.nonzero().squeeze(1)  # (E,)
        if ended_rows.numel() == 0:
            continue
        ids, row_scores = sentence[ended_rows].tolist(), scores[ended_rows].tolist()
        row_tokens = history[ended_rows, :t].tolist()
        for row, sid, score, toks in zip(ended_rows.tolist(), ids, row_scores, row_tokens, strict=True):
            attention = None
            if attention_store is not None:
                attention = attention_store[row, : t + 1, ..., : src_len_list[sid]].cpu()
            results[sid] = Hypothesis(toks, score, score, attention)
        keep = (~ended).nonzero().squeeze(1)  # (N',)
        if keep.numel() == 0:
            break
        limits = [limits[i] for i in keep.tolist()]
        state = model.reorder_state(state, keep)
        sentence, tokens, scores, history = sentence[keep], tokens[keep], scores[keep], history[keep]
        if forced is not None:
            forced = forced[keep]
        if attention_store is not None:
            attention_store = attention_store[keep]
    if any(r is None for r in results):
        raise RuntimeError("greedy search ended with unfinished sentences")
    return results  # type: ignore[return-value]


@torch.inference_mode()
def beam_search(
    model: EncoderDecoder,
    src: torch.Tensor,
    src_lens: torch.Tensor,
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    length_penalty: float = 1.0,
    nbest: int = 1,
    max_len_a: float = 1.5,
    max_len_b: float = 10,
    need_attention: bool = False,
    prefix: list[list[int]] | None = None,
    never: tuple[int, ...] = (),
    positions: int | None = None,
    stop_at_k_finished: bool = False,
) -> list[list[Hypothesis]]:
    """Vectorised beam search over (sentences x beam); per sentence its `nbest` outputs, best first.

    `prefix[i]` forces sentence i's first tokens; no output holds a `never` id; `stop_at_k_finished`
    ends a sentence as soon as K outputs have finished (module docstring)."""
    if beam_size < 1:
        raise UserError(f"beam size must be at least 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise UserError(f"nbest must be between 1 and the beam size {beam_size}, got {nbest}")
    _check_inputs(src, src_lens)
    batch, device, K = src.shape[0], src.device, beam_size
    if batch == 0:
        return []
    limits = max_output_lengths(src_lens, max_len_a, max_len_b, positions).tolist()  # per live sentence
    forced = _forced_ids(prefix, limits, eos_id, device)  # (B, P) or None: per live sentence
    left_out = _never_ids(never, device)  # (M,) or None
    src_len_list = src_lens.tolist()
    max_steps = max(limits)
    state = model.init_state(model.encode(src, src_lens))
    sentence = torch.arange(batch, device=device)  # (n,) which sentence each live group of rows holds
    tokens = torch.full((batch,), bos_id, dtype=torch.long, device=device)  # (n*w,), w = 1 at step 0, then K
    scores = torch.zeros(batch, 1, device=device)  # (n, w)
    history = torch.full((batch, max_steps), eos_id, dtype=torch.long, device=device)  # (n*w, max_steps)
    num_finished = torch.zeros(batch, dtype=torch.long, device=device)  # (n,)
    worst_kept = torch.full((batch,), -math.inf, device=device)  # (n,) worst kept norm_score once K finished
    attention_store: torch.Tensor | None = None
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    ranks = torch.arange(2 * K, device=device)  # (2K,)
    for t in range(max_steps):
        n, width = scores.shape
        logits, state, cross = _step_logits(model, tokens, state, need_attention)  # (n*w, V)
        log_probs = torch.log_softmax(logits, dim=-1)  # (n*w, V)
        _leave_out(log_probs, left_out)
        vocab = log_probs.shape[-1]
        if vocab < 2 * K:
            raise UserError(f"beam size {K} needs at least {2 * K} target vocabulary entries, got {vocab}")
        log_probs = log_probs.view(n, width, vocab)  # (n, w, V)
        at_limit = None
        if t + 1 == min(limits):
            at_limit = _at_limit(limits, t, device)  # (n,)
            log_probs = _only_eos(log_probs, at_limit, eos_id)
        step_forced = _forced_at(forced, t)  # (n,) or None
        if step_forced is not None:
            log_probs = _only_forced(log_probs, step_forced)
        candidates = (scores.unsqueeze(2) + log_probs).view(n, width * vocab)  # (n, w*V)
        top_scores, top_ids = candidates.topk(2 * K, dim=1)  # (n, 2K), best first
        origin = top_ids // vocab + (torch.arange(n, device=device) * width).unsqueeze(1)  # (n, 2K) row ids
        top_tokens = top_ids % vocab  # (n, 2K)
        ends = (top_tokens == eos_id) & torch.isfinite(top_scores)  # (n, 2K)
        if cross is not None:
            if attention_store is None:
                attention_store = _attention_buffer(cross, max_steps)  # (n*w, max_steps, ..., S)
            attention_store[:, t] = cross
        finishing = ends[:, :K]  # (n, K) eos extensions among the best K
        fin_group, fin_rank = finishing.nonzero(as_tuple=True)  # (F,), (F,) ordered by group, then rank
        if fin_group.numel():
            fin_rows = origin[fin_group, fin_rank]  # (F,)
            fin_scores = top_scores[fin_group, fin_rank].tolist()
            fin_tokens = history[fin_rows, :t].tolist()
            fin_ids = sentence[fin_group].tolist()
            fin_groups = fin_group.tolist()
            for row, group, sid, score, toks in zip(
                fin_rows.tolist(), fin_groups, fin_ids, fin_scores, fin_tokens, strict=True
            ):
                norm = score / gnmt_length_penalty(len(toks) + 1, length_penalty)
                kept = finished[sid]
                if len(kept) == K and norm <= min(h.norm_score for h in kept):
                    continue
                attention = None
                if attention_store is not None:
                    attention = attention_store[row, : t + 1, ..., : src_len_list[sid]].cpu()
                if len(kept) == K:
                    kept.remove(min(kept, key=lambda h: h.norm_score))
                kept.append(Hypothesis(toks, score, norm, attention))
                worst_kept[group] = min(h.norm_score for h in kept) if len(kept) == K else -math.inf
            num_finished = torch.clamp(num_finished + finishing.sum(dim=1), max=K)
        order = ends.long() * ranks.numel() + ranks  # (n, 2K): candidates not ending first, by rank
        live_pos = order.topk(K, dim=1, largest=False).indices  # (n, K)
        live_scores = top_scores.gather(1, live_pos)  # (n, K)
        live_rows = origin.gather(1, live_pos)  # (n, K)
        live_tokens = top_tokens.gather(1, live_pos)  # (n, K)
        done = num_finished >= K  # (n,)
        if K > 1 and not stop_at_k_finished and bool(done.any()):
            best_live = _best_reachable(live_scores[:, 0], t, limits, length_penalty)  # (n,)
            done &= best_live <= worst_kept
        if at_limit is not None:
            done |= at_limit
        num_done = int(done.sum())
        if num_done == n:
            break
        if num_done:
            keep = (~done).nonzero().squeeze(1)  # (n',)
            limits = [limits[i] for i in keep.tolist()]
            live_scores, live_rows, live_tokens = live_scores[keep], live_rows[keep], live_tokens[keep]
            sentence, num_finished, worst_kept = sentence[keep], num_finished[keep], worst_kept[keep]
            if forced is not None:
                forced = forced[keep]
        index = live_rows.reshape(-1)  # (n'*K,)
        state = model.reorder_state(state, index)
        history = history[index]
        tokens = live_tokens.reshape(-1)  # (n'*K,)
        history[:, t] = tokens
        scores = live_scores
        if attention_store is not None:
            attention_store = attention_store[index]
    if any(not hyps for hyps in finished):
        raise RuntimeError("beam search ended a sentence without a finished hypothesis")
    return [sorted(hyps, key=lambda h: -h.norm_score)[:nbest] for hyps in finished]


def _best_reachable(live: torch.Tensor, t: int, limits: list[int], alpha: float) -> torch.Tensor:
    """The best `norm_score` each group's best live hypothesis (n,), raw scores after step t, can end with.

    The hypothesis holds t + 1 tokens, so it ends with length n (its <eos> counted) between t + 2 and its
    sentence's limit, and with a raw score no higher than today's (log-probabilities are at most 0);
    s / lp(n) is monotone in n, so the better end of that range bounds it.
    """
    shortest = gnmt_length_penalty(t + 2, alpha)
    longest = torch.tensor(
        [gnmt_length_penalty(max(limit, t + 2), alpha) for limit in limits], device=live.device
    )  # (n,)
    return torch.maximum(live / shortest, live / longest)  # (n,)


def _only_forced(log_probs: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    """-inf for every score (n, w, V) but the forced id's, in the groups whose `forced` (n,) id is not -1."""
    groups = (forced >= 0).view(-1, 1, 1)  # (n, 1, 1)
    others = torch.ones_like(log_probs, dtype=torch.bool)  # (n, w, V)
    others.scatter_(2, forced.clamp(min=0).view(-1, 1, 1).expand(-1, log_probs.shape[1], 1), False)
    return log_probs.masked_fill(groups & others, -math.inf)


@torch.inference_mode()
def forced_log_probs(
    model: EncoderDecoder,
    src: torch.Tensor,
    src_lens: torch.Tensor,
    targets: list[list[int]],
    *,
    bos_id: int,
    eos_id: int,
) -> list[list[float]]:
    """The log-probability of each token of each given target and of its closing <eos> (forced decoding).

    The model runs the same incremental steps as the searches, fed the target instead of its own
    choices, so a search's output scored here gets the score the search reported. `targets[i]`
    holds ids without <bos>/<eos>; the answer for it has len(targets[i]) + 1 entries.
    """
    _check_inputs(src, src_lens)
    if len(targets) != src.shape[0]:
        raise ValueError(f"{len(targets)} targets for {src.shape[0]} sources")
    if not targets:
        return []
    device = src.device
    steps = max(len(t) for t in targets) + 1
    forced = torch.full((len(targets), steps), eos_id, dtype=torch.long)  # (B, T) targets, then <eos>
    for i, target in enumerate(targets):
        forced[i, : len(target)] = torch.tensor(target, dtype=torch.long)
    forced = forced.to(device)
    state = model.init_state(model.encode(src, src_lens))
    tokens = torch.full((len(targets),), bos_id, dtype=torch.long, device=device)  # (B,)
    picked = torch.zeros(len(targets), steps, device=device)  # (B, T)
    for t in range(steps):
        logits, state, _ = _step_logits(model, tokens, state, False)  # (B, V)
        log_probs = logits.log_softmax(dim=-1)  # (B, V)
        picked[:, t] = log_probs.gather(1, forced[:, t : t + 1]).squeeze(1)
        tokens = forced[:, t]
    rows = picked.cpu().tolist()
    return [row[: len(target) + 1] for row, target in zip(rows, targets, strict=True)]
