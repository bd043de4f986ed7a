"""Several files of a run directory written as one change: each is first proved writable, then written
to a temporary file beside it, and only when every one is written are they renamed over the old ones
(`os.replace`), so a refused or failed write leaves every file as it was (`attn-mt tune --write`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from attn_mt.errors import UserError


def check_writable(paths: list[Path], what: str) -> None:
    """Refuse (UserError starting with `what`) when a file of `paths` could not be replaced: it is a
    folder, it is read-only, or its folder takes no new file (the temporary one)."""
    for path in paths:
        if path.is_dir():
            raise UserError(f"{what}: {path} is a folder, not a file it can write; move it away")
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(f"{what}: cannot write {path} (it is read-only)")
    for folder in dict.fromkeys(path.parent for path in paths):
        try:
            fd, name = tempfile.mkstemp(prefix=".write-check.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise UserError(f"{what}: cannot write in {folder}: {exc.strerror or exc}") from None
        os.close(fd)
        os.unlink(name)


def replace_files(contents: dict[Path, str], what: str) -> None:
    """Write each path's text (UTF-8) to a temporary file beside it, then rename every one over its
    path; on a failure before the renames nothing is changed and the temporary files are removed."""
    written: dict[Path, str] = {}
    try:
        for path, text in contents.items():
            name = str(path.with_name(f".{path.name}.{os.getpid()}.tmp"))
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # mode: as a new file
            written[path] = name
            if path.exists():
                os.chmod(fd, path.stat().st_mode & 0o777)  # a replaced file keeps its mode
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        for path, name in written.items():
            os.replace(name, path)
    except OSError as exc:
        raise UserError(f"{what}: cannot write {exc.filename or 'a file'}: {exc.strerror or exc}") from None
    finally:
        for name in written.values():
            Path(name).unlink(missing_ok=True)
