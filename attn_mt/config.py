"""One typed configuration for a run: a dataclass per section, validated on load.

Every key is declared once, on its field, with `key(...)`: its default, a one-line help, and the
choices or bounds a value must keep. One checker reads those declarations, so adding a key is one
edit (docs/architecture.md, "Adding a config key"); `attn-mt validate --explain KEY` prints them.
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

# the repository's configs/ folder, reached through the attn_mt/configs link and shipped in the
# package as package data (pyproject.toml), so an installed attn-mt finds it too
SHIPPED_CONFIGS = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = SHIPPED_CONFIGS / "d2l_bahdanau.yaml"  # what `attn-mt train` runs without a CONFIG


@dataclass(frozen=True)
class Declared:
    """What a config key allows, beyond its type: choices, bounds, a list's length, and its help."""

    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None  # value >= minimum
    above: float | None = None  # value > above
    maximum: float | None = None  # value <= maximum
    below: float | None = None  # value < below
    length: int | None = None  # a list's number of items (the bounds then hold for each item)
    clamped_on_open: bool = False  # a saved run's value outside the bounds is brought inside, not refused

    def bounds(self) -> str:
        """The bounds in words (`> 0`, `from 1 to 16`, `in [0, 1)`), or '' when there are none."""
        low = self.minimum if self.minimum is not None else self.above
        high = self.maximum if self.maximum is not None else self.below
        opening = "[" if self.minimum is not None else "("  # interval notation: [ ] include, ( ) exclude
        closing = "]" if self.maximum is not None else ")"
        if low is None and high is None:
            return ""
        if high is None:
            return f"{'>=' if opening == '[' else '>'} {low:g}"
        if low is None:
            return f"{'<=' if closing == ']' else '<'} {high:g}"
        if opening + closing == "[]":
            return f"from {low:g} to {high:g}"
        return f"in {opening}{low:g}, {high:g}{closing}"

    def bound_problem(self, value: float) -> str | None:
        """Why a number breaks the bounds (NaN breaks any), or None when it keeps them."""
        keeps = (
            (self.minimum is None or value >= self.minimum)
            and (self.above is None or value > self.above)
            and (self.maximum is None or value <= self.maximum)
            and (self.below is None or value < self.below)
        )
        if keeps:
            return None
        words = self.bounds()
        if words.startswith("from "):  # the wording of limits.py, which the command line and serve share
            return out_of_bounds(value, self.minimum, self.maximum)  # type: ignore[arg-type]
        return f"must be {words}, got {value}"


