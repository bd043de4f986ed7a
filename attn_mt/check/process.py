"""Check a learner's file in a child process with a time limit, never in the caller's own process.

A learner's file may loop forever, import what is not installed, print without end, wait for input,
start processes of its own or end the process itself; the child (`worker.py`) writes its progress as
JSON lines to a file of its own, so whatever happens the parent reads how far it got and says so in
one line, within the limit. The child starts in a session of its own with no input (stdin is empty,
so `input()` fails at once), and the whole session is killed when the check ends, so nothing it
started outlives the check. Of the child's output the parent keeps the first and last `OUTPUT_KEEP`
bytes, and stops a child that prints more than `OUTPUT_LIMIT` bytes. The child reports in the language in
force here (given to it as $ATTN_MT_LANG), as do the lines this module writes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from attn_mt.check.results import BlockResult, note_line
from attn_mt.errors import UserError
from attn_mt.i18n import _, current_language
from attn_mt.i18n.languages import ENV_VAR

DEFAULT_TIMEOUT_S = 60.0
OUTPUT_KEEP = 1024  # bytes of the learner's output kept from its start, and as many from its end
OUTPUT_LIMIT = 16 << 20  # bytes of output past which the child is stopped (a print in a loop)
READ_BYTES = 1 << 16
POLL_S = 0.1  # how often a child that prints nothing is looked at


@dataclass
class FileReport:
    """What checking one file gave: its blocks, or why it stopped early (`error`)."""

    path: Path
    results: list[BlockResult] = field(default_factory=list)
    error: str = ""
    notes: list[str] = field(default_factory=list)  # about the whole file (the d2l stand-in it was given)

    @property
    def passed(self) -> bool:
        """No error, at least one block found, and every found block passed."""
        found = [result for result in self.results if result.found]
        return not self.error and bool(found) and all(result.passed for result in found)

    def text(self) -> str:
        """The whole report, as `attn-mt check` prints it; each lesson once, where it first comes up."""
        taught: set[str] = set()
        lines = [note_line(note) for note in self.notes]
        lines += [result.text(taught) for result in self.results]
        if self.error:
            lines.append(_("error: {error}").format(error=self.error))
        elif not any(result.found for result in self.results):
            lines.append(
                _("no block found in {file}: define them under the book's names").format(file=self.path.name)
            )
        else:
            found = [result for result in self.results if result.found]
            passed = sum(result.passed for result in found)
            lines.append(_("{passed} of {total} blocks passed").format(passed=passed, total=len(found)))
        return "\n".join(lines)


class KeptOutput:
    """The first and last `keep` bytes of what the child printed, and how many bytes it printed in all."""

    def __init__(self, keep: int = OUTPUT_KEEP) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        """Keep what `chunk` adds to the start or the end; forget the middle."""
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        del self.tail[: max(0, len(self.tail) - self.keep)]

    def text(self) -> str:
        """The kept output as text, saying how much of the middle was left out."""
        left_out = self.total - len(self.head) - len(self.tail)
        if left_out <= 0:
            return bytes(self.head + self.tail).decode("utf-8", "replace").strip()
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail).decode("utf-8", "replace")
        left = _("[... {count} bytes of its output left out ...]").format(count=left_out)
        return f"{head}\n{left}\n{tail}".strip()


@dataclass
class ChildRun:
    """How the child ended: its exit code (negative: the signal that killed it), and why it was stopped."""

    returncode: int
    timed_out: bool
    flooded: bool
    output: KeptOutput


def read_events(path: Path) -> list[dict[str, object]]:
    """The child's event lines so far (a last line cut short by a kill is dropped)."""
    if not path.exists():
        return []
    events = []
    for line in path.read_bytes().decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


