"""The run directory: where a training run keeps everything, and how to load a trained run.

torch and the models are imported by the two functions that build a torch model (`load_run`,
`model_with_weights`), so a CTranslate2 folder, laid out like a run, is read without them
(run/open.py opens every kind of model; run/open_run_dir.py is a run directory's opener).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_mt.config import Config, Depths, config_from_dict, load_config
from attn_mt.data.subword import SubwordVocab
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.run.opened import LoadedRun, ModelKind, within_bounds

if TYPE_CHECKING:
    import torch

    from attn_mt.models.base import EncoderDecoder


@dataclass(frozen=True)
class RunPaths:
    """The files of one run directory."""

    root: Path

    @property
    def config(self) -> Path:
        """The resolved config (YAML)."""
        return self.root / "config.yaml"

    @property
    def config_history(self) -> Path:
        """What each --resume changed in the config: one JSON object per resume that changed it."""
        return self.root / "config_history.jsonl"

    @property
    def src_vocab(self) -> Path:
        """Source vocabulary (JSON; a sentencepiece run also keeps src_vocab.model beside it)."""
        return self.root / "src_vocab.json"

    @property
    def tgt_vocab(self) -> Path:
        """Target vocabulary (JSON; a sentencepiece run also keeps tgt_vocab.model beside it)."""
        return self.root / "tgt_vocab.json"

    @property
    def checkpoints(self) -> Path:
        """Folder of last.pt and best.pt."""
        return self.root / "checkpoints"

    @property
    def last(self) -> Path:
        """The newest checkpoint."""
        return self.checkpoints / "last.pt"

    @property
    def best(self) -> Path:
        """The best checkpoint by train.best_metric."""
        return self.checkpoints / "best.pt"

    @property
    def metrics(self) -> Path:
        """One JSON object per log interval."""
        return self.root / "metrics.jsonl"

    @property
    def timeline(self) -> Path:
        """The probes' outputs and attention at each recorded validation (train.timeline)."""
        return self.root / "timeline.jsonl"

    @property
    def log(self) -> Path:
        """The human-readable training log."""
        return self.root / "train.log"

    @property
    def summary(self) -> Path:
        """What the last training session was and how it ended (JSON, for `attn-mt report`)."""
        return self.root / "run_summary.json"

    @property
    def parent(self) -> Path:
        """The trained run a fine-tuned run started from (JSON; absent for other runs)."""
        return self.root / "parent.json"

    @property
    def curves(self) -> Path:
        """Training-curve picture."""
        return self.root / "curves.png"

    @property
    def data_report(self) -> Path:
        """The data report (JSON)."""
        return self.root / "data_report.json"

    def eval_dir(self, split: str) -> Path:
        """Where `attn-mt eval --split SPLIT` writes its files."""
        return self.root / "eval" / split


def resolve_checkpoint(run_dir: Path, which: str) -> Path:
    """`best` (falling back to `last`), `last`, a NAME in checkpoints/ (NAME.pt), or a checkpoint path."""
    paths = RunPaths(run_dir)
    if which == "best":
        return paths.best if paths.best.exists() else paths.last
    if which == "last":
        return paths.last
    named = paths.checkpoints / f"{which}.pt"
    if "/" not in which and not which.endswith(".pt") and named.exists():
        return named
    return Path(which)


def check_run_dir(run_dir: str | Path) -> RunPaths:
    """Fail with one clear message if `run_dir` is missing or lacks its config and vocabularies."""
    paths = RunPaths(Path(run_dir))
    if not paths.root.is_dir():
        raise UserError(f"run directory not found: {paths.root}")
    missing = [p.name for p in (paths.config, paths.src_vocab, paths.tgt_vocab) if not p.exists()]
    if missing:
        raise UserError(
            f"run directory {paths.root} is incomplete: missing {', '.join(missing)} (was it trained?)"
        )
    return paths


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds an attn-mt run: a config.yaml that loads as an attn-mt config."""
    try:
        load_config(RunPaths(path).config, saved=True)
    except UserError:
        return False
    return True


def describe_contents(path: Path, shown: int = 5) -> str:
    """The first few entries of a directory, for messages: 'a.txt, b/, ... (12 entries)'."""
    entries = sorted(path.iterdir())
    names = [p.name + ("/" if p.is_dir() else "") for p in entries[:shown]]
    more = f", ... ({len(entries)} entries)" if len(entries) > shown else ""
    return ", ".join(names) + more


def load_vocabs(paths: RunPaths, cfg: Config) -> tuple[Vocab, Vocab]:
    """The run's source and target vocabularies: JSON word lists, or sentencepiece models beside them."""
    kind = SubwordVocab if cfg.data.tokenizer == "sentencepiece" else Vocab
    return kind.load(paths.src_vocab), kind.load(paths.tgt_vocab)


