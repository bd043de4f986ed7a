"""`python -m attn_mt.check.worker FILE EVENTS [BLOCK ...]`: the child process that runs a learner's file.

It loads FILE as a module and checks its blocks, writing one JSON line to EVENTS as each block starts
and ends, so that the parent (`process.py`) can say where a file that never finishes got stuck. A file
that cannot be loaded gets one line saying why. When no d2l is installed, `from d2l import torch as
d2l` gives the file attn-mt's stand-in (standin.py), which the report notes. The learner's own prints
go to this process's stdout and stderr, which the parent keeps apart from EVENTS; its stdin is empty,
so `input()` fails at once. torch runs on one thread here: the cases' tensors are tiny. It writes its
lines in the language $ATTN_MT_LANG names (the parent's, which `check_file` passes on).
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
from attn_mt.i18n import N_, _, resolve_language, use_language

THREADS = 1  # the cases' tensors are tiny: a second thread costs more in hand-offs than it saves
STANDIN_NOTE = N_(
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
    where = _("line {line} of {file}").format(line=lines[-1], file=path.name) if lines else path.name
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        return _("{file} has a syntax error at line {line}: {message}").format(
            file=path.name, line=exc.lineno, message=exc.msg
        )
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == "d2l" and standin.used_package():
        return _(
            "{where} raised {error}; attn-mt check stands in only for d2l.torch "
            "(from d2l import torch as d2l)"
        ).format(where=where, error=error)
    if isinstance(exc, ModuleNotFoundError):
        return _(
            "{where} imports {module}, which is not installed in this Python; write the blocks with torch "
            "alone (attn-mt check needs no d2l)"
        ).format(where=where, module=exc.name)
    if isinstance(exc, EOFError):
        return _(
            "{where} raised {error} while the file was loaded; attn-mt check gives the file no input, so "
            "input() fails at once: define the blocks without asking for input"
        ).format(where=where, error=error)
    return _("{where} raised {error} while the file was loaded").format(where=where, error=error)


def main(argv: list[str]) -> int:
    """Load the file and check its blocks; the exit code is 0 whatever they show."""
    path, events_path, only = Path(argv[0]), Path(argv[1]), tuple(argv[2:])
    use_language(resolve_language())
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
                write(events, note=_(STANDIN_NOTE).format(name=path.name))
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
