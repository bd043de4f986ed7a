"""Benchmark: what shipping a model gains: checkpoint averaging, int8 and bf16 inference, onnxruntime,
and CTranslate2.

    python scripts/bench_ship.py runs/transformer --sentences 500 --threads 2
    python scripts/bench_ship.py runs/transformer --engines --sentences 0 --threads 2
    python scripts/bench_ship.py runs/transformer-gpu --engines --device cuda --sentences 0

RUN_DIR must be a Transformer run trained with train.keep_checkpoints >= --average. On the first
--sentences sources of its test split (all their references) it scores and times:
  * test BLEU of best.pt against the average of the last --average kept checkpoints (greedy and beam 4);
  * float32, bfloat16 (torch.autocast; only where the CPU has AVX512-BF16 or AMX) and
    `--quantize int8` models: sentences/s and BLEU, greedy and beam 4;
  * greedy search in onnxruntime over `attn-mt export --format onnx` graphs against torch's.
Times are the best of --repeats passes. Prints one JSON object; copy the numbers into docs/shipping.md.

With --engines it instead compares the engines of translate/eval/serve on the first --sentences test
sources (0: all): torch float32, torch `--quantize int8`, and the CTranslate2 folders of
`attn-mt export --format ctranslate2` in float32 and int8 (2 layouts each: --threads single-thread
workers, the default, and one translator with --threads OpenMP threads), greedy and beam 4, with the
same sentences and threads. Passes are interleaved (engine after engine, --repeats rounds, best
kept) in-process and end to end (`attn-mt translate` in a fresh process, start-up included). It
reports sentences/s, the share of outputs identical to torch float32's, BLEU, and the CPU's flags;
each part is also printed to stderr as it completes. With --device cuda the engines are the GPU's:
torch float32 and bfloat16 (autocast), and CTranslate2 computing the float32 folder in float16 and
the int8 folder in int8_float16 (one worker each); end to end, `attn-mt translate --device cuda`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from attn_mt.commands.average import run_average
from attn_mt.data.dataset import encode_sources
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import prepare_sentence
from attn_mt.decoding.search import max_output_lengths
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.evaluate import split_examples
from attn_mt.evaluation.scores import corpus_scores
from attn_mt.machine import cpu_flags, cpu_has_native_bf16, cpu_name
from attn_mt.run.ctranslate2_folder import import_ctranslate2
from attn_mt.run.open import open_model
from attn_mt.shipping.ctranslate2_export import write_ctranslate2
from attn_mt.shipping.onnx_graphs import OnnxModel, write_onnx


def best_of(repeats: int, work) -> tuple[float, object]:
    """The shortest of `repeats` timings of work() and its last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure(
    translator: Translator,
    sources: list[str],
    refs: list[list[str]],
    beam: int,
    repeats: int,
    bf16: bool = False,
) -> dict[str, float]:
    """Sentences/s and BLEU of one model at one beam size."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        seconds, results = best_of(repeats, lambda: translator.translate(sources, beam_size=beam))
    hyps = [r.text for r in results]
    return {
        "sentences_per_s": round(len(sources) / seconds, 1),
        "bleu": round(corpus_scores(hyps, refs)["bleu"], 2),
    }


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")


def cpu_description() -> dict:
    """The CPU's model name and which of the flags that decide int8 and bf16 speed it has."""
    name = cpu_name() or platform.processor()
    flags = cpu_flags()
    return {"cpu": name, "cores": os.cpu_count(), "flags": {flag: flag in flags for flag in CPU_FLAGS}}


def one_translator_layout(run, threads: int):
    """The same CTranslate2 folder opened as one translator with `threads` OpenMP threads."""
    model = run.model
    translator = import_ctranslate2().Translator(
        str(model.folder),
        device="cpu",
        inter_threads=1,
        compute_type=model.compute_type,
        intra_threads=threads,
    )
    whole = dataclasses.replace(model, translator=translator, workers=1, threads_per_worker=threads)
    return dataclasses.replace(run, model=whole)