def load_run(run_dir: str | Path, which: str = "best", device: torch.device | str = "cpu") -> LoadedRun:
    """Load config, vocabularies and model weights of a trained run; refuses checkpoints that do not fit."""
    from attn_mt.run.checkpoint import load_checkpoint  # torch (see the module docstring)

    paths = check_run_dir(run_dir)
    ckpt_path = resolve_checkpoint(paths.root, which)
    if which not in ("best", "last") and not ckpt_path.is_file():
        raise UserError(f"--checkpoint {which}: no such checkpoint file")
    if not ckpt_path.exists():
        raise UserError(
            f"run directory {paths.root} has no checkpoint {ckpt_path.name} (was training started?)"
        )
    cfg = within_bounds(load_config(paths.config, saved=True), paths.config)
    src_vocab, tgt_vocab = load_vocabs(paths, cfg)
    state = load_checkpoint(ckpt_path, map_location="cpu")
    check_fits(state, cfg, src_vocab.idx_to_token, tgt_vocab.idx_to_token, ckpt_path)
    model = model_with_weights(cfg, len(src_vocab), len(tgt_vocab), state["model"], ckpt_path)
    model.to(device).eval()
    step = int(state.get("step", 0))
    return LoadedRun(
        cfg, src_vocab, tgt_vocab, model, ckpt_path, step, ModelKind.RUN_DIR, str(device), paths.root
    )


def model_with_weights(
    cfg: Config, src_size: int, tgt_size: int, weights: dict[str, torch.Tensor], where: Path
) -> EncoderDecoder:
    """The config's model holding `weights`; weights that do not fit it are a UserError naming `where`."""
    from attn_mt.models.build import build_model  # torch (see the module docstring)

    model = build_model(cfg.model, src_size, tgt_size)
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise UserError(f"checkpoint {where} does not fit this run: its weights differ ({detail})") from None
    return model


def check_fits(state: dict, cfg: Config, src_tokens: list[str], tgt_tokens: list[str], where: Path) -> None:
    """Refuse a checkpoint whose model or vocabularies differ from the run's, naming what differs."""
    problems = []
    saved = state.get("config")
    if isinstance(saved, dict):
        saved_cfg = config_from_dict(saved, f"config inside {where}", saved=True)
        for key, value in vars(cfg.model).items():
            other = getattr(saved_cfg.model, key)
            if other != value and key not in ("dropout", "num_layers", "encoder_layers", "decoder_layers"):
                problems.append(f"model.{key} is {other!r} in the checkpoint but {value!r} in the run")
        # the layer keys are compared as the depths they give: num_layers 3 = encoder and decoder layers 3
        for side, theirs, ours in zip(Depths._fields, saved_cfg.model.depths, cfg.model.depths, strict=True):
            if theirs != ours:
                problems.append(f"the {side} has {theirs} layers in the checkpoint but {ours} in the run")
    for name, run_tokens in (("src_vocab", src_tokens), ("tgt_vocab", tgt_tokens)):
        problem = vocab_difference(name, state.get(name), list(run_tokens))
        if problem:
            problems.append(problem)
    if problems:
        raise UserError(f"checkpoint {where} does not fit this run: " + "; ".join(problems))


def vocab_difference(name: str, saved: object, run_tokens: list[str]) -> str:
    """How the checkpoint's token list `saved` differs from the run's ('' when equal or not stored)."""
    if not isinstance(saved, list):
        return ""
    if len(saved) != len(run_tokens):
        return f"{name} has {len(saved)} tokens in the checkpoint but {len(run_tokens)} in the run"
    for index, (theirs, ours) in enumerate(zip(saved, run_tokens, strict=True)):
        if theirs != ours:
            return f"{name} differs at id {index}: {theirs!r} in the checkpoint but {ours!r} in the run"
    return ""


def read_parent(path: Path) -> dict[str, Any] | None:
    """A fine-tuned run's parent.json record; None for other runs (or an unreadable file)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def read_jsonl_text(path: Path) -> str:
    """A JSON-lines file's text; bytes that are not UTF-8 (a last line a crash cut inside a character)
    become U+FFFD, so such a line is one that `parse_metrics` skips, not a UnicodeDecodeError."""
    return path.read_bytes().decode("utf-8", "replace")


def parse_metrics(text: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON records of a metrics.jsonl text, and the numbers of lines that are not one (a crash's)."""
    records, bad = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad.append(number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(number)
    return records, bad


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file (none if it does not exist); broken lines are skipped."""
    return parse_metrics(read_jsonl_text(path))[0] if path.exists() else []


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines after `step` (work a crash lost and a resume will redo) and final validations.

    A final validation scored a stop between two scheduled validations; the resumed run goes on
    past that step as the uninterrupted run did, without one.
    """
    kept = [r for r in read_metrics(path) if r.get("step", 0) <= step and not r.get("final")]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
