"""One typed configuration for a run: a dataclass per section, validated on load.

Every problem in a config file is collected and reported at once, each naming its key
(`train.lr: expected a number, got 'fast'`), with the closest valid name for a typo.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from attn_mt.errors import UserError
from attn_mt.limits import DECODE_BOUNDS, out_of_bounds

DATA_MODES = ("book", "split")
TOKENIZERS = ("book", "sentencepiece")
SUBWORD_TYPES = ("unigram", "bpe")
MODEL_TYPES = ("gru_bahdanau", "transformer")
OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("constant", "inverse_sqrt", "linear", "plateau")
LOSS_AVERAGES = ("book", "token")
INITS = ("xavier", "default")
EMBED_INITS = ("book", "scaled")
POSITIONAL_ENCODINGS = ("sinusoidal", "learned", "none")  # the Transformer's; sinusoidal is the book's
NORMS = ("layer", "batch")  # the normalisation in the Transformer's add & norm; layer is the book's
SCORINGS = ("additive", "dot")  # the Bahdanau decoder's attention scoring; additive is the book's
AMP_MODES = ("none", "auto", "bf16", "fp16")
KERNEL_CHOICES = ("auto", "reference", "cpu", "gpu")  # see attn_mt/kernels
COMPILE_MODES = ("default", "reduce-overhead")  # torch.compile modes; reduce-overhead captures CUDA graphs
BEST_METRICS = ("valid_bleu", "valid_loss", "train_loss")
# the repository's configs/ folder, reached through the attn_mt/configs link and shipped in the
# package as package data (pyproject.toml), so an installed attn-mt finds it too
SHIPPED_CONFIGS = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = SHIPPED_CONFIGS / "d2l_bahdanau.yaml"  # what `attn-mt train` runs without a CONFIG
HIGHER_IS_BETTER = {"valid_bleu": True, "valid_loss": False, "train_loss": False}  # per BEST_METRICS


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` of `metric` (one of BEST_METRICS) beats `best`; anything beats None."""
    if best is None:
        return True
    return value > best if HIGHER_IS_BETTER[metric] else value < best


@dataclass
class DataConfig:
    """Where the corpus comes from and how it becomes batches."""

    mode: str = "book"
    path: str | list[str] | None = None
    languages: str = "en-fr"
    direction: str = "en-fr"
    tokenizer: str = "book"
    subword_type: str = "unigram"
    vocab_size: int = 8000
    shared_vocab: bool = True
    subword_sample: int = 2_000_000  # sentencepiece learns from at most this many sentences (0 = all)
    num_examples: int = 600
    num_steps: int = 10
    batch_size: int = 64
    min_freq: int = 2
    normalize_apostrophes: bool = False
    split_seed: int = 0
    valid_size: int = 1000
    test_size: int = 2000
    max_len: int = 30
    max_tokens: int = 4096


class Depths(NamedTuple):
    """How many layers the encoder and the decoder have (a tuple, as CTranslate2's specs take it)."""

    encoder: int
    decoder: int


@dataclass
class ModelConfig:
    """Which encoder-decoder to build and its sizes."""

    type: str = "gru_bahdanau"
    embed_size: int = 32
    num_hiddens: int = 32
    num_layers: int = 2
    encoder_layers: int | None = None  # None = num_layers
    decoder_layers: int | None = None  # None = num_layers
    num_heads: int = 4
    ffn_num_hiddens: int = 64
    dropout: float = 0.1
    pack_padded: bool = False
    tie_embeddings: bool = False
    tie_source_embedding: bool = False
    embed_init: str = "book"
    positional_encoding: str = "sinusoidal"  # transformer: sinusoidal (the book's), learned or none
    max_positions: int = 256  # rows of the learned position table (positional_encoding: learned)
    norm: str = "layer"  # transformer's add & norm: layer (the book's LayerNorm) or batch (BatchNorm1d)
    scoring: str = "additive"  # gru_bahdanau's attention: additive (the book's) or dot (scaled dot product)

    @property
    def switches(self) -> dict[str, str]:
        """The chapter's exercise switches set away from the book's choice, as {"model.key": value}."""
        book = {"positional_encoding": "sinusoidal", "norm": "layer", "scoring": "additive"}
        chosen = {key: getattr(self, key) for key in book}
        return {f"model.{key}": value for key, value in chosen.items() if value != book[key]}

    @property
    def depths(self) -> Depths:
        """The encoder's and the decoder's layer counts: encoder_layers, decoder_layers, else num_layers."""
        return Depths(
            self.num_layers if self.encoder_layers is None else self.encoder_layers,
            self.num_layers if self.decoder_layers is None else self.decoder_layers,
        )


