"""Profile the trainer's own training step of a config on this machine's device, in minutes, without a corpus.

    python scripts/profile_step.py                       # configs/transformer-gpu.yaml on cuda
    python scripts/profile_step.py --variants reference,reference+step --set data.batch_shapes=8
    python scripts/profile_step.py configs/tiny.yaml --device cpu --warmup 2 --steps 3
    python scripts/profile_step.py configs/tiny.yaml --device cpu --data corpus.txt   # a corpus's own batches
    make profile-step PYTHON=python3                     # a GPU session's first command (docs/gpu.md)

Each variant builds the Trainer `attn-mt train` builds and times its own step (Trainer.train_step:
the epoch's batches collated by the training set, on the prefetch thread into pinned memory on
CUDA, copied to the device, forward, backward, clipping, the update, the loss totals and a
metrics.jsonl line every train.log_every steps), so its ms a step is the figure `train`'s steady
tokens/s comes from. Without --data no corpus is read: the training set is drawn from
scripts/profile_lengths.json, the joint histogram of source and target lengths (in pieces, <eos>
counted) of configs/transformer-gpu.yaml's training split, with random token ids past the special
tokens, and batched by the same BucketTrainSet (data/bucketing.py) under the config's
`data.max_tokens`. Each variant is a `train.kernels` value (reference, cpu, auto),
`+step`, `+step-graphs` and `+step-capture` compile the whole step (train.compile_scope: step; modes
default, reduce-overhead and cuda-graphs: give `--set data.batch_shapes=16` for the last two),
`+compile` compiles it (train.compile), `+graphs` compiles it with train.compile_mode:
reduce-overhead (CUDA graphs; give data.batch_shapes for fixed shapes); all run in one
process on the same batches: the trainer's start (compiling every batch shape, compile_s), --warmup
steps, --steps timed steps, then --trace-steps steps under torch.profiler. Printed per variant: ms a
step, target tokens/s, MFU (training/flops.py's one definition: the FLOPs of a step's real tokens,
the arithmetic printed, over the card's dense bf16 peak: attn_mt/machine.py's PEAK_TFLOPS or
--peak-tflops), and from the profile: kernels a step, attention kernels a step by backend (flash,
memory-efficient, cuDNN: their CUDA kernel names in the trace), and the
GPU's busy share (the union of the kernels' intervals over the profiled wall time), host syncs a
step (torch.cuda's sync debug mode, over up to 5 steps after the timed ones), the top ops by self
device and self CPU time, and the attention's and the loss's shares of the step's op time. One
chrome trace per variant goes to --out, with profile.json (everything printed). A variant that
fails prints its error and the others go on; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attn_mt.config import Config, load_config
from attn_mt.data.batch import Batch
from attn_mt.data.bucketing import BucketTrainSet, fit_shapes
from attn_mt.data.dataset import NMTData, load_data
from attn_mt.data.trainset import TokenSequences
from attn_mt.data.vocab import BOS, EOS, PAD, UNK, Vocab
from attn_mt.machine import gpu_peak_tflops
from attn_mt.models.build import build_model
from attn_mt.run.device import setup_device
from attn_mt.run.run_dir import RunPaths
from attn_mt.training.flops import ModelFlops, mfu
from attn_mt.training.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent

LENGTHS = ROOT / "scripts" / "profile_lengths.json"
SPECIALS = (UNK, PAD, BOS, EOS)  # ids 0-3, as every vocabulary of attn-mt numbers them
ATTENTION_OPS = ("scaled_dot_product", "attention", "softmax_backward_data", "aten::_softmax")
LOSS_OPS = (
    "cross_entropy",
    "nll_loss",
    "log_softmax",
    "logsumexp",
    "TokenCrossEntropy",
)
# attention kernels by backend, from a substring of their CUDA kernel names (cuDNN's first)
ATTENTION_KERNELS = (
    ("cudnn", ("cudnn",)),
    ("flash", ("flash_fwd", "flash_bwd")),
    ("efficient", ("fmha_cutlass", "efficient_attention", "mem_efficient")),
)
TOP = 12  # ops listed in each table
KERNELS = ("reference", "cpu", "auto")  # train.kernels values


@dataclass
class Result:
    """One variant's figures (what profile.json holds for it)."""

    variant: str
    ok: bool = True
    error: str = ""
    ms_per_step: float = 0.0
    warmup_s: float = 0.0  # start-up: compiling every batch shape (compile_s) and the --warmup steps
    compile_s: float = 0.0
    tokens_per_s: float = 0.0
    tflops: float = 0.0
    mfu: float | None = None
    kernels_per_step: float | None = None
    gpu_busy: float | None = None
    host_syncs_per_step: float | None = None
    ops_per_step: float = 0.0
    real_share: float = 0.0  # real tokens over the cells of the batches as this variant pads them
    attention_kernels: dict[str, float] = field(default_factory=dict)  # backend -> its kernels a step
    attention_share: float = 0.0
    loss_share: float = 0.0
    top_device: list[dict[str, Any]] = field(default_factory=list)
    top_cpu: list[dict[str, Any]] = field(default_factory=list)
    trace: str = ""


