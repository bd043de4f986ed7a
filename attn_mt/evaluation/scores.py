"""Translation scores: sacreBLEU's BLEU, chrF and TER, the book's BLEU, the paired bootstrap test,
and the eval files they are computed from.

An eval directory holds `src.txt` and `hyp.txt` (one sentence per line), `refs.jsonl` (one JSON
list of reference strings per line; sentences may have different numbers of references) and
`scores.json`. Every sacreBLEU number is computed by sacreBLEU itself (Post 2018) with its default
settings, so `read_eval_files` + sacreBLEU's API reproduce `scores.json` exactly.
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

from attn_mt.errors import UserError

SRC_FILE, HYP_FILE, REFS_FILE, SCORES_FILE = "src.txt", "hyp.txt", "refs.jsonl", "scores.json"
METRIC_KEYS = ("bleu", "chrf", "ter")
BOOK_BLEU_ORDER = 2  # the book reports BLEU with n-grams up to 2
BOOK_SENTENCES = (  # the book's four test pairs (d2l.ai section 10.7.6)
    ("go .", "va !"),
    ("i lost .", "j'ai perdu ."),
    ("he's calm .", "il est calme ."),
    ("i'm home .", "je suis chez moi ."),
)
RAW_BOOK_SENTENCES = (  # the same four pairs as fra.txt writes them, for runs on raw text
    ("Go.", "Va !"),
    ("I lost.", "J'ai perdu."),
    ("He's calm.", "Il est calme."),
    ("I'm home.", "Je suis chez moi."),
)


def book_pairs(tokenizer: str, direction: str) -> tuple[tuple[str, str], ...]:
    """The book's four (source, reference) pairs as a run with this tokenizer and direction reads them."""
    pairs = RAW_BOOK_SENTENCES if tokenizer == "sentencepiece" else BOOK_SENTENCES
    return tuple((fr, en) for en, fr in pairs) if direction == "fr-en" else pairs


# Which text the scores were computed on, by data.tokenizer. Scores on different texts are not comparable.
SCORED_TEXT = {
    "book": "lowercased, book-tokenised",
    "sentencepiece": "raw cased, detokenised",
}


def _metrics() -> dict[str, Metric]:
    """Fresh sacreBLEU metrics with default settings.

    `force=True` only silences BLEU's "tokenized period" warning: our outputs and references are
    tokenised alike on purpose; it changes neither the score nor the signature.
    """
    return {"bleu": BLEU(force=True), "chrf": CHRF(), "ter": TER()}


def reference_streams(refs: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-sentence reference lists -> sacreBLEU's streams (stream j = every sentence's j-th reference).

    A sentence with fewer references than the most gets `None` in the remaining streams, which
    sacreBLEU skips (an empty string would count as a real, empty reference).
    """
    if not refs:
        raise UserError("no sentences to score")
    for i, sentence_refs in enumerate(refs):
        if isinstance(sentence_refs, str) or not sentence_refs:
            raise ValueError(f"sentence {i}: expected a non-empty list of references, got {sentence_refs!r}")
    width = max(len(r) for r in refs)
    return [[r[j] if j < len(r) else None for r in refs] for j in range(width)]


def _check_pair(hyps: Sequence[str], refs: Sequence[Sequence[str]], what: str = "hypotheses") -> None:
    """Hypotheses and references must describe the same sentences."""
    if len(hyps) != len(refs):
        raise UserError(f"{len(hyps)} {what} but {len(refs)} reference lists: they must match one to one")


def corpus_scores(hyps: list[str], refs: list[list[str]]) -> dict[str, Any]:
    """sacreBLEU BLEU, chrF and TER of `hyps` against every sentence's references, with signatures."""
    _check_pair(hyps, refs)
    streams = reference_streams(refs)
    counts = [len(r) for r in refs]
    result: dict[str, Any] = {
        "num_sentences": len(hyps),
        "refs_per_sentence": {"min": min(counts), "max": max(counts), "mean": sum(counts) / len(counts)},
    }
    for key, metric in _metrics().items():
        score = metric.corpus_score(hyps, streams)
        result[key] = score.score
        result[f"{key}_signature"] = metric.get_signature().format()
        if key == "bleu":
            result["bleu_detail"] = {
                "counts": list(score.counts),
                "totals": list(score.totals),
                "precisions": list(score.precisions),
                "bp": score.bp,
                "sys_len": score.sys_len,
                "ref_len": score.ref_len,
            }
    return result


