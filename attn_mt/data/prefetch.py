"""Batches collated ahead of the training step on a background thread (`train.prefetch_batches`, CUDA only).

On a GPU the step's kernels run while the host queues them, so collating the next step's batches
(numpy gathers and padding) on the training thread leaves the GPU waiting; `Prefetcher` collates
them on a thread into pinned memory, from which the trainer's `non_blocking` copy runs without
stopping the host. Collating draws no random numbers, so the order in which batches are made does
not change a run. On the CPU the trainer collates on its own thread, where a second thread would
compete for the same cores.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType

from attn_mt.data.batch import Batch

StepIndices = list[Sequence[int]]  # the example indices of each batch of one training step
_DONE = object()  # put after the last step


class Prefetcher:
    """Iterates over the collated batches of `steps`, made `ahead` steps in advance on a thread.

    Use it as a context manager: leaving the block (a run stopping mid-epoch) stops the thread. An
    exception raised while collating is raised again by the step that needs the batch.
    """

    def __init__(
        self,
        steps: Iterable[StepIndices],
        collate: Callable[[Sequence[int]], Batch],
        ahead: int,
        pin: bool,
    ):
        if ahead < 1:
            raise ValueError(f"ahead must be at least 1, got {ahead}")
        self._queue: queue.Queue = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._fill, args=(steps, collate, pin), name="attn-mt-prefetch", daemon=True
        )
        self._thread.start()

    def _fill(
        self, steps: Iterable[StepIndices], collate: Callable[[Sequence[int]], Batch], pin: bool
    ) -> None:
        """The thread: collate (and pin) each step's batches and queue them, until done or stopped."""
        try:
            for indices in steps:
                batches = [collate(ix) for ix in indices]
                if not self._put([b.pinned() for b in batches] if pin else batches):
                    return
            self._put(_DONE)
        except BaseException as exc:  # handed to the training thread, which raises it
            self._put(exc)

    def _put(self, item: object) -> bool:
        """Queue `item`, waiting for room; False when asked to stop meanwhile."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[list[Batch]]:
        return self

    def __next__(self) -> list[Batch]:
        item = self._queue.get()
        if item is _DONE:
            self._queue.put(_DONE)  # later calls end too
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def batch_feed(
    steps: Iterable[StepIndices], collate: Callable[[Sequence[int]], Batch], ahead: int, pin: bool
) -> contextlib.AbstractContextManager[Iterator[list[Batch]]]:
    """Each step's collated batches: from a Prefetcher `ahead` steps ahead, or (0) collated when asked."""
    if ahead:
        return Prefetcher(steps, collate, ahead, pin)
    return contextlib.nullcontext([collate(ix) for ix in step] for step in steps)
