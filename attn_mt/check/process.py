"""Check a learner's file in a child process with a time limit, never in the caller's own process.

A learner's file may loop forever, import what is not installed, or print anything; the child
(`worker.py`) writes its progress as JSON lines to a file of its own, so whatever happens the parent
reads how far it got and says so in one line, within the limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from attn_mt.check.results import BlockResult
from attn_mt.errors import UserError

DEFAULT_TIMEOUT_S = 60.0
OUTPUT_TAIL = 2000  # characters of the learner's own output kept for a message


@dataclass
class FileReport:
    """What checking one file gave: its blocks, or why it stopped early (`error`)."""

    path: Path
    results: list[BlockResult] = field(default_factory=list)
    error: str = ""

    @property
    def passed(self) -> bool:
        """No error, at least one block found, and every found block passed."""
        found = [result for result in self.results if result.found]
        return not self.error and bool(found) and all(result.passed for result in found)

    def text(self) -> str:
        """The whole report, as `attn-mt check` prints it."""
        lines = [result.text() for result in self.results]
        if self.error:
            lines.append(f"error: {self.error}")
        elif not any(result.found for result in self.results):
            lines.append(f"no block found in {self.path.name}: define them under the book's names")
        else:
            found = [result for result in self.results if result.found]
            passed = sum(result.passed for result in found)
            lines.append(f"{passed} of {len(found)} blocks passed")
        return "\n".join(lines)


def read_events(path: Path) -> list[dict[str, object]]:
    """The child's event lines so far (a last line cut short by a kill is dropped)."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


def check_file(path: Path, only: tuple[str, ...] = (), timeout_s: float = DEFAULT_TIMEOUT_S) -> FileReport:
    """Run the checks of the blocks in the learner's file `path` in a child process, within `timeout_s`."""
    if not path.is_file():
        raise UserError(f"no such file to check: {path}")
    report = FileReport(path)
    with tempfile.TemporaryDirectory(prefix="attn-mt-check-") as folder:
        events_path = Path(folder) / "events.jsonl"
        command = [sys.executable, "-m", "attn_mt.check.worker", str(path.resolve()), str(events_path), *only]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=path.resolve().parent
            )
            timed_out, output = False, (done.stdout or "") + (done.stderr or "")
        except subprocess.TimeoutExpired as exc:
            timed_out, output = True, decoded(exc.stdout) + decoded(exc.stderr)
        events = read_events(events_path)
    for event in events:
        if "result" in event:
            report.results.append(BlockResult.from_dict(event["result"]))  # type: ignore[arg-type]
        if "load_error" in event:
            report.error = str(event["load_error"])
    started = [str(event["started"]) for event in events if "started" in event]
    finished = any("finished" in event for event in events)
    if timed_out:
        where = "while loading the file" if started[-1:] in ([], ["loading"]) else f"in {started[-1]}"
        report.error = (
            f"{path.name} did not finish within {timeout_s:g} s (stopped {where}): "
            "look for a loop that never ends"
        )
    elif not finished and not report.error:
        report.error = f"the check of {path.name} stopped early: {output[-OUTPUT_TAIL:].strip()}"
    return report


def decoded(data: bytes | str | None) -> str:
    """Captured output as text, whatever subprocess gave."""
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")
