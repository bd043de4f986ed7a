"""The model card (README.md) of a Hugging Face export: the Hub's YAML front matter and the run's story.

The front matter carries the languages, licence, tags, dataset and, when the run was scored on its
test split with the exported checkpoint (`attn-mt eval RUN`), the `model-index` block the Hub reads
its metrics from. The text gives the training data, the config, the sacreBLEU signature, how the
model was trained, the preparation attn-mt does before sentencepiece (which the exported sentencepiece
models repeat; its effect measured on the corpus the run was trained on, when that file is still
there) and the limitations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from attn_mt.data.pairs import read_corpus_files
from attn_mt.data.subword import prepare_text
from attn_mt.decoding.outputs import max_source_tokens
from attn_mt.evaluation.evaluate import trained_corpus, trained_report
from attn_mt.evaluation.scores import SCORES_FILE
from attn_mt.run.opened import LoadedRun
from attn_mt.run.run_dir import RunPaths

LANGUAGE_NAMES = {"en": "English", "fr": "French"}
DATA_LICENCE = "CC-BY 2.0 FR"
HUB_LICENCE = "cc-by-2.0"  # the Hub's identifier closest to the data's licence
CORPUS_URL = "https://www.manythings.org/anki/"
TATOEBA_URL = "https://tatoeba.org"
METRICS = (("bleu", "BLEU"), ("chrf", "chrF"), ("ter", "TER"))
TATOEBA_FILES = ("fra-eng.zip", "fra.txt")  # the corpus attn-mt downloads, and the file inside it


def test_scores(run: LoadedRun, paths: RunPaths | None) -> dict[str, Any] | None:
    """The run's eval/test/scores.json when it scored the exported checkpoint, else None."""
    if paths is None:
        return None
    try:
        scores = json.loads((paths.eval_dir("test") / SCORES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(scores, dict) or scores.get("checkpoint") != run.checkpoint.name:
        return None
    if scores.get("step") != run.step:
        return None
    return scores


def preprocessing_effect(run: LoadedRun, corpus: str | list[str] | None) -> tuple[int, int, int] | None:
    """(distinct sources in `corpus`, those the preprocessing changes, those of them cut differently)."""
    if corpus is None:
        return None
    _, pairs = read_corpus_files(
        run.config.data, [Path(c) for c in ([corpus] if isinstance(corpus, str) else corpus)]
    )
    sources = sorted({source for source, _ in pairs})
    apostrophes = run.config.data.normalize_apostrophes
    changed = [s for s in sources if prepare_text(s, apostrophes) != s]
    tokenize = run.src_vocab.tokenize
    pieces = [s for s in changed if tokenize(prepare_text(s, apostrophes)) != tokenize(s)]
    return len(sources), len(changed), len(pieces)


def is_tatoeba(report: dict[str, Any]) -> bool:
    """Whether the run's data report names the Tatoeba corpus file (fra-eng.zip or its fra.txt)."""
    corpus = report.get("corpus")
    return isinstance(corpus, str) and Path(corpus).name in TATOEBA_FILES


def front_matter(run: LoadedRun, name: str, scores: dict[str, Any] | None, tatoeba: bool) -> dict[str, Any]:
    """The Hub's YAML metadata: languages, licence, tags, dataset, and the metrics when there are any."""
    source, target = run.config.data.direction.split("-")
    meta: dict[str, Any] = {
        "language": [source, target],
        "license": HUB_LICENCE if tatoeba else "other",
        "library_name": "transformers",
        "pipeline_tag": "translation",
        "tags": ["translation", "marian", "attn-mt", "d2l"],
    }
    if tatoeba:
        meta["datasets"] = ["tatoeba"]
    if scores is not None:
        pair = f"{source}-{target}"
        meta["model-index"] = [
            {
                "name": name,
                "results": [
                    {
                        "task": {"type": "translation", "name": f"Translation {pair}"},
                        "dataset": {
                            "type": "tatoeba" if tatoeba else "other",
                            "name": f"{'Tatoeba' if tatoeba else 'the training corpus'} {pair} "
                            "(attn-mt's held-out test split)",
                            "split": "test",
                        },
                        "metrics": [
                            {
                                "type": key,
                                "value": round(float(scores[key]), 2),
                                "name": f"{label} (sacreBLEU)",
                                "args": scores.get(f"{key}_signature", ""),
                            }
                            for key, label in METRICS
                            if key in scores
                        ],
                    }
                ],
            }
        ]
    return meta


def _scores_section(scores: dict[str, Any] | None) -> list[str]:
    """The evaluation section: scores and signatures, or how to get them."""
    if scores is None:
        return [
            "Not scored: the run holds no evaluation of this checkpoint. `attn-mt eval RUN_DIR --split test`",
            "scores it on the held-out test split, and exporting again puts the scores here.",
        ]
    lines = [
        f"Held-out test split ({scores.get('num_sentences', '?')} source sentences with all their "
        f"references), beam {scores.get('beam_size')}, GNMT length penalty "
        f"{scores.get('length_penalty')}, scored on {scores.get('scored_text', 'raw')} text by "
        "attn-mt's own search (`attn-mt eval`):",
        "",
        "| metric | score | sacreBLEU signature |",
        "| --- | --- | --- |",
    ]
    for key, label in METRICS:
        if key in scores:
            lines.append(f"| {label} | {float(scores[key]):.2f} | `{scores.get(key + '_signature', '')}` |")
    return lines


def _preprocessing_section(run: LoadedRun, effect: tuple[int, int, int] | None) -> list[str]:
    """What attn-mt does to a sentence before sentencepiece, and how often it matters."""
    steps = ["Unicode NFC", "runs of spaces made one, outer spaces dropped"]
    if run.config.data.normalize_apostrophes:
        steps.insert(1, "typographic apostrophes ’ and ‘ replaced by '")
    lines = [
        "attn-mt prepares each sentence before sentencepiece: " + "; ".join(steps) + ". The exported",
        "source.spm and target.spm carry this as sentencepiece normalisation rules (sentencepiece",
        "collapses the spaces itself), so MarianTokenizer gives attn-mt's pieces with no extra code. The",
        "one gap: a combining mark NFC itself replaces (the deprecated Greek tone marks U+0340, U+0341,",
        "U+0343, U+0344, some Tibetan vowel signs) after a letter NFC then joins it with. Outside",
        "transformers, in Python:",
        "",
        "```python",
        "import re, unicodedata",
        "",
        "def prepare(text):",
        '    text = unicodedata.normalize("NFC", text)',
    ]
    if run.config.data.normalize_apostrophes:
        lines.append('    text = text.replace("\\u2019", "\'").replace("\\u2018", "\'")')
    lines += ['    return re.sub(" {2,}", " ", text).strip(" ")', "```", ""]
    if effect is None:
        lines.append("Its effect was not measured: the corpus the run was trained on is not at hand.")
    else:
        total, changed, pieces = effect
        lines.append(
            f"Measured on the {total:,} distinct source sentences of the training corpus: {changed:,} "
            f"change under this preparation; without it {pieces:,} of them would be cut into other pieces."
        )
    lines += [
        "",
        "attn-mt's `translate` also splits a line into sentences and cuts a sentence longer than the "
        "model reads at clause punctuation; `transformers` translates what it is given.",
    ]
    return lines


def _data_text(report: dict[str, Any], tatoeba: bool) -> str:
    """Where the training pairs came from, with the data's licence."""
    pairs = report.get("corpus_pairs")
    count = f"{pairs:,} pairs" if isinstance(pairs, int) else "pairs"
    if tatoeba:
        return (
            f"Sentence pairs from [Tatoeba]({TATOEBA_URL}) (licence {DATA_LICENCE}), in the fra-eng.zip of "
            f"[manythings.org]({CORPUS_URL}): {count}. The `license` above is the data's; whoever "
            "publishes the model decides its own."
        )
    corpus = report.get("corpus") or "a corpus the run no longer names"
    return (
        f"The corpus {corpus} ({count}), not Tatoeba's fra-eng.zip: give it and its licence here, "
        "and set `license` above, before publishing."
    )


def card_text(run: LoadedRun, paths: RunPaths | None, name: str) -> str:
    """The whole README.md."""
    cfg = run.config
    source, target = cfg.data.direction.split("-")
    scores = test_scores(run, paths)
    effect = preprocessing_effect(run, trained_corpus(paths.root) if paths is not None else None)
    pair = f"{LANGUAGE_NAMES.get(source, source)} to {LANGUAGE_NAMES.get(target, target)}"
    report = trained_report(paths.root) if paths is not None else {}
    tatoeba = is_tatoeba(report)
    meta = front_matter(run, name, scores, tatoeba)
    yaml_block = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    config_yaml = cfg.to_yaml().rstrip()
    parameters = sum(p.numel() for p in run.model.parameters())
    lines = [
        "---",
        yaml_block.rstrip(),
        "---",
        "",
        f"# {name}: {pair}, the attention chapter's Transformer",
        "",
        f"A {parameters:,}-parameter post-norm Transformer (Vaswani et al. 2017, the Transformer of "
        "Dive into Deep Learning's attention chapter) trained with attn-mt, exported as a Marian model: "
        "`MarianMTModel` and `MarianTokenizer` load it with no other code.",
        "",
        "```python",
        "from transformers import MarianMTModel, MarianTokenizer",
        "",
        'tokenizer = MarianTokenizer.from_pretrained("PATH")',
        'model = MarianMTModel.from_pretrained("PATH")',
        'batch = tokenizer(["I lost."], return_tensors="pt", padding=True)',
        "print(tokenizer.batch_decode(model.generate(**batch, num_beams=1), skip_special_tokens=True))",
        "```",
        "",
        "## Training data",
        "",
        _data_text(report, tatoeba)
        + f" attn-mt splits them by source sentence: {cfg.data.valid_size} source sentences held out "
        f"for validation and {cfg.data.test_size} for the test, every translation of a held-out "
        "sentence with it.",
        "",
        "## Training",
        "",
        f"`attn-mt train CONFIG` with this resolved config; the exported checkpoint is "
        f"`{run.checkpoint.name}` at step {run.step}. One sentencepiece model "
        + ("serves both languages" if cfg.data.shared_vocab else "per language")
        + f" ({cfg.data.subword_type}, {cfg.data.vocab_size} pieces, byte fallback).",
        "",
        "```yaml",
        config_yaml,
        "```",
        "",
        "## Evaluation",
        "",
        *_scores_section(scores),
        "",
        "## Decoding",
        "",
        "Greedy `generate()` gives attn-mt's greedy outputs token for token. attn-mt caps an output at "
        f"floor({cfg.decode.max_len_a} x source pieces + {cfg.decode.max_len_b}) pieces with <eos>; "
        "generation_config.json holds the cap of the longest source (`max_new_tokens`). Beam search "
        "agrees with attn-mt's when both rank by the raw log-probability: attn-mt's "
        '`--length-penalty 0` and `length_penalty=0.0`, `early_stopping="never"` here, but for outputs '
        "that reach the cap (transformers scores the forced <eos> as certain). With another alpha the "
        "forms differ: attn-mt divides by GNMT's ((5 + n) / 6) ** alpha, transformers by n ** alpha.",
        "",
        "## Text preparation",
        "",
        *_preprocessing_section(run, effect),
        "",
        "## Limitations",
        "",
        "- "
        + ("Trained on Tatoeba's short everyday sentences" if tatoeba else "Trained on its corpus alone")
        + ": text unlike it (long, technical, informal) is out of its domain, and it translates one "
        "sentence at a time.",
        f"- It reads at most {max_source_tokens(cfg)} source pieces; MarianTokenizer truncates longer input "
        "only when asked (`truncation=True`).",
        "- The decoder's first position holds the <bos> embedding in its position table (row 0 of "
        "`model.decoder.embed_positions.weight`): transformers loads that table from model.safetensors, "
        "but `save_pretrained` leaves position tables out, and a model saved again that way starts "
        "from the wrong input. Copy or upload this folder as it is.",
        "- `<bos>`, `<eos>`, `<unk>`, `<pad>` and `<attn_mt_pad>` typed in the input are read as those "
        "tokens by MarianTokenizer, where attn-mt cuts them into ordinary pieces.",
        "",
    ]
    return "\n".join(lines)


def write_model_card(path: Path, run: LoadedRun, paths: RunPaths | None, name: str | None = None) -> Path:
    """Write the README.md of the export folder `path.parent`."""
    title = name or (paths.root.name if paths is not None else path.parent.name)
    path.write_text(card_text(run, paths, title), encoding="utf-8")
    return path
