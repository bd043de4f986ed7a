"""Find, download and read the Tatoeba English-French corpus (fra-eng.zip, member fra-eng/fra.txt).

Where the corpus comes from, first match wins: an explicit path (CLI option or `data.path`), the
environment variable ATTN_MT_DATA, the user cache file, and finally a download from the book's
public URL, checked against the book's SHA-1.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from attn_mt.errors import UserError
from attn_mt.progress_bars import progress_bar

CORPUS_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
CORPUS_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"
CORPUS_MEMBER = "fra-eng/fra.txt"
CORPUS_FILE_NAME = "fra-eng.zip"
ENV_VAR = "ATTN_MT_DATA"
MACOS_JUNK = "__MACOSX/"
ABOUT_MEMBER = "_about.txt"
CHUNK_BYTES = 1 << 16
DOWNLOAD_TIMEOUT_S = 60.0


def cache_path() -> Path:
    """The cached corpus: `$XDG_CACHE_HOME/attn-mt/fra-eng.zip`, by default under `~/.cache`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attn-mt" / CORPUS_FILE_NAME


def _existing_file(path: Path, source: str) -> Path:
    """Return `path` made absolute if it is a readable file, else a UserError naming it and its source."""
    if not path.exists():
        raise UserError(f"corpus file not found: {path} (from {source})")
    if not path.is_file():
        raise UserError(f"corpus path is not a file: {path} (from {source})")
    if not os.access(path, os.R_OK):
        raise UserError(f"corpus file is not readable: {path} (from {source})")
    return path.resolve()  # absolute, so a run's data_report.json names it from any working directory


def resolve_corpus(explicit: str | os.PathLike | None = None, *, download: bool = True) -> Path:
    """Locate the corpus: explicit path, then $ATTN_MT_DATA, then the cache file, then a download."""
    if explicit is not None and str(explicit) != "":
        return _existing_file(Path(explicit).expanduser(), "data.path or --data")
    env = os.environ.get(ENV_VAR)
    if env:
        return _existing_file(Path(env).expanduser(), f"${ENV_VAR}")
    cached = cache_path()
    if cached.is_file():
        return cached.resolve()
    if not download:
        raise UserError(
            f"no corpus found: give a path (data.path or --data), set ${ENV_VAR}, or put "
            f"{CORPUS_FILE_NAME} at {cached}"
        )
    return download_corpus(CORPUS_URL, cached, CORPUS_SHA1)