def end_to_end(model: Path, options: list[str], source: Path, out: Path, device: str = "cpu") -> float:
    """Seconds of `attn-mt translate MODEL --input SOURCE` in a fresh process, start-up included."""
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "attn_mt",
            "translate",
            str(model),
            "--device",
            device,
            "--input",
            str(source),
            "--output",
            str(out),
            *options,
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def engine_runs(args: argparse.Namespace, best: object, folders: dict[str, Path]) -> dict[str, object]:
    """The opened models to compare on args.device, by name (see the module docstring)."""
    if args.device != "cpu":
        return {
            "torch float32": best,
            "torch bf16": best,  # the same model under bf16 autocast (BF16_ENGINES)
            "ctranslate2 float16": open_model(folders["float32"], device=args.device),
            "ctranslate2 int8_float16": open_model(folders["int8"], device=args.device),
        }
    runs = {"torch float32": best, "torch int8": open_model(args.run_dir, "best", "cpu", "int8")}
    for weights, folder in folders.items():
        runs[f"ctranslate2 {weights}, {args.threads} workers x 1 thread"] = open_model(folder, device="cpu")
        runs[f"ctranslate2 {weights}, 1 x {args.threads} threads"] = one_translator_layout(
            open_model(folder, device="cpu"), args.threads
        )
    return runs


BF16_ENGINES = ("torch bf16",)  # translated under torch.autocast(bfloat16)


