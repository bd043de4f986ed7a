"""The serving queue: which jobs are decoded together, in what order, and what each job gets back."""

from __future__ import annotations

import threading
import time

import pytest

from attn_mt.decoding.stopping import DecodeStoppedError, check_stop, stop_when
from attn_mt.decoding.translator import Translator
from attn_mt.run.run_dir import load_run
from attn_mt.serving.batcher import (
    Batcher,
    ClientGoneError,
    DeadlinePassedError,
    QueueFullError,
    ShuttingDownError,
    WarmUp,
)

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


class SteppingDecoder:
    """A stand-in search: `steps` steps of `step_s` each, calling check_stop() before every one, as
    decoding/search.py does; records each batch's sentences and how many steps it ran."""

    def __init__(self, steps: int = 1, step_s: float = 0.0) -> None:
        self.steps, self.step_s = steps, step_s
        self.calls: list[list[str]] = []
        self.ran: list[int] = []
        self.started = threading.Event()

    def __call__(self, sentences: list[str], options: str) -> list[str]:
        self.calls.append(list(sentences))
        index = len(self.ran)  # another call may run inside this one (at a check_stop)
        self.ran.append(0)
        self.started.set()
        for _ in range(self.steps):
            check_stop()
            time.sleep(self.step_s)
            self.ran[index] += 1
        return [s.upper() for s in sentences]


def test_max_batch_is_never_exceeded_a_job_larger_than_the_room_is_split():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=4, max_wait_s=WAIT_S)
    first = batcher.submit(["a1", "a2", "a3"], "x")  # 3 of 4: the batch waits for more
    second = batcher.submit(["b1", "b2", "b3", "b4", "b5", "b6"], "x")  # its first sentence fills it
    decoder.release.set()
    assert first.result(WAIT_S) == ["x:A1", "x:A2", "x:A3"]
    batcher.close()  # ends the wait of the last part's batch, which is still decoded
    assert second.result(WAIT_S) == [f"x:B{i}" for i in range(1, 7)]  # its parts joined in order
    assert [call[0] for call in decoder.calls] == [
        ["a1", "a2", "a3", "b1"],
        ["b2", "b3", "b4", "b5"],
        ["b6"],
    ]
    assert (batcher.batches, batcher.sentences) == (3, 9)


def test_the_queue_is_bounded_in_work_and_refuses_with_a_retry_time():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=1, max_wait_s=0.0, max_queued_work=100)
    batcher.submit(["running"], "x", work=90)
    assert decoder.started.wait(WAIT_S)  # decoding: no longer queued
    waiting = batcher.submit(["a"], "x", work=60)
    with pytest.raises(QueueFullError) as refused:
        batcher.submit(["b"], "x", work=50)  # 60 + 50 waiting would pass 100
    assert refused.value.retry_after_s >= 1 and refused.value.queued_work == 60
    small = batcher.submit(["c"], "x", work=40)  # 60 + 40 fits
    assert batcher.queued_work == 100 and batcher.refused == 1
    decoder.release.set()
    assert waiting.result(WAIT_S) == ["x:A"] and small.result(WAIT_S) == ["x:C"]
    huge = batcher.submit(["d"], "x", work=10_000)  # larger than the bound, taken when nothing waits
    assert huge.result(WAIT_S) == ["x:D"]
    batcher.close()


def test_a_job_past_its_deadline_is_not_decoded():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=8, max_wait_s=0.0)
    batcher.submit(["a"], "x")
    assert decoder.started.wait(WAIT_S)
    late = batcher.submit(["late"], "y", deadline=time.monotonic() + 0.05)
    time.sleep(0.1)
    decoder.release.set()
    with pytest.raises(DeadlinePassedError):
        late.result(WAIT_S)
    assert batcher.submit(["b"], "y").result(WAIT_S) == ["y:B"]
    batcher.close()
    assert all("late" not in sentences for sentences, _ in decoder.calls)
    assert (batcher.expired, batcher.dropped) == (1, 0)  # expired, not counted as a client that left


def test_a_batch_whose_clients_all_left_stops_between_search_steps():
    decoder = SteppingDecoder(steps=1000, step_s=0.005)  # 5 s if it ran to the end
    batcher = Batcher(decoder, max_batch=8, max_wait_s=0.0)
    leaving = batcher.submit(["long"], "x")
    assert decoder.started.wait(WAIT_S)
    assert not leaving.cancel()  # running: the waiting request fails it instead, as app.py does
    leaving.set_exception(ClientGoneError("its client left"))
    decoder.steps = 1
    assert batcher.submit(["next"], "x").result(WAIT_S) == ["NEXT"]  # the worker is free again
    batcher.close()
    assert decoder.ran[0] < 1000 and (batcher.stopped, batcher.dropped, batcher.expired) == (1, 1, 0)


