"""Alignment error rate of runs' attention alignments on the team's hand-aligned test pairs.

    python scripts/bench_alignments.py runs/transformer runs/d2l_bahdanau [--json out.json]

For every pair of scripts/data/alignments_gold.txt (English source, French reference, Sure and
Possible links; its header gives the conventions) the run is forced along the reference and its
word alignment read from the attention, as `attn-mt score --alignments --no-split` reads it
(decoding/scoring.py with `alignments`, decoding/alignments.py): each pair one sentence. For a
Transformer the alignment is also read from each decoder layer's head average and from the mean
over every layer; the default (the last layer) is the one `score` and `translate` write. A
diagonal alignment (target word j to source word round((j + 0.5) * S / T - 0.5)) gives the scale.

AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) (Och and Ney 2003), summed over all pairs, with S
within P. Runs whose tokens split punctuation off (the book's tokenizer) are projected onto the
gold's space-separated words: a link between two tokens is a link between the words they belong to.

The torch engine's maps are also read shifted ("shift-att", Chen et al. 2020): an output word
aligned by the attention of the step that reads it as the decoder's input, the step after the one
that predicts it (not what `score` and `translate` write). A map picked as the best on this sample
is also scored by halves: chosen on the even-numbered pairs and reported on the odd ones and the
other way round, so that the choice is not judged on the pairs that made it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from attn_mt.config import Config
from attn_mt.data.preprocess import preprocess, tokenize
from attn_mt.decoding.alignments import WordAlignment, align_words
from attn_mt.decoding.attention import SentenceAttention
from attn_mt.decoding.engine import Engine
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Hypothesis, Translation
from attn_mt.decoding.scoring import score_with
from attn_mt.decoding.translator import in_words
from attn_mt.run.open import open_model

ROOT = Path(__file__).resolve().parent.parent
GOLD = ROOT / "scripts" / "data" / "alignments_gold.txt"

Links = set[tuple[int, int]]


@dataclass
class GoldPair:
    """One hand-aligned pair: its line in the test split, the two texts, Sure and Possible links."""

    line: int
    source: str
    target: str
    sure: Links
    possible: Links  # Sure links included


@dataclass
class Counts:
    """Per pair: |A|, |S|, |A & S| and |A & P|, the sums AER is computed from."""

    rows: list[tuple[int, int, int, int]] = field(default_factory=list)

    def add(self, found: Links, pair: GoldPair) -> None:
        """Count one pair's found links against its gold."""
        self.rows.append((len(found), len(pair.sure), len(found & pair.sure), len(found & pair.possible)))

    def half(self, odd: int) -> Counts:
        """The counts of the even-numbered pairs (`odd` 0) or the odd ones (1)."""
        return Counts(self.rows[odd::2])

    def scores(self) -> dict[str, float]:
        """AER, precision |A & P| / |A| and recall |A & S| / |S|, over the pairs counted."""
        found, sure, found_sure, found_possible = (sum(column) for column in zip(*self.rows, strict=True))
        return {
            "aer": aer_of(found, sure, found_sure, found_possible),
            "precision": found_possible / found if found else 0.0,
            "recall": found_sure / sure if sure else 0.0,
        }


def aer_of(found: int, sure: int, found_sure: int, found_possible: int) -> float:
    """1 - (|A & S| + |A & P|) / (|A| + |S|) from the four counts."""
    return 1.0 - (found_sure + found_possible) / (found + sure)


def alignment_error_rate(found: Links, sure: Links, possible: Links) -> float:
    """AER of one alignment `found` against gold Sure and Possible links (Sure taken as Possible too)."""
    possible = possible | sure
    return aer_of(len(found), len(sure), len(found & sure), len(found & possible))


def parse_links(text: str) -> tuple[Links, Links]:
    """`0-0 1?2` as (Sure, Possible) link sets; Possible holds the Sure ones too."""
    sure, possible = set(), set()
    for link in text.split():
        if "-" in link:
            i, j = link.split("-")
            sure.add((int(i), int(j)))
        else:
            i, j = link.split("?")
        possible.add((int(i), int(j)))
    return sure, possible


def read_gold(path: Path) -> list[GoldPair]:
    """The gold file's pairs (lines starting with # are its header)."""
    pairs = []
    for row in path.read_text(encoding="utf-8").splitlines():
        if not row.strip() or row.startswith("#"):
            continue
        line, source, target, links = row.split("\t")
        sure, possible = parse_links(links)
        pairs.append(GoldPair(int(line), source, target, sure, possible))
    return pairs


def diagonal(pair: GoldPair) -> Links:
    """Each target word linked to the source word at the same relative position."""
    sources, targets = len(pair.source.split(" ")), len(pair.target.split(" "))
    return {(min(sources - 1, max(0, round((j + 0.5) * sources / targets - 0.5))), j) for j in range(targets)}


def word_owners(cfg: Config, text: str) -> list[int]:
    """For each of the run's alignment words of `text`, the gold word (space-separated) it belongs to."""
    words = text.split(" ")  # a no-break space joins, as in the subword runs' words
    if cfg.data.tokenizer != "book":
        return list(range(len(words)))
    return [
        k for k, word in enumerate(words) for _ in tokenize(preprocess(word, cfg.data.normalize_apostrophes))
    ]


def projected(alignment: WordAlignment, sources: list[int], targets: list[int]) -> Links:
    """The run's links as links between the gold's whitespace words."""
    if len(alignment.source_words) > len(sources) or len(alignment.target_words) != len(targets):
        raise ValueError(
            f"the run's words ({len(alignment.source_words)}, {len(alignment.target_words)}) are not "
            f"those of the gold ({len(sources)}, {len(targets)}): {alignment.target_words}"
        )
    return {(sources[i], targets[j]) for i, j in alignment.pairs}