def key(
    default: Any,
    *,
    help: str,  # noqa: A002 - the name argparse, typer and fairseq give a field's one-line help
    choices: tuple[str, ...] = (),
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
    between: tuple[float, float] | None = None,
    length: int | None = None,
    clamped_on_open: bool = False,
) -> Any:
    """Declare one config key: `lr: float = key(0.005, help="...", above=0)`.

    `choices`: the strings a value may take; `minimum`/`maximum` (inclusive) and `above`/`below`
    (exclusive) bound a number, or each of a list of `length` numbers; `between=(low, high)` is
    minimum and maximum at once (attn_mt/limits.py's pairs); `clamped_on_open`: a run saved with a
    value outside the bounds opens with it brought inside (`bounded_decode`) instead of failing.
    A list default is copied for each config, as a dataclass needs.
    """
    if between is not None:
        minimum, maximum = between
    if (minimum is not None and above is not None) or (maximum is not None and below is not None):
        raise TypeError("key(): give one lower bound (minimum or above) and one upper (maximum or below)")
    declared = Declared(help, tuple(choices), minimum, above, maximum, below, length, clamped_on_open)
    metadata = {"declared": declared}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class DataConfig:
    """Where the corpus comes from and how it becomes batches."""

    mode: str = key(
        "book",
        help="book: the book's first num_examples pairs, no held-out split; split: the whole corpus, "
        "train / valid / test grouped by source sentence",
        choices=("book", "split"),
    )
    path: str | list[str] | None = key(
        None,
        help="fra-eng.zip, a Tatoeba tab file or [a.en, a.fr]; null = --data, $ATTN_MT_DATA, the cache, "
        "or a download",
    )
    languages: str = key("en-fr", help="language codes of the corpus's two columns (or files), in file order")
    direction: str = key(
        "en-fr", help="translate from the first code to the second (fr-en reverses an en-fr corpus)"
    )
    tokenizer: str = key(
        "book",
        help="book: the book's words; sentencepiece: subword pieces learned on the training split "
        "(split mode)",
        choices=("book", "sentencepiece"),
    )
    subword_type: str = key(
        "unigram",
        help="sentencepiece's algorithm: unigram or bpe (docs/subwords.md)",
        choices=("unigram", "bpe"),
    )
    vocab_size: int = key(8000, help="sentencepiece pieces in a vocabulary", above=0)
    shared_vocab: bool = key(True, help="one sentencepiece model for both languages")
    subword_sample: int = key(
        2_000_000,
        help="sentencepiece learns from at most this many training sentences, seeded (0 = all)",
        minimum=0,
    )
    num_examples: int = key(
        600,
        help="book mode: read pairs 0..num_examples of the corpus (the book's 600 gives 601; 0 = all)",
        minimum=0,
    )
    num_steps: int = key(
        10, help="book mode: every sentence truncated or padded to this many tokens", above=0
    )
    batch_size: int = key(64, help="book mode: sentence pairs per batch, reshuffled every epoch", above=0)
    min_freq: int = key(2, help="word tokens seen fewer times become <unk>", minimum=0)
    normalize_apostrophes: bool = key(False, help="map ’ and ‘ to ' (the corpus mixes j'ai and j’ai)")
    split_seed: int = key(0, help="seed of the grouped train / valid / test split")
    valid_size: int = key(
        1000,
        help="split mode: source sentences (with all their translations) held out for validation",
        minimum=0,
    )
    test_size: int = key(2000, help="split mode: source sentences held out for the final test", minimum=0)
    max_len: int = key(
        30, help="split mode: training pairs longer than this many tokens (incl. <eos>) are dropped", above=0
    )
    max_tokens: int = key(
        4096, help="split mode: token budget per batch (rows x longest padded side)", above=0
    )
    batch_shapes: int = key(
        0,
        help="split mode: pad every batch to one of at most this many fixed (rows, source, target) shapes, "
        "for a compiled or CUDA-graph step (0 = each batch to its own longest)",
        minimum=0,
    )


class Depths(NamedTuple):
    """How many layers the encoder and the decoder have (a tuple, as CTranslate2's specs take it)."""

    encoder: int
    decoder: int