def run_child(command: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> ChildRun:
    """Run `command` in a session of its own with no input, reading its output as it comes; kill the
    session when it ends, when it runs past `timeout_s` or when it prints more than OUTPUT_LIMIT bytes."""
    output = KeptOutput()
    timed_out = flooded = False
    deadline = time.monotonic() + timeout_s
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    assert process.stdout is not None
    pipe = process.stdout.fileno()
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(pipe, selectors.EVENT_READ)
            pipe_open = True
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if pipe_open and selector.select(min(left, POLL_S)):
                    chunk = os.read(pipe, READ_BYTES)
                    if not chunk:  # every writer closed it: the child has ended, or is about to
                        selector.unregister(pipe)
                        pipe_open = False
                    output.add(chunk)
                    if output.total > OUTPUT_LIMIT:
                        flooded = True
                        break
                elif not pipe_open:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(min(left, POLL_S))
                if process.poll() is not None:
                    # what is still in the pipe (a traceback's end); a process the child started may
                    # hold the pipe open, so read only what is there now
                    while pipe_open and output.total <= OUTPUT_LIMIT and selector.select(0):
                        chunk = os.read(pipe, READ_BYTES)
                        pipe_open = bool(chunk)
                        output.add(chunk)
                    break
    finally:
        kill_session(process.pid)
        process.wait()
        process.stdout.close()
    return ChildRun(process.returncode, timed_out, flooded, output)


def kill_session(pid: int) -> None:
    """Kill every process left in the session (process group) the child `pid` leads."""
    with contextlib.suppress(ProcessLookupError):  # nothing is left of it
        os.killpg(pid, signal.SIGKILL)


def check_timeout(timeout_s: float, option: str = "timeout_s") -> None:
    """Refuse a time limit that is not a positive finite number of seconds (NaN, infinity, 0, < 0)."""
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise UserError(
            _("{option} must be a positive finite number of seconds, got {value}").format(
                option=option, value=f"{timeout_s:g}"
            )
        )


def check_file(path: Path, only: tuple[str, ...] = (), timeout_s: float = DEFAULT_TIMEOUT_S) -> FileReport:
    """Run the checks of the blocks in the learner's file `path` in a child process, within `timeout_s`."""
    check_timeout(timeout_s)
    if not path.is_file():
        raise UserError(_("no such file to check: {path}").format(path=path))
    report = FileReport(path)
    with tempfile.TemporaryDirectory(prefix="attn-mt-check-") as folder:
        events_path = Path(folder) / "events.jsonl"
        command = [sys.executable, "-m", "attn_mt.check.worker", str(path.resolve()), str(events_path), *only]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            ENV_VAR: current_language(),
        }
        child = run_child(command, env, path.resolve().parent, timeout_s)
        events = read_events(events_path)
    for event in events:
        if "result" in event:
            report.results.append(BlockResult.from_dict(event["result"]))  # type: ignore[arg-type]
        if "load_error" in event:
            report.error = str(event["load_error"])
        if "note" in event:
            report.notes.append(str(event["note"]))
    started = [str(event["started"]) for event in events if "started" in event]
    finished = any("finished" in event for event in events)
    if started[-1:] in ([], ["loading"]):
        where = _("while loading the file")
    else:
        where = _("in {block}").format(block=started[-1])
    if child.timed_out:
        report.error = _(
            "{file} did not finish within {seconds} s (stopped {where}): look for a loop that never ends"
        ).format(file=path.name, seconds=f"{timeout_s:g}", where=where)
    elif child.flooded:
        report.error = _(
            "{file} printed more than {size} MiB (stopped {where}): print less, such as a tensor's shape "
            "rather than the tensor"
        ).format(file=path.name, size=OUTPUT_LIMIT >> 20, where=where)
    elif not finished and not report.error:
        report.error = ended_early(path, bool(events), where, child)
    return report


def ended_early(path: Path, loading_began: bool, where: str, child: ChildRun) -> str:
    """Why the child ended before the check finished: its exit code or signal, and the end of its output."""
    code = child.returncode
    if code < 0:
        try:
            how = _("killed by {signal}").format(signal=signal.Signals(-code).name)
        except ValueError:
            how = _("killed by signal {number}").format(number=-code)
    else:
        how = _("exit code {code}").format(code=code)
    if not loading_began:
        said = _("the check of {file} stopped before loading the file ({how})").format(
            file=path.name, how=how
        )
    elif code < 0:
        said = _("the check's process was {how} {where}").format(how=how, where=where)
    else:
        said = _("{file} ended the check's process {where} ({how})").format(
            file=path.name, where=where, how=how
        )
    printed = child.output.text()
    return _("{said}; its last output: {output}").format(said=said, output=printed) if printed else said