@dataclass
class TrainConfig:
    """The optimisation recipe; the defaults are the book's."""

    epochs: int = 250
    max_steps: int = 0
    time_limit_minutes: float = 0.0
    lr: float = 0.005
    optimizer: str = "adam"
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    label_smoothing: float = 0.0
    loss_average: str = "book"
    init: str = "xavier"
    schedule: str = "constant"
    warmup_steps: int = 0
    plateau_factor: float = 0.5
    plateau_patience: int = 2
    accum_steps: int = 1
    amp: str = "none"
    compile: bool = False
    compile_mode: str = (
        "default"  # under train.compile: reduce-overhead pads batches to a few shapes for CUDA graphs
    )
    tf32: bool = False  # CUDA only: float32 matrix products and cuDNN in TensorFloat-32
    prefetch_batches: int = 2  # CUDA only: batches collated into pinned memory ahead, on a thread (0 = off)
    kernels: str = "auto"
    seed: int = 0
    threads: int = 0
    log_every: int = 50
    tensorboard: bool = False
    valid_every: int = 0
    checkpoint_minutes: float = 1.0
    keep_checkpoints: int = 0
    valid_max_sentences: int = 1000
    best_metric: str = "train_loss"
    patience: int = 0


@dataclass
class DecodeConfig:
    """Search settings used by validation, translate and eval."""

    beam_size: int = 4
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    nbest: int = 1
    batch_size: int = 128


