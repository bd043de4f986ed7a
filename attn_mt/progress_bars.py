"""Progress on stderr that reads well both on a terminal and in a file.

On a terminal a tqdm bar redraws itself in place. Anywhere else (`2> train.err`, `nohup`, a batch
scheduler's log) every redraw would be kept, thousands of carriage returns on one "line", so there
`progress_bar` gives a `LineProgress` instead: one plain line every `LINE_INTERVAL_S` seconds and
one when the work ends. Translation, evaluation and the corpus download report through it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO

from tqdm import tqdm

LINE_INTERVAL_S = 30.0  # seconds between two progress lines when stderr is not a terminal


def is_terminal(stream: IO[str]) -> bool:
    """Whether `stream` is an interactive terminal (a closed or unusual stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def format_duration(seconds: float) -> str:
    """Seconds as [H:]MM:SS, the way tqdm writes times."""
    return tqdm.format_interval(max(seconds, 0.0))


class LineProgress:
    """A progress report for a file: a plain line every `interval_s` seconds and one at the end.

    Each line says what is done, of how much, the time taken and (when the total is known) the time
    left at the rate so far: `translating: 1,200/5,000 sentences (24%), elapsed 00:32, left 01:41`.
    The closing line is left out when the work took less than `delay` seconds and wrote no line
    before (a one-sentence translation says nothing, as the terminal bar's `delay` does).
    """

    def __init__(
        self,
        total: float | None,
        desc: str,
        unit: str,
        stream: IO[str],
        *,
        unit_scale: bool = False,
        delay: float = 0.0,
        interval_s: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.desc, self.unit = total, desc, unit.strip()
        self.stream, self.unit_scale, self.delay = stream, unit_scale, delay
        self.interval_s, self.clock = interval_s, clock
        self.n: float = 0
        self.started = self.last_line = clock()
        self.lines = 0
        self.closed = False

    def update(self, n: float = 1) -> None:
        """Count `n` more units; write a line when `interval_s` has passed since the last one."""
        self.n += n
        now = self.clock()
        if now - self.last_line >= self.interval_s:
            self.last_line = now
            self._write(self.line(now))

    def line(self, now: float) -> str:
        """The progress line at time `now`."""
        elapsed = now - self.started
        text = f"{self.desc}: {self._amount(self.n)}"
        if self.total:
            text += f"/{self._amount(self.total)}"
        text += "" if self.unit_scale else f" {self.unit}"
        if self.total:
            text += f" ({100 * self.n / self.total:.0f}%)"
        text += f", elapsed {format_duration(elapsed)}"
        if self.total and 0 < self.n < self.total:
            text += f", left {format_duration(elapsed * (self.total - self.n) / self.n)}"
        return text

    def _amount(self, value: float) -> str:
        """A count as '1,234', or with `unit_scale` as '1.23MB'."""
        return tqdm.format_sizeof(value, self.unit) if self.unit_scale else f"{value:,.0f}"

    def close(self) -> None:
        """Write the closing line (once; see `delay`)."""
        if self.closed:
            return
        self.closed = True
        now = self.clock()
        if self.lines or now - self.started >= self.delay:
            self._write(self.line(now))

    def _write(self, text: str) -> None:
        """One whole line on the stream, flushed so a file being watched shows it now."""
        self.stream.write(text + "\n")
        self.stream.flush()
        self.lines += 1

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def progress_bar(
    total: float | None,
    desc: str,
    unit: str,
    *,
    enabled: bool = True,
    stream: IO[str] | None = None,
    unit_scale: bool = False,
    leave: bool = True,
    delay: float = 0.0,
) -> tqdm | LineProgress:
    """A tqdm bar on a terminal, a LineProgress anywhere else, nothing (a disabled tqdm) when not `enabled`.

    `delay`: seconds before the bar first shows (see LineProgress for the file form); `leave`: the
    terminal bar stays once done. Both forms count with `update(n)` and end with `close()` or `with`.
    """
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return tqdm(total=total, disable=True)
    if not is_terminal(stream):
        return LineProgress(total, desc, unit, stream, unit_scale=unit_scale, delay=delay)
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        file=stream,
        leave=leave,
        delay=delay,
        dynamic_ncols=True,
    )
