"""One decoding worker behind a bounded queue: requests that arrive close together are decoded as one batch.

The web server's threads only put jobs on the queue and wait on their futures; the worker alone
runs the model. It takes the oldest waiting job, then keeps adding jobs with the same decoding
options for up to `max_wait_s`, until the batch holds `max_batch` sentences or `batch_work` units
of work (serving/admission.py measures it: characters times beam). A job larger than the room left
is split: its first sentences go in this batch, the rest wait at the head of the queue, so no batch
ever exceeds `max_batch`. Jobs whose options differ wait for a later round, in arrival order.

Two lanes keep short requests from starving behind long ones: a job of at most `short_work` units
is short. When both lanes wait, the worker alternates between them, so a short job waits for at
most one bounded batch of long work, and long work still advances every other round. A batch
holds at least one sentence, and one long sentence can take seconds, so a long batch's search also
lets short jobs in at its step boundaries: once a short job has waited half of `max_queue_wait_s`,
the short jobs' batch is decoded there, on the same thread, and the long search resumes where it
was (decoding/stopping.py's check is the hook), losing nothing.

The queue is bounded in work, not in requests: `submit` refuses a job (`QueueFullError`, which says when
to retry) when the waiting work and the job's together pass `max_queued_work`, or when the work
already waiting in its lane would take more than `max_queue_wait_s` at the speed the worker has
measured, so a request is either answered in about that time or refused at once. The speed is known
from the first request on: given a `WarmUp`, the worker decodes that batch before it takes any job
(twice: the first round pays the model's first-call costs, the second is timed) and starts from its
speed; every batch decoded after it is folded into a running average.

A job is gone when its future is done before its results: its client left (the future cancelled, or
failed with `ClientGoneError` by the waiting request: counted in `dropped`), or its deadline passed
(failed with `DeadlinePassedError`, by the worker or the waiting request: counted in `expired`); each
gone job is counted once, in one of the two. A gone job takes no room in a batch, and a batch whose
jobs are all gone stops between two search steps (decoding/stopping.py). `shut_down(by)` fails every
job not finished at `by` with `ShuttingDownError`, and stops the batch then being decoded.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from attn_mt.decoding.stopping import DecodeStoppedError, stop_when

DecodeFn = Callable[[list[Any], Any], Sequence[Any]]  # (sentences or pairs, options) -> one result each
RETRY_AFTER_S = (1, 120)  # the bounds of the Retry-After a refused job is given, in seconds


class QueueFullError(Exception):
    """The queue holds too much work to take this job now; `retry_after_s` estimates when it would."""

    def __init__(self, queued_work: float, retry_after_s: int):
        super().__init__(f"the server is busy ({queued_work:.0f} units of work waiting); retry later")
        self.queued_work, self.retry_after_s = queued_work, retry_after_s


class DeadlinePassedError(Exception):
    """The job was not finished by its deadline."""


class ClientGoneError(Exception):
    """The job's client left before its answer."""


class ShuttingDownError(Exception):
    """The server is stopping and did not finish the job within its shutdown timeout."""


@dataclass(eq=False)
class Job:
    """Sentences of one request, its decoding options, its cost and deadline, and where its results go."""

    sentences: list[Any]  # sentences to translate, or (source, target) pairs to score
    options: Hashable
    work: float = 0.0  # the whole job's cost (0: one unit a sentence)
    deadline: float | None = None  # time.monotonic() by which it must be finished
    future: Future = field(default_factory=Future)
    handed: int = 0  # sentences put in batches so far
    finished: int = 0  # sentences decoded so far
    results: list[Any] = field(default_factory=list)
    counted: bool = False  # counted as gone (in Batcher.dropped or Batcher.expired)
    queued_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.work = float(self.work or len(self.sentences))
        self.results = [None] * len(self.sentences)

    @property
    def unit_work(self) -> float:
        """The work of one of its sentences (the job's spread evenly)."""
        return self.work / max(1, len(self.sentences))

    @property
    def left(self) -> int:
        """Sentences not yet put in a batch."""
        return len(self.sentences) - self.handed


@dataclass(frozen=True)
class WarmUp:
    """A batch the worker decodes before any job, to know its speed from the first request on."""

    sentences: list[Any]
    options: Hashable
    work: float  # the batch's work units (serving/admission.py)
    rounds: int = 2  # decodings; the last one is timed