def _ngrams(tokens: Sequence[str], n: int) -> collections.Counter:
    """Counts of the n-grams of `tokens`."""
    return collections.Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def book_bleu(pred: str, label: str, k: int = BOOK_BLEU_ORDER) -> float:
    """The book's sentence BLEU (d2l.ai eq. 10.7.1): exp(min(0, 1 - len_label/len_pred)) * prod_n p_n^(1/2^n).

    Tokens are separated by spaces. p_n is the clipped n-gram precision; as in the book, n runs
    up to min(k, len_pred), so a prediction shorter than k is scored on the n-grams it has. An
    empty prediction scores 0.
    """
    pred_tokens, label_tokens = pred.split(), label.split()
    if not pred_tokens:
        return 0.0
    score = math.exp(min(0.0, 1.0 - len(label_tokens) / len(pred_tokens)))
    for n in range(1, min(k, len(pred_tokens)) + 1):
        label_counts = _ngrams(label_tokens, n)
        matches = sum(min(count, label_counts[gram]) for gram, count in _ngrams(pred_tokens, n).items())
        score *= (matches / (len(pred_tokens) - n + 1)) ** (0.5**n)
    return score


def book_bleu_rows(
    sources: Sequence[str], hyps: Sequence[str], labels: Sequence[str], k: int = BOOK_BLEU_ORDER
) -> list[dict[str, Any]]:
    """One row per sentence (source, output, reference, book BLEU-k), as the book prints them."""
    if not len(sources) == len(hyps) == len(labels):
        raise ValueError(f"{len(sources)} sources, {len(hyps)} outputs and {len(labels)} labels must match")
    return [
        {"source": s, "output": h, "reference": r, f"bleu{k}": book_bleu(h, r, k)}
        for s, h, r in zip(sources, hyps, labels, strict=True)
    ]


def paired_bootstrap(
    hyps_a: list[str],
    hyps_b: list[str],
    refs: list[list[str]],
    *,
    n_samples: int = 1000,
    names: tuple[str, str] = ("a", "b"),
) -> dict[str, Any]:
    """sacreBLEU's paired bootstrap resampling test (Koehn 2004) of system b against baseline a.

    Per metric key ("bleu", "chrf", "ter"): "baseline" (a) and "system" (b), each with its score,
    bootstrap mean and 95% confidence half-width ("ci"), and b's p-value. The resampling seed is
    sacreBLEU's (SACREBLEU_SEED, default 12345), so the numbers equal those of the command line
    `sacrebleu REF -i A B --paired-bs`.
    """
    _check_pair(hyps_a, refs, f"hypotheses in {names[0]}")
    _check_pair(hyps_b, refs, f"hypotheses in {names[1]}")
    metrics = _metrics()
    test = PairedTest(
        [(names[0], hyps_a), (names[1], hyps_b)],
        metrics,
        reference_streams(refs),
        test_type="bs",
        n_samples=n_samples,
    )
    signatures, table = test()
    key_of = {id(metric): key for key, metric in metrics.items()}
    result: dict[str, Any] = {
        "test": "paired bootstrap resampling",
        "n_samples": test.n_samples,
        "baseline_name": names[0],
        "system_name": names[1],
    }
    for score_name, metric in test.metrics.items():
        baseline, system = table[score_name]
        result[key_of[id(metric)]] = {
            "name": score_name,
            "signature": signatures[score_name].format(),
            "baseline": _bootstrap_numbers(baseline),
            "system": {**_bootstrap_numbers(system), "p_value": float(system.p_value)},
        }
    return result


def _bootstrap_numbers(result: Any) -> dict[str, float]:
    """Score, bootstrap mean and 95% CI half-width of one sacreBLEU significance Result, as floats."""
    return {"score": float(result.score), "mean": float(result.mean), "ci": float(result.ci)}


# ----- eval files -----


@dataclass
class EvalFiles:
    """The contents of one eval directory."""

    sources: list[str]
    hyps: list[str]
    refs: list[list[str]]


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    """One line per entry; an entry may be empty but never contain a line break."""
    for i, line in enumerate(lines):
        if "\n" in line or "\r" in line:
            raise ValueError(f"{path.name} line {i + 1} contains a line break: {line!r}")
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        handle.write("".join(line + "\n" for line in lines))


