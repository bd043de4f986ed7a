"""Scoring a given translation: how probable the model finds a target sentence for a source sentence.

The model is run along the given target (forced decoding) with the same steps its search takes, so
the model's own output scored here gets the score the search reported. Each pair gets:

- `token_log_probs`: log P(token | source, the target's tokens before it), for every target token
  and for the closing <eos>;
- `log_prob`: their sum, the log-probability of the whole target (`Hypothesis.score`);
- `score`: `log_prob` divided by GNMT's length penalty at the run's `decode.length_penalty` alpha,
  the number beam search ranks its outputs by (`Hypothesis.norm_score`; greedy search ranks
  nothing and reports `log_prob`).

Sources and targets are prepared as the training data was (the same preprocessing, tokenizer and
vocabularies); unknown target tokens are scored as <unk> and named in the pair's warnings. An empty
(or blank) target is scored as the model ending at once: `<eos>` alone, whose log-probability is
the score a search reports for an empty output; the pair's warnings say so. A blank source is an
error: there is nothing to translate. No torch here: CTranslate2 folders score through their
`score_batch`.

`score_lines` scores lines of running text as `translate` translates them (decoding/lines.py): the
source cut into sentences as `translate` cuts it, the target into the target language's sentences,
each sentence pair scored and the line's numbers added up, as `translate` adds up its sentences'. So
a line's score is the same whether `translate` reports it for its own output or `score` computes it.

With `alignments`, each pair also gets the word alignment of its target (decoding/alignments.py's
`alignment_of`, the function `translate --alignments` uses, on the given target instead of a
search's output), so the model's own output gets the pairs `translate` wrote for it; a line's
sentences' alignments are joined as `translate` joins them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attn_mt.data.sentences import split_line
from attn_mt.data.vocab import EOS
from attn_mt.decoding import alignments as word_alignments
from attn_mt.decoding.engine import Engine
from attn_mt.decoding.lines import line_warnings, split_for
from attn_mt.decoding.outputs import (
    PROGRESS_DELAY_S,
    Hypothesis,
    Translation,
    gnmt_length_penalty,
    prepare_sentence,
)
from attn_mt.errors import UserError
from attn_mt.limits import length_penalty_problem
from attn_mt.progress_bars import progress_bar


@dataclass
class Scored:
    """One source sentence and the target it was scored along."""

    source: str
    target: str
    source_tokens: list[str]
    target_tokens: list[str]  # as the model reads them (unknown ones as <unk>), without <eos>
    token_log_probs: list[float]  # one per target token, then the <eos>'s
    log_prob: float
    score: float
    warnings: list[str]
    alignment: word_alignments.WordAlignment | None = None  # with `alignments`: the target's words aligned


EMPTY_TARGET_NOTE = "an empty target: scored as the model ending at once (<eos> alone)"
UNKNOWN_TARGET = "unknown target tokens, scored as <unk>"  # a warning's kind; its words follow ": "


def blank_pairs(sources: list[str], targets: list[str]) -> list[tuple[int, str]]:
    """(index, "source") of each pair with a blank source: there is nothing to translate.

    A blank target is no error: it is scored as `<eos>` alone (see the module docstring).
    """
    return [(i, "source") for i, source in enumerate(sources) if not source.strip()]


def name_blank(blank: list[tuple[int, str]], unit: str) -> str:
    """`blank_pairs`' findings for a message, 1-based, the first five named: `line 2 (target), 5 (source)`."""
    named = ", ".join(f"{i + 1} ({side})" for i, side in blank[:5])
    more = f" and {len(blank) - 5} more" if len(blank) > 5 else ""
    return f"{unit} {named}{more}"