@dataclass
class Config:
    """A whole run: data, model, training and decoding sections."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict, ready for YAML or JSON."""
        return asdict(self)

    def to_yaml(self) -> str:
        """The resolved config as YAML text."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


CHOICES: dict[str, tuple[str, ...]] = {
    "data.mode": DATA_MODES,
    "data.tokenizer": TOKENIZERS,
    "data.subword_type": SUBWORD_TYPES,
    "model.type": MODEL_TYPES,
    "model.embed_init": EMBED_INITS,
    "model.positional_encoding": POSITIONAL_ENCODINGS,
    "model.norm": NORMS,
    "model.scoring": SCORINGS,
    "train.optimizer": OPTIMIZERS,
    "train.schedule": SCHEDULES,
    "train.loss_average": LOSS_AVERAGES,
    "train.init": INITS,
    "train.amp": AMP_MODES,
    "train.kernels": KERNEL_CHOICES,
    "train.compile_mode": COMPILE_MODES,
    "train.best_metric": BEST_METRICS,
}


class ConfigError(UserError):
    """All problems found in one config, one per line."""

    def __init__(self, problems: list[str], source: str = "config"):
        self.problems = problems
        super().__init__(
            f"{source} has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems)
        )


def _type_name(tp: Any) -> str:
    """A readable name for a field's annotation."""
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _check_value(key: str, value: Any, tp: Any, problems: list[str]) -> Any:
    """Check one value against its annotation; return it (ints widened to float where asked)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        listed = [a for a in args if typing.get_origin(a) is list]
        chosen = listed[0] if listed and isinstance(value, list) else args[0]
        return _check_value(key, value, chosen, problems)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {value!r}")
            return value
        return [_check_value(f"{key}[{i}]", v, item_tp, problems) for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and tp is not bool or not isinstance(value, tp):
        problems.append(f"{key}: expected {_type_name(tp)}, got {value!r}")
    return value


def _build_section(name: str, cls: type, raw: Any, problems: list[str]) -> Any:
    """Build one section dataclass from its raw mapping, collecting problems."""
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        problems.append(f"{name}: expected a mapping of keys, got {raw!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in raw.items():
        if key not in hints:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {name}.{close[0]}?)" if close else f" (valid keys: {', '.join(valid)})"
            problems.append(f"{name}.{key}: unknown key{hint}")
            continue
        kwargs[key] = _check_value(f"{name}.{key}", value, hints[key], problems)
    return cls(**kwargs)


def _sound(problems: list[str], *keys: str) -> bool:
    """Whether none of `keys` has a problem yet: combinations are only checked on sound values."""
    named = {p.split(":", 1)[0].split("[", 1)[0] for p in problems}
    return named.isdisjoint(keys)


def _check_semantics(cfg: Config, problems: list[str], saved: bool = False) -> None:
    """Bad choices, non-finite or out-of-range numbers and impossible combinations.

    `saved`: a trained run's config, whose decode settings outside the bounds are left for
    `bounded_decode` to bring in (a run saved before the bounds existed still opens).
    """
    for section in SECTIONS:
        for key, value in vars(getattr(cfg, section)).items():
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"{section}.{key}: must be a finite number, got {value}")
    for dotted, choices in CHOICES.items():
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        if isinstance(value, str) and value not in choices:
            close = difflib.get_close_matches(value, choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{dotted}: {value!r} is not one of {', '.join(choices)}{hint}")
    positive = [
        "data.num_steps",
        "data.batch_size",
        "data.max_len",
        "data.max_tokens",
        "data.vocab_size",
        "model.embed_size",
        "model.num_hiddens",
        "model.num_layers",
        "model.encoder_layers",
        "model.decoder_layers",
        "model.num_heads",
        "model.ffn_num_hiddens",
        "model.max_positions",
        "train.epochs",
        "train.accum_steps",
        "train.log_every",
        "decode.batch_size",
        "train.lr",
    ]
    non_negative = [
        "data.num_examples",
        "data.subword_sample",
        "data.min_freq",
        "data.valid_size",
        "data.test_size",
        "train.max_steps",
        "train.time_limit_minutes",
        "train.weight_decay",
        "train.grad_clip",
        "train.warmup_steps",
        "train.threads",
        "train.prefetch_batches",
        "train.valid_every",
        "train.checkpoint_minutes",
        "train.keep_checkpoints",
        "train.valid_max_sentences",
        "train.patience",
    ]
    for dotted in positive + non_negative:
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            if dotted in positive and value <= 0:
                problems.append(f"{dotted}: must be > 0, got {value}")
            elif dotted in non_negative and value < 0:
                problems.append(f"{dotted}: must be >= 0, got {value}")
    for key, (low, high) in DECODE_BOUNDS.items() if not saved else ():
        value = getattr(cfg.decode, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            problem = out_of_bounds(value, low, high)
            if problem:
                problems.append(f"decode.{key}: {problem}")
    for dotted in ("model.dropout", "train.label_smoothing"):
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        if isinstance(value, float) and not 0.0 <= value < 1.0:
            problems.append(f"{dotted}: must be in [0, 1), got {value}")
    if isinstance(cfg.train.plateau_factor, float) and not 0.0 < cfg.train.plateau_factor < 1.0:
        problems.append(f"train.plateau_factor: must be in (0, 1), got {cfg.train.plateau_factor}")
    if isinstance(cfg.train.adam_betas, list) and len(cfg.train.adam_betas) != 2:
        problems.append(f"train.adam_betas: expected two numbers, got {cfg.train.adam_betas!r}")
    if _sound(problems, "train.adam_betas"):
        for i, beta in enumerate(cfg.train.adam_betas):
            if not 0.0 <= beta < 1.0:
                problems.append(f"train.adam_betas[{i}]: must be in [0, 1), got {beta}")
    _check_languages(cfg, problems)
    _check_combinations(cfg, problems)


LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")


def _check_languages(cfg: Config, problems: list[str]) -> None:
    """data.languages names the corpus's two columns (or files); data.direction is them or the reverse."""
    if isinstance(cfg.data.path, list) and len(cfg.data.path) != 2:
        problems.append(f"data.path: a list must name two line-aligned files, got {len(cfg.data.path)}")
    codes = {}
    for key in ("languages", "direction"):
        value = getattr(cfg.data, key)
        parts = value.split("-") if isinstance(value, str) else []
        if len(parts) != 2 or not all(LANGUAGE_CODE.fullmatch(c) for c in parts) or parts[0] == parts[1]:
            problems.append(f"data.{key}: expected two different language codes like en-fr, got {value!r}")
        else:
            codes[key] = parts
    if len(codes) == 2 and sorted(codes["languages"]) != sorted(codes["direction"]):
        first, second = codes["languages"]
        problems.append(
            f"data.direction: {cfg.data.direction!r} does not match data.languages {cfg.data.languages!r} "
            f"(use {first}-{second} or {second}-{first})"
        )