def download_corpus(
    url: str, dest: Path, sha1: str, *, progress: bool = True, timeout: float = DOWNLOAD_TIMEOUT_S
) -> Path:
    """Download `url` to `dest` via a temp file in the same folder; only a complete file with `sha1` lands."""
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the cache folder {dest.parent}: {exc.strerror or exc}") from None
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest, received, expected_size = _fetch(url, out, progress, timeout)
        if expected_size is not None and received != expected_size:
            raise UserError(
                f"download of {url} was cut off after {received} of {expected_size} bytes; "
                "nothing was saved, try again"
            )
        if digest != sha1.lower():
            raise UserError(
                f"checksum mismatch for {url}: expected SHA-1 {sha1.lower()}, got {digest}; "
                f"nothing was saved (to use a copy you trust, set ${ENV_VAR} to its path)"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _fetch(url: str, out: BinaryIO, progress: bool, timeout: float) -> tuple[str, int, int | None]:
    """Stream `url` into the open file `out`; return (SHA-1 hex, bytes received, Content-Length or None)."""
    digest = hashlib.sha1()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            with progress_bar(
                expected, f"downloading {PurePosixPath(url).name}", "B", enabled=progress, unit_scale=True
            ) as bar:
                while chunk := response.read(CHUNK_BYTES):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as exc:
        raise UserError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UserError(
            f"cannot download {url}: {reason} (download fra-eng.zip yourself and set ${ENV_VAR} to its path)"
        ) from None
    return digest.hexdigest(), received, expected


def _is_safe_member(name: str) -> bool:
    """A member name that stays inside the archive: relative, no `..` part, not macOS resource junk."""
    posix = name.replace("\\", "/")
    if posix.startswith("/") or (len(posix) > 1 and posix[1] == ":"):
        return False
    parts = PurePosixPath(posix).parts
    return ".." not in parts and not posix.startswith(MACOS_JUNK)


def _choose_member(archive: zipfile.ZipFile, where: Path) -> str:
    """The pairs member: fra-eng/fra.txt, else the one safe fra.txt, else the one safe *.txt.

    Tatoeba archives from the same site (deu-eng.zip, ...) also hold `_about.txt`, which is skipped.
    """
    names = [
        info.filename
        for info in archive.infolist()
        if not info.is_dir() and PurePosixPath(info.filename).name != ABOUT_MEMBER
    ]
    safe = [n for n in names if _is_safe_member(n)]
    if CORPUS_MEMBER in safe:
        return CORPUS_MEMBER
    for candidates in (
        [n for n in safe if PurePosixPath(n).name == "fra.txt"],
        [n for n in safe if n.lower().endswith(".txt")],
    ):
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            raise UserError(
                f"{where}: several text members could hold the corpus ({', '.join(candidates)}); "
                f"expected {CORPUS_MEMBER}"
            )
    unsafe = [n for n in names if not _is_safe_member(n) and not n.startswith(MACOS_JUNK)]
    skipped = f"; refused unsafe member names: {', '.join(unsafe)}" if unsafe else ""
    listed = ", ".join(names) if names else "no files"
    raise UserError(f"{where}: zip has no {CORPUS_MEMBER} member (it holds {listed}){skipped}")


def _decode_line(raw: bytes, number: int, where: str) -> str:
    """One line as text without its line break; a bad byte is reported with the line number."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{where}: line {number} is not valid UTF-8 "
            f"(byte {raw[exc.start]:#04x} at byte column {exc.start + 1})"
        ) from None
    return line.removesuffix("\n").removesuffix("\r")


def parse_pairs(
    lines: Iterable[bytes], where: str, names: tuple[str, str] = ("English", "French")
) -> list[tuple[str, str]]:
    """(first, second) column from tab-separated UTF-8 lines with 2 or 3 columns; blank lines are skipped.

    `names` are the two columns' languages, for messages. Lines with a wrong number of columns are
    counted over the whole file and reported together, naming the first.
    """
    pairs: list[tuple[str, str]] = []
    bad_lines, first_bad = 0, ""
    for number, raw in enumerate(lines, start=1):
        line = _decode_line(raw, number, where)
        if number == 1:
            line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            bad_lines += 1
            if bad_lines == 1:
                first_bad = f"line {number} has {len(fields)} tab-separated field(s)"
            continue
        first, second = fields[0], fields[1]
        if not first.strip() or not second.strip():
            side = names[0] if not first.strip() else names[1]
            raise UserError(f"{where}: line {number} has an empty {side} sentence")
        pairs.append((first, second))
    if bad_lines:
        raise UserError(
            f"{where}: {first_bad}, expected 2 ({names[0]}, {names[1]}) or 3 ({names[0]}, {names[1]}, "
            f"attribution); {bad_lines} line(s) in all have the wrong number of fields"
        )
    if not pairs:
        raise UserError(f"{where}: the corpus is empty (no sentence pairs)")
    return pairs


def read_aligned(first: Path, second: Path) -> list[tuple[str, str]]:
    """Pairs from two line-aligned plain-text files (line i of `first` translates line i of `second`).

    Blank line pairs are skipped; a blank line facing a sentence, or different line counts, is an error.
    """
    sides = []
    for path in (first, second):
        try:
            with Path(path).open("rb") as stream:
                lines = [_decode_line(raw, n, str(path)) for n, raw in enumerate(stream, start=1)]
        except OSError as exc:
            raise UserError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
        sides.append([lines[0].removeprefix("\ufeff"), *lines[1:]] if lines else [])
    if len(sides[0]) != len(sides[1]):
        raise UserError(
            f"{first} has {len(sides[0])} lines but {second} has {len(sides[1])}: "
            "the two files of a corpus must be line-aligned"
        )
    pairs = []
    for number, (a, b) in enumerate(zip(*sides, strict=True), start=1):
        if not a.strip() and not b.strip():
            continue
        if not a.strip() or not b.strip():
            empty, other = (first, second) if not a.strip() else (second, first)
            raise UserError(f"{empty}: line {number} is empty but line {number} of {other} is not")
        pairs.append((a, b))
    if not pairs:
        raise UserError(f"{first} and {second}: the corpus is empty (no sentence pairs)")
    return pairs


def read_pairs(path: Path, names: tuple[str, str] = ("English", "French")) -> list[tuple[str, str]]:
    """Raw (first, second) column strings in file order, from a zip (streamed, not extracted) or text file."""
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                member = _choose_member(archive, path)
                if archive.getinfo(member).flag_bits & 0x1:
                    raise UserError(f"{path}: {member} is encrypted; give an archive without a password")
                try:
                    with archive.open(member) as stream:
                        return parse_pairs(stream, f"{path}:{member}", names)
                except NotImplementedError as exc:
                    raise UserError(
                        f"{path}: cannot read {member}: {exc} (re-zip it with ordinary deflate compression)"
                    ) from None
        if path.suffix.lower() == ".zip":
            raise UserError(f"{path} is not a zip archive (a corpus must be a .zip or a tab-separated .txt)")
        with path.open("rb") as stream:
            return parse_pairs(stream, str(path), names)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise UserError(f"{path}: damaged zip archive ({exc})") from None
    except OSError as exc:
        raise UserError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
