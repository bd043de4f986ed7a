"""Two decodings of one sentence that part: decided where they part, not by a share of equal lists.

Two engines (torch and CTranslate2), two kernels, two batch shapes or a quantised copy compute the same
next-token scores with float32 sums in different orders (tests/support/tolerances.py). Where two candidates'
scores lie closer than that rounding, either engine may take either one, and every later step then
differs: a legitimate near-tie. A tiny model trained on the machine that runs the test has other
weights on each CPU, so where such ties fall differs from one machine to the next, and a test that
asserts equal outputs, or a fixed share of them, fails on some CPU and not on another.

So a test compares the two outputs and, where they differ, asks the reference model (a torch
`EncoderDecoder`, run through the searches' own incremental steps) how close the decision was:

* greedy: the first output step where they part; everything before is identical by construction.
  There the reference model scores both tokens taken after the shared prefix; their log-probabilities
  must lie within the tolerance.
* beam search: which step parted the beams is not visible from the outputs alone (two hypotheses may
  live side by side for several steps before a later ranking drops one). The reference search of that
  one sentence is replayed step by step; every ranking it made (the best 2K + 1 candidates of each step,
  which decide what finishes and what lives on, and the finished hypotheses' final order) is a
  decision, and at least one must have been closer than the tolerance. If every decision had a clear
  margin, any engine computing the same scores within the rounding makes the same decisions, so a
  divergence then is a defect and fails.

The tolerance is twice `float32_tolerance(terms, scale)`: each side's value may be off by the bound, so
a margin of up to twice it can change sign between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attn_mt.decoding.outputs import Hypothesis
from attn_mt.decoding.search import beam_search, max_output_lengths
from attn_mt.models.base import DecoderState, EncoderDecoder
from support.tolerances import float32_tolerance


@dataclass(frozen=True)
class Parting:
    """Where two outputs of one sentence differ and how close the reference's deciding margin was."""

    position: int  # the first output position (0-based, <eos> counted) where the two outputs differ
    margin: float  # the reference's closest decision: a log-probability (greedy) or score gap (beam)
    tolerance: float  # the largest margin rounding alone can overturn
    decided_at: str  # which decision that margin belongs to, for the failure message

    @property
    def near_tie(self) -> bool:
        """Whether rounding alone can explain the difference."""
        return self.margin <= self.tolerance


def parting_position(a: list[int], b: list[int], eos_id: int) -> int | None:
    """The first position where outputs `a` and `b` (<eos> implied at the end) differ; None if the same."""
    a_full, b_full = [*a, eos_id], [*b, eos_id]
    for position, (x, y) in enumerate(zip(a_full, b_full, strict=False)):
        if x != y:
            return position
    return None if len(a_full) == len(b_full) else min(len(a_full), len(b_full))


def near_tie_tolerance(terms: int, scale: float) -> float:
    """Twice the float32 bound of `terms` reordered additions of size `scale` (one bound for each side)."""
    return 2 * float32_tolerance(terms, scale)


