"""`python -m attn_mt.check.worker FILE EVENTS [BLOCK ...]`: the child process that runs a learner's file.

It loads FILE as a module and checks its blocks, writing one JSON line to EVENTS as each block starts
and ends, so that the parent (`process.py`) can say where a file that never finishes got stuck. A file
that cannot be loaded gets one line saying why. When no d2l is installed, `from d2l import torch as
d2l` gives the file attn-mt's stand-in (standin.py), which the report notes. The learner's own prints
go to this process's stdout and stderr, which the parent keeps apart from EVENTS; its stdin is empty,
so `input()` fails at once. torch runs on one thread here: the cases' tensors are tiny.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import TextIO

import torch

from attn_mt.check import standin
from attn_mt.check.runner import check_namespace

THREADS = 1  # the cases' tensors are tiny: a second thread costs more in hand-offs than it saves
STANDIN_NOTE = (
    "{name} imports d2l, which is not installed here: it was given attn-mt check's stand-in for the "
    "d2l names the attention chapter calls (sequence_mask, masked_softmax, the attention classes, "
    "Encoder, AttentionDecoder, EncoderDecoder, ...), written from d2l's documented behaviour"
)


def write(events: TextIO, **event: object) -> None:
    """One event line, flushed at once (the process may be killed at any moment)."""
    events.write(json.dumps(event) + "\n")
    events.flush()


def load(path: Path) -> dict[str, object]:
    """Run the learner's file as a module named `learner` and return its globals.

    The source goes to `compile` as bytes, which reads it as Python itself does: a UTF-8 byte order
    mark or an encoding declaration at the top is honoured."""
    source = path.read_bytes()
    namespace: dict[str, object] = {"__name__": "learner", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


def load_error(exc: BaseException, path: Path) -> str:
    """Why the file could not be loaded, in one line that names the file's line."""
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == str(path)]
    where = f"line {lines[-1]} of {path.name}" if lines else path.name
    if isinstance(exc, SyntaxError):
        return f"{path.name} has a syntax error at line {exc.lineno}: {exc.msg}"
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == "d2l" and standin.used_package():
        return (
            f"{where} raised {type(exc).__name__}: {exc}; attn-mt check stands in only for d2l.torch "
            "(from d2l import torch as d2l)"
        )
    if isinstance(exc, ModuleNotFoundError):
        return (
            f"{where} imports {exc.name}, which is not installed in this Python; write the blocks with torch "
            "alone (attn-mt check needs no d2l)"
        )
    if isinstance(exc, EOFError):
        return (
            f"{where} raised EOFError: {exc} while the file was loaded; attn-mt check gives the file no "
            "input, so input() fails at once: define the blocks without asking for input"
        )
    return f"{where} raised {type(exc).__name__}: {exc} while the file was loaded"


def main(argv: list[str]) -> int:
    """Load the file and check its blocks; the exit code is 0 whatever they show."""
    path, events_path, only = Path(argv[0]), Path(argv[1]), tuple(argv[2:])
    standin.install()
    torch.set_num_threads(THREADS)
    with events_path.open("w", encoding="utf-8") as events:
        write(events, started="loading")
        try:
            namespace = load(path)
        except BaseException as exc:  # the learner's file may raise anything, SystemExit included
            write(events, load_error=load_error(exc, path))
            return 0
        finally:
            if standin.used():
                write(events, note=STANDIN_NOTE.format(name=path.name))
        check_namespace(
            namespace,
            only,
            progress=lambda name: write(events, started=name),
            done=lambda result: write(events, result=result.to_dict()),
        )
        write(events, finished=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