def _check_combinations(cfg: Config, problems: list[str]) -> None:
    """Settings that are fine alone but impossible together (checked on keys without other problems)."""
    if _sound(problems, "model.type", "model.num_hiddens", "model.num_heads") and (
        cfg.model.type == "transformer" and cfg.model.num_hiddens % cfg.model.num_heads
    ):
        problems.append(
            f"model.num_hiddens: {cfg.model.num_hiddens} is not divisible by model.num_heads "
            f"= {cfg.model.num_heads}"
        )
    if _sound(
        problems, "model.type", "model.num_layers", "model.encoder_layers", "model.decoder_layers"
    ) and (cfg.model.type == "gru_bahdanau" and cfg.model.depths.decoder > cfg.model.depths.encoder):
        encoder, decoder = cfg.model.depths
        problems.append(
            f"model.decoder_layers: the GRU decoder starts from the final states of the encoder's top "
            f"layers, so it cannot have more layers ({decoder}) than the encoder ({encoder})"
        )
    if _sound(problems, "model.type", "model.tie_embeddings") and (
        cfg.model.tie_embeddings and cfg.model.type != "transformer"
    ):
        problems.append(
            f"model.tie_embeddings: only the transformer ties its target embedding to its output layer, "
            f"but model.type is {cfg.model.type!r}"
        )
    if _sound(problems, "model.type", "model.tie_source_embedding") and (
        cfg.model.tie_source_embedding and cfg.model.type != "transformer"
    ):
        problems.append(
            f"model.tie_source_embedding: only the transformer shares one embedding between encoder and "
            f"decoder, but model.type is {cfg.model.type!r}"
        )
    if _sound(problems, "model.type", "model.embed_init") and (
        cfg.model.embed_init != "book" and cfg.model.type != "transformer"
    ):
        problems.append(
            f"model.embed_init: {cfg.model.embed_init!r} rescales the transformer's sqrt(H)-scaled "
            f"embeddings, but model.type is {cfg.model.type!r}"
        )
    _check_switches(cfg, problems)
    if _sound(problems, "model.tie_source_embedding", "data.tokenizer", "data.shared_vocab") and (
        cfg.model.tie_source_embedding
        and (cfg.data.tokenizer != "sentencepiece" or not cfg.data.shared_vocab)
    ):
        problems.append(
            "model.tie_source_embedding: the encoder can use the decoder's embedding only with one "
            "vocabulary for both languages (data.tokenizer: sentencepiece and data.shared_vocab: true)"
        )
    if _sound(problems, "data.mode", "train.best_metric") and (
        cfg.data.mode == "book" and cfg.train.best_metric != "train_loss"
    ):
        problems.append(
            f"train.best_metric: {cfg.train.best_metric!r} needs a valid split, but data.mode is 'book' "
            "(use 'train_loss' or data.mode: split)"
        )
    kernels, compiled = cfg.train.kernels, cfg.train.compile
    if _sound(problems, "train.kernels", "train.compile") and kernels == "cpu" and compiled:
        problems.append("train.kernels: cpu cannot run under train.compile: true (use auto or reference)")
    if _sound(problems, "data.mode", "data.tokenizer") and (
        cfg.data.mode == "book" and cfg.data.tokenizer != "book"
    ):
        problems.append(
            f"data.tokenizer: {cfg.data.tokenizer!r} needs data.mode: split "
            "(book mode is the book's word pipeline)"
        )
    if _sound(problems, "data.tokenizer", "data.subword_sample", "data.vocab_size") and (
        cfg.data.tokenizer == "sentencepiece" and 0 < cfg.data.subword_sample < cfg.data.vocab_size
    ):
        problems.append(
            f"data.subword_sample: {cfg.data.subword_sample} sentences are too few to learn "
            f"data.vocab_size = {cfg.data.vocab_size} pieces from; use 0 (every training sentence) or more"
        )
    if _sound(problems, "data.mode", "train.patience") and cfg.data.mode == "book" and cfg.train.patience:
        problems.append("train.patience: early stopping needs a valid split, but data.mode is 'book'")
    if _sound(problems, "decode.nbest", "decode.beam_size") and cfg.decode.nbest > cfg.decode.beam_size:
        problems.append(
            f"decode.nbest: {cfg.decode.nbest} is larger than decode.beam_size = {cfg.decode.beam_size}"
        )
    if _sound(problems, "train.schedule", "train.warmup_steps") and (
        cfg.train.schedule == "inverse_sqrt" and cfg.train.warmup_steps == 0
    ):
        problems.append("train.warmup_steps: the inverse_sqrt schedule needs warmup_steps > 0")
    if _sound(problems, "data.mode", "data.valid_size", "train.best_metric", "train.patience") and (
        cfg.data.mode == "split" and cfg.data.valid_size == 0
    ):
        if cfg.train.best_metric != "train_loss":
            problems.append(
                f"train.best_metric: {cfg.train.best_metric!r} needs a valid split, but data.valid_size "
                "is 0 (use 'train_loss' or hold sentences out)"
            )
        if cfg.train.patience:
            problems.append("train.patience: early stopping needs a valid split, but data.valid_size is 0")