def _source(src_ids: list[int], src_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One sentence as the searches take it: ids (1, S) and its length (1,)."""
    return torch.tensor([src_ids], dtype=torch.long), torch.tensor([src_len], dtype=torch.long)


@torch.inference_mode()
def next_log_probs(
    model: EncoderDecoder, src_ids: list[int], src_len: int, prefix: list[int], *, bos_id: int
) -> torch.Tensor:
    """The reference model's log-probabilities (V,) of the next token after `prefix`, step by step."""
    src, src_lens = _source(src_ids, src_len)
    state = model.init_state(model.encode(src, src_lens))
    tokens = torch.tensor([bos_id], dtype=torch.long)  # (1,)
    for token in [*prefix, None]:
        logits, state, _ = model.step(tokens, state, False)  # (1, V)
        if token is None:
            return logits.float().log_softmax(dim=-1)[0]  # (V,)
        tokens = torch.tensor([token], dtype=torch.long)
    raise AssertionError("unreachable")


def greedy_parting(
    model: EncoderDecoder,
    src_ids: list[int],
    src_len: int,
    a: list[int],
    b: list[int],
    *,
    bos_id: int,
    eos_id: int,
    terms: int,
) -> Parting | None:
    """None when greedy outputs `a` and `b` are equal; else the reference's margin where they part."""
    position = parting_position(a, b, eos_id)
    if position is None:
        return None
    a_full, b_full = [*a, eos_id], [*b, eos_id]
    log_probs = next_log_probs(model, src_ids, src_len, a_full[:position], bos_id=bos_id)  # (V,)
    taken = float(log_probs[a_full[position]]), float(log_probs[b_full[position]])
    scale = max(abs(taken[0]), abs(taken[1]), float(log_probs.max().abs()))
    return Parting(
        position,
        abs(taken[0] - taken[1]),
        near_tie_tolerance(terms, scale),
        f"step {position}: token {a_full[position]} ({taken[0]:.6f}) or {b_full[position]} ({taken[1]:.6f})",
    )


class _Recorder:
    """Stands in for a model in a search and keeps what each step fed and returned, and each reorder."""

    def __init__(self, model: EncoderDecoder):
        self.model = model
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []  # (tokens (N,), log-probs (N, V)) a step
        self.reorders: list[torch.Tensor] = []  # (N',) rows kept after each step but the last

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """The model's own encoder."""
        return self.model.encode(src, src_lens)

    def init_state(self, state: DecoderState) -> DecoderState:
        """The model's own first decoder state."""
        return self.model.init_state(state)

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """One model step, its input tokens and log-probabilities kept."""
        logits, state, attention = self.model.step(tokens, state, need_attention)  # (N, V)
        self.steps.append((tokens.clone(), logits.float().log_softmax(dim=-1)))
        return logits, state, attention

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """The model's own reorder, the kept rows noted."""
        self.reorders.append(index.clone())
        return self.model.reorder_state(state, index)


def _adjacent_gaps(values: torch.Tensor) -> list[float]:
    """Gaps between neighbours of the finite values, largest first."""
    ranked = values[torch.isfinite(values)].sort(descending=True).values
    return (ranked[:-1] - ranked[1:]).tolist()


@torch.inference_mode()
def beam_decisions(
    model: EncoderDecoder,
    src_ids: list[int],
    src_len: int,
    *,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: float,
    bos_id: int,
    eos_id: int,
) -> tuple[list[tuple[str, float]], list[Hypothesis]]:
    """The reference beam search of one sentence replayed: each ranking's closest gap, and every finished
    hypothesis, best first.

    A step's candidates are the live scores plus the step's log-probabilities, as the search adds them;
    the best 2K + 1 of them decide what finishes and what lives on (at least K of the best 2K do not
    end, so no rank below 2K + 1 can matter).
    """
    K = beam_size
    recorder = _Recorder(model)
    src, src_lens = _source(src_ids, src_len)
    finished = beam_search(
        recorder,  # type: ignore[arg-type]
        src,
        src_lens,
        beam_size=K,
        nbest=K,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        bos_id=bos_id,
        eos_id=eos_id,
    )[0]
    limit = int(max_output_lengths(src_lens, max_len_a, max_len_b)[0])
    decisions: list[tuple[str, float]] = []
    scores = torch.zeros(1)  # (w,) the live hypotheses' scores
    candidates = torch.zeros(1, 1)
    for t, (tokens, log_probs) in enumerate(recorder.steps):  # log_probs (w, V)
        if t > 0:
            scores = candidates[recorder.reorders[t - 1], tokens]  # (w,)
        if t + 1 == limit:  # the last allowed step: only <eos>
            only_eos = torch.full_like(log_probs, -torch.inf)
            only_eos[:, eos_id] = log_probs[:, eos_id]
            log_probs = only_eos
        candidates = scores.unsqueeze(1) + log_probs  # (w, V)
        best = candidates.flatten().topk(min(2 * K + 1, candidates.numel())).values  # (2K+1,)
        gaps = _adjacent_gaps(best)
        if gaps:
            decisions.append((f"beam step {t}", min(gaps)))
    final = _adjacent_gaps(torch.tensor([h.norm_score for h in finished]))
    if final:
        decisions.append(("the finished hypotheses' order", min(final)))
    return decisions, finished


def beam_parting(
    model: EncoderDecoder,
    src_ids: list[int],
    src_len: int,
    a: list[int],
    b: list[int],
    *,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: float,
    bos_id: int,
    eos_id: int,
    terms: int,
) -> Parting | None:
    """None when beam outputs `a` and `b` are equal; else the reference search's closest decision."""
    position = parting_position(a, b, eos_id)
    if position is None:
        return None
    decisions, finished = beam_decisions(
        model,
        src_ids,
        src_len,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        bos_id=bos_id,
        eos_id=eos_id,
    )
    if not decisions:
        return Parting(position, float("inf"), 0.0, "no ranking at all")
    where, margin = min(decisions, key=lambda d: d[1])
    scale = max(abs(h.score) for h in finished)
    return Parting(position, margin, near_tie_tolerance(terms, scale), where)


def assert_near_tie(parting: Parting | None, what: str) -> None:
    """Pass when the outputs were equal or parted at a near-tie; fail naming the clear margin otherwise."""
    if parting is None or parting.near_tie:
        return
    raise AssertionError(
        f"{what}: the outputs part at position {parting.position} where the reference decided with a clear "
        f"margin of {parting.margin:.3g} ({parting.decided_at}), more than rounding can overturn "
        f"({parting.tolerance:.3g})"
    )


def translation_parting(reference, want, got, *, beam: int, terms: int, rank: int = 0) -> Parting | None:
    """Where the `rank`-th outputs of two Translations of one sentence part, judged by `reference` (a torch
    Translator with the settings both used) as `greedy_parting` or `beam_parting` does."""
    a, b = want.hypotheses[rank].tokens, got.hypotheses[rank].tokens
    src_ids, src_len = reference.source_ids(want.source_tokens)
    vocab, decode = reference.tgt_vocab, reference.cfg.decode
    if beam == 1:
        return greedy_parting(
            reference.model, src_ids, src_len, a, b, bos_id=vocab.bos_id, eos_id=vocab.eos_id, terms=terms
        )
    return beam_parting(
        reference.model,
        src_ids,
        src_len,
        a,
        b,
        beam_size=beam,
        length_penalty=decode.length_penalty,
        max_len_a=decode.max_len_a,
        max_len_b=decode.max_len_b,
        bos_id=vocab.bos_id,
        eos_id=vocab.eos_id,
        terms=terms,
    )


def reference_score(reference, source_tokens: list[str], tokens: list[int]) -> float:
    """The reference's own log-probability of an output, <eos> included (forced decoding)."""
    (forced,) = reference.force([source_tokens], [tokens], lambda _: None)
    return math.fsum(forced.log_probs)


def assert_decodings_agree(
    reference, want: list, got: list, *, beam: int, terms: int, other_search_rules: bool = False
) -> list[Parting]:
    """Each pair of Translations (`want` by the torch Translator `reference`, `got` by another engine,
    kernel or batch shape) has the same source tokens and warnings, and best outputs that are equal or
    part at a near-tie (see the module docstring); returns the partings found.

    `other_search_rules`: the other engine runs a beam search of its own (CTranslate2: which hypotheses
    count as finished, when the search stops and what it closes at the length limit differ from
    attn-mt's; decoding/ctranslate2_engine.py). Its best output may then differ at a clear margin too;
    such an output must still carry the score the reference gives it (the model is the same, only the
    search differs), and the caller bounds how many there are (the partings whose `near_tie` is False).
    """
    partings = []
    for w, g in zip(want, got, strict=True):
        assert g.source_tokens == w.source_tokens and g.warnings == w.warnings, w.source
        if not w.hypotheses or not g.hypotheses:
            assert not w.hypotheses and not g.hypotheses, w.source
            continue
        parting = translation_parting(reference, w, g, beam=beam, terms=terms)
        if parting is None:
            continue
        partings.append(parting)
        if parting.near_tie:
            continue
        if other_search_rules and beam > 1:
            found = g.hypotheses[0]
            by_reference = reference_score(reference, g.source_tokens, found.tokens)
            assert abs(by_reference - found.score) <= max(parting.tolerance, 1e-4), (w.source, g.text)
            continue
        assert_near_tie(parting, f"{w.source!r}: {w.text!r} against {g.text!r}")
    return partings