@dataclass
class ModelConfig:
    """Which encoder-decoder to build and its sizes."""

    # the names of models/build.py's MODEL_BUILDERS (tests/test_config.py checks they agree)
    type: str = key(
        "gru_bahdanau",
        help="the encoder-decoder: gru_bahdanau (GRU + Bahdanau attention) or transformer",
        choices=("gru_bahdanau", "transformer"),
    )
    embed_size: int = key(32, help="gru_bahdanau: token embedding size", above=0)
    num_hiddens: int = key(32, help="model width: GRU hidden size, or the Transformer's d_model", above=0)
    num_layers: int = key(2, help="layers in the encoder and in the decoder", above=0)
    encoder_layers: int | None = key(
        None, help="encoder layers if not num_layers (null = num_layers)", above=0
    )
    decoder_layers: int | None = key(
        None, help="decoder layers if not num_layers (null = num_layers)", above=0
    )
    num_heads: int = key(4, help="transformer: attention heads (they must divide num_hiddens)", above=0)
    ffn_num_hiddens: int = key(64, help="transformer: the position-wise feed-forward's hidden size", above=0)
    dropout: float = key(0.1, help="dropout probability", minimum=0, below=1)
    pack_padded: bool = key(False, help="gru_bahdanau: the GRU skips <pad> steps (the book reads them)")
    tie_embeddings: bool = key(
        False, help="transformer: one matrix embeds the target tokens and scores them (Press & Wolf 2017)"
    )
    tie_source_embedding: bool = key(
        False, help="transformer: the encoder embeds with the decoder's matrix too (one shared vocabulary)"
    )
    embed_init: str = key(
        "book",
        help="transformer: book (nn.Embedding's N(0, 1), the book's) or scaled (N(0, 1/H), Vaswani et al.)",
        choices=("book", "scaled"),
    )
    positional_encoding: str = key(
        "sinusoidal",
        help="transformer: sinusoidal (the book's), learned (a trained table) or none",
        choices=("sinusoidal", "learned", "none"),
    )
    max_positions: int = key(
        256, help="rows of the learned position table (positional_encoding: learned)", above=0
    )
    norm: str = key(
        "layer",
        help="transformer's add & norm: layer (the book's LayerNorm) or batch (BatchNorm1d)",
        choices=("layer", "batch"),
    )
    scoring: str = key(
        "additive",
        help="gru_bahdanau's attention: additive (the book's) or dot (scaled dot product)",
        choices=("additive", "dot"),
    )

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

    epochs: int = key(
        250, help="passes over the training data (an upper bound with the limits below)", above=0
    )
    max_steps: int = key(0, help="stop after this many optimiser steps (0 = no step limit)", minimum=0)
    time_limit_minutes: float = key(
        0.0, help="stop after this many minutes of training (0 = no limit)", minimum=0
    )
    lr: float = key(0.005, help="learning rate; the peak one when a schedule warms up", above=0)
    optimizer: str = key("adam", help="adam, or adamw (decoupled weight decay)", choices=("adam", "adamw"))
    adam_betas: list[float] = key([0.9, 0.999], help="Adam's two betas", length=2, minimum=0, below=1)
    weight_decay: float = key(0.0, help="weight decay (decoupled with adamw)", minimum=0)
    grad_clip: float = key(1.0, help="clip the gradient norm at this value (0 = no clipping)", minimum=0)
    label_smoothing: float = key(
        0.0, help="spread this share of the target probability over the vocabulary", minimum=0, below=1
    )
    loss_average: str = key(
        "book",
        help="book: per-sentence loss averaged over num_steps, summed over the batch; token: mean over real "
        "target tokens",
        choices=("book", "token"),
    )
    init: str = key(
        "xavier",
        help="xavier: Xavier-uniform weights, as the book; default: torch's",
        choices=("xavier", "default"),
    )
    schedule: str = key(
        "constant",
        help="learning-rate schedule: constant, inverse_sqrt (needs warmup_steps), linear decay to zero, or "
        "plateau (drops on validations without improvement)",
        choices=("constant", "inverse_sqrt", "linear", "plateau"),
    )
    warmup_steps: int = key(0, help="steps of linear warmup to lr", minimum=0)
    plateau_factor: float = key(0.5, help="plateau schedule: lr multiplier on a plateau", above=0, below=1)
    plateau_patience: int = key(2, help="plateau schedule: validations without improvement before lr drops")
    accum_steps: int = key(1, help="batches whose gradients are summed into one optimiser step", above=0)
    amp: str = key(
        "none",
        help="mixed precision: none, auto (bf16 where the device computes it natively and fast), bf16, fp16",
        choices=("none", "auto", "bf16", "fp16"),
    )
    compile: bool = key(
        False, help="torch.compile the model (fewer kernel launches, after a minute of compiling)"
    )
    compile_mode: str = key(
        "default",
        help="under train.compile, the torch.compile mode: default, reduce-overhead (CUDA graphs through "
        "torch.compile), or cuda-graphs (compile_scope step only: the compiled step captured by "
        "torch.cuda.graphs, one graph a batch shape)",
        choices=("default", "reduce-overhead", "cuda-graphs"),
    )
    compile_scope: str = key(
        "module",
        help="under train.compile, what is compiled: module (the model; loss, clipping and the optimiser "
        "stay eager) or step (forward, loss, backward, clipping and AdamW as one compiled step)",
        choices=("module", "step"),
    )
    compile_shapes: str = key(
        "static",
        help="under compile_scope step with data.batch_shapes: static (one compiled step a shape, as ran on "
        "an H200) or dynamic (one compiled step for every shape: 5x less compiling on the CPU, refused by "
        "torch 2.11's dynamo on the card)",
        choices=("static", "dynamic"),
    )
    capture_step: bool = key(
        False,
        help="CUDA with data.batch_shapes: the whole step (forward, loss, backward, clipping, the optimiser) "
        "captured as one CUDA graph a batch shape and replayed, not compiled (the GRU model's path; for a "
        "compiled step captured: compile true, compile_scope step, compile_mode cuda-graphs)",
    )
    tf32: bool = key(False, help="CUDA only: float32 matrix products and cuDNN in TensorFloat-32")
    prefetch_batches: int = key(
        2, help="CUDA only: batches collated into pinned memory ahead, on a thread (0 = off)", minimum=0
    )
    kernels: str = key(
        "auto",
        help="the training pass: auto (the CPU kernels on the CPU, plain torch elsewhere), reference (plain "
        "torch), cpu (attn_mt/kernels/cpu)",
        choices=("auto", "reference", "cpu"),
    )
    seed: int = key(0, help="torch seed for initialisation, dropout and batch order")
    threads: int = key(0, help="torch CPU threads (0 = torch's default, every core)", minimum=0)
    log_every: int = key(50, help="steps between metrics.jsonl lines", above=0)
    tensorboard: bool = key(False, help="also write event files in RUN/tensorboard/ (attn-mt[tensorboard])")
    valid_every: int = key(0, help="steps between validations (0 = once per epoch)", minimum=0)
    checkpoint_minutes: float = key(
        1.0,
        help="write last.pt at most this often, and when training stops (0 = at every validation)",
        minimum=0,
    )
    keep_checkpoints: int = key(
        0,
        help="keep each validation's weights as checkpoints/step-N.pt, the newest this many (0 = none)",
        minimum=0,
    )
    valid_max_sentences: int = key(
        1000, help="valid sentences decoded for BLEU, spread over all lengths (0 = all)", minimum=0
    )
    # the names of training/best_metric.py's HIGHER_IS_BETTER (tests/test_config.py checks they agree)
    best_metric: str = key(
        "train_loss",
        help="what best.pt is chosen by: valid_bleu, valid_loss (both need a valid split) or train_loss",
        choices=("valid_bleu", "valid_loss", "train_loss"),
    )
    patience: int = key(
        0, help="validations without improvement before stopping (0 = never stop early)", minimum=0
    )
    timeline: bool = key(
        False, help="record the probes' greedy output and attention at validations (RUN/timeline.jsonl)"
    )
    timeline_every: int = key(
        1, help="record every N-th validation (each epoch in book mode), and the untrained model", above=0
    )
    timeline_probes: list[str] = key(
        [], help="the sentences recorded ([] = the book's four in book mode, else four valid sentences)"
    )


