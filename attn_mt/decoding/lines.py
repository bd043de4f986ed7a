"""Lines of running text translated sentence by sentence, and put back together line for line.

The models learn from single short sentences, so `translate` and `serve` split each line into its
sentences (data/sentences.py: sentencex, for the run's source language), cut a sentence longer
than the model reads at its clause punctuation, translate every sentence of every line as one
batch, and join each line's translations with the line's own spacing: one output line per input
line, blank lines and leading or trailing spaces kept. Without splitting each line is one
sentence, as it was given, and the output is exactly what the engine gives for it. Either way the
\r of a CRLF line end is dropped: CRLF input gives LF output from `translate`, `serve` and the
Python API alike.

A line's n-best entry k joins each sentence's k-th output; its scores are the sums of theirs (the
log-probability of the sentences' outputs together). There are as many entries as the sentence
with the fewest outputs has. Samples join the same way (entry k: each sentence's k-th sample).

A line given a target prefix is translated whole, as one sentence: the prefix is the start of the
whole line's translation, which splitting would hand to its first sentence alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attn_mt.config import Config
from attn_mt.data.sentences import SplitLine, cut_long, split_line
from attn_mt.data.vocab import Vocab
from attn_mt.decoding.engine import Engine
from attn_mt.decoding.outputs import Translation, max_source_tokens, prepare_sentence
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError


@dataclass
class LineTranslation:
    """One input line: how it was split, each sentence's translation, and notes on the splitting."""

    line: str
    split: SplitLine
    sentences: list[Translation]
    notes: list[str] = field(default_factory=list)  # e.g. a sentence cut at clause punctuation

    @property
    def text(self) -> str:
        """The line with each sentence replaced by its best translation, spacing kept."""
        return self.split.join([t.text for t in self.sentences])

    @property
    def warnings(self) -> list[str]:
        """The splitting notes, then each sentence's warnings (named by number when there are several)."""
        return line_warnings(self.notes, [t.warnings for t in self.sentences])

    def nbest(self) -> list[tuple[str, float, float]]:
        """(text, summed normalised score, summed log-probability) of each joined n-best entry."""
        if not self.sentences or any(not t.hypotheses for t in self.sentences):
            return []
        entries = []
        for k in range(min(len(t.hypotheses) for t in self.sentences)):
            text = self.split.join([t.outputs[k] for t in self.sentences])
            norm = sum(t.hypotheses[k].norm_score for t in self.sentences)
            entries.append((text, norm, sum(t.hypotheses[k].score for t in self.sentences)))
        return entries


def without_carriage_returns(text: str) -> str:
    """`text` with the \\r of each CRLF line end dropped (a \\r before a \\n, or ending the text), so
    `translate`, `serve` and the Python API all give LF where their input had CRLF."""
    return "\n".join(line.removesuffix("\r") for line in text.split("\n"))


def line_warnings(notes: list[str], per_sentence: list[list[str]]) -> list[str]:
    """A line's splitting notes, then its sentences' warnings (named `sentence k:` when there are several)."""
    several = len(per_sentence) > 1
    found = list(notes)
    for k, warnings in enumerate(per_sentence, start=1):
        found += [f"sentence {k}: {w}" if several else w for w in warnings]
    return found


def plan_lines(
    engine: Engine, lines: list[str], split: bool, prefix: list[str] | None = None
) -> list[tuple[SplitLine, list[str]]]:
    """Each line's sentences and notes (see `split_for`); without `split`, or for a line with a
    non-blank `prefix`, the line itself as one sentence.

    A CRLF line end is read as LF (`without_carriage_returns`), whichever entry point the text came from.
    """
    lines = [without_carriage_returns(line) for line in lines]
    whole = [not split or bool(prefix and prefix[i].strip()) for i in range(len(lines))]
    return [
        (SplitLine([line], ["", ""]), []) if one else split_for(engine.cfg, engine.src_vocab, line)
        for line, one in zip(lines, whole, strict=True)
    ]


def source_language(cfg: Config) -> str:
    """The run's source language code (data.direction's first half, e.g. `en`)."""
    return cfg.data.direction.split("-")[0]


def split_for(cfg: Config, src_vocab: Vocab, line: str) -> tuple[SplitLine, list[str]]:
    """The line's sentences, any too long for the model cut at clause punctuation; notes on the cuts."""
    limit = max_source_tokens(cfg)

    def fits(sentence: str) -> bool:
        return len(prepare_sentence(cfg, src_vocab, sentence)) + 1 <= limit  # + <eos>

    whole = split_line(line, source_language(cfg))
    split, cut = cut_long(whole, fits)
    notes = [
        f"{whole.sentences[k][:40].rstrip()!r}... is longer than the model reads ({limit} tokens with "
        "<eos>): translated in parts cut at its clause punctuation"
        for k in cut
    ]
    return split, notes


def translate_lines(
    engine: Engine,
    lines: list[str],
    split: bool = True,
    settings: DecodeSettings | None = None,
    need_attention: bool = False,
    progress: bool = False,
    prefix: list[str] | None = None,
) -> list[LineTranslation]:
    """Translate each line (see the module docstring) as `settings` asks (None: the run's); `split`
    False takes each line as one sentence.

    `prefix[i]`: the text line i's translation starts with (blank: none).
    """
    if prefix is not None and len(prefix) != len(lines):
        raise UserError(f"{len(prefix)} prefixes for {len(lines)} lines: give one per line")
    plans = plan_lines(engine, lines, split, prefix)
    sentences = [s for plan, _ in plans for s in plan.sentences]
    per_sentence = None
    if prefix is not None:
        per_sentence = [p for plan, p in zip(plans, prefix, strict=True) for _ in plan[0].sentences]
    translations = engine.translate(
        sentences, need_attention=need_attention, progress=progress, prefix=per_sentence, settings=settings
    )
    results, at = [], 0
    for line, (plan, notes) in zip(lines, plans, strict=True):
        count = len(plan.sentences)
        results.append(LineTranslation(line, plan, translations[at : at + count], notes))
        at += count
    return results
