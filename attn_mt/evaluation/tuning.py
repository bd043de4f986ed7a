"""Choosing the beam size and length penalty on the valid split (`attn-mt tune`): decode the split once per
pair, score each with sacreBLEU, pick the best pair.

Greedy search (beam 1) ignores the length penalty, so beam 1 is decoded once and stands for every alpha.
The best pair has the highest valid BLEU; a tie goes to the smaller beam (the faster search), then to the
alpha nearest the run's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from attn_mt.decoding.engine import Engine
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.evaluation.scores import corpus_scores


@dataclass(frozen=True)
class TunedPair:
    """One searched pair and what it scored on the valid split; `length_penalty` None: greedy, any alpha."""

    beam_size: int
    length_penalty: float | None
    bleu: float
    chrf: float
    sentences_per_s: float

    def as_dict(self) -> dict[str, Any]:
        """Plain data for run_summary.json, the numbers rounded for reading."""
        row = asdict(self)
        for key in ("bleu", "chrf", "sentences_per_s"):
            row[key] = round(row[key], 2)
        return row


def search_pairs(beams: list[int], length_penalties: list[float]) -> list[tuple[int, float | None]]:
    """Every (beam, alpha) to decode: beam 1 once (alpha None), each larger beam with every alpha."""
    return [
        (beam, alpha)
        for beam in beams
        for alpha in ([None] if beam == 1 else length_penalties)  # type: ignore[list-item]
    ]


def tune_decoding(
    engine: Engine,
    sources: list[str],
    refs: list[list[str]],
    pairs: list[tuple[int, float | None]],
    on_row: Callable[[TunedPair], object] = lambda row: None,
) -> list[TunedPair]:
    """Decode `sources` with each (beam, alpha) of `pairs` and score them against `refs`, in that order.

    Each pair becomes the `DecodeSettings` of the engine's run with that beam size and length penalty
    (alpha None: the run's); `on_row` sees each row as soon as it is scored (the command prints the
    table as it grows).
    """
    rows = []
    for beam, alpha in pairs:
        settings = DecodeSettings.resolve(engine.cfg.decode, beam, length_penalty=alpha)
        start = time.perf_counter()
        results = engine.translate(sources, progress=True, settings=settings)
        seconds = time.perf_counter() - start
        scores = corpus_scores([r.text for r in results], refs)
        row = TunedPair(beam, alpha, scores["bleu"], scores["chrf"], len(sources) / max(seconds, 1e-9))
        on_row(row)
        rows.append(row)
    return rows


def best_pair(rows: list[TunedPair], current_alpha: float) -> TunedPair:
    """The highest valid BLEU; ties: the smaller beam, then the alpha nearest `current_alpha`."""

    def rank(row: TunedPair) -> tuple[float, int, float]:
        alpha = current_alpha if row.length_penalty is None else row.length_penalty
        return (-row.bleu, row.beam_size, abs(alpha - current_alpha))

    return min(rows, key=rank)


def alpha_text(alpha: float | None) -> str:
    """An alpha for the table: greedy's (None) is 'any'."""
    return "any" if alpha is None else f"{alpha:g}"


TABLE_HEADER = f"{'beam':>5} {'alpha':>6} {'valid BLEU':>11} {'chrF':>7} {'sentences/s':>12}"


def table_row(row: TunedPair) -> str:
    """One line of the table under TABLE_HEADER."""
    return (
        f"{row.beam_size:>5} {alpha_text(row.length_penalty):>6} {row.bleu:>11.2f} {row.chrf:>7.2f} "
        f"{row.sentences_per_s:>12.1f}"
    )