def test_jobs_given_up_are_counted_once_as_departed_or_as_expired():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=8, max_wait_s=0.0)
    late_running = batcher.submit(["a"], "x")
    assert decoder.started.wait(WAIT_S)
    staying = batcher.submit(["b"], "y")
    left_queued, cancelled = batcher.submit(["c"], "z"), batcher.submit(["d"], "z")
    late_queued = batcher.submit(["e"], "z", deadline=time.monotonic() + 0.05)
    late_running.set_exception(DeadlinePassedError("given up by its request"))  # app.py's timer, mid-batch
    left_queued.set_exception(ClientGoneError("its client left"))
    assert cancelled.cancel()
    time.sleep(0.1)  # past the queued job's deadline
    decoder.release.set()
    batcher.close()
    with pytest.raises(DeadlinePassedError):
        late_queued.result(WAIT_S)
    assert staying.result(WAIT_S) == ["y:B"]
    assert [sentences for sentences, _ in decoder.calls] == [["a"], ["b"]]
    assert (batcher.expired, batcher.dropped) == (2, 2)


def test_a_job_given_up_while_its_batch_fails_is_counted_once():
    decoder = GatedDecoder()
    batcher = Batcher(decoder, max_batch=8, max_wait_s=0.0)
    leaving = batcher.submit(["boom"], "x")
    assert decoder.started.wait(WAIT_S)
    leaving.set_exception(ClientGoneError("its client left"))
    decoder.release.set()
    assert batcher.submit(["after"], "x").result(WAIT_S) == ["x:AFTER"]
    batcher.close()
    assert (batcher.dropped, batcher.expired) == (1, 0)


def test_a_warm_up_batch_gives_the_speed_before_the_first_job():
    decoder = GatedDecoder()
    decoder.release.set()
    timed = SteppingDecoder(steps=1, step_s=0.1)  # 10 units in at least 0.1 s: at most 100 units a second

    def decode(sentences: list[str], options: str) -> list[str]:
        return (decoder if "hold" in sentences else timed)(sentences, options)

    warm_up = WarmUp(["w1", "w2"], "x", work=10)
    batcher = Batcher(decode, max_batch=1, max_wait_s=0.0, max_queue_wait_s=0.5, warm_up=warm_up)
    assert batcher.warmed.wait(WAIT_S)
    assert timed.calls == [["w1", "w2"], ["w1", "w2"]] and 0 < batcher.work_per_s <= 100
    assert (batcher.batches, batcher.sentences) == (0, 0)  # the warm-up is no request's
    decoder.release.clear()
    held = batcher.submit(["hold"], "x", work=1)  # the first job of all: nothing measured it yet
    assert decoder.started.wait(WAIT_S)
    admitted = []
    for number in range(10):
        try:
            admitted.append(batcher.submit([f"j{number}"], "x", work=10))
        except QueueFullError as refused:
            assert refused.retry_after_s >= 1
    decoder.release.set()
    assert [f.result(WAIT_S) for f in admitted] == [[f"J{n}"] for n in range(len(admitted))]
    assert held.result(WAIT_S) == ["x:HOLD"]
    batcher.close()
    # 0.5 s at 100 units a second or less, halved while the held batch runs: at most 3 jobs of 10
    assert 1 <= len(admitted) <= 3 and batcher.refused == 10 - len(admitted)


def test_a_failed_warm_up_leaves_the_worker_serving_without_a_speed():
    def decode(sentences: list[str], options: str) -> list[str]:
        if "w" in sentences:
            raise RuntimeError("cannot warm up")
        return [s.upper() for s in sentences]

    batcher = Batcher(decode, max_batch=4, max_wait_s=0.0, warm_up=WarmUp(["w"], "x", work=5))
    assert batcher.warmed.wait(WAIT_S)
    assert str(batcher.warm_up_error) == "cannot warm up" and batcher.work_per_s == 0
    assert batcher.submit(["a"], "x").result(WAIT_S) == ["A"]
    batcher.close()
    assert batcher.work_per_s > 0  # measured on the first batch


def test_short_jobs_alternate_with_bounded_batches_of_a_long_one():
    decoder = SteppingDecoder(steps=3, step_s=0.01)
    batcher = Batcher(decoder, max_batch=64, max_wait_s=0.0, batch_work=4, short_work=2)
    long = batcher.submit([f"l{i}" for i in range(12)], "x")  # 12 units: 3 batches of 4
    assert decoder.started.wait(WAIT_S)
    short = [batcher.submit([f"s{i}"], "x") for i in range(2)]  # 1 unit each
    assert [s.result(WAIT_S) for s in short] == [["S0"], ["S1"]]
    assert long.result(WAIT_S) == [f"L{i}" for i in range(12)]
    batcher.close()
    # after the first long batch the short ones go next (together, within max_batch), not after all 12
    assert decoder.calls[:2] == [["l0", "l1", "l2", "l3"], ["s0", "s1"]]
    assert [len(call) for call in decoder.calls[2:]] == [4, 4]


