"""Benchmark: what shipping a model gains: checkpoint averaging, int8 and bf16 inference, onnxruntime.

    python scripts/bench_ship.py runs/transformer --sentences 500 --threads 2

RUN_DIR must be a Transformer run trained with train.keep_checkpoints >= --average. On the first
--sentences sources of its test split (all their references) it scores and times:
  * test BLEU of best.pt against the average of the last --average kept checkpoints (greedy and beam 4);
  * float32, bfloat16 (torch.autocast; only where the CPU has AVX512-BF16 or AMX) and
    `--quantize int8` models: sentences/s and BLEU, greedy and beam 4;
  * greedy search in onnxruntime over `attn-mt export --format onnx` graphs against torch's.
Times are the best of --repeats passes. Prints one JSON object; copy the numbers into docs/shipping.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from attn_mt.commands.average import run_average
from attn_mt.data.dataset import encode_sources
from attn_mt.decoding.search import max_output_lengths
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.evaluate import split_examples
from attn_mt.evaluation.scores import corpus_scores
from attn_mt.run.device import cpu_has_native_bf16
from attn_mt.run.load import load_model
from attn_mt.shipping.onnx_graphs import OnnxModel, write_onnx


def best_of(repeats: int, work) -> tuple[float, object]:
    """The shortest of `repeats` timings of work() and its last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure(translator: Translator, sources: list[str], refs: list[list[str]], beam: int, repeats: int,
            bf16: bool = False) -> dict[str, float]:
    """Sentences/s and BLEU of one model at one beam size."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        seconds, results = best_of(repeats, lambda: translator.translate(sources, beam_size=beam))
    hyps = [r.text for r in results]
    return {"sentences_per_s": round(len(sources) / seconds, 1),
            "bleu": round(corpus_scores(hyps, refs)["bleu"], 2)}


def main() -> None:
    """Score and time the variants of one run; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--average", type=int, default=5, help="kept checkpoints to average")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    best = load_model(args.run_dir, "best")
    sources, refs = split_examples(best, "test", None, args.run_dir)
    sources, refs = sources[: args.sentences], refs[: args.sentences]
    out: dict = {"machine": platform.processor() or platform.machine(), "threads": args.threads,
                 "sentences": len(sources), "run_step": best.step}

    run_average(args.run_dir, args.average, None, "bench-average")
    averaged = load_model(args.run_dir, "bench-average")
    out["averaging"] = {
        name: {f"beam{beam}": measure(Translator(run.model, run.src_vocab, run.tgt_vocab, run.config),
                                      sources, refs, beam, 1)["bleu"] for beam in (1, 4)}
        for name, run in (("best", best), (f"average_last_{args.average}", averaged))
    }

    variants = {"float32": (best, False), "int8": (load_model(args.run_dir, "best", "cpu", "int8"), False)}
    if cpu_has_native_bf16():
        variants["bf16"] = (best, True)
    out["precision"] = {
        name: {f"beam{beam}": measure(Translator(run.model, run.src_vocab, run.tgt_vocab, run.config),
                                      sources, refs, beam, args.repeats, bf16) for beam in (1, 4)}
        for name, (run, bf16) in variants.items()
    }

    translator = Translator(best.model, best.src_vocab, best.tgt_vocab, best.config)
    dc = best.config.decode
    order = sorted(range(len(sources)), key=lambda i: -len(translator.prepare(sources[i])))  # as translate
    batches = []
    for start in range(0, len(order), dc.batch_size):
        chunk = order[start : start + dc.batch_size]
        encoded = encode_sources([translator.prepare(sources[i]) for i in chunk], best.src_vocab,
                                 max_len=translator.max_src)
        limits = max_output_lengths(encoded.src_lens, dc.max_len_a, dc.max_len_b).numpy()
        batches.append((chunk, encoded.src.numpy(), encoded.src_lens.numpy(), limits))
    bos, eos = best.tgt_vocab.bos_id, best.tgt_vocab.eos_id
    with tempfile.TemporaryDirectory() as tmp:
        onnx = OnnxModel(write_onnx(best, Path(tmp) / "onnx"), args.threads)
        onnx_s, onnx_out = best_of(args.repeats, lambda: [
            (i, tokens) for chunk, src, lens, limits in batches
            for i, tokens in zip(chunk, onnx.greedy(src, lens, bos, eos, limits), strict=True)
        ])
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
