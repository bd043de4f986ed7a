"""One decoding worker behind a queue: requests that arrive close together are decoded as one batch.

The web server's threads only put jobs on the queue and wait on their futures; the worker alone
runs the model. It takes the oldest job, then keeps taking jobs for up to `max_wait_s` or until
`max_batch` sentences are gathered. Jobs whose decoding options differ from the first job's are
set aside for the next round, in arrival order, so a batch is always decoded with one set of
options. A job whose client has gone (its future cancelled) is dropped without being decoded: it
takes no room in a batch when it is gone before the batch is formed, and is left out of the
decoding when it goes while the batch waits for more jobs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

DecodeFn = Callable[[list[Any], Any], Sequence[Any]]  # (sentences or pairs, options) -> one result each


@dataclass
class Job:
    """Sentences of one request, its decoding options, and where its results go."""

    sentences: list[Any]  # sentences to translate, or (source, target) pairs to score
    options: Hashable
    future: Future = field(default_factory=Future)


class Batcher:
    """A queue of translation jobs and the one thread that decodes them in batches."""

    def __init__(self, decode: DecodeFn, max_batch: int, max_wait_s: float):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be 0 or more, got {max_wait_s}")
        self.decode, self.max_batch, self.max_wait_s = decode, max_batch, max_wait_s
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._set_aside: deque[Job] = deque()
        self.batches = 0  # batches decoded so far
        self.sentences = 0  # sentences decoded so far
        self.dropped = 0  # jobs not decoded because their client had gone
        self._thread = threading.Thread(target=self._run, name="attn-mt-decoder", daemon=True)
        self._thread.start()

    def submit(self, sentences: list[Any], options: Hashable) -> Future:
        """Queue one request; its future gets the list of results, one per sentence."""
        job = Job(list(sentences), options)
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        """Stop the worker after the jobs already queued."""
        self._queue.put(None)
        self._thread.join()

    def _gone(self, job: Job) -> bool:
        """Whether the job's client has gone (its future cancelled); such a job is counted as dropped."""
        if job.future.cancelled():
            self.dropped += 1
            return True
        return False

    def _next_job(self) -> Job | None:
        """The oldest live set-aside job, else the next live queued one, waiting for it; None means stop."""
        while self._set_aside:
            job = self._set_aside.popleft()
            if not self._gone(job):
                return job
        while True:
            job = self._queue.get()
            if job is None or not self._gone(job):
                return job

    def gather(self) -> list[Job] | None:
        """Wait for a job, then collect jobs with its options for up to max_wait_s; None means stop."""
        first = self._next_job()
        if first is None:
            return None
        batch, size = [first], len(first.sentences)
        others: list[Job] = []
        set_aside, self._set_aside = self._set_aside, deque()
        for job in set_aside:  # older jobs first, before anything newer from the queue
            if self._gone(job):
                continue
            if job.options == first.options and size < self.max_batch:
                batch.append(job)
                size += len(job.sentences)
            else:
                others.append(job)
        deadline = time.monotonic() + self.max_wait_s
        while size < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)  # stop after this batch
                break
            if self._gone(job):
                continue
            if job.options == first.options:
                batch.append(job)
                size += len(job.sentences)
            else:
                others.append(job)
        self._set_aside.extend(others)
        return batch

    def _run(self) -> None:
        """The worker: gather a batch, decode it once, hand each job its share of the results."""
        while True:
            batch = self.gather()
            if batch is None:
                return
            live = [job for job in batch if job.future.set_running_or_notify_cancel()]
            self.dropped += len(batch) - len(live)  # clients that left while the batch was gathered
            if not live:
                continue
            sentences = [s for job in live for s in job.sentences]
            try:
                results = list(self.decode(sentences, live[0].options))
                if len(results) != len(sentences):
                    raise RuntimeError(f"{len(results)} results for {len(sentences)} sentences")
            except Exception as exc:  # handed to every waiting request; the worker carries on
                for job in live:
                    job.future.set_exception(exc)
                continue
            self.batches += 1
            self.sentences += len(sentences)
            start = 0
            for job in live:
                job.future.set_result(results[start : start + len(job.sentences)])
                start += len(job.sentences)
