"""How one translate call decodes: `DecodeSettings`, resolved from a run's `decode` config and the caller's
overrides and checked once, here, against attn_mt/limits.py (no torch).

Every entry point builds one with `DecodeSettings.resolve` (translate, eval, tune, serve, the Python
API, the lab) and every engine takes it as it is (`Engine.translate`, `translate_with`, `search`), so a
setting keeps one name from the command line to the search: `beam_size`, `nbest`, `length_penalty`
(GNMT's alpha) and `sampling`. The length limits (decode.max_len_a, max_len_b) and the batch size are
the run's own and stay in its config.
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_mt.config import DecodeConfig
from attn_mt.decoding.outputs import Sampling
from attn_mt.errors import UserError
from attn_mt.limits import MAX_BEAM, length_penalty_problem


def check_search(beam_size: int, nbest: int, vocab_size: int | None = None) -> None:
    """Refuse a beam outside 1..MAX_BEAM (attn_mt/limits.py), an n-best outside 1..beam, and (given the
    target vocabulary's size) a beam whose 2 x beam candidates per step the vocabulary cannot fill, with
    the same words for every engine and entry point."""
    if beam_size < 1:
        raise UserError(f"beam must be at least 1, got {beam_size}")
    if beam_size > MAX_BEAM:
        raise UserError(f"beam must be at most {MAX_BEAM}, got {beam_size}")
    if nbest < 1:
        raise UserError(f"nbest must be at least 1, got {nbest}")
    if nbest > beam_size:
        raise UserError(f"nbest {nbest} needs a beam at least as large (the beam is {beam_size})")
    if vocab_size is not None and vocab_size < 2 * beam_size:
        raise UserError(
            f"beam size {beam_size} needs at least {2 * beam_size} target vocabulary entries, "
            f"got {vocab_size}"
        )


def check_sampling(sampling: Sampling | None, beam_size: int | None, nbest: int) -> None:
    """Refuse sampling together with a beam above 1 or an n-best list: the samples are the outputs."""
    if sampling is None:
        return
    if beam_size is not None and beam_size > 1:
        raise UserError(f"--sample draws its outputs token by token; it takes no --beam (got {beam_size})")
    if nbest > 1:
        raise UserError(
            f"--sample {sampling.samples} gives that many outputs per sentence; leave out --nbest"
        )


@dataclass(frozen=True)
class DecodeSettings:
    """The search of one translate call: greedy (beam_size 1, nbest 1), beam search ranking by GNMT's
    length penalty alpha `length_penalty` (nbest outputs per sentence), or `sampling` (beam_size 1).

    Build it with `resolve`, which fills in the run's defaults and checks every value once.
    """

    beam_size: int
    nbest: int
    length_penalty: float
    sampling: Sampling | None = None

    @classmethod
    def resolve(
        cls,
        decode: DecodeConfig,
        beam_size: int | None = None,
        nbest: int = 1,
        length_penalty: float | None = None,
        sampling: Sampling | None = None,
        vocab_size: int | None = None,
    ) -> DecodeSettings:
        """The run's `decode` settings with the caller's overrides (None keeps the run's), checked:
        sampling takes no beam or n-best, the beam and n-best are within attn_mt/limits.py (and within
        what a target vocabulary of `vocab_size` entries can fill), alpha is within 0..MAX_LENGTH_PENALTY."""
        check_sampling(sampling, beam_size, nbest)
        beam = 1 if sampling is not None else decode.beam_size if beam_size is None else beam_size
        check_search(beam, nbest, vocab_size)
        if length_penalty is not None:
            problem = length_penalty_problem(length_penalty)
            if problem:
                raise UserError(f"--length-penalty {problem}")
        alpha = decode.length_penalty if length_penalty is None else length_penalty
        return cls(beam, nbest, float(alpha), sampling)

    @property
    def outputs(self) -> int:
        """How many outputs each sentence gets: its n-best list, or its samples."""
        return self.nbest if self.sampling is None else self.sampling.samples
