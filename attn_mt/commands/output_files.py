"""The files a command writes, checked before it reads or decodes anything: each a file path (not a
folder), none the same file as another it writes or as one it reads. Two options naming one file
would leave only the last one written (`translate --output x --alignments x` kept the alignments
and lost the translations), and an output naming an input would overwrite it."""

from __future__ import annotations

import os
from pathlib import Path

from attn_mt.errors import UserError

STDIN = "-"


def refuse_directories(output: Path | None, alignments: Path | None) -> None:
    """Refuse an --output or --alignments path that is a directory: each names a file to write."""
    for option, path in (("--output", output), ("--alignments", alignments)):
        if path is not None and path.is_dir():
            raise UserError(f"{option} {path} is a directory; give a file path")


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode when both exist (hard and symbolic links
    included), else the same path once symbolic links and `..` are resolved."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return a.resolve() == b.resolve()


def refuse_shared_paths(
    outputs: dict[str, Path | None],
    inputs: dict[str, str | None],
    folders: dict[str, Path | None] | None = None,
) -> None:
    """Refuse two outputs (option -> file; None: stdout or not asked) that name one file, an output or
    output folder (option -> folder) that names an input (option -> file; "-": stdin), and a file
    given where a folder is written."""
    files = [(option, path) for option, path in outputs.items() if path is not None]
    dirs = [(option, path) for option, path in (folders or {}).items() if path is not None]
    read = [(option, Path(path)) for option, path in inputs.items() if path not in (None, STDIN)]
    for k, (option, path) in enumerate(files):
        for other, other_path in files[k + 1 :]:
            if same_file(path, other_path):
                raise UserError(
                    f"{option} and {other} name the same file ({path}): the second would overwrite the "
                    "first; give each its own file"
                )
    for option, path in files + dirs:
        for source, source_path in read:
            if same_file(path, source_path):
                raise UserError(
                    f"{option} {path} is the file {source} reads: writing it would overwrite the input; "
                    "give another path"
                )
    for folder_option, folder in dirs:
        for option, path in files:
            if same_file(path, folder):
                raise UserError(
                    f"{option} and {folder_option} name the same path ({path}): one is a file, the other "
                    "a folder of files; give each its own"
                )
