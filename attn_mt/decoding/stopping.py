"""Stopping a search between its steps: the server's way to drop a decode nobody will read.

The decoding worker of `attn-mt serve` runs each batch inside `stop_when(check)`; every search step
(greedy, beam, sampling and forced scoring: decoding/search.py) calls `check_stop()` first, which
raises `DecodeStoppedError` once `check()` says so. The check belongs to the calling thread alone, so
searches run elsewhere (the commands, the Python API) never see it and pay one attribute read a step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_local = threading.local()


class DecodeStoppedError(Exception):
    """A search given up between two steps because its caller no longer wants the result."""


@contextmanager
def stop_when(check: Callable[[], bool]) -> Iterator[None]:
    """Within the block, searches on this thread stop (DecodeStoppedError) at the first step where
    `check()` is true."""
    outer = getattr(_local, "check", None)
    _local.check = check
    try:
        yield
    finally:
        _local.check = outer


def check_stop() -> None:
    """Raise DecodeStoppedError when this thread's stop check (if any) says so; called before each step."""
    check = getattr(_local, "check", None)
    if check is not None and check():
        raise DecodeStoppedError("the search was stopped between two steps")