def draw_lengths(count: int, seed: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` (source, target) length pairs drawn from the stored histogram, lengths <= max_len."""
    table = np.asarray(json.loads(LENGTHS.read_text())["joint"], dtype=np.int64)  # (K, 3)
    table = table[(table[:, 0] <= max_len) & (table[:, 1] <= max_len)]
    picks = np.random.default_rng(seed).choice(len(table), size=count, p=table[:, 2] / table[:, 2].sum())
    return table[picks, 0], table[picks, 1]


def synthetic_vocab(size: int) -> Vocab:
    """A vocabulary of `size` ids: the special tokens, then made-up pieces."""
    return Vocab([*SPECIALS, *(f"piece{i}" for i in range(len(SPECIALS), size))])


def synthetic_train_set(
    max_tokens: int, max_len: int, vocab: Vocab, seed: int, pairs: int = 162_670
) -> BucketTrainSet:
    """`pairs` drawn (source, target) pairs of random ids past the special tokens, batched as in training.

    The same BucketTrainSet as a real corpus's (data/bucketing.py): the same plan under `max_tokens`
    and the same collate (<eos> appended, <pad> past each length).
    """
    src_lens, tgt_lens = draw_lengths(pairs, seed, max_len)  # <eos> counted
    rng = np.random.default_rng(seed + 1)

    def sequences(lengths: np.ndarray) -> TokenSequences:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths - 1, out=offsets[1:])
        ids = rng.integers(len(SPECIALS), len(vocab), size=int(offsets[-1]), dtype=np.int32)
        return TokenSequences.from_offsets(ids, offsets)

    return BucketTrainSet(sequences(src_lens), sequences(tgt_lens), max_tokens, vocab.pad_id, vocab.eos_id)


def synthetic_batches(
    steps: int, max_tokens: int, max_len: int, vocab: int, seed: int, train_seed: int = 0
) -> list[Batch]:
    """The first `steps` collated batches of the synthetic training set's first epoch, as a run of
    `train.seed` = `train_seed` plans it (before the speed object shapes them)."""
    train = synthetic_train_set(max_tokens, max_len, synthetic_vocab(vocab), seed)
    return [train.collate(indices) for indices in train.plan(0, train_seed)[:steps]]


def step_flops(counts: ModelFlops | None, batches: list[Batch]) -> tuple[float, str]:
    """Training FLOPs of the batches' real tokens (training/flops.py, MFU's one definition) and the sum."""
    if counts is None:
        return 0.0, "n/a: MFU is defined for the Transformer (training/flops.py)"
    total = sum(counts.step(b.src_lens, b.tgt_lens) for b in batches)
    src = sum(int(b.src_lens.sum()) for b in batches)
    tgt = sum(int(b.tgt_lens.sum()) for b in batches)
    encoder, decoder, output = (part / 1e6 for part in (counts.encoder, counts.decoder, counts.output))
    text = (
        f"6 x ({encoder:.2f} M encoder weights x {src:,} source tokens + "
        f"({decoder:.2f} M decoder + {output:.2f} M output) x {tgt:,} target tokens)"
        f" + 12 x H {counts.hidden} x (L {counts.encoder_layers} x S^2"
        f" + L {counts.decoder_layers} x (T^2 + S T))"
        f" query-key pairs = {total / 1e12:.2f} TFLOP over {len(batches)} steps, "
        f"{total / max(tgt, 1) / 1e6:.0f} MFLOP a target token"
    )
    return total, text


def card_peak(device: torch.device, given: float | None) -> tuple[float | None, str]:
    """The device's dense bf16 peak in TFLOP/s and its name: --peak-tflops, else PEAK_TFLOPS, else None."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    if given:
        return given, name
    return (gpu_peak_tflops(name) if device.type == "cuda" else None), name


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """torch's scaled_dot_product_attention restricted to one backend, or as torch chooses (`auto`)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    return sdpa_kernel(backends[name])


WHOLE_STEP_MODES = {"step": "default", "step-graphs": "reduce-overhead", "step-capture": "cuda-graphs"}
"""Variant suffixes that compile the whole step (train.compile_scope: step), and their train.compile_mode."""


def profile_data(cfg: Config, args: argparse.Namespace) -> NMTData:
    """The variants' training set: --data's (with its vocabularies), else the synthetic one; no valid set."""
    if args.data:
        data = load_data(cfg.data, args.data)
        return NMTData(data.src_vocab, data.tgt_vocab, data.train)
    vocab = synthetic_vocab(args.vocab or cfg.data.vocab_size)
    train = synthetic_train_set(cfg.data.max_tokens, cfg.data.max_len, vocab, args.seed)
    if cfg.data.batch_shapes:  # --set data.batch_shapes=K: the fixed shapes a run fits to these lengths
        src_lens, tgt_lens = train.src.lengths + 1, train.tgt.lengths + 1
        train.shapes = fit_shapes(src_lens, tgt_lens, cfg.data.max_tokens, cfg.data.batch_shapes)
    return NMTData(vocab, vocab, train)


def profile_trainer(
    cfg: Config, variant: str, args: argparse.Namespace, device: torch.device, data: NMTData
) -> Trainer:
    """The Trainer `attn-mt train` builds for this variant's kernels and compile settings, on `data`.

    Nothing validates (no valid set); quiet; its run directory under --out (metrics.jsonl only).
    """
    kernels, _, extra = variant.partition("+")
    settings = [f"train.kernels={kernels}"]
    if extra or args.compile:
        settings.append("train.compile=true")
    mode = "reduce-overhead" if extra == "graphs" else args.compile_mode
    if extra in WHOLE_STEP_MODES:  # the whole step compiled (training/whole_step.py)
        settings.append("train.compile_scope=step")
        mode = WHOLE_STEP_MODES[extra]
    if mode:
        settings.append(f"train.compile_mode={mode}")
    cfg = load_config(args.config, [*args.overrides, *settings])
    root = args.out / variant.replace("+", "-")
    root.mkdir(parents=True, exist_ok=True)
    (root / "metrics.jsonl").unlink(missing_ok=True)
    torch.manual_seed(cfg.train.seed)  # as training/launch.py seeds before building the trainer
    return Trainer(cfg, RunPaths(root), data, device, quiet=True)


class StepDriver:
    """Runs the trainer's own steps (Trainer.train_step) on its epoch feed, keeping each step's batches."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.trainer.start()  # amp settled, every batch shape compiled (train.compile), clocks started
        self.bar = trainer.display()
        self.plan = trainer.data.train.plan(trainer.progress.epoch, trainer.cfg.train.seed)
        self.feed_context = trainer.epoch_feed(self.plan)  # the prefetch thread on CUDA, as in fit
        self.feed = self.feed_context.__enter__()
        self.batches: list[list[Batch]] = []  # each step's batches, as the feed collated them

    def steps(self, count: int) -> list[list[Batch]]:
        """Train `count` steps; their batches."""
        if self.trainer.progress.batch_in_epoch + count * self.trainer.cfg.train.accum_steps > len(self.plan):
            raise ValueError(f"the synthetic epoch has {len(self.plan)} batches: too few for the steps asked")
        start = len(self.batches)
        for _ in range(count):
            self.trainer.train_step(self.recorded(), self.bar, False, 0.0)
        return self.batches[start:]

    def recorded(self) -> Any:
        """The feed, keeping the step's batches."""
        batches = next(self.feed)
        self.batches.append(batches)
        yield batches

    def close(self) -> None:
        """Stop the prefetch thread."""
        self.feed_context.__exit__(None, None, None)


def wait(device: torch.device) -> None:
    """Until the device has finished what it was given."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_syncs(driver: StepDriver, steps: int) -> float | None:
    """Host syncs a step over `steps` trainer steps, by torch.cuda's sync debug mode (None off CUDA)."""
    device = driver.trainer.device
    if device.type != "cuda":
        return None
    wait(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            driver.steps(steps)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    wait(device)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    return len(syncs) / steps


def merged_length(intervals: list[tuple[float, float]]) -> float:
    """The total length of the union of (start, end) intervals."""
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def trace_figures(trace: dict, steps: int) -> tuple[float | None, float | None]:
    """Kernels a step and the GPU's busy share of the profiled steps' wall time, from a chrome trace."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel"]
    if not kernels:
        return None, None
    marks = [
        (e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    start = min(s for s, _ in marks) if marks else min(s for s, _ in kernels)
    stop = max(max(e for _, e in kernels), max(e for _, e in marks) if marks else 0.0)
    return len(kernels) / steps, merged_length(kernels) / max(stop - start, 1e-9)


def attention_kernels(trace: dict, steps: int) -> dict[str, float]:
    """Attention kernels a step by backend (ATTENTION_KERNELS), from a chrome trace's kernel names."""
    counts = {backend: 0 for backend, _ in ATTENTION_KERNELS}
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X" or event.get("cat") != "kernel":
            continue
        name = str(event.get("name", ""))
        backend = next((b for b, parts in ATTENTION_KERNELS if any(p in name for p in parts)), None)
        if backend:
            counts[backend] += 1
    return {backend: count / steps for backend, count in counts.items()}


def op_tables(prof: torch.profiler.profile, steps: int, on_gpu: bool) -> dict[str, Any]:
    """The top ops by self device and self CPU time (ms a step), ops a step, attention's and loss's shares.

    An op's self device time is that of the kernels it launched itself; shares are of all kernels'
    time on a GPU, of all ops' self CPU time on the CPU.
    """
    rows = [a for a in prof.key_averages() if not a.key.startswith("ProfilerStep")]
    ops = [a for a in rows if a.device_type == torch.autograd.DeviceType.CPU]
    kernels = [a for a in rows if a.device_type != torch.autograd.DeviceType.CPU]

    def device_us(a: Any) -> float:
        return float(getattr(a, "self_device_time_total", 0.0))

    def cpu_us(a: Any) -> float:
        return float(a.self_cpu_time_total)

    def table(time_of: Any, total: float) -> list[dict[str, Any]]:
        ranked = sorted(ops, key=time_of, reverse=True)[:TOP]
        return [
            {
                "op": a.key[:70],
                "ms_per_step": round(time_of(a) / 1000 / steps, 3),
                "share": round(time_of(a) / total, 4),
                "calls_per_step": round(a.count / steps, 1),
            }
            for a in ranked
            if time_of(a) > 0
        ]

    time_of = device_us if on_gpu else cpu_us
    total = sum(device_us(a) for a in kernels) if on_gpu else sum(cpu_us(a) for a in ops)
    total = total or 1.0

    def share(names: tuple[str, ...]) -> float:
        return round(sum(time_of(a) for a in ops if any(n in a.key for n in names)) / total, 4)

    return {
        "top_device": table(device_us, total) if on_gpu else [],
        "top_cpu": table(cpu_us, sum(cpu_us(a) for a in ops) or 1.0),
        "ops_per_step": round(sum(a.count for a in ops if a.key.startswith("aten::")) / steps, 1),
        "attention_share": share(ATTENTION_OPS),
        "loss_share": share(LOSS_OPS),
    }


def profile_variant(
    variant: str, cfg: Config, args: argparse.Namespace, data: NMTData, flops: float
) -> Result:
    """Warm up, time and profile one variant: the trainer's own steps on `data`'s training set."""
    result = Result(variant)
    device = torch.device(args.device)
    trainer = profile_trainer(cfg, variant, args, device, data)
    with sdpa_backend(args.attention_backend):
        started = time.perf_counter()
        driver = StepDriver(trainer)  # compiles every batch shape first under train.compile
        try:
            driver.steps(args.warmup)
            wait(device)
            result.warmup_s = time.perf_counter() - started
            result.compile_s = trainer.compile_s
            started = time.perf_counter()
            timed = driver.steps(args.steps)
            wait(device)
            seconds = time.perf_counter() - started
            result.host_syncs_per_step = count_syncs(driver, min(5, args.steps))
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            wait(device)
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(args.trace_steps):
                    driver.steps(1)
                    prof.step()
                wait(device)
        finally:
            driver.close()
    batches = [b for step in timed for b in step]
    tokens = sum(b.num_tgt_tokens for b in batches)
    cells = sum(b.src.numel() + b.tgt.numel() for b in batches)
    result.real_share = sum(int(b.src_lens.sum() + b.tgt_lens.sum()) for b in batches) / cells
    result.ms_per_step = 1000 * seconds / len(timed)
    result.tokens_per_s = tokens / seconds
    result.tflops = flops / seconds / 1e12
    peak, _ = card_peak(device, args.peak_tflops)
    result.mfu = mfu(flops, seconds, peak)
    trace_path = args.out / f"{variant.replace('+', '-')}.trace.json"
    prof.export_chrome_trace(str(trace_path))
    result.trace = str(trace_path)
    trace = json.loads(trace_path.read_text())
    result.kernels_per_step, result.gpu_busy = trace_figures(trace, args.trace_steps)
    result.attention_kernels = attention_kernels(trace, args.trace_steps) if device.type == "cuda" else {}
    for key, value in op_tables(prof, args.trace_steps, device.type == "cuda").items():
        setattr(result, key, value)
    return result


def show(result: Result, peak_name: str) -> None:
    """Print one variant's figures."""
    print(f"\n== {result.variant}")
    if not result.ok:
        print(f"FAILED: {result.error}")
        return

    def maybe(value: float | None, text: str) -> str:
        return "n/a" if value is None else text.format(value)

    print(
        f"{result.ms_per_step:.2f} ms a step, {result.tokens_per_s:,.0f} target tokens/s, "
        f"real tokens {result.real_share:.1%} of the cells, "
        f"{result.tflops:.2f} TFLOP/s, MFU {maybe(result.mfu, '{:.1%}')} ({peak_name}); "
        f"warm-up {result.warmup_s:.1f} s (compiling {result.compile_s:.1f} s)"
    )
    kernels, busy = maybe(result.kernels_per_step, "{:.0f}"), maybe(result.gpu_busy, "{:.1%}")
    syncs = maybe(result.host_syncs_per_step, "{:.1f}")
    print(
        f"kernels a step {kernels}, GPU busy {busy}, host syncs a step {syncs}, "
        f"aten ops a step {result.ops_per_step:.0f}, "
        f"attention {result.attention_share:.1%} and loss {result.loss_share:.1%} of the op time"
    )
    if result.attention_kernels:
        taken = ", ".join(f"{backend} {count:.0f}" for backend, count in result.attention_kernels.items())
        print(f"attention kernels a step: {taken}")
    for title, rows in (("self device time", result.top_device), ("self CPU time", result.top_cpu)):
        if rows:
            print(f"top ops by {title} (ms a step, share, calls a step):")
            for row in rows:
                figures = f"{row['ms_per_step']:9.3f}  {row['share']:6.1%}  {row['calls_per_step']:7.1f}"
                print(f"  {figures}  {row['op']}")
    print(f"trace: {result.trace}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "transformer-gpu.yaml"))
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument(
        "--variants",
        default="reference,gpu",
        help="train.kernels values, each +compile, +graphs, +step, +step-graphs or +step-capture",
    )
    parser.add_argument("--compile", action="store_true", help="compile every variant (train.compile)")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. reduce-overhead")
    parser.add_argument(
        "--attention-backend",
        default="auto",
        choices=("auto", "flash", "efficient", "cudnn", "math"),
        help="pin SDPA's kernel; flash and cudnn refuse the masked calls and dropout 0.2 (docs/gpu.md)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps (default 40)")
    parser.add_argument("--trace-steps", type=int, default=3, help="profiled steps (default 3)")
    parser.add_argument("--vocab", type=int, help="synthetic vocabulary size (default data.vocab_size)")
    parser.add_argument(
        "--data", help="train on this corpus's batches instead of synthetic ones (as --data of train)"
    )
    parser.add_argument("--peak-tflops", type=float, help="the device's peak TFLOP/s, for MFU off the table")
    parser.add_argument("--seed", type=int, default=0, help="seed of the drawn batches")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "profile", help="traces and profile.json")
    args = parser.parse_args(argv)
    for variant in args.variants.split(","):
        kernels, _, extra = variant.strip().partition("+")
        if variant.strip() and (
            kernels not in KERNELS or extra not in ("", "compile", "graphs", *WHOLE_STEP_MODES)
        ):
            parser.error(
                f"--variants: {variant!r} is not one of {', '.join(KERNELS)} (+compile, +graphs, "
                f"+{', +'.join(WHOLE_STEP_MODES)})"
            )
    if args.warmup < 0 or args.steps < 1 or args.trace_steps < 1:
        parser.error("--steps and --trace-steps must be at least 1, --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Profile every variant; print and write the figures; 1 if any variant failed."""
    args = parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # each line as it comes, also into a pipe (tee)
    cfg = load_config(args.config, args.overrides)
    device = torch.device(args.device)
    setup_device(device, cfg.train.threads, cfg.train.tf32)  # as training sets it up (TF32, SDPA backends)
    data = profile_data(cfg, args)
    total = args.warmup + args.steps + args.trace_steps
    plan = data.train.plan(0, cfg.train.seed)
    if len(plan) < total:
        print(
            f"the training set's epoch has {len(plan)} batches, fewer than the {total} steps asked "
            f"(--warmup {args.warmup} + --steps {args.steps} + --trace-steps {args.trace_steps}): "
            "the steps must fit in one epoch",
            file=sys.stderr,
        )
        return 2
    batches = [data.train.collate(ix) for ix in plan[:total]]  # every variant's, in its order (accum_steps 1)
    timed = batches[args.warmup : args.warmup + args.steps]
    probe = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    flops, arithmetic = step_flops(ModelFlops.of(probe), timed)
    peak, name = card_peak(device, args.peak_tflops)
    cells = sum(b.src.numel() + b.tgt.numel() for b in timed)
    real = sum(int(b.src_lens.sum() + b.tgt_lens.sum()) for b in timed)
    print(
        f"{args.config} on {name}, torch {torch.__version__}, amp {cfg.train.amp}, "
        f"peak {peak or 'n/a'} TFLOP/s"
    )
    tokens = sum(b.num_tgt_tokens for b in timed) / len(timed)
    rows = sum(len(b.src) for b in timed) / len(timed)
    print(
        f"{len(timed)} timed steps of {tokens:,.0f} target tokens and {rows:,.0f} rows; "
        f"real tokens {real / cells:.1%} of the padded cells"
    )
    print(f"FLOPs: {arithmetic}")
    summary = {
        "config": args.config,
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "driver": driver_version() if device.type == "cuda" else None,
        "peak_tflops": peak,
        "flops_per_step": flops / len(timed),
        "flops_arithmetic": arithmetic,
        "warmup": args.warmup,
        "steps": args.steps,
        "variants": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        try:
            result = profile_variant(variant, cfg, args, data, flops)
        except Exception as error:  # one variant's failure (an unsupported backend, memory) is its row
            traceback.print_exc()
            result = Result(variant, ok=False, error=f"{type(error).__name__}: {error}".splitlines()[0][:300])
        results.append(result)
        show(result, name)
        summary["variants"].append(vars(result))
        # after every variant: a run stopped by its time limit keeps what it measured
        (args.out / "profile.json").write_text(json.dumps(summary, indent=1))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    (args.out / "profile.json").write_text(json.dumps(summary, indent=1))
    print(f"\nfigures in {args.out / 'profile.json'}")
    return 0 if all(r.ok for r in results) else 1


def driver_version() -> str | None:
    """The NVIDIA driver's version, from nvidia-smi (None without it)."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


if __name__ == "__main__":
    sys.exit(main())
