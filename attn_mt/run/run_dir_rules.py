"""A run directory's rules before training: what may be started, resumed or replaced, what a refusal leaves.

`attn-mt train` (training/launch.py) asks these before it writes anything: an existing run is kept
unless --overwrite, --auto-resume resumes a last.pt or starts anew, a resumed run's vocabularies and
last.pt must fit the corpus and the model, and a new run refused before its first checkpoint leaves
no trace.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attn_mt.config import Config
from attn_mt.data.dataset import NMTData
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.run_dir import RunPaths, check_fits, describe_contents, is_run_dir


def refuse_existing(run_dir: Path, overwrite: bool) -> None:
    """An existing, non-empty run directory is an error unless --overwrite; other directories always are."""
    if not (run_dir.exists() and any(run_dir.iterdir())):
        return
    if not overwrite:
        raise UserError(
            f"run directory {run_dir} already exists; pass --resume to continue it, "
            "--overwrite to start it again, or --run-dir for a new one"
        )
    if not is_run_dir(run_dir):
        raise UserError(
            f"--overwrite: {run_dir} is not an attn-mt run directory (no valid config.yaml), so it is "
            f"not deleted; it holds {describe_contents(run_dir)}"
        )


def auto_resume_choice(paths: RunPaths) -> tuple[bool, bool] | str:
    """--auto-resume's (resume, overwrite) for a run directory, or why it can neither resume nor start.

    A last.pt is resumed; a run directory without any checkpoint (a run lost before its first) is
    started again; a missing or empty directory is a new run; a run with other checkpoints but no
    last.pt (best.pt, step-*.pt), and any other non-empty directory, are kept.
    """
    root = paths.root
    if paths.last.exists():
        return True, False
    if not (root.exists() and any(root.iterdir())):
        return False, False
    if not is_run_dir(root):
        return (
            f"--auto-resume: {root} is not an attn-mt run directory (no valid config.yaml) and not empty, "
            f"so it is neither resumed nor replaced; it holds {describe_contents(root)}"
        )
    saved = sorted(p.name for p in paths.checkpoints.glob("*.pt")) if paths.checkpoints.is_dir() else []
    if saved:
        return (
            f"--auto-resume: {root} has checkpoints ({', '.join(saved[:5])}) but no last.pt to resume "
            "from, so it is neither resumed nor replaced; give another --run-dir (or --overwrite to "
            "delete them)"
        )
    return False, True


def prepare_run_dir(run_dir: Path, overwrite: bool) -> RunPaths:
    """Create a new run's directory, deleting an existing run first with --overwrite (`refuse_existing`)."""
    refuse_existing(run_dir, overwrite)
    if run_dir.exists() and any(run_dir.iterdir()):
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunPaths(run_dir)


@contextmanager
def unmade_on_refusal(
    paths: RunPaths, new_run: bool, made: bool, close_log: Callable[[], None]
) -> Iterator[None]:
    """A new run refused (UserError) before it saved a checkpoint leaves no trace: the directory it `made`
    is removed, one that was there is emptied again, so the corrected command starts the run without
    --overwrite. A run with a checkpoint, a resumed run and any other failure keep their files."""
    try:
        yield
    except UserError:
        saved = paths.checkpoints.is_dir() and any(paths.checkpoints.glob("*.pt"))
        if new_run and not saved:
            close_log()  # train.log is closed before it is deleted
            if made:
                shutil.rmtree(paths.root, ignore_errors=True)
            else:
                for entry in list(paths.root.iterdir()):
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        raise


def resume_state(paths: RunPaths, cfg: Config, data: NMTData, flag: str) -> dict[str, Any]:
    """last.pt of a run to resume, checked to fit the corpus's vocabularies and the run's model."""
    for name, vocab in (("src_vocab", data.src_vocab), ("tgt_vocab", data.tgt_vocab)):
        saved = Vocab.load(getattr(paths, name))
        if saved.idx_to_token != vocab.idx_to_token:
            raise UserError(f"{flag}: the corpus gives a different {name} than {getattr(paths, name)}")
    state = load_checkpoint(paths.last, map_location="cpu")
    check_fits(state, cfg, data.src_vocab.idx_to_token, data.tgt_vocab.idx_to_token, paths.last)
    return state
