"""Compare a run with its Hugging Face export on the run's test split: identical outputs and test BLEU.

    attn-mt export runs/transformer hf/ --format huggingface
    python scripts/compare_huggingface.py runs/transformer hf/ --beam 1 --beam 4

For each --beam K it translates the first --sentences test sources (0: all; every reference kept)
with attn-mt's search and with transformers' `generate()` on the exported folder (padded batches of
32; transformers 5 has no translation pipeline any more), each sentence capped at attn-mt's
floor(max_len_a x source pieces + max_len_b) (`max_new_tokens`, grouped by cap). Beam searches run
twice: as shipped (attn-mt with the run's GNMT alpha, transformers with the folder's
generation_config.json) and both ranking by the raw log-probability (alpha 0, `early_stopping="never"`).
Prints one JSON object: per search, the outputs identical between the two and the test BLEU of both
(sacreBLEU, as `attn-mt eval`); copy the numbers into docs/shipping.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import MarianMTModel, MarianTokenizer

from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import output_length_limits
from attn_mt.evaluation.evaluate import split_examples
from attn_mt.evaluation.scores import corpus_scores
from attn_mt.run.run_dir import load_run

BATCH = 32  # sentences per generate() call


def transformers_outputs(
    model: MarianMTModel, tokenizer: MarianTokenizer, sources: list[str], cfg: Any, options: dict[str, Any]
) -> list[str]:
    """generate()'s translation of every source, each under attn-mt's cap for its length."""
    lengths = [len(tokenizer(s)["input_ids"]) for s in sources]
    caps = output_length_limits(lengths, cfg.decode.max_len_a, cfg.decode.max_len_b)
    outputs = [""] * len(sources)
    for cap in sorted(set(caps)):
        rows = [i for i, c in enumerate(caps) if c == cap]
        for start in range(0, len(rows), BATCH):
            chunk = rows[start : start + BATCH]
            batch = tokenizer([sources[i] for i in chunk], return_tensors="pt", padding=True)
            found = model.generate(**batch, max_new_tokens=cap, **options)
            for i, text in zip(chunk, tokenizer.batch_decode(found, skip_special_tokens=True), strict=True):
                outputs[i] = text
    return outputs


def compare(run_dir: Path, folder: Path, beams: list[int], sentences: int, data: str | None) -> dict:
    """Identical outputs and BLEU of attn-mt and transformers for each search (module docstring)."""
    run = load_run(run_dir)
    sources, refs = split_examples(run, "test", data, run_dir)
    if sentences:
        sources, refs = sources[:sentences], refs[:sentences]
    tokenizer = MarianTokenizer.from_pretrained(folder)
    model = MarianMTModel.from_pretrained(folder).eval()
    searches = []
    for beam in beams:
        alphas = [None] if beam == 1 else [None, 0.0]  # None: as shipped
        for alpha in alphas:
            decode = replace(run.config.decode, beam_size=beam)
            options: dict[str, Any] = {"num_beams": beam, "early_stopping": "never"}
            if alpha is not None:
                decode = replace(decode, length_penalty=alpha)
                options["length_penalty"] = alpha
            cfg = replace(run.config, decode=decode)
            ours = [r.text for r in translator_for(run, cfg).translate(sources, beam_size=beam)]
            with torch.inference_mode():
                theirs = transformers_outputs(model, tokenizer, sources, cfg, options)
            searches.append(
                {
                    "beam": beam,
                    "attn_mt_alpha": cfg.decode.length_penalty,
                    "transformers_length_penalty": options.get(
                        "length_penalty", model.generation_config.length_penalty
                    ),
                    "identical": sum(a == b for a, b in zip(ours, theirs, strict=True)),
                    "sentences": len(sources),
                    "bleu_attn_mt": round(corpus_scores(ours, refs)["bleu"], 2),
                    "bleu_transformers": round(corpus_scores(theirs, refs)["bleu"], 2),
                }
            )
    return {"run": str(run_dir), "checkpoint": run.checkpoint.name, "searches": searches}


def main() -> None:
    """Parse the arguments, compare, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("folder", type=Path, help="the run's `attn-mt export --format huggingface` folder")
    parser.add_argument("--beam", type=int, action="append", help="beam sizes (default: 1 and 4)")
    parser.add_argument("--sentences", type=int, default=0, help="first N test sources (0: all)")
    parser.add_argument("--data", default=None, help="the corpus, if not the one the run names")
    args = parser.parse_args()
    print(
        json.dumps(
            compare(args.run_dir, args.folder, args.beam or [1, 4], args.sentences, args.data), indent=2
        )
    )


if __name__ == "__main__":
    main()