def refuse_switches(model: ModelConfig, what: str) -> None:
    """A UserError naming the exercise switches of `model` that `what` (an export format) cannot express."""
    if model.switches:
        listed = ", ".join(f"{key}: {value}" for key, value in model.switches.items())
        raise UserError(
            f"{what} expresses the book's architecture only, but this run has {listed} "
            "(export it with --format pt)"
        )


def _check_switches(cfg: Config, problems: list[str]) -> None:
    """Each exercise switch belongs to one model type, and the fast kernels run the book's choices only."""
    owners = {"positional_encoding": "transformer", "norm": "transformer", "scoring": "gru_bahdanau"}
    for key, owner in owners.items():
        if _sound(problems, "model.type", f"model.{key}") and (
            f"model.{key}" in cfg.model.switches and cfg.model.type != owner
        ):
            problems.append(
                f"model.{key}: {getattr(cfg.model, key)!r} applies to model.type {owner!r} only, "
                f"but model.type is {cfg.model.type!r}"
            )
    switches = [key for key in cfg.model.switches if _sound(problems, key)]
    if _sound(problems, "train.kernels") and switches and cfg.train.kernels in ("cpu", "gpu"):
        problems.append(
            f"train.kernels: {cfg.train.kernels} runs the book's architecture only, but "
            f"{', '.join(f'{key} is {cfg.model.switches[key]!r}' for key in switches)} "
            "(use auto or reference: they train it with plain torch)"
        )


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config)}  # type: ignore[misc]