def test_shutting_down_finishes_what_fits_and_fails_the_rest():
    decoder = SteppingDecoder(steps=1000, step_s=0.005)
    batcher = Batcher(decoder, max_batch=1, max_wait_s=0.0)
    running, queued = batcher.submit(["a"], "x"), batcher.submit(["b"], "x")
    assert decoder.started.wait(WAIT_S)
    started = time.monotonic()
    batcher.shut_down(by=started + 0.2)
    with pytest.raises(ShuttingDownError):
        batcher.submit(["c"], "x")  # nothing new once stopping
    for future in (running, queued):
        with pytest.raises(ShuttingDownError):
            future.result(WAIT_S)
    batcher.close()  # the worker has ended: the running batch stopped between two steps
    assert time.monotonic() - started < 2.0 and batcher.unfinished_at_shutdown == 2
    assert decoder.calls == [["a"]] and decoder.ran[0] < 1000


def test_a_real_search_stops_at_the_step_its_check_says(tiny_runs):
    loaded = load_run(tiny_runs.transformer, "best", "cpu")
    translator = Translator(loaded.model, loaded.src_vocab, loaded.tgt_vocab, loaded.config)
    sentences = ["alpha bravo charlie delta echo foxtrot ."]
    checks = []

    def third_step() -> bool:
        checks.append(1)
        return len(checks) == 3

    for beam in (1, 3):
        checks.clear()
        with stop_when(third_step), pytest.raises(DecodeStoppedError):
            translator.translate(sentences, beam_size=beam)
        assert len(checks) == 3  # two steps ran, the third was never started
    checks.clear()
    assert translator.translate(sentences, beam_size=3)[0].text  # no check outside the block
    assert checks == []


def test_a_request_that_would_wait_longer_than_max_queue_wait_is_refused_at_once():
    decoder = GatedDecoder()
    decoder.release.set()
    timed = SteppingDecoder(steps=1, step_s=0.1)  # 10 units in 0.1 s: about 100 units a second

    def decode(sentences: list[str], options: str) -> list[str]:
        return (decoder if "hold" in sentences else timed)(sentences, options)

    batcher = Batcher(decode, max_batch=1, max_wait_s=0.0, max_queue_wait_s=0.5)
    assert batcher.submit(["a"], "x", work=10).result(WAIT_S) == ["A"]  # the speed is measured
    decoder.release.clear()
    held = batcher.submit(["hold"], "x", work=1)
    assert decoder.started.wait(WAIT_S)
    admitted = []
    for number in range(10):  # each waits behind the ones before: 0, 10, 20, ... units
        try:
            admitted.append(batcher.submit([f"j{number}"], "x", work=10))
        except QueueFullError as refused:
            assert refused.retry_after_s >= 1
    decoder.release.set()
    assert [f.result(WAIT_S) for f in admitted] == [[f"J{n}"] for n in range(len(admitted))]  # the first ones
    assert held.result(WAIT_S) == ["x:HOLD"]
    batcher.close()
    # 0.5 s at about 100 units a second, halved while another batch runs: 2 or 3 jobs of 10 fit
    assert 2 <= len(admitted) <= 4 and batcher.refused == 10 - len(admitted)


def test_a_long_search_lets_an_overdue_short_job_in_at_a_step_boundary_and_resumes():
    decoder = SteppingDecoder(steps=200, step_s=0.005)  # about 1 s a batch
    batcher = Batcher(decoder, max_batch=64, max_wait_s=0.0, short_work=2, max_queue_wait_s=0.2)
    long = batcher.submit(["l0", "l1", "l2"], "x", work=30)
    assert decoder.started.wait(WAIT_S)
    started = time.monotonic()
    short = batcher.submit(["s"], "x", work=1)
    assert short.result(WAIT_S) == ["S"]
    waited = time.monotonic() - started
    assert long.result(WAIT_S) == ["L0", "L1", "L2"]
    batcher.close()
    assert decoder.calls == [["l0", "l1", "l2"], ["s"]]  # the short batch ran inside the long search
    assert decoder.ran == [200, 200] and batcher.interleaved == 1  # and the long one lost no step
    assert waited < 1.6  # 0.1 s to be overdue and its own 1 s of steps; behind the long one, about 2 s


def test_a_real_search_resumes_unchanged_after_another_ran_inside_it(tiny_runs):
    loaded = load_run(tiny_runs.transformer, "best", "cpu")
    translator = Translator(loaded.model, loaded.src_vocab, loaded.tgt_vocab, loaded.config)
    outer_sentences, inner_sentences = ["alpha bravo charlie delta ."], ["echo foxtrot golf ."]
    alone_outer = [t.text for t in translator.translate(outer_sentences, beam_size=3, nbest=2)]
    alone_inner = [t.text for t in translator.translate(inner_sentences, beam_size=2)]
    inner: list[str] = []
    steps = []

    def at_a_step() -> bool:
        steps.append(1)
        if len(steps) == 2:  # the outer search has run one step
            with stop_when(lambda: False):
                inner.extend(t.text for t in translator.translate(inner_sentences, beam_size=2))
        return False

    with stop_when(at_a_step):
        outer = [t.text for t in translator.translate(outer_sentences, beam_size=3, nbest=2)]
    assert outer == alone_outer and inner == alone_inner and len(steps) >= 3  # it went on after
