"""The prepared-corpus store: encoded training splits on disk, memory-mapped by every process that trains.

One folder per corpus and settings, under `$XDG_CACHE_HOME/attn-mt/prepared/<key>/` (default
`~/.cache/...`), as fairseq's `fairseq-preprocess` writes binaries once for every worker to map:

    header.json      format version, the inputs the folder was made from, each file's size and CRC-32
    *.npy            flat arrays (ids, offsets, ...) opened with numpy's mmap_mode="r"
    other files      vocabularies, held-out sentences (small; read whole)

A folder is written under a temporary name and renamed into place when complete, so a process
killed mid-write leaves no folder a reader would take. A folder is used only when its header has
this format version and the expected inputs and every file has its recorded size and checksum;
anything else (truncated, edited, older format) is reported and rebuilt, never trusted.

One process builds a missing folder while the others wait on a file lock (`<key>.lock`), so the
ranks of a torchrun job on one machine prepare once and then all map the same files; local rank 0
is given the first chance to take the lock, so its log shows the work.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import filelock
import numpy as np

from attn_mt.data.corpus import cache_path

log = logging.getLogger("attn_mt.data")

FORMAT = "attn-mt-prepared"
VERSION = 1  # bump when the stored arrays, files or their meaning change
HEADER = "header.json"
RANK_GRACE_S = 5.0  # how long a non-zero local rank leaves the lock to local rank 0
POLL_S = 0.05
T = TypeVar("T")


class StoreError(Exception):
    """A prepared folder that must not be used; the message says why."""


def store_root() -> Path:
    """Where prepared corpora live: `$XDG_CACHE_HOME/attn-mt/prepared` (default under `~/.cache`)."""
    return cache_path().parent / "prepared"


def entry_key(inputs: dict[str, Any]) -> str:
    """The folder name for `inputs`: a SHA-1 of them (canonical JSON) and the format version."""
    text = json.dumps({"format": FORMAT, "version": VERSION, "inputs": inputs}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:24]


@dataclass
class Contents:
    """What a prepared folder holds: flat arrays, small files, and facts (JSON-ready) about the build."""

    arrays: dict[str, np.ndarray]
    files: dict[str, bytes]
    facts: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None  # where it is mapped from; None when kept in memory


def _file_crc32(path: Path) -> int:
    """CRC-32 of a file's bytes, read through a read-only map (no copy in this process's heap)."""
    with path.open("rb") as stream:
        if os.fstat(stream.fileno()).st_size == 0:
            return zlib.crc32(b"")
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return zlib.crc32(mapped)


def write_entry(folder: Path, inputs: dict[str, Any], contents: Contents) -> None:
    """Write `contents` as a prepared folder: under a temporary name, renamed into place when complete."""
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        files: dict[str, Any] = {}
        for name, array in contents.arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        for name, data in contents.files.items():
            (tmp / name).write_bytes(data)
        for path in sorted(tmp.iterdir()):
            with path.open("rb") as stream:
                os.fsync(stream.fileno())
            files[path.name] = {"bytes": path.stat().st_size, "crc32": _file_crc32(path)}
        header = {
            "format": FORMAT,
            "version": VERSION,
            "inputs": inputs,
            "files": files,
            "arrays": {
                name: {"dtype": array.dtype.str, "shape": list(array.shape)}
                for name, array in contents.arrays.items()
            },
            "facts": contents.facts,
        }
        (tmp / HEADER).write_text(json.dumps(header, indent=1), encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def open_entry(folder: Path, inputs: dict[str, Any]) -> Contents:
    """The prepared folder's contents with arrays memory-mapped; StoreError if anything is off."""
    try:
        header = json.loads((folder / HEADER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{folder} has no {HEADER}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{folder / HEADER} cannot be read: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StoreError(f"{folder / HEADER} is not an {FORMAT} header")
    if header.get("version") != VERSION:
        raise StoreError(f"{folder} has format version {header.get('version')!r}; attn-mt reads {VERSION}")
    if header.get("inputs") != inputs:
        raise StoreError(f"{folder / HEADER} was written for other inputs than its folder name says")
    files, shapes = header.get("files"), header.get("arrays")
    if not all(isinstance(part, dict) for part in (files, shapes, header.get("facts"))):
        raise StoreError(f"{folder / HEADER} lacks its file table")
    for name, expected in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            raise StoreError(f"{path} is missing") from None
        if size != expected.get("bytes"):
            raise StoreError(
                f"{path} has {size} bytes, the header says {expected.get('bytes')} (truncated or rewritten)"
            )
        if _file_crc32(path) != expected.get("crc32"):
            raise StoreError(f"{path} does not match its checksum (modified since it was written)")
    arrays = {}
    for name, spec in shapes.items():
        if f"{name}.npy" not in files:
            raise StoreError(f"{folder / HEADER} lists array {name} without its file")
        try:
            array = np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{folder / name}.npy cannot be mapped: {exc}") from None
        if array.dtype.str != spec.get("dtype") or list(array.shape) != spec.get("shape"):
            raise StoreError(
                f"{folder / name}.npy holds {array.dtype.str} {list(array.shape)}, the header "
                f"says {spec.get('dtype')} {spec.get('shape')}"
            )
        arrays[name] = array
    data = {name: (folder / name).read_bytes() for name in files if not name.endswith(".npy")}
    return Contents(arrays, data, header["facts"], folder)


def _local_rank() -> int:
    """This process's rank on its machine under torchrun (LOCAL_RANK), else 0."""
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0


def _held_elsewhere(lock: filelock.BaseFileLock) -> bool:
    """Whether another process holds `lock` right now."""
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        return True
    lock.release()
    return False


@contextlib.contextmanager
def _locked(lock_path: Path, folder: Path, what: str) -> Iterator[None]:
    """Hold the folder's build lock; a non-zero local rank first leaves local rank 0 a moment to take it."""
    lock = filelock.FileLock(str(lock_path))
    if _local_rank() > 0:
        deadline = time.monotonic() + RANK_GRACE_S
        while time.monotonic() < deadline and not folder.exists() and not _held_elsewhere(lock):
            time.sleep(POLL_S)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        log.info("waiting for another process preparing %s (%s)", what, folder)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def ensure_entry(
    inputs: dict[str, Any], what: str, build: Callable[[], Contents], use: Callable[[Contents], T]
) -> tuple[T, bool]:
    """(use(contents), whether they were built now): map the prepared folder, else build it once and map it.

    `use` turns mapped contents into what the caller needs and raises StoreError when they are
    inconsistent; a folder that fails any check is deleted and built again. A store that cannot be
    written (read-only cache) is skipped with a warning: the contents are then kept in memory.
    """
    root = store_root()
    key = entry_key(inputs)
    folder = root / key
    with contextlib.suppress(StoreError):
        return use(open_entry(folder, inputs)), False
    with contextlib.ExitStack() as stack:
        try:
            root.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_locked(root / f"{key}.lock", folder, what))
        except OSError as exc:
            log.warning("cannot use the prepared-corpus store %s (%s); preparing in memory", root, exc)
            return use(build()), True
        if folder.exists():
            try:
                return use(open_entry(folder, inputs)), False  # another process built it meanwhile
            except StoreError as exc:
                log.warning("rebuilding the prepared corpus: %s", exc)
                shutil.rmtree(folder, ignore_errors=True)
        for stale in root.glob(f".{key}.*.tmp"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        contents = build()
        try:
            write_entry(folder, inputs, contents)
        except OSError as exc:
            log.warning("cannot write the prepared corpus to %s (%s); keeping it in memory", folder, exc)
            return use(contents), True
        return use(open_entry(folder, inputs)), True