@dataclass
class DecodeConfig:
    """Search settings used by validation, translate and eval."""

    # the bounds of attn_mt/limits.py, shared with the command line, serve and the Python API
    beam_size: int = key(
        4, help="beam width (1 = greedy search)", between=DECODE_BOUNDS["beam_size"], clamped_on_open=True
    )
    length_penalty: float = key(
        1.0,
        help="GNMT length penalty alpha (0 = rank beams by raw log-probability)",
        between=DECODE_BOUNDS["length_penalty"],
        clamped_on_open=True,
    )
    max_len_a: float = key(
        1.5,
        help="output length limit: max_len_a x source length + max_len_b tokens",
        between=DECODE_BOUNDS["max_len_a"],
        clamped_on_open=True,
    )
    max_len_b: int = key(
        10,
        help="tokens allowed beyond max_len_a x source length",
        between=DECODE_BOUNDS["max_len_b"],
        clamped_on_open=True,
    )
    nbest: int = key(
        1,
        help="outputs kept per sentence (at most beam_size)",
        between=DECODE_BOUNDS["nbest"],
        clamped_on_open=True,
    )
    batch_size: int = key(128, help="sentences per decoding batch", above=0)
    beam_stop: str = key(
        "bound",
        help="when beam search ends a sentence: bound (once K outputs have finished and no live hypothesis "
        "can still beat them) or k_finished (as soon as K have finished: fairseq's and CTranslate2's rule)",
        choices=("bound", "k_finished"),
    )


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
    kwargs = {}
    for key, value in raw.items():
        if key not in hints:
            problems.append(_unknown_key(name, cls, key))
            continue
        kwargs[key] = _check_value(f"{name}.{key}", value, hints[key], problems)
    return cls(**kwargs)