def config_from_dict(raw: Any, source: str = "config", saved: bool = False) -> Config:
    """Validate a raw nested mapping and build the Config, or raise ConfigError listing every problem.

    `saved`: the config of a trained run or export, whose decode settings may lie outside the bounds
    of attn_mt/limits.py (see `bounded_decode`); a new config's may not.
    """
    problems: list[str] = []
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"top level: expected a mapping of sections, got {type(raw).__name__}"], source)
    sections = {}
    for name, value in raw.items():
        if name not in SECTIONS:
            close = difflib.get_close_matches(str(name), list(SECTIONS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (sections: {', '.join(SECTIONS)})"
            problems.append(f"{name}: unknown section{hint}")
            continue
        sections[name] = _build_section(name, SECTIONS[name], value, problems)
    cfg = Config(**sections)
    _check_semantics(cfg, problems, saved)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """Turn `section.key=value` strings into a nested dict; values are parsed as YAML scalars."""
    nested: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) != 2 or not all(parts):
            raise UserError(f"--set {item!r}: expected section.key=value, e.g. train.lr=0.001")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UserError(f"--set {item!r}: cannot parse the value as YAML: {problem}") from None
        nested.setdefault(parts[0], {})
        if not isinstance(nested[parts[0]], dict):
            raise UserError(f"--set {item!r}: {parts[0]} is set twice in different ways")
        nested[parts[0]][parts[1]] = value
    return nested


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Overlay `extra` onto `base` one section deep."""
    merged = dict(base)
    for section, values in extra.items():
        current = merged.get(section)
        merged[section] = {**current, **values} if isinstance(current, dict) else values
    return merged


def _duplicate_keys(node: yaml.Node, prefix: str = "") -> list[str]:
    """A problem for every mapping key given twice (YAML would silently keep the last one)."""
    problems: list[str] = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            if key in first_line:
                problems.append(f"{prefix}{key}: given twice (lines {first_line[key]} and {line}); keep one")
            else:
                first_line[key] = line
            problems.extend(_duplicate_keys(value_node, f"{prefix}{key}."))
    return problems


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file with safe_load, turning every failure into a UserError."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"config file not found: {path}")
    if path.is_dir():
        raise UserError(f"config path is a directory, not a YAML file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read config {path}: {exc}") from None
    if not text.strip():
        raise UserError(f"config file is empty: {path}")
    try:
        raw = yaml.safe_load(text)
        duplicates = _duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(f"YAML syntax error in {path}{where}: {problem}") from None
    if duplicates:
        raise ConfigError(duplicates, str(path))
    return raw


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, saved: bool = False
) -> Config:
    """Load a YAML config (the book's Bahdanau run when `path` is None), apply `--set` overrides, validate.

    `saved`: a run directory's config.yaml (see `config_from_dict`).
    """
    path = DEFAULT_CONFIG if path is None else path
    raw = read_yaml(path)
    source = str(path)
    if overrides:
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(
                [f"top level: expected a mapping of sections, got {type(raw).__name__}"], source
            )
        raw = _merge(raw or {}, parse_overrides(overrides))
    return config_from_dict(raw, source, saved)


def with_overrides(cfg: Config, overrides: list[str], source: str) -> Config:
    """`cfg` with `--set` overrides applied, validated as a new config."""
    return config_from_dict(_merge(cfg.to_dict(), parse_overrides(overrides)), source)


def bounded_decode(cfg: Config) -> tuple[Config, list[str]]:
    """A saved config's decode settings brought inside attn_mt/limits.py's bounds, and a note for each
    one changed (a run saved before the bounds existed: translate, eval, serve and the API use these)."""
    changed, notes = {}, []
    for key, (low, high) in DECODE_BOUNDS.items():
        value = getattr(cfg.decode, key)
        if out_of_bounds(value, low, high):
            changed[key] = type(value)(min(max(value, low), high))
            notes.append(
                f"decode.{key} is {value:g}, outside {low:g}..{high:g} (the bounds of every command and "
                f"of serve): using {changed[key]:g}"
            )
    if not changed:
        return cfg, notes
    return dataclasses.replace(cfg, decode=dataclasses.replace(cfg.decode, **changed)), notes


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML."""
    Path(path).write_text(cfg.to_yaml(), encoding="utf-8")