def engine_autocast(name: str, device: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` for the engines of BF16_ENGINES, nothing for the others."""
    if name in BF16_ENGINES:
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compare_engines(args: argparse.Namespace) -> dict:
    """Time and score the engines side by side (see the module docstring)."""
    best = open_model(args.run_dir, "best", args.device)
    on_cpu = best if args.device == "cpu" else open_model(args.run_dir, "best", "cpu")  # what is exported
    sources, refs = split_examples(best, "test", None, args.run_dir)
    if args.sentences:
        sources, refs = sources[: args.sentences], refs[: args.sentences]
    out: dict = {
        **cpu_description(),
        "threads": args.threads,
        "sentences": len(sources),
        "run_step": best.step,
        "ctranslate2": import_ctranslate2().__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(args.device) if args.device != "cpu" else "cpu",
    }
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # CTranslate2's workers (machine.cpu_threads)
    with tempfile.TemporaryDirectory() as tmp:
        folders = {w: write_ctranslate2(on_cpu, Path(tmp) / w, w) for w in ("float32", "int8")}
        runs = engine_runs(args, best, folders)
        translators = {name: translator_for(run) for name, run in runs.items()}
        out["engines"] = {name: translator.description() for name, translator in translators.items()}
        results: dict = {}
        for beam in (1, 4):
            seconds = {name: float("inf") for name in translators}
            texts = {}
            for _ in range(args.repeats):  # interleaved: every engine once per round
                for name, translator in translators.items():
                    start = time.perf_counter()
                    with engine_autocast(name, args.device):
                        texts[name] = [r.text for r in translator.translate(sources, beam_size=beam)]
                    seconds[name] = min(seconds[name], time.perf_counter() - start)
            reference = texts["torch float32"]
            results[f"beam{beam}"] = {
                name: {
                    "sentences_per_s": round(len(sources) / seconds[name], 1),
                    "identical_to_torch_float32": round(
                        float(np.mean([a == b for a, b in zip(texts[name], reference, strict=True)])), 4
                    ),
                    "bleu": round(corpus_scores(texts[name], refs)["bleu"], 2),
                }
                for name in translators
            }
            print(json.dumps({f"in_process_beam{beam}": results[f"beam{beam}"]}), file=sys.stderr, flush=True)
        out["in_process"] = results
        source = Path(tmp) / "source.txt"
        source.write_text("".join(s.replace("\n", " ") + "\n" for s in sources), encoding="utf-8")
        commands = {
            "torch float32": (args.run_dir, []),
            "torch int8": (args.run_dir, ["--quantize", "int8"]),
            "ctranslate2 float32": (folders["float32"], []),
            "ctranslate2 int8": (folders["int8"], []),
        }
        if args.device != "cpu":  # int8 torch is CPU only; the folders run in float16 and int8_float16
            commands = {
                "torch float32": (args.run_dir, []),
                "ctranslate2 float16": (folders["float32"], []),
                "ctranslate2 int8_float16": (folders["int8"], []),
            }
        process: dict = {}
        for beam in (1, 4):
            seconds = {name: float("inf") for name in commands}
            for _ in range(args.repeats):
                for name, (model, options) in commands.items():
                    took = end_to_end(
                        model, [*options, "--beam", str(beam)], source, Path(tmp) / "out.txt", args.device
                    )
                    seconds[name] = min(seconds[name], took)
            process[f"beam{beam}"] = {name: round(len(sources) / s, 1) for name, s in seconds.items()}
            print(json.dumps({f"end_to_end_beam{beam}": process[f"beam{beam}"]}), file=sys.stderr, flush=True)
        out["end_to_end_sentences_per_s"] = process
    return out


def main() -> None:
    """Score and time the variants of one run; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sentences", type=int, default=500, help="the first N test sentences (0: all)")
    parser.add_argument("--average", type=int, default=5, help="kept checkpoints to average")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--engines", action="store_true", help="compare torch and CTranslate2 instead")
    parser.add_argument("--device", default="cpu", help="with --engines: cpu, cuda or cuda:N (default cpu)")
    args = parser.parse_args()
    if args.device != "cpu" and not args.engines:
        parser.error("--device applies to --engines only (the other comparisons are the CPU's)")
    torch.set_num_threads(args.threads)
    if args.engines:
        print(json.dumps(compare_engines(args), indent=2))
        return

    best = open_model(args.run_dir, "best", "cpu")
    sources, refs = split_examples(best, "test", None, args.run_dir)
    if args.sentences:
        sources, refs = sources[: args.sentences], refs[: args.sentences]
    out: dict = {
        "machine": platform.processor() or platform.machine(),
        "threads": args.threads,
        "sentences": len(sources),
        "run_step": best.step,
    }

    run_average(args.run_dir, args.average, None, "bench-average")
    averaged = open_model(args.run_dir, "bench-average", "cpu")
    out["averaging"] = {
        name: {
            f"beam{beam}": measure(
                Translator(run.model, run.src_vocab, run.tgt_vocab, run.config), sources, refs, beam, 1
            )["bleu"]
            for beam in (1, 4)
        }
        for name, run in (("best", best), (f"average_last_{args.average}", averaged))
    }

    variants = {"float32": (best, False), "int8": (open_model(args.run_dir, "best", "cpu", "int8"), False)}
    if cpu_has_native_bf16():
        variants["bf16"] = (best, True)
    out["precision"] = {
        name: {
            f"beam{beam}": measure(
                Translator(run.model, run.src_vocab, run.tgt_vocab, run.config),
                sources,
                refs,
                beam,
                args.repeats,
                bf16,
            )
            for beam in (1, 4)
        }
        for name, (run, bf16) in variants.items()
    }

    translator = Translator(best.model, best.src_vocab, best.tgt_vocab, best.config)
    dc = best.config.decode
    prepared = [prepare_sentence(best.config, best.src_vocab, s) for s in sources]
    order = sorted(range(len(sources)), key=lambda i: -len(prepared[i]))  # as translate
    batches = []
    for start in range(0, len(order), dc.batch_size):
        chunk = order[start : start + dc.batch_size]
        encoded = encode_sources([prepared[i] for i in chunk], best.src_vocab, max_len=translator.max_src)
        limits = max_output_lengths(encoded.src_lens, dc.max_len_a, dc.max_len_b).numpy()
        batches.append((chunk, encoded.src.numpy(), encoded.src_lens.numpy(), limits))
    bos, eos = best.tgt_vocab.bos_id, best.tgt_vocab.eos_id
    with tempfile.TemporaryDirectory() as tmp:
        onnx = OnnxModel(write_onnx(best, Path(tmp) / "onnx"), args.threads)
        onnx_s, onnx_out = best_of(
            args.repeats,
            lambda: [
                (i, tokens)
                for chunk, src, lens, limits in batches
                for i, tokens in zip(chunk, onnx.greedy(src, lens, bos, eos, limits), strict=True)
            ],
        )
    onnx_tokens = dict(onnx_out)
    torch_s, results = best_of(args.repeats, lambda: translator.translate(sources, beam_size=1))
    same = np.mean([onnx_tokens[i] == r.hypotheses[0].tokens for i, r in enumerate(results)])
    out["onnxruntime_greedy"] = {
        "onnxruntime_sentences_per_s": round(len(sources) / onnx_s, 1),
        "torch_sentences_per_s": round(len(sources) / torch_s, 1),
        "share_of_outputs_equal_to_torch": round(float(same), 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
