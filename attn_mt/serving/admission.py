"""Admission control of `attn-mt serve`: what a request costs, how long it may wait, and how much may wait.

A request's work is what the decoding worker will spend on it, in units of one source character
searched with one beam: each sentence's characters (plus a few for its <eos> and the decoder's
steps past its end) times the beam width (the beam, or the samples drawn; 1 for scoring), doubled
when the attention maps are returned (they are copied out of the search and written as JSON). The
largest legal request, 64 texts of 1,000 characters each with a 1,000-character prefix at beam 16
with attention, is about 4.1 million units; a one-sentence greedy request about 50.

The queue holds at most `max_queued_work` units (more is refused with 503 and a Retry-After; a
request larger than that is taken when nothing else waits), and a request is refused the same way
when the work waiting in its lane would take the worker more than `max_queue_wait_s` at the speed
it has measured, so a request is answered in about that time (plus one batch) or refused at once;
the speed is measured before the first request, on `WARM_UP_SENTENCES` at the run's beam (the
server decodes them at start: serving/server.py), so a burst at start-up is refused like any other;
requests of at most `short_work` units go in the short lane, which the worker alternates with the
long one; a batch holds at most `batch_work` units, so a short request waits for at most one such
batch of long work. Every request has a deadline: `default_timeout_s` after it arrives, or the
`timeout` it asks for, up to `max_timeout_s`; a request not answered by then gets 503 and its
decoding is stopped between two search steps when nothing else in its batch is still wanted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from attn_mt.errors import UserError
from attn_mt.serving.schemas import MAX_BEAM, MAX_CHARS, MAX_REQUEST_CHARS, MAX_SENTENCES, MAX_SPLIT_SENTENCES

SENTENCE_OVERHEAD = 10  # work units of a sentence besides its characters (its <eos>, steps past the end)
ATTENTION_FACTOR = 2  # returning the attention maps doubles a request's work
# the largest legal request, at the widest beam with attention: every character split into as many
# sentences as allowed, or 64 texts each with a prefix as long (a text with a prefix is not split)
# English sentences of everyday length (60 to 78 characters): the warm-up batch the decoding speed is first
# measured on. One batch of eight decodes faster per unit than one sentence and slower than a full batch
# of 64, so the first estimate errs towards refusing, until the first requests' batches are measured.
WARM_UP_SENTENCES = (
    "The last train to the city leaves at seven, so we should go now.",
    "She told me that her brother had found a new job near the harbour.",
    "I don't think it will rain today, but take an umbrella anyway.",
    "We have been waiting for the doctor since nine o'clock this morning.",
    "If you had asked me earlier, I would have helped you carry the boxes upstairs.",
    "The children were playing in the garden when their grandmother arrived.",
    "He reads the newspaper every morning before he goes to work.",
    "Could you tell me how far it is from here to the nearest station by bus?",
)
LARGEST_WORK = (
    max(
        MAX_REQUEST_CHARS + MAX_SPLIT_SENTENCES * SENTENCE_OVERHEAD,
        MAX_SENTENCES * (2 * MAX_CHARS + SENTENCE_OVERHEAD),
    )
    * MAX_BEAM
    * ATTENTION_FACTOR
)


@dataclass(frozen=True)
class Admission:
    """The server's limits on waiting work and waiting time."""

    max_queued_work: float = 4 * LARGEST_WORK  # work units waiting for a batch
    max_queue_wait_s: float = 2.0  # refuse a request when its lane's waiting work would take longer
    batch_work: float = 40_000  # work units in one batch (one sentence more when a batch would be empty)
    short_work: float = 4_000  # requests of at most this many units go in the short lane
    default_timeout_s: float = 60.0  # a request's deadline when it gives no timeout
    max_timeout_s: float = 300.0  # the longest timeout a request may ask for

    def check(self) -> None:
        """Refuse settings that contradict each other, naming the option to change."""
        if not self.max_queued_work >= 1:
            raise UserError(f"--max-queued-work must be at least 1, got {self.max_queued_work:g}")
        if not self.max_queue_wait_s > 0:
            raise UserError(f"--max-queue-wait must be above 0, got {self.max_queue_wait_s:g}")
        if not 0 < self.default_timeout_s <= self.max_timeout_s:
            raise UserError(
                f"--request-timeout must be above 0 and at most --max-request-timeout "
                f"({self.max_timeout_s:g} s), got {self.default_timeout_s:g}"
            )

    def deadline(self, timeout: float | None) -> float:
        """The time.monotonic() by which a request asking for `timeout` seconds (None: the default) must
        be answered; a timeout over the maximum is refused (ValueError, in the API's words)."""
        if timeout is None:
            return time.monotonic() + self.default_timeout_s
        if timeout > self.max_timeout_s:
            raise ValueError(
                f"timeout: at most {self.max_timeout_s:g} seconds on this server, got {timeout:g}"
            )
        return time.monotonic() + timeout


def source_text(item: Any) -> str:
    """The text a queued item makes the model read: a sentence, a (sentence, prefix) pair's both, or a
    scored (source, target) pair's both."""
    return item if isinstance(item, str) else "".join(item)


def request_work(items: list[Any], width: int, attention: bool = False) -> float:
    """A request's work units: its sentences' characters (and overhead) times the beam width, doubled
    with attention."""
    characters = sum(len(source_text(item)) + SENTENCE_OVERHEAD for item in items)
    return float(characters * max(1, width) * (ATTENTION_FACTOR if attention else 1))
