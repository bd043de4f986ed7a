"""What a person watching a training run sees: the end of the run it is heading for, and how it is shown.

A run ends at whichever comes first of its step bound (epochs x steps per epoch, capped by
train.max_steps) and train.time_limit_minutes. `EndEstimate` follows that rule: with a time limit
that will be reached first, the fraction done is minutes elapsed of the limit, otherwise steps done
of the step bound; the time left is the smaller of the two estimates. Steps are timed over this
session (a resumed run has its own speed), validation pauses included: the estimate settles once
a few validations have been seen (a run that validates only at each epoch's end learns their cost
at the first one). With a time limit that ends the run first, the estimate is exact.

`TrainingDisplay` shows it: on a terminal a tqdm bar in that unit; anywhere else (a file, a pipe)
no bar at all, one plain line per train.log_every steps. Those lines also go to train.log.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from tqdm import tqdm

from attn_mt.progress_bars import format_duration, is_terminal
from attn_mt.training.logs import FILE_ONLY
from attn_mt.training.run_state import Progress
from attn_mt.training.stopping import StopBounds

log = logging.getLogger("attn_mt")

STEPS, TIME_LIMIT = "steps", "time limit"  # what ends the run first, as the lines name it
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}{postfix}"


@dataclass(frozen=True)
class Position:
    """Where the run stands against the bound that ends it first."""

    by: str  # STEPS or TIME_LIMIT
    done: float  # steps done, or minutes elapsed
    total: float  # the step bound, or the time limit in minutes
    unit: str  # "step" or "min"
    left_s: float | None  # estimated seconds to the end (None before the speed is known)

    @property
    def fraction(self) -> float:
        """Share of the run done, in [0, 1]."""
        return min(self.done / self.total, 1.0) if self.total else 0.0


class EndEstimate:
    """Estimates the end of a run from the speed of this session's steps (see the module docstring)."""

    def __init__(self, rule: StopBounds, start_step: int = 0, start_elapsed_s: float = 0.0):
        self.rule, self.start_step, self.start_elapsed_s = rule, start_step, start_elapsed_s

    def position(self, step: int, elapsed_s: float) -> Position:
        """The run at `step` after `elapsed_s` seconds of training (the whole run's, resumes included)."""
        rule = self.rule
        steps_left_s = None
        if rule.step_bound and step > self.start_step:
            seconds_per_step = (elapsed_s - self.start_elapsed_s) / (step - self.start_step)
            steps_left_s = max(rule.step_bound - step, 0) * seconds_per_step
        if rule.time_limit_s:
            time_left_s = max(rule.time_limit_s - elapsed_s, 0.0)
            if steps_left_s is None or time_left_s <= steps_left_s:
                minutes = float(rule.time_limit_minutes)
                return Position(TIME_LIMIT, elapsed_s / 60, minutes, "min", time_left_s)
        return Position(STEPS, step, rule.step_bound, "step", steps_left_s)


def window_line(
    step: int, epoch: int, loss: float, tokens_per_s: float, lr: float, elapsed_s: float, position: Position
) -> str:
    """The line for one log window: 'step 600: epoch 2, loss 4.1234, 5,123 target tokens/s, ...'."""
    left = "?" if position.left_s is None else format_duration(position.left_s)
    return (
        f"step {step}: epoch {epoch}, loss {loss:.4f}, {tokens_per_s:,.0f} target tokens/s, lr {lr:.3g}, "
        f"elapsed {format_duration(elapsed_s)}, left {left} ({position.by})"
    )


class TrainingDisplay:
    """Training progress on `stream` (stderr): a bar on a terminal, a line per log window elsewhere.

    `step` is called after every optimiser step, `window` every train.log_every steps, `close` at
    the end (or use it as a context manager). Not `enabled` (--quiet, ranks other than 0): nothing
    on the stream, but `window` still writes its line to train.log.
    """

    def __init__(
        self,
        rule: StopBounds,
        *,
        start_step: int = 0,
        start_elapsed_s: float = 0.0,
        stream: IO[str] | None = None,
        enabled: bool = True,
    ):
        self.estimate = EndEstimate(rule, start_step, start_elapsed_s)
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.position = self.estimate.position(start_step, start_elapsed_s)
        self.elapsed_s = start_elapsed_s
        self.window_text = ""  # loss and speed of the last window, shown on the bar
        self.bar: tqdm | None = None
        if enabled and is_terminal(self.stream):
            self.bar = tqdm(
                total=_bar_number(self.position.total),
                initial=_bar_number(self.position.done),
                desc="train",
                unit=self.position.unit,
                file=self.stream,
                dynamic_ncols=True,
                bar_format=BAR_FORMAT,
                postfix=self._postfix(),
            )

    def step(self, step: int, elapsed_s: float) -> None:
        """After an optimiser step: move the bar (on a terminal; tqdm limits the redraws)."""
        self.position, self.elapsed_s = self.estimate.position(step, elapsed_s), elapsed_s
        if self.bar is None:
            return
        done = _bar_number(self.position.done)
        if self.bar.unit != self.position.unit:  # the other bound now ends the run first
            self.bar.unit, self.bar.total = self.position.unit, _bar_number(self.position.total)
            self.bar.n = done
            self._show()
            self.bar.refresh()
        else:
            self._show()
            self.bar.update(done - self.bar.n)

    def window(
        self, *, step: int, epoch: int, loss: float, tokens_per_s: float, lr: float, elapsed_s: float
    ) -> str:
        """One log window's line: into train.log, and onto the stream unless a bar shows it; returns it."""
        self.step(step, elapsed_s)
        line = window_line(step, epoch, loss, tokens_per_s, lr, elapsed_s, self.position)
        log.info("%s", line, extra=FILE_ONLY)
        if self.bar is not None:
            self.window_text = f"loss {loss:.4f}, {tokens_per_s:,.0f} tok/s"
            self._show()
            self.bar.refresh()
        elif self.enabled:
            self.stream.write(line + "\n")
            self.stream.flush()
        return line

    def _show(self) -> None:
        """Update the text behind the bar (drawn at the next redraw)."""
        assert self.bar is not None
        self.bar.set_postfix_str(self._postfix(), refresh=False)

    def _postfix(self) -> str:
        """Elapsed time, time left and the last window's numbers."""
        left = "?" if self.position.left_s is None else format_duration(self.position.left_s)
        parts = [f"elapsed {format_duration(self.elapsed_s)}", f"left {left}", self.window_text]
        return ", ".join(p for p in parts if p)

    def close(self) -> None:
        """Close the bar (the lines need no ending)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> TrainingDisplay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _bar_number(value: float) -> float:
    """A bar position or total as tqdm prints it: whole steps, or minutes to a tenth."""
    return value if isinstance(value, int) else round(value, 1)


def training_display(tc: Any, steps_per_epoch: int, progress: Progress, quiet: bool) -> TrainingDisplay:
    """Progress on stderr (off when quiet) from the run's progress so far: a bar on a terminal, a line per
    log window elsewhere (`tc`: the train section)."""
    rule = StopBounds(tc.max_steps, tc.epochs, steps_per_epoch, tc.time_limit_minutes)
    return TrainingDisplay(
        rule, start_step=progress.step, start_elapsed_s=progress.elapsed_s, enabled=not quiet
    )