def _unknown_key(section: str, cls: type, key: Any) -> str:
    """The problem for a key that `section` does not have, with the closest valid one."""
    valid = [f.name for f in dataclasses.fields(cls)]
    close = _closest(str(key), valid)
    hint = f" (did you mean {section}.{close}?)" if close else f" (valid keys: {', '.join(valid)})"
    return f"{section}.{key}: unknown key{hint}"


def _unknown_section(name: Any) -> str:
    """The problem for a section that a config does not have, with the closest valid one."""
    close = _closest(str(name), list(SECTIONS))
    hint = f" (did you mean {close}?)" if close else f" (sections: {', '.join(SECTIONS)})"
    return f"{name}: unknown section{hint}"


def _closest(name: str, valid: list[str]) -> str | None:
    """The valid name closest to `name`, letter case aside (TRAIN is closest to train), or None."""
    lowered = {item.lower(): item for item in valid}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    return lowered[close[0]] if close else None


def _sound(problems: list[str], *keys: str) -> bool:
    """Whether none of `keys` has a problem yet: combinations are only checked on sound values."""
    named = {p.split(":", 1)[0].split("[", 1)[0] for p in problems}
    return named.isdisjoint(keys)


RETIRED_VALUES: dict[tuple[str, str], tuple[str, str]] = {
    ("train.kernels", "gpu"): (
        "reference",
        "was removed (issue 70): the reference path takes its attention kernels (masks as aligned "
        "biases), and data.batch_shapes with train.compile_scope: step replace its bucketing; use auto or "
        "reference",
    ),
}
"""Values a key no longer takes: (key, value) -> (what a saved run opens with instead, why and what to use).

A new config naming one is refused with the reason; a trained run's config opens with the replacement
(the removed GPU path trained the book's parameters, which the reference path loads as they are).
"""


def _retire(raw: dict) -> dict:
    """A saved config with its retired values replaced by what runs in their stead (RETIRED_VALUES)."""
    for (dotted, value), (instead, _) in RETIRED_VALUES.items():
        section, name = dotted.split(".")
        keys = raw.get(section)
        if isinstance(keys, dict) and keys.get(name) == value:
            raw = {**raw, section: {**keys, name: instead}}
    return raw