def _read_lines(path: Path) -> list[str]:
    """The lines `_write_lines` wrote (empty lines kept)."""
    if not path.is_file():
        raise UserError(f"eval file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def write_eval_files(
    out_dir: Path, sources: Sequence[str], hyps: Sequence[str], refs: Sequence[Sequence[str]]
) -> None:
    """Write src.txt, hyp.txt and refs.jsonl into `out_dir` (created if needed)."""
    if not len(sources) == len(hyps) == len(refs):
        sizes = f"{len(sources)} sources, {len(hyps)} outputs, {len(refs)} reference lists"
        raise ValueError(f"eval files need one line per sentence: got {sizes}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_lines(out_dir / SRC_FILE, sources)
    _write_lines(out_dir / HYP_FILE, hyps)
    _write_lines(out_dir / REFS_FILE, [json.dumps(list(r), ensure_ascii=False) for r in refs])


def read_eval_files(eval_dir: Path) -> EvalFiles:
    """Read an eval directory back; the three files must have one line per sentence."""
    eval_dir = Path(eval_dir)
    sources, hyps = _read_lines(eval_dir / SRC_FILE), _read_lines(eval_dir / HYP_FILE)
    refs = []
    for i, line in enumerate(_read_lines(eval_dir / REFS_FILE)):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{eval_dir / REFS_FILE} line {i + 1} is not JSON: {exc.msg}") from exc
        if not isinstance(row, list) or not row or not all(isinstance(r, str) for r in row):
            raise UserError(f"{eval_dir / REFS_FILE} line {i + 1}: expected a non-empty list of strings")
        refs.append(row)
    if not len(sources) == len(hyps) == len(refs):
        raise UserError(
            f"{eval_dir}: {SRC_FILE} has {len(sources)} lines, {HYP_FILE} {len(hyps)}, "
            f"{REFS_FILE} {len(refs)}; they must match"
        )
    return EvalFiles(sources, hyps, refs)


def write_scores(eval_dir: Path, scores: dict[str, Any]) -> Path:
    """Write scores.json into `eval_dir`; returns its path."""
    path = Path(eval_dir) / SCORES_FILE
    path.write_text(json.dumps(scores, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_scores(eval_dir: Path) -> dict[str, Any]:
    """The scores.json of an eval directory."""
    path = Path(eval_dir) / SCORES_FILE
    if not path.is_file():
        raise UserError(f"scores file {path} does not exist")
    return json.loads(path.read_text(encoding="utf-8"))


def scored_text_of(eval_dir: Path) -> str:
    """Which text an eval directory's scores were computed on (older evaluations were all book-tokenised)."""
    path = Path(eval_dir) / SCORES_FILE
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        scores = {}
    text = scores.get("scored_text") if isinstance(scores, dict) else None
    return text if isinstance(text, str) else SCORED_TEXT["book"]


def check_same_scoring(baseline_dir: Path, baseline_text: str, system_dir: Path, system_text: str) -> None:
    """Refuse to compare two evaluations scored on different text (raw cased against book-tokenised)."""
    if baseline_text != system_text:
        raise UserError(
            f"{baseline_dir} was scored on {baseline_text} text but {system_dir} on {system_text} text: "
            "their scores cannot be compared"
        )


def compare_eval_dirs(
    baseline_dir: Path, system_dir: Path, n_samples: int = 1000, system_text: str | None = None
) -> dict[str, Any]:
    """Paired bootstrap of two eval directories, which must hold the same sources, references and scored text.

    `system_text` is the system's scored text when its scores.json is not written yet.
    """
    check_same_scoring(
        baseline_dir,
        scored_text_of(baseline_dir),
        system_dir,
        system_text if system_text is not None else scored_text_of(system_dir),
    )
    baseline, system = read_eval_files(baseline_dir), read_eval_files(system_dir)
    if baseline.sources != system.sources or baseline.refs != system.refs:
        raise UserError(
            f"{baseline_dir} and {system_dir} are not evaluations of the same split "
            "(their sources or references differ); compare runs on the same split"
        )
    names = (str(baseline_dir), str(system_dir))
    return paired_bootstrap(baseline.hyps, system.hyps, baseline.refs, n_samples=n_samples, names=names)
