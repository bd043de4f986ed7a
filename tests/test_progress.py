"""Progress on stderr: a bar on a terminal, plain lines in a file, an end estimate knowing the time limit."""

from __future__ import annotations

import io
import logging
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_CORPUS_LINES

from attn_mt.progress_bars import LineProgress, progress_bar
from attn_mt.training.logs import setup_logging
from attn_mt.training.progress_display import STEPS, TIME_LIMIT, EndEstimate, TrainingDisplay, window_line
from attn_mt.training.stopping import StopBounds

ROOT = Path(__file__).resolve().parent.parent
WINDOW_LINE = re.compile(
    r"^step \d+: epoch \d+, loss \d+\.\d{4}, [\d,]+ target tokens/s, lr [\d.e-]+, "
    r"elapsed [\d:]+, left ([\d:]+|\?) \((steps|time limit)\)$"
)


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def quiet_logger():
    """The `attn_mt` logger with no handlers; restored afterwards."""
    logger = logging.getLogger("attn_mt")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield logger
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    for handler in saved[0]:
        logger.addHandler(handler)
    logger.propagate, logger.level = saved[1], saved[2]


# ----- the general helper: translate, eval, download -----


def test_line_progress_writes_a_line_per_interval_and_one_at_the_end():
    clock, stream = FakeClock(), io.StringIO()
    bar = LineProgress(100, "translating", " sentences", stream, interval_s=30, clock=clock)
    for _ in range(100):  # one sentence a second
        clock.now += 1
        bar.update(1)
    bar.close()
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert len(lines) == 4  # at 30, 60 and 90 s, then the end
    assert lines[0] == "translating: 30/100 sentences (30%), elapsed 00:30, left 01:10"
    assert lines[-1] == "translating: 100/100 sentences (100%), elapsed 01:40"


def test_line_progress_scales_bytes_and_copes_without_a_total():
    clock, stream = FakeClock(), io.StringIO()
    with LineProgress(None, "downloading fra-eng.zip", "B", stream, unit_scale=True, clock=clock) as bar:
        clock.now += 4
        bar.update(2_500_000)
    assert stream.getvalue() == "downloading fra-eng.zip: 2.50MB, elapsed 00:04\n"


def test_line_progress_says_nothing_about_quick_work_shorter_than_its_delay():
    clock, stream = FakeClock(), io.StringIO()
    bar = LineProgress(3, "translating", "sentences", stream, delay=1.0, clock=clock)
    clock.now += 0.5
    bar.update(3)
    bar.close()
    assert stream.getvalue() == ""


def test_progress_bar_is_a_tqdm_bar_on_a_terminal_lines_in_a_file_and_silent_when_off():
    shown = {}
    for name, stream, enabled in [
        ("terminal", FakeTerminal(), True),
        ("file", io.StringIO(), True),
        ("off", FakeTerminal(), False),
    ]:
        with progress_bar(5, "work", "item", stream=stream, enabled=enabled) as bar:
            for _ in range(5):
                bar.update(1)
        shown[name] = stream.getvalue()
    assert "\r" in shown["terminal"] and "5/5" in shown["terminal"]
    assert "\r" not in shown["file"] and shown["file"].startswith("work: 5/5 item (100%), elapsed ")
    assert shown["file"].count("\n") == 1
    assert shown["off"] == ""


# ----- the end estimate -----


def simulate(rule: StopBounds, seconds_of_step, start_step: int = 0, start_elapsed: float = 0.0):
    """Run steps as the trainer does until the rule stops them: [(step, elapsed, Position)] and the end.

    Like the trainer, a step starts only while the time limit is not used up and the step bound not
    reached, so the run ends on the first step at or past either.
    """
    estimate = EndEstimate(rule, start_step, start_elapsed)
    step, elapsed, seen = start_step, start_elapsed, []
    while (not rule.step_bound or step < rule.step_bound) and (
        not rule.time_limit_s or elapsed < rule.time_limit_s
    ):
        step += 1
        elapsed += seconds_of_step(step)
        seen.append((step, elapsed, estimate.position(step, elapsed)))
    return seen, elapsed