def shifted(attention: SentenceAttention) -> SentenceAttention:
    """Piece-level maps whose cross-attention row for output piece t is the row of step t + 1, where that
    piece is the decoder's input ("shift-att", Chen et al. 2020); the closing <eos> keeps its own row."""
    cross = attention.maps["cross"]  # (..., T, S), T = output pieces and <eos>
    moved = np.concatenate([cross[..., 1:, :], cross[..., -1:, :]], axis=-2)  # (..., T, S)
    return replace(attention, maps={**attention.maps, "cross": moved})


def layer_choices(engine: Engine) -> dict[str, int | None]:
    """The cross-attention maps to read: the last layer (the default), and for a Transformer each
    layer and the mean over all layers."""
    layers = engine.cfg.model.depths.decoder if engine.cfg.model.type == "transformer" else 1
    choices: dict[str, int | None] = {"default (last layer)": -1}
    if engine.all_attention_maps and layers > 1:
        choices |= {f"layer {n + 1}": n for n in range(layers - 1)} | {"all layers": None}
    return choices


def forced_attention_alignments(engine: Engine, gold: list[GoldPair]) -> dict[str, list[Links]]:
    """Each choice of map's links for every gold pair, the reference forced, projected on gold words;
    the default is what `score --alignments` writes, the shifted ones (torch engine) are not."""
    scored = score_with(engine, [p.source for p in gold], [p.target for p in gold], alignments=True)
    layers = layer_choices(engine)
    choices: dict[str, list[Links]] = {name: [] for name in layers}
    if engine.all_attention_maps:
        choices |= {f"shifted, {name}": [] for name in layers}
    for pair, found in zip(gold, scored, strict=True):
        sources, targets = word_owners(engine.cfg, pair.source), word_owners(engine.cfg, pair.target)
        assert found.alignment is not None
        ids = engine.tgt_vocab.encode(found.target_tokens)
        best = Hypothesis(ids, found.log_prob, found.score)
        output = Translation(pair.source, found.source_tokens, hypotheses=[best])
        words = engine.attention(output, words=True)
        for name, layer in layers.items():
            choices[name].append(projected(align_words(words, layer), sources, targets))
        assert choices["default (last layer)"][-1] == projected(found.alignment, sources, targets)
        if not engine.all_attention_maps:
            continue
        fed, src_len = engine.source_ids(found.source_tokens)
        pieces = shifted(engine.attention(output))
        moved = in_words(pieces, engine.src_vocab, engine.tgt_vocab, fed[:src_len], ids)
        for name, layer in layers.items():
            choices[f"shifted, {name}"].append(projected(align_words(moved, layer), sources, targets))
    return choices


def counted(gold: list[GoldPair], links: list[Links]) -> Counts:
    """Every pair's links counted against the gold."""
    counts = Counts()
    for pair, found in zip(gold, links, strict=True):
        counts.add(found, pair)
    return counts


def held_out_choice(choices: dict[str, Counts]) -> dict[str, object]:
    """The best map picked on one half of the pairs and scored on the other, both ways."""
    layers = choices
    if len(layers) == 1:
        return {}
    result = {}
    for pick, report in ((0, 1), (1, 0)):
        best = min(layers, key=lambda name: layers[name].half(pick).scores()["aer"])
        result[f"picked on {'even' if pick == 0 else 'odd'}"] = {
            "choice": best,
            "aer held out": round(layers[best].half(report).scores()["aer"], 4),
            "default's aer there": round(choices["default (last layer)"].half(report).scores()["aer"], 4),
        }
    return result


def bench(run_dirs: list[Path], gold_path: Path) -> dict[str, object]:
    """Every run's AER by choice of map, the diagonal's, and the held-out layer choice."""
    gold = read_gold(gold_path)
    results: dict[str, object] = {
        "pairs": len(gold),
        "sure": sum(len(p.sure) for p in gold),
        "possible": sum(len(p.possible) for p in gold),
        "diagonal": counted(gold, [diagonal(p) for p in gold]).scores(),
    }
    for run_dir in run_dirs:
        engine = translator_for(open_model(run_dir, device="cpu"))
        choices = {
            name: counted(gold, links) for name, links in forced_attention_alignments(engine, gold).items()
        }
        results[str(run_dir)] = {
            "model": f"{engine.cfg.model.type}, {engine.cfg.data.tokenizer} tokens",
            "choices": {name: {k: round(v, 4) for k, v in c.scores().items()} for name, c in choices.items()},
            "held out": held_out_choice(choices),
        }
    return results


def main() -> None:
    """Print the AER table (and write it as JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="Run directories (or exported models).")
    parser.add_argument("--gold", type=Path, default=GOLD, help="The hand-aligned pairs.")
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    args = parser.parse_args()
    results = bench(args.runs, args.gold)
    print(f"{results['pairs']} pairs, {results['sure']} Sure and {results['possible']} Possible links")
    print("| model | map | AER | precision | recall |")
    print("|---|---|---|---|---|")
    diag = results["diagonal"]
    print(f"| diagonal baseline | - | {diag['aer']:.3f} | {diag['precision']:.3f} | {diag['recall']:.3f} |")
    for run_dir in args.runs:
        entry = results[str(run_dir)]
        for name, s in entry["choices"].items():
            print(f"| {run_dir.name} | {name} | {s['aer']:.3f} | {s['precision']:.3f} | {s['recall']:.3f} |")
        for how, held in entry["held out"].items():
            print(f"{run_dir.name}: {how}: {json.dumps(held)}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