def _check_semantics(cfg: Config, problems: list[str], saved: bool = False) -> None:
    """Non-finite numbers, what each key's declaration allows, and impossible combinations.

    `saved`: a trained run's config, whose values outside bounds declared `clamped_on_open` (the decode
    settings) are left for `bounded_decode` to bring in (a run saved before the bounds existed still opens).
    """
    values = [
        (f"{section}.{f.name}", declared(f), getattr(getattr(cfg, section), f.name))
        for section, f in _fields()
    ]
    for dotted, _, value in values:
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{dotted}: must be a finite number, got {value}")
    for dotted, rule, value in values:
        if isinstance(value, str) and (dotted, value) in RETIRED_VALUES:
            problems.append(f"{dotted}: {value!r} {RETIRED_VALUES[dotted, value][1]}")
        elif rule.choices and isinstance(value, str) and value not in rule.choices:
            close = difflib.get_close_matches(value, rule.choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{dotted}: {value!r} is not one of {', '.join(rule.choices)}{hint}")
    for dotted, rule, value in values:
        if saved and rule.clamped_on_open:
            continue
        if isinstance(value, list) and rule.length is not None:
            if len(value) != rule.length:
                problems.append(f"{dotted}: expected {_in_words(rule.length)} numbers, got {value!r}")
            elif _sound(problems, dotted):
                for i, item in enumerate(value):
                    problem = rule.bound_problem(item)
                    if problem:
                        problems.append(f"{dotted}[{i}]: {problem}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            problem = rule.bound_problem(value)
            if problem:
                problems.append(f"{dotted}: {problem}")
    _check_languages(cfg, problems)
    _check_probes(cfg, problems)
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


def _check_probes(cfg: Config, problems: list[str]) -> None:
    """Each train.timeline_probes entry is a sentence to translate: a blank one has no attention to show."""
    if not _sound(problems, "train.timeline_probes"):
        return
    for i, probe in enumerate(cfg.train.timeline_probes):
        if not probe.strip():
            problems.append(
                f"train.timeline_probes[{i}]: a probe must be a sentence, got the blank {probe!r}"
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
    _check_positions(cfg, problems)
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
    _check_whole_step(cfg, problems)
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


def _check_whole_step(cfg: Config, problems: list[str]) -> None:
    """Fixed batch shapes need a model and loss they are exact for; the whole compiled step needs them."""
    data, train = cfg.data, cfg.train
    if (
        _sound(problems, "data.batch_shapes", "data.mode", "model.type", "train.loss_average")
        and data.batch_shapes
    ):
        if data.mode != "split":
            problems.append(
                "data.batch_shapes: fixed batch shapes need data.mode: split (book mode pads to num_steps)"
            )
        if (
            cfg.model.type != "transformer"
            and _sound(problems, "model.pack_padded")
            and not cfg.model.pack_padded
        ):
            problems.append(
                "data.batch_shapes: the padding is exact only for a model that never reads its source "
                "padding (the transformer, or gru_bahdanau with model.pack_padded: true), but this "
                "gru_bahdanau's GRU reads it (model.pack_padded: false)"
            )
        if train.loss_average != "token":
            problems.append(
                "data.batch_shapes: train.loss_average: book divides by the padded width, which the shapes "
                "change; use token"
            )
    keys = (
        "train.compile_scope",
        "train.compile_mode",
        "train.compile",
        "train.kernels",
        "train.capture_step",
        "data.batch_shapes",
    )
    if not _sound(problems, *keys):
        return
    if train.capture_step:
        _check_capture(cfg, problems)
    if train.compile_mode == "cuda-graphs" and train.compile_scope != "step":
        problems.append(
            "train.compile_mode: cuda-graphs captures the whole step: it needs train.compile_scope: step"
        )
    if train.compile_scope != "step":
        return
    if not train.compile:
        problems.append("train.compile_scope: step compiles the step, so it needs train.compile: true")
    if train.kernels == "cpu":
        problems.append(
            "train.compile_scope: step compiles the book's modules and torch's loss; train.kernels: "
            "cpu cannot run inside it (use auto or reference)"
        )
    if train.compile_mode != "default" and not data.batch_shapes:
        problems.append(
            f"train.compile_mode: {train.compile_mode} captures one CUDA graph a batch shape: give "
            "data.batch_shapes (16 is enough for the corpus)"
        )


def _check_capture(cfg: Config, problems: list[str]) -> None:
    """train.capture_step captures the eager step, one graph a fixed batch shape."""
    train = cfg.train
    if train.compile:
        problems.append(
            "train.capture_step captures the step as it runs, not compiled; for the compiled step "
            "captured, set train.capture_step: false, train.compile_scope: step and train.compile_mode: "
            "cuda-graphs (or train.compile: false)"
        )
    if train.kernels == "cpu":
        problems.append(
            "train.capture_step captures the book's modules and torch's loss; train.kernels: cpu cannot run "
            "inside it (use auto or reference)"
        )
    if not cfg.data.batch_shapes:
        problems.append(
            "train.capture_step captures one CUDA graph a batch shape: give data.batch_shapes (16 is "
            "enough for the corpus)"
        )


def _check_positions(cfg: Config, problems: list[str]) -> None:
    """A learned position table must cover every training sentence: data.max_len positions in split mode
    (a kept sentence has fewer tokens, and <eos> or <bos> takes one more), data.num_steps in book mode."""
    keys = ("model.type", "model.positional_encoding", "model.max_positions", "data.mode", "data.max_len")
    if not _sound(problems, *keys, "data.num_steps"):
        return
    model, data = cfg.model, cfg.data
    if model.type != "transformer" or model.positional_encoding != "learned":
        return
    key = "data.num_steps" if data.mode == "book" else "data.max_len"
    needed = data.num_steps if data.mode == "book" else data.max_len
    if model.max_positions < needed:
        problems.append(
            f"model.max_positions: a learned table of {model.max_positions} positions is shorter than the "
            f"training sentences {key} = {needed} allows ({needed} positions with <eos> or <bos>); raise "
            f"model.max_positions to {needed} or lower {key}"
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
    if _sound(problems, "train.kernels") and switches and cfg.train.kernels == "cpu":
        problems.append(
            f"train.kernels: {cfg.train.kernels} runs the book's architecture only, but "
            f"{', '.join(f'{key} is {cfg.model.switches[key]!r}' for key in switches)} "
            "(use auto or reference: they train it with plain torch)"
        )


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config)}  # type: ignore[misc]


def _fields() -> list[tuple[str, dataclasses.Field]]:
    """Every key's field with its section's name, in file order."""
    return [(section, f) for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


def declared(f: dataclasses.Field) -> Declared:
    """The declaration `key(...)` put on a config field."""
    return f.metadata["declared"]


_UNDECLARED = [f"{section}.{f.name}" for section, f in _fields() if "declared" not in f.metadata]
if _UNDECLARED:  # a field without key(...) would have no help, no checks and no --explain
    raise TypeError(f"config keys not declared with key(...): {', '.join(_UNDECLARED)}")


def _default(f: dataclasses.Field) -> Any:
    """A field's default value (a fresh list for a list key)."""
    return f.default_factory() if callable(f.default_factory) else f.default


def _in_words(count: int) -> str:
    """A small count in words, as a message reads it ("two numbers")."""
    return ("zero", "one", "two", "three", "four")[count] if count < 5 else str(count)


def _describe_type(tp: Any) -> str:
    """A field's annotation in words: `str | list[str] | None` is 'a string, a list of strings or null'."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        words = [_describe_type(a) for a in typing.get_args(tp) if a is not type(None)]
        words += ["null"] if type(None) in typing.get_args(tp) else []
        return ", ".join(words[:-1]) + " or " + words[-1]
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(item, str(item))
    return _type_name(tp)


def _as_yaml(value: Any) -> str:
    """One value as a config file writes it (null, true, [0.9, 0.999], book)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix("...\n").strip()


def explain(name: str) -> str:
    """What `attn-mt validate --explain NAME` prints: a key's (`train.lr`) help, type, default, choices
    and bounds, or a section's (`model`) keys as YAML with their defaults and help. Letter case is
    ignored (TRAIN.LR explains train.lr)."""
    section, _, key_name = name.partition(".")
    section = section.lower() if section not in SECTIONS and section.lower() in SECTIONS else section
    if section not in SECTIONS:
        raise UserError(f"--explain {_unknown_section(name if not key_name else section)}")
    cls = SECTIONS[section]
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if not key_name:
        rows = [(f"{k}: {_as_yaml(_default(f))}", declared(f).help) for k, f in fields.items()]
        width = max(len(row) for row, _ in rows)
        lines = [f"# {section}: {cls.__doc__}", f"{section}:"]
        lines += [f"  {row:<{width}}  # {help_text}" for row, help_text in rows]
        return "\n".join(lines) + "\n"
    key_name = key_name.lower() if key_name not in fields and key_name.lower() in fields else key_name
    if key_name not in fields:
        raise UserError(f"--explain {_unknown_key(section, cls, key_name)}")
    rule = declared(fields[key_name])
    lines = [
        f"{section}.{key_name}: {rule.help}",
        f"  type: {_describe_type(hints[key_name])}",
        f"  default: {_as_yaml(_default(fields[key_name]))}",
    ]
    if rule.choices:
        lines.append(f"  choices: {', '.join(rule.choices)}")
    if rule.length is not None:
        lines.append(f"  length: {rule.length}")
    if rule.bounds():
        lines.append(f"  bounds: {rule.bounds()}{' (each item)' if rule.length is not None else ''}")
    if rule.clamped_on_open:
        lines.append(
            "  a run saved with a value outside the bounds opens with it brought inside, and a warning"
        )
    return "\n".join(lines) + "\n"


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
    if saved:
        raw = _retire(raw)
    sections = {}
    for name, value in raw.items():
        if name not in SECTIONS:
            problems.append(_unknown_section(name))
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
    clamped = [f for f in dataclasses.fields(DecodeConfig) if declared(f).clamped_on_open]
    for key, low, high in ((f.name, declared(f).minimum, declared(f).maximum) for f in clamped):
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