def noisy_steps(mean_s: float, valid_every: int, valid_s: float, seed: int = 0):
    """Step times around `mean_s` (+-30 %), with a validation pause of `valid_s` every `valid_every` steps."""
    rng = random.Random(seed)

    def seconds(step: int) -> float:
        pause = valid_s if step % valid_every == 0 else 0.0
        return mean_s * rng.uniform(0.7, 1.3) + pause

    return seconds


def assert_estimates_within(seen, end: float, start_elapsed: float = 0.0, share: float = 0.1) -> int:
    """Every estimate of the end after the first tenth of the run is within `share` of the real end."""
    checked = 0
    for step, elapsed, position in seen:
        if elapsed - start_elapsed < 0.1 * (end - start_elapsed):
            continue
        assert position.left_s is not None, step
        predicted = elapsed + position.left_s
        assert abs(predicted - end) <= share * (end - start_elapsed), (step, elapsed, predicted, end)
        checked += 1
    return checked


def test_a_time_limit_that_ends_the_run_first_drives_the_estimate_and_the_bar_unit():
    rule = StopBounds(epochs=30, steps_per_epoch=2000, time_limit_minutes=12)  # 60,000 steps would take hours
    seen, end = simulate(rule, noisy_steps(0.3, valid_every=500, valid_s=20.0))
    assert 720 <= end < 722  # stopped on the first step past the limit
    assert assert_estimates_within(seen, end) > 1800
    last = seen[-1][2]
    assert (last.by, last.unit, last.total) == (TIME_LIMIT, "min", 12)
    step, elapsed, position = seen[len(seen) // 2]
    assert position.done == pytest.approx(elapsed / 60) and position.fraction == pytest.approx(elapsed / 720)


def test_steps_that_end_the_run_before_the_time_limit_drive_the_estimate():
    rule = StopBounds(max_steps=2000, epochs=30, steps_per_epoch=500, time_limit_minutes=60)
    seen, end = simulate(rule, noisy_steps(0.2, valid_every=100, valid_s=3.0))
    assert seen[-1][0] == 2000 and end < 3600
    assert assert_estimates_within(seen, end) > 1500
    step, _, position = seen[999]
    assert (position.by, position.unit, position.done, position.total) == (STEPS, "step", 1000, 2000)
    assert position.fraction == 0.5


def test_the_epoch_bound_counts_when_there_is_no_other():
    rule = StopBounds(epochs=3, steps_per_epoch=400)
    seen, end = simulate(rule, noisy_steps(0.1, valid_every=100, valid_s=1.0))
    assert seen[-1][0] == 1200
    assert assert_estimates_within(seen, end) > 1000
    assert seen[0][2].left_s is not None and seen[0][2].by == STEPS


def test_a_resumed_run_estimates_from_its_own_speed():
    """The first session ran at 1 s a step; this machine does 0.25 s: the time left follows the new speed."""
    rule = StopBounds(max_steps=4000, epochs=100, steps_per_epoch=1000)
    seen, end = simulate(
        rule, noisy_steps(0.25, valid_every=200, valid_s=2.0), start_step=1000, start_elapsed=1000.0
    )
    assert assert_estimates_within(seen, end, start_elapsed=1000.0) > 2000
    assert EndEstimate(rule, 1000, 1000.0).position(1000, 1000.0).left_s is None  # no step timed yet


def test_before_any_step_is_timed_a_time_limit_gives_the_time_left():
    position = EndEstimate(StopBounds(epochs=10, steps_per_epoch=10, time_limit_minutes=5)).position(0, 0.0)
    assert (position.by, position.left_s, position.total) == (TIME_LIMIT, 300.0, 5)


# ----- the training display -----


def run_display(display: TrainingDisplay, steps: int, log_every: int, seconds_per_step: float) -> list[str]:
    """Drive a display as the trainer does; returns the window lines it made."""
    lines = []
    for step in range(1, steps + 1):
        elapsed = step * seconds_per_step
        display.step(step, elapsed)
        if step % log_every == 0:
            lines.append(
                display.window(
                    step=step,
                    epoch=step // 10,
                    loss=4.5 - step / 100,
                    tokens_per_s=1234.5,
                    lr=0.0015,
                    elapsed_s=elapsed,
                )
            )
    display.close()
    return lines


def test_redirected_training_shows_one_plain_line_per_log_window_also_written_to_train_log(
    tmp_path, capsys, quiet_logger
):
    setup_logging(tmp_path / "train.log")
    stream = io.StringIO()
    display = TrainingDisplay(StopBounds(max_steps=20, epochs=5, steps_per_epoch=10), stream=stream)
    lines = run_display(display, steps=20, log_every=5, seconds_per_step=3.0)
    text = stream.getvalue()
    assert "\r" not in text
    assert text.splitlines() == lines and len(lines) == 4
    assert all(WINDOW_LINE.match(line) for line in lines), lines
    assert lines[1] == (
        "step 10: epoch 1, loss 4.4000, 1,234 target tokens/s, lr 0.0015, elapsed 00:30, left 00:30 (steps)"
    )
    logged = (tmp_path / "train.log").read_text(encoding="utf-8").splitlines()
    assert [line.split(" INFO ", 1)[1] for line in logged] == lines  # with train.log's time stamp
    assert capsys.readouterr().err == ""  # the logger's console handler leaves them to the display


def test_terminal_training_shows_a_bar_in_the_unit_that_ends_the_run(tmp_path, quiet_logger):
    setup_logging(tmp_path / "train.log")
    shown = {}
    for name, rule in [
        ("steps", StopBounds(max_steps=20, epochs=5, steps_per_epoch=10)),
        ("minutes", StopBounds(epochs=50, steps_per_epoch=1000, time_limit_minutes=2)),
    ]:
        stream = FakeTerminal()
        lines = run_display(TrainingDisplay(rule, stream=stream), steps=20, log_every=5, seconds_per_step=3.0)
        shown[name] = stream.getvalue()
        assert "\r" in shown[name] and "loss 4.3000, 1,234 tok/s" in shown[name]
        assert not any(line in shown[name] for line in lines)  # the window lines go to train.log only
    assert "20/20 step" in shown["steps"] and "left 00:00" in shown["steps"]
    assert "1.0/2.0 min" in shown["minutes"] and "left 01:00" in shown["minutes"]
    assert len((tmp_path / "train.log").read_text(encoding="utf-8").splitlines()) == 8


def test_a_quiet_display_writes_nothing_to_the_stream_but_keeps_train_log(tmp_path, quiet_logger):
    setup_logging(tmp_path / "train.log", quiet=True)
    stream = FakeTerminal()
    run_display(TrainingDisplay(StopBounds(max_steps=10), stream=stream, enabled=False), 10, 5, 1.0)
    assert stream.getvalue() == ""
    assert len((tmp_path / "train.log").read_text(encoding="utf-8").splitlines()) == 2


def test_window_line_says_which_bound_ends_the_run():
    position = EndEstimate(StopBounds(epochs=1, steps_per_epoch=100, time_limit_minutes=1)).position(10, 6.0)
    line = window_line(10, 0, 2.0, 99.4, 5e-05, 6.0, position)
    assert (
        line == "step 10: epoch 0, loss 2.0000, 99 target tokens/s, lr 5e-05, elapsed 00:06, left 00:54 "
        "(time limit)"
    )


def test_train_with_stderr_in_a_pipe_writes_plain_lines_without_carriage_returns(tmp_path):
    """`attn-mt train 2> file`: no bar redraws, one line per log window besides the validation lines."""
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("\n".join(TINY_CORPUS_LINES) + "\n", encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "attn_mt",
            "train",
            str(ROOT / "configs" / "tiny.yaml"),
            "--data",
            str(corpus),
            "--run-dir",
            str(tmp_path / "run"),
            "--set",
            "train.epochs=4",
            "--set",
            "train.log_every=2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr
    windows = [line for line in result.stderr.splitlines() if WINDOW_LINE.match(line)]
    assert [line.split(":")[0] for line in windows] == ["step 2", "step 4"]
    validations = [line for line in result.stderr.splitlines() if "valid_bleu" in line]
    assert len(validations) == 4  # once an epoch (tiny.yaml validates at each epoch's end)
    assert result.stderr.splitlines()[-1].startswith("done after 4 steps")
