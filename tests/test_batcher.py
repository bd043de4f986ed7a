"""The serving queue: which jobs are decoded together, in what order, and what each job gets back."""

from __future__ import annotations

import threading

import pytest

from attn_mt.serving.batcher import Batcher

WAIT_S = 30.0  # a batch waits this long for more jobs; the tests fill batches well before it ends


class GatedDecoder:
    """A fake decode function that records each batch and holds the first one until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, sentences: list[str], options: str) -> list[str]:
        self.calls.append((list(sentences), options))
        self.started.set()
        self.release.wait()
        if "boom" in sentences:
            raise ValueError("cannot decode boom")
        return [f"{options}:{s.upper()}" for s in sentences]


def test_jobs_waiting_together_share_one_batch_per_options():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=4, max_wait_s=WAIT_S)
    first = batcher.submit(["a1", "a2", "a3", "a4"], "greedy")  # a full batch: decoded at once
    assert decoder.started.wait(WAIT_S)  # the worker is inside decode with the first job alone
    b = batcher.submit(["b", "c"], "greedy")
    d = batcher.submit(["d"], "beam2")
    e = batcher.submit(["e"], "greedy")
    f = batcher.submit(["f"], "beam2")
    g = batcher.submit(["g"], "greedy")
    decoder.release.set()
    assert first.result(WAIT_S) == ["greedy:A1", "greedy:A2", "greedy:A3", "greedy:A4"]
    assert b.result(WAIT_S) == ["greedy:B", "greedy:C"]
    assert e.result(WAIT_S) == ["greedy:E"] and g.result(WAIT_S) == ["greedy:G"]
    batcher.close()  # ends the wait of the half-full last batch, which is still decoded
    assert d.result(WAIT_S) == ["beam2:D"] and f.result(WAIT_S) == ["beam2:F"]
    assert decoder.calls == [
        (["a1", "a2", "a3", "a4"], "greedy"),
        (["b", "c", "e", "g"], "greedy"),  # max_batch 4 reached: the other options wait for the next round
        (["d", "f"], "beam2"),
    ]
    assert (batcher.batches, batcher.sentences) == (3, 10)


def test_a_full_batch_leaves_later_jobs_for_the_next_one_in_order():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=2, max_wait_s=WAIT_S)
    batcher.submit(["a", "a"], "x")
    assert decoder.started.wait(WAIT_S)
    futures = [batcher.submit([s], "x") for s in "bcde"]
    decoder.release.set()
    assert [f.result(WAIT_S) for f in futures] == [["x:B"], ["x:C"], ["x:D"], ["x:E"]]
    batcher.close()
    assert [call[0] for call in decoder.calls] == [["a", "a"], ["b", "c"], ["d", "e"]]


def test_cancelled_jobs_are_not_decoded_and_errors_reach_only_their_batch():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=8, max_wait_s=0.0)
    batcher.submit(["a"], "x")
    assert decoder.started.wait(WAIT_S)
    gone = batcher.submit(["gone"], "x")
    assert gone.cancel()  # its client went away while it was queued
    failing = batcher.submit(["boom"], "y")
    decoder.release.set()
    with pytest.raises(ValueError, match="cannot decode boom"):
        failing.result(WAIT_S)
    assert batcher.submit(["after"], "x").result(WAIT_S) == ["x:AFTER"]  # the worker carries on
    batcher.close()
    assert all("gone" not in sentences for sentences, _ in decoder.calls)
    assert batcher.dropped == 1


def test_jobs_cancelled_before_their_batch_take_no_room_in_it():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=2, max_wait_s=WAIT_S)
    batcher.submit(["a", "a"], "x")
    assert decoder.started.wait(WAIT_S)
    gone = batcher.submit(["gone"], "x")
    b, c = batcher.submit(["b"], "x"), batcher.submit(["c"], "x")
    assert gone.cancel()
    decoder.release.set()
    assert b.result(WAIT_S) == ["x:B"] and c.result(WAIT_S) == ["x:C"]  # one full batch, no wait
    batcher.close()
    assert [call[0] for call in decoder.calls] == [["a", "a"], ["b", "c"]]
    assert (batcher.batches, batcher.sentences, batcher.dropped) == (2, 4, 1)


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        Batcher(GatedDecoder(), max_batch=0, max_wait_s=0.01)
    with pytest.raises(ValueError, match="max_wait_s must be 0 or more"):
        Batcher(GatedDecoder(), max_batch=1, max_wait_s=-1)