def score_with(
    engine: Engine,
    sources: list[str],
    targets: list[str],
    length_penalty: float | None = None,
    progress: bool = False,
    alignments: bool = False,
) -> list[Scored]:
    """Score each target as a translation of its source (see the module docstring), batched.

    `length_penalty` None takes the run's decode.length_penalty. A blank source or target is a
    UserError naming the pair (1-based), as is a different number of sources and targets; a blank
    target scores `<eos>` alone. With `alignments`, each pair's `alignment` is its target's word
    alignment.
    """
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets: give one target per source")
    blank = blank_pairs(sources, targets)
    if blank:
        raise UserError(f"nothing to score in {name_blank(blank, 'pair')}: a blank source sentence")
    alpha = engine.cfg.decode.length_penalty if length_penalty is None else length_penalty
    problem = length_penalty_problem(alpha)
    if problem:
        raise UserError(f"the length penalty {problem}")
    cfg, src_vocab, tgt_vocab = engine.cfg, engine.src_vocab, engine.tgt_vocab
    source_tokens = [prepare_sentence(cfg, src_vocab, s) for s in sources]
    target_tokens = [prepare_sentence(cfg, tgt_vocab, t) for t in targets]
    target_ids = [tgt_vocab.encode(tokens) for tokens in target_tokens]
    bar = progress_bar(
        len(sources), "scoring", " pairs", enabled=progress, leave=False, delay=PROGRESS_DELAY_S
    )
    forced = engine.force(source_tokens, target_ids, bar.update)
    bar.close()
    scored = []
    for k, (ids, found) in enumerate(zip(target_ids, forced, strict=True)):
        unknown = [t for t, i in zip(target_tokens[k], ids, strict=True) if i == tgt_vocab.unk_id]
        warnings = list(found.warnings)
        if not ids:
            warnings.append(EMPTY_TARGET_NOTE)
        if unknown:
            warnings.append(f"{UNKNOWN_TARGET}: {' '.join(dict.fromkeys(unknown))}")
        log_prob = float(sum(found.log_probs))
        score = log_prob / gnmt_length_penalty(len(ids) + 1, alpha)
        alignment = None
        if alignments:
            given = Translation(sources[k], source_tokens[k], hypotheses=[Hypothesis(ids, log_prob, score)])
            alignment = word_alignments.alignment_of(engine, given)
        scored.append(
            Scored(
                source=sources[k],
                target=targets[k],
                source_tokens=source_tokens[k],
                target_tokens=tgt_vocab.decode(ids),
                token_log_probs=found.log_probs,
                log_prob=log_prob,
                score=score,
                warnings=warnings,
                alignment=alignment,
            )
        )
    return scored


def sentence_pairs(engine: Engine, source: str, target: str) -> tuple[list[tuple[str, str]], list[str]]:
    """A line pair as sentence pairs (the source cut as `translate` cuts it, the target into the target
    language's sentences) and notes; the pair itself, with a note, when the two counts differ (and
    without one when a side is blank: `score_with` decides what that scores)."""
    if not source.strip() or not target.strip():
        return [(source, target)], []
    plan, notes = split_for(engine.cfg, engine.src_vocab, source)
    targets = split_line(target, engine.cfg.data.direction.split("-")[1]).sentences
    if plan.sentences and len(plan.sentences) == len(targets):
        return list(zip(plan.sentences, targets, strict=True)), notes
    note = (
        f"the source has {len(plan.sentences)} sentence(s) and the target {len(targets)}: "
        "scored as one sentence each"
    )
    return [(source, target)], [note]


def joined(source: str, target: str, parts: list[Scored], notes: list[str]) -> Scored:
    """A line's score from its sentences': log-probabilities and scores added, tokens in a row (an <eos>
    between the sentences' targets), the line's notes before the sentences' warnings, alignments joined."""
    warnings = line_warnings(notes, [p.warnings for p in parts])
    if len(parts) == 1:
        return replace(parts[0], source=source, target=target, warnings=warnings)
    return Scored(
        source=source,
        target=target,
        source_tokens=[t for p in parts for t in p.source_tokens],
        target_tokens=[t for p in parts for t in [*p.target_tokens, EOS]][:-1],
        token_log_probs=[v for p in parts for v in p.token_log_probs],
        log_prob=sum(p.log_prob for p in parts),
        score=sum(p.score for p in parts),
        warnings=warnings,
        alignment=None
        if parts[0].alignment is None
        else word_alignments.joined([p.alignment for p in parts if p.alignment is not None]),
    )


def score_lines(
    engine: Engine,
    sources: list[str],
    targets: list[str],
    split: bool = True,
    length_penalty: float | None = None,
    progress: bool = False,
    alignments: bool = False,
) -> list[Scored]:
    """Score each target line as a translation of its source line (`score_with`); with `split` (what
    `translate` does), sentence by sentence and added up (see the module docstring)."""
    if not split:
        return score_with(engine, sources, targets, length_penalty, progress, alignments)
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets: give one target per source")
    blank = blank_pairs(sources, targets)
    if blank:
        raise UserError(f"nothing to score in {name_blank(blank, 'pair')}: a blank sentence")
    planned = [sentence_pairs(engine, s, t) for s, t in zip(sources, targets, strict=True)]
    pieces = [pair for pairs, _ in planned for pair in pairs]
    parts = score_with(
        engine, [s for s, _ in pieces], [t for _, t in pieces], length_penalty, progress, alignments
    )
    scored, at = [], 0
    for source, target, (pairs, notes) in zip(sources, targets, planned, strict=True):
        scored.append(joined(source, target, parts[at : at + len(pairs)], notes))
        at += len(pairs)
    return scored