def settle(future: Future, result: Any = None, error: BaseException | None = None) -> bool:
    """Give the future its result (or error) unless it is already done; whether this call settled it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        return False
    return True


class Batcher:
    """A bounded queue of translation jobs and the one thread that decodes them in batches."""

    def __init__(
        self,
        decode: DecodeFn,
        max_batch: int,
        max_wait_s: float,
        max_queued_work: float = math.inf,
        batch_work: float = math.inf,
        short_work: float = math.inf,
        max_queue_wait_s: float = math.inf,
        warm_up: WarmUp | None = None,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be 0 or more, got {max_wait_s}")
        self.decode, self.max_batch, self.max_wait_s = decode, max_batch, max_wait_s
        self.max_queued_work, self.batch_work, self.short_work = max_queued_work, batch_work, short_work
        self.max_queue_wait_s = max_queue_wait_s
        self._jobs: deque[Job] = deque()  # jobs with sentences not yet in a batch, in arrival order
        self._lock = threading.Condition()
        self._closing = False
        self._stop_by: float | None = None  # the shutdown deadline, once shut_down is called
        self._running: list[Job] = []  # the jobs of the batch being decoded (and one run inside it)
        self._last_long = False  # whether the last batch came from the long lane
        self._work_per_s = 0.0  # decoding speed, a running average (0 until the warm-up or first batch)
        self.warm_up = warm_up
        self.warmed = threading.Event()  # set once the warm-up batch is decoded (at once without one)
        self.warm_up_s = 0.0  # how long the timed round of the warm-up took
        self.warm_up_error: Exception | None = None  # what the warm-up raised, if it failed
        self.batches = 0  # batches decoded so far (the warm-up's not counted)
        self.sentences = 0  # sentences decoded so far
        self.dropped = 0  # jobs given up because their client left before the answer
        self.expired = 0  # jobs given up because their deadline passed first
        self.refused = 0  # jobs refused because the queue was full
        self.stopped = 0  # batches stopped between two search steps
        self.interleaved = 0  # short batches decoded at a step boundary of a long batch's search
        self.unfinished_at_shutdown = 0  # jobs failed with ShuttingDownError
        self._thread = threading.Thread(target=self._run, name="attn-mt-decoder", daemon=True)
        self._thread.start()

    @property
    def queued_work(self) -> float:
        """The work of the sentences waiting for a batch."""
        with self._lock:
            return self._queued_work()

    @property
    def work_per_s(self) -> float:
        """The decoding speed admission control uses, in work units a second (0 while unknown)."""
        return self._work_per_s

    def retry_after_s(self) -> int:
        """A Retry-After for a request refused now: the time the waiting work would take at the speed
        measured, in whole seconds within RETRY_AFTER_S."""
        with self._lock:
            queued = self._queued_work()
        return self._retry_after(queued / self._work_per_s if self._work_per_s > 0 else 0.0)

    @property
    def queued_jobs(self) -> int:
        """The jobs with sentences waiting for a batch (those given up excepted)."""
        with self._lock:
            return sum(1 for job in self._jobs if not job.future.done())

    def _queued_work(self) -> float:
        return sum(job.unit_work * job.left for job in self._jobs)

    def submit(
        self, sentences: list[Any], options: Hashable, work: float = 0.0, deadline: float | None = None
    ) -> Future:
        """Queue one request; its future gets the list of results, one per sentence. Raises
        QueueFullError when the queue has no room for its work (an empty queue takes any job), and
        ShuttingDownError once the server is stopping."""
        job = Job(list(sentences), options, work, deadline)
        with self._lock:
            if self._closing or self._stop_by is not None:
                raise ShuttingDownError("the server is shutting down")
            queued = self._queued_work()
            if self._jobs and queued + job.work > self.max_queued_work:
                self.refused += 1
                seconds = (queued + job.work) / self._work_per_s if self._work_per_s > 0 else 0.0
                raise QueueFullError(queued, self._retry_after(seconds))
            wait_s = self._lane_wait_s(self._is_long(job))
            if wait_s > self.max_queue_wait_s:
                self.refused += 1
                raise QueueFullError(queued, self._retry_after(wait_s))
            self._jobs.append(job)
            self._lock.notify_all()
        return job.future

    def _lane_wait_s(self, long: bool) -> float:
        """How long a job put in a lane now would wait: as long as its oldest live job has waited so
        far (beyond max_wait_s), or the time their work would take at the speed measured (doubled
        while the other lane waits too, as the lanes alternate), whichever is longer."""
        lane = [job for job in self._jobs if self._is_long(job) == long and not job.future.done()]
        oldest = min((job.queued_at for job in lane), default=time.monotonic())
        waited = time.monotonic() - oldest - self.max_wait_s  # less the time a batch waits for company
        if self._work_per_s <= 0:
            return waited
        ahead = sum(job.unit_work * job.left for job in lane)
        others = any(self._is_long(job) != long for job in self._jobs) or bool(self._running)
        return max(waited, ahead / self._work_per_s * (2 if others else 1))

    def _retry_after(self, seconds: float) -> int:
        """A Retry-After: the whole seconds of `seconds`, within RETRY_AFTER_S."""
        low, high = RETRY_AFTER_S
        return int(min(high, max(low, math.ceil(seconds))))

    def close(self) -> None:
        """Stop the worker after the jobs already queued."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join()

    def shut_down(self, by: float) -> None:
        """Refuse new jobs; at time.monotonic() `by`, fail every job not finished with ShuttingDownError and
        stop the batch being decoded. Returns at once."""
        with self._lock:
            self._stop_by = by
            self._lock.notify_all()
        timer = threading.Timer(max(0.0, by - time.monotonic()), self._fail_all_unfinished)
        timer.daemon = True
        timer.start()

    def _fail_all_unfinished(self) -> None:
        """At the shutdown deadline: every job still waiting or being decoded gets ShuttingDownError."""
        with self._lock:
            jobs, self._jobs = list(self._jobs), deque()
            self._closing = True
            self._lock.notify_all()
        for job in jobs + list(self._running):
            self._fail_at_shutdown(job)

    def _fail_at_shutdown(self, job: Job) -> None:
        """Once stopping, fail an unfinished job with ShuttingDownError (counted once)."""
        if self._stop_by is not None and settle(
            job.future, error=ShuttingDownError("not finished within the shutdown timeout")
        ):
            self.unfinished_at_shutdown += 1

    def _gone(self, job: Job, now: float) -> bool:
        """Whether the job is no longer wanted: its future done (its client gone, or given up by its
        request) or its deadline passed (the future then fails with DeadlinePassedError)."""
        if job.deadline is not None and now > job.deadline:
            settle(job.future, error=DeadlinePassedError("the deadline passed"))
        return job.future.done()

    def _prune(self) -> None:
        """Drop gone jobs from the queue (under the lock)."""
        now = time.monotonic()
        for job in [job for job in self._jobs if self._gone(job, now)]:
            self._jobs.remove(job)
            self._drop(job)

    def _is_long(self, job: Job) -> bool:
        return job.work > self.short_work

    def _lane(self) -> bool | None:
        """Which lane the next batch comes from (True: long), None when nothing waits."""
        lanes = {self._is_long(job) for job in self._jobs}
        if len(lanes) == 2:
            return not self._last_long
        return next(iter(lanes), None)

    def _plan(self, long: bool) -> tuple[list[tuple[Job, int]], bool]:
        """The batch the waiting jobs make now: (job, sentences) in arrival order, from the oldest job
        of the lane and those with its options, within max_batch and batch_work; and whether it is full."""
        plan: list[tuple[Job, int]] = []
        room, work_room, options = self.max_batch, self.batch_work, None
        for job in self._jobs:
            if self._is_long(job) != long or (options is not None and job.options != options):
                continue
            options = job.options
            fits = int(work_room // job.unit_work) if math.isfinite(work_room) else job.left
            take = min(job.left, room, fits if plan else max(1, fits))
            if take <= 0:
                return plan, True
            plan.append((job, take))
            room -= take
            work_room -= take * job.unit_work
            if room == 0 or take < job.left:
                return plan, True
        return plan, False

    def gather(self) -> list[tuple[Job, int, int]] | None:
        """Wait for a job, then collect jobs with its options for up to max_wait_s: the batch as (job,
        first sentence, end) parts; None means stop."""
        with self._lock:
            while True:
                if self._stop_by is not None and time.monotonic() > self._stop_by:
                    for job in self._jobs:  # past the shutdown deadline: no batch is started
                        self._fail_at_shutdown(job)
                    self._jobs.clear()
                    return None
                self._prune()
                if self._jobs:
                    break
                if self._closing:
                    return None
                self._lock.wait()
            long = bool(self._lane())
            until = time.monotonic() + self.max_wait_s
            plan, full = self._plan(long)
            while not full and not self._closing and self._stop_by is None:
                remaining = until - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
                self._prune()
                plan, full = self._plan(long)
                if not plan:  # every job of the batch left while it waited
                    long = bool(self._lane())
                    plan, full = self._plan(long)
                    if not plan:
                        return []
            self._last_long = long
            return self._commit(plan)

    def _commit(self, plan: list[tuple[Job, int]]) -> list[tuple[Job, int, int]]:
        """Hand out a planned batch (under the lock): (job, first sentence, end) parts; a job whose
        every sentence is handed out leaves the queue."""
        parts = []
        for job, take in plan:
            parts.append((job, job.handed, job.handed + take))
            job.handed += take
            if job.left == 0:
                self._jobs.remove(job)
        return parts

    def _run(self) -> None:
        """The worker: decode the warm-up batch, then gather a batch, decode it once, hand each job its
        share of the results."""
        if self.warm_up is not None:
            self._warm(self.warm_up)
        self.warmed.set()
        while True:
            parts = self.gather()
            if parts is None:
                return
            self._decode(parts, self._last_long)

    def _decode(self, parts: list[tuple[Job, int, int]], long: bool) -> None:
        """Decode one batch and hand each job its share. A long batch's search lets overdue short jobs
        go first at its step boundaries: their batch is decoded there, and the search resumes."""
        live = [(job, start, end) for job, start, end in parts if self._start(job)]
        if not live:
            return
        jobs = [job for job, _, _ in live]
        outer, self._running = self._running, self._running + jobs
        items = [s for job, start, end in live for s in job.sentences[start:end]]
        started = time.monotonic()

        def stop(jobs: list[Job] = jobs) -> bool:
            if self._all_gone(jobs):
                return True
            if long and self._short_overdue():
                short = self._take_short()
                if short:
                    self.interleaved += 1
                    self._decode(short, long=False)  # the long search waits at this step meanwhile
            return False

        try:
            with stop_when(stop):
                results = list(self.decode(items, jobs[0].options))
            if len(results) != len(items):
                raise RuntimeError(f"{len(results)} results for {len(items)} sentences")
        except DecodeStoppedError:
            self.stopped += 1
            for job in jobs:
                self._fail_at_shutdown(job)
                self._drop(job)
            return
        except Exception as exc:  # handed to every waiting request; the worker carries on
            for job in jobs:
                if not settle(job.future, error=exc):
                    self._drop(job)  # given up while its batch was decoded
            return
        finally:
            self._running = outer
        self._measure(sum(job.unit_work * (end - start) for job, start, end in live), started)
        self.batches += 1
        self.sentences += len(items)
        at = 0
        for job, start, end in live:
            job.results[start:end] = results[at : at + end - start]
            at += end - start
            job.finished += end - start
            if job.finished == len(job.sentences) and not settle(job.future, job.results):
                self._drop(job)  # given up while its last batch was decoded

    def _short_overdue(self) -> bool:
        """Whether a short job has waited half of max_queue_wait_s: a long search then lets it in."""
        limit = self.max_queue_wait_s / 2
        if not math.isfinite(limit):
            return False
        now = time.monotonic()
        with self._lock:
            return any(
                now - job.queued_at > limit
                for job in self._jobs
                if not self._is_long(job) and not job.future.done()
            )

    def _take_short(self) -> list[tuple[Job, int, int]]:
        """The short jobs' batch as it stands now, taken from the queue without waiting for more."""
        with self._lock:
            self._prune()
            plan, _ = self._plan(long=False)
            return self._commit(plan)

    def _start(self, job: Job) -> bool:
        """Mark the job running when its first part is decoded; whether it is still wanted."""
        future = job.future
        if not future.running() and not future.done() and not future.set_running_or_notify_cancel():
            self._drop(job)
            return False
        if self._gone(job, time.monotonic()):
            self._drop(job)
            return False
        return True

    def _drop(self, job: Job) -> None:
        """Count a gone job once, however many parts it had: in `expired` when its deadline passed, in
        `dropped` when its client left; neither when the shutdown failed it (unfinished_at_shutdown)."""
        if job.counted or not job.future.done():
            return
        job.counted = True
        if job.future.cancelled() or isinstance(job.future.exception(), ClientGoneError):
            self.dropped += 1
        elif isinstance(job.future.exception(), DeadlinePassedError):
            self.expired += 1

    def _all_gone(self, jobs: list[Job]) -> bool:
        """The stop check of a batch being decoded: every job of it gone, or the shutdown deadline passed."""
        now = time.monotonic()
        if self._stop_by is not None and now > self._stop_by:
            return True
        return all(self._gone(job, now) for job in jobs)

    def _warm(self, warm_up: WarmUp) -> None:
        """Decode the warm-up batch `rounds` times and start from the last round's speed."""
        try:
            for _ in range(max(1, warm_up.rounds)):
                started = time.monotonic()
                self.decode(list(warm_up.sentences), warm_up.options)
                self.warm_up_s = max(time.monotonic() - started, 1e-6)
        except Exception as exc:  # the server starts without a speed; its first batch measures one
            self.warm_up_error = exc
            return
        self._work_per_s = warm_up.work / self.warm_up_s

    def _measure(self, work: float, started: float) -> None:
        """Fold one batch's work per second into the running average that Retry-After is computed from."""
        elapsed = max(time.monotonic() - started, 1e-6)
        speed = work / elapsed
        self._work_per_s = speed if self._work_per_s <= 0 else 0.8 * self._work_per_s + 0.2 * speed
