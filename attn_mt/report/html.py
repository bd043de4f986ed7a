"""The `attn-mt report` page: one self-contained HTML page about one or more runs.

The page needs nothing beside itself: pictures are PNG `data:` URIs, the style sheet is inline, there
is no script and no external font. Every piece of text that comes from a run is escaped. Its own text is
in the language in force (attn_mt.i18n), its numbers written as that language writes them, and its font
stack names CJK fonts, so a page in Chinese shows its characters.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from attn_mt.data.report import SPLITS, length_cell
from attn_mt.decoding.attention import TITLES
from attn_mt.evaluation.scores import SCORED_TEXT, scored_text_of
from attn_mt.i18n import _, format_number, html_lang, ngettext
from attn_mt.i18n.fonts import PAGE_FONT_STACK
from attn_mt.report.collect import (
    AttentionDump,
    Comparison,
    RunInfo,
    Sentence,
    SplitEval,
    compare_runs,
    eval_command,
    select_gallery,
)
from attn_mt.report.figures import comparison_data_uri, curves_data_uri, file_data_uri
from attn_mt.report.timeline import timeline_section

GALLERY_PER_END = 3  # sentences shown from each end of the sentence-chrF ranking, per split
SIGNIFICANCE = 0.05  # p-value below which the paired bootstrap calls a difference significant
METRICS = (("bleu", "BLEU"), ("chrf", "chrF"), ("ter", "TER"))
STYLE = """
body { font-family: FONT_STACK; margin: 0 auto; max-width: 1150px;
       padding: 1rem 1.5rem 3rem; color: #1d1d1f; background: #fff; line-height: 1.45; }
h1 { border-bottom: 3px solid #b3261e; padding-bottom: .3rem; }
h2 { border-bottom: 1px solid #ccc; margin-top: 2.5rem; }
section.run > h2 { background: #f4ecec; padding: .3rem .5rem; border: none; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid #d0d0d0; padding: .25rem .55rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; border: 1px solid #e0e0e0; padding: .6rem; overflow-x: auto; font-size: .85rem; }
code { font-size: .85rem; }
td code { overflow-wrap: anywhere; }
pre.config { columns: 3 18rem; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
figure { display: inline-block; margin: .4rem .8rem .4rem 0; vertical-align: top; }
figcaption { font-size: .85rem; color: #555; }
article.sample { border: 1px solid #ddd; border-radius: 6px; padding: .2rem .9rem .6rem; margin: 1rem 0; }
.tag { display: inline-block; background: #b3261e; color: #fff; border-radius: 3px; padding: 0 .4rem;
       font-size: .8rem; margin-left: .3rem; }
.tag.best { background: #1b6e3a; }
.tag.dump { background: #44546a; }
.note { color: #6b4e00; background: #fff8e1; border-left: 4px solid #e0a800; padding: .3rem .6rem; }
nav ul { columns: 2; }
""".replace("FONT_STACK", PAGE_FONT_STACK)


def esc(value: Any) -> str:
    """Text (or anything printable) made safe for HTML content and quoted attributes."""
    return escape(str(value), quote=True)


def number(value: Any, digits: int = 2) -> str:
    """A float with `digits` decimals as the language in force writes it, or "n/a" when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _("n/a")
    return format_number(value, digits)


def duration(seconds: float | None) -> str:
    """Seconds as `12.3 s`, `4 min 05 s` or `2 h 03 min`."""
    if seconds is None:
        return _("n/a")
    if seconds < 60:
        return _("{seconds} s").format(seconds=format_number(seconds, 1))
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return _("{minutes} min {seconds} s").format(minutes=minutes, seconds=f"{secs:02d}")
    hours, minutes = divmod(minutes, 60)
    return _("{hours} h {minutes} min").format(hours=hours, minutes=f"{minutes:02d}")


def table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table of plain-text `header` cells and ready-HTML body cells; `numeric` columns right-aligned."""
    head = "".join(f"<th>{esc(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>\n"
        for row in rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n"


def key_value_table(pairs: Iterable[tuple[str, str]]) -> str:
    """A two-column table of (label, ready-HTML value) rows."""
    rows = "".join(f"<tr><th>{esc(label)}</th><td>{value}</td></tr>\n" for label, value in pairs)
    return f"<table>\n<tbody>\n{rows}</tbody>\n</table>\n"


def signature_cell(signature: Any) -> str:
    """A sacreBLEU signature as code, or "n/a"."""
    return f"<code>{esc(signature)}</code>" if signature else esc(_("n/a"))


def note(text: str) -> str:
    """A highlighted remark (e.g. something that is missing)."""
    return f'<p class="note">{esc(text)}</p>\n'


def image(uri: str, alt: str, caption: str | None = None) -> str:
    """An inlined picture, with an optional caption."""
    img = f'<img src="{uri}" alt="{esc(alt)}">'
    if caption is None:
        return f"<p>{img}</p>\n"
    return f"<figure>{img}<figcaption>{esc(caption)}</figcaption></figure>\n"


# ----- one run -----


def model_type(run: RunInfo) -> str:
    """model.type from the run's config (else from run_summary.json), or "n/a"."""
    section = (run.config or {}).get("model")
    if isinstance(section, dict) and section.get("type"):
        return str(section["type"])
    return run.log.model_type or _("n/a")


def overview_section(run: RunInfo, anchor: str) -> str:
    """Model, device, steps, wall time, throughput and best validation numbers."""
    log, training = run.log, run.training
    missing = _("n/a")
    throughput = missing
    if training.mean_tokens_per_s is not None:
        throughput = _("{mean} target tokens/s (mean over log intervals; last {last})").format(
            mean=format_number(training.mean_tokens_per_s, 0, grouping=True),
            last=format_number(training.last_tokens_per_s, 0, grouping=True),
        )
    best_bleu = training.best_valid_bleu
    best_loss = training.best_valid_loss
    at_step = _("{score} at step {step}")
    pairs = [
        (_("run directory"), f"<code>{esc(run.root)}</code>"),
        (_("model"), esc(model_type(run))),
        (_("parameters"), esc(log.parameters or missing)),
        (_("device"), esc(log.device or missing)),
        (_("steps"), esc(training.last_step if training.last_step is not None else missing)),
        (_("epochs completed"), esc(training.epochs_completed)),
        (_("wall time (training loop)"), esc(duration(training.elapsed_s))),
        (
            _("last session"),
            esc(
                _("{start} to {end}").format(start=log.first_time, end=log.last_time)
                if log.first_time
                else missing
            ),
        ),
        (_("throughput"), esc(throughput)),
        (
            _("best valid BLEU"),
            esc(
                at_step.format(score=format_number(best_bleu[0]), step=best_bleu[1]) if best_bleu else missing
            ),
        ),
        (
            _("best valid loss"),
            esc(
                at_step.format(score=format_number(best_loss[0], 4), step=best_loss[1])
                if best_loss
                else missing
            ),
        ),
        (_("how training ended"), esc(log.finish or missing)),
    ]
    if log.parent:
        pairs.insert(2, (_("fine-tuned from"), esc(log.parent)))
    return f'<section id="{anchor}">\n<h3>{esc(_("Overview"))}</h3>\n{key_value_table(pairs)}</section>\n'


def config_section(run: RunInfo, anchor: str) -> str:
    """The resolved config.yaml."""
    if run.config_text is None:
        body = note(_("config.yaml missing"))
    else:
        body = f'<pre class="config">{esc(run.config_text)}</pre>\n'
    return f'<section id="{anchor}">\n<h3>{esc(_("Resolved config"))}</h3>\n{body}</section>\n'


def vocabulary_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The data report's vocabulary sizes, tokenizer and where the vocabulary came from, as table rows."""
    vocab, subword, parent = report.get("vocab", {}), report.get("tokenizer"), report.get("vocab_from")
    sizes = {
        "src": format_number(vocab.get("src", 0), 0, True),
        "tgt": format_number(vocab.get("tgt", 0), 0, True),
    }
    if not subword:
        origin = _("min_freq {min_freq}, built on train").format(min_freq=report.get("min_freq", "?"))
        return [
            (_("vocabulary"), esc(_("source {src}, target {tgt} tokens").format(**sizes))),
            (
                _("vocabulary from"),
                esc(_("the parent run's, {run}").format(run=parent) if parent else origin),
            ),
        ]
    if subword.get("origin") == "learned":
        seconds = _("{seconds} s").format(seconds=format_number(subword["seconds"], 2))
        origin = _("learned on train in {seconds}").format(seconds=seconds)
    elif subword.get("origin") == "cache":
        origin = _("from the cache")
    elif subword.get("origin") == "run":
        origin = _("the parent run's, {run}").format(run=parent) if parent else _("the run's own")
    else:
        origin = "?"
    models = (
        _("sentencepiece {model}, one shared model")
        if subword["shared"]
        else _("sentencepiece {model}, two models")
    )
    return [
        (_("vocabulary"), esc(_("source {src}, target {tgt} pieces").format(**sizes))),
        (_("tokenizer"), esc(models.format(model=subword["model"]))),
        (_("vocabulary from"), esc(origin)),
    ]


def data_facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The corpus, the split, the vocabulary, what was cut or dropped, and the loading of a data report."""
    pairs = format_number(report.get("corpus_pairs", 0), 0, True)
    rows = [
        (
            _("corpus"),
            esc(_("{corpus}: {pairs} pairs").format(corpus=report.get("corpus", "?"), pairs=pairs)),
        ),
        (_("direction"), esc(report.get("direction", "en-fr"))),
        (_("mode"), esc(report.get("mode", "?"))),
    ]
    if "split_seed" in report:
        rows.append((_("split seed"), esc(report["split_seed"])))
    if report.get("normalize_apostrophes"):
        rows.append((_("apostrophes"), esc(_("normalised"))))
    rows += vocabulary_rows(report)
    train = report.get("splits", {}).get("train", {})
    if "dropped_for_length" in train:
        label = _("train pairs dropped for length > {max_len} tokens").format(max_len=report.get("max_len"))
        rows.append((label, esc(format_number(train["dropped_for_length"], 0, True))))
    if "truncated_src" in train:
        label = _("pairs truncated to num_steps = {num_steps}").format(num_steps=report.get("num_steps"))
        src, tgt = (format_number(train[key], 0, True) for key in ("truncated_src", "truncated_tgt"))
        rows.append((label, esc(_("source {src}, target {tgt}").format(src=src, tgt=tgt))))
    overlap = report.get("overlap")
    if overlap:
        shared = ", ".join(
            f"{key.replace('_', '/')} {format_number(count, 0, True)}" for key, count in overlap.items()
        )
        rows.append((_("English sentences shared across splits"), esc(shared)))
    prepared = report.get("prepared")
    if prepared and prepared.get("origin") == "built":
        stages = ", ".join(
            f"{stage} " + _("{seconds} s").format(seconds=format_number(wall, 1))
            for stage, (wall, _cpu) in prepared["seconds"].items()
        )
        built = (
            _("now ({stages}; {workers} worker processes) into {folder}")
            if prepared.get("folder")
            else _("now ({stages}; {workers} worker processes), in memory")
        )
        rows.append(
            (
                _("prepared"),
                esc(built.format(stages=stages, workers=prepared["workers"], folder=prepared.get("folder"))),
            )
        )
    elif prepared:
        rows.append((_("prepared"), esc(_("mapped from {folder}").format(folder=prepared.get("folder")))))
    if "seconds" in report:
        rows.append(
            (_("loaded in"), esc(_("{seconds} s").format(seconds=format_number(report["seconds"], 2))))
        )
    return rows


def percent(share: float) -> str:
    """A share (0.0425) as a percentage with two decimals, as the language in force writes it (4.25%)."""
    return format_number(100 * share, 2) + "%"


def split_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per split of a data report: pairs, source sentences, lengths, references and <unk> shares."""
    rows = []
    for name in SPLITS:
        stats = report.get("splits", {}).get(name)
        if not stats:
            continue
        refs = stats.get("refs_per_sentence")
        rows.append(
            [
                esc(name),
                esc(format_number(stats["pairs"], 0, True)),
                esc(format_number(stats["english_sentences"], 0, True)),
                esc(length_cell(stats.get("src_len"))),
                esc(length_cell(stats.get("tgt_len"))),
                esc(f"{format_number(refs['mean'])}/{refs['max']}" if refs else "-"),
                esc(
                    f"{percent(stats['unk_src'])}/{percent(stats['unk_tgt'])}" if "unk_src" in stats else "-"
                ),
            ]
        )
    return rows


def data_tables(report: dict[str, Any]) -> str:
    """A data report (what `attn-mt data-report` prints) as a table of facts and a table of its splits."""
    header = [
        _("split"),
        _("pairs"),
        _("source sentences"),
        _("source length p50/p90/p99/max"),
        _("target length p50/p90/p99/max"),
        _("references per sentence, mean/max"),
        _("<unk> share, source/target"),
    ]
    lengths = _(
        "Lengths count the tokens (or subword pieces) of a sentence and the <eos> the model sees: the 50th, "
        "90th and 99th percentiles and the longest."
    )
    return (
        key_value_table(data_facts(report))
        + table(header, split_rows(report), numeric=(1, 2))
        + f"<p>{esc(lengths)}</p>\n"
    )


def data_section(run: RunInfo, anchor: str) -> str:
    """The data report in two tables (raw JSON if it has an unexpected shape)."""
    if run.data_report is None:
        body = note(_("data_report.json missing"))
    else:
        try:
            body = data_tables(run.data_report)
        except (KeyError, TypeError, ValueError, AttributeError):
            body = f"<pre>{esc(json.dumps(run.data_report, indent=2, ensure_ascii=False))}</pre>\n"
    return f'<section id="{anchor}">\n<h3>{esc(_("Data"))}</h3>\n{body}</section>\n'


def curves_section(run: RunInfo, anchor: str) -> str:
    """Training and validation curves drawn from metrics.jsonl."""
    if run.metrics:
        body = image(curves_data_uri(run.metrics), _("training curves of {run}").format(run=run.name))
    else:
        body = note(_("no metrics.jsonl records: no training curves"))
    return f'<section id="{anchor}">\n<h3>{esc(_("Training curves"))}</h3>\n{body}</section>\n'


def score_with_interval(entry: dict[str, Any]) -> str:
    """A bootstrap entry as "score (mean ± ci)"."""
    return f"{number(entry.get('score'))} ({number(entry.get('mean'))} ± {number(entry.get('ci'))})"


def bootstrap_table(result: dict[str, Any]) -> str:
    """Baseline and system score (bootstrap mean +- 95% CI) and p-value per metric."""
    rows = []
    for key, label in METRICS:
        entry = result.get(key)
        if not isinstance(entry, dict):
            continue
        base, system = entry.get("baseline", {}), entry.get("system", {})
        p_value = system.get("p_value")
        significant = _("n/a")
        if isinstance(p_value, (int, float)):
            significant = _("yes") if p_value < SIGNIFICANCE else _("no")
        rows.append(
            [
                esc(label),
                esc(score_with_interval(base)),
                esc(score_with_interval(system)),
                esc(number(p_value, 4)),
                esc(significant),
                signature_cell(entry.get("signature")),
            ]
        )
    header = [
        _("metric"),
        _("baseline score (mean ± 95% CI)"),
        _("system score (mean ± 95% CI)"),
        _("p-value"),
        _("significant (p < {level})").format(level=format_number(SIGNIFICANCE)),
        _("signature"),
    ]
    return table(header, rows, numeric=(3,))


def scores_block(evaluation: SplitEval) -> str:
    """One split's scores, each with its sacreBLEU signature, book BLEU-2 rows and any stored comparison."""
    scores = evaluation.scores
    if scores is None:
        return note(_("eval/{split} has no scores.json").format(split=evaluation.split))
    refs = scores.get("refs_per_sentence")
    scored = scores.get("scored_text", SCORED_TEXT["book"])
    missing = _("n/a")
    facts = _(
        "{direction}, scored on {scored} text, {sentences} sentences, references per sentence {refs}, "
        "beam {beam}, checkpoint {checkpoint} (step {step})"
    ).format(
        direction=scores.get("direction", "en-fr"),
        scored=scored,
        sentences=scores.get("num_sentences", missing),
        refs=number(refs.get("mean")) if isinstance(refs, dict) else missing,
        beam=scores.get("beam_size", missing),
        checkpoint=scores.get("checkpoint", missing),
        step=scores.get("step", missing),
    )
    rows = [
        [esc(label), esc(number(scores.get(key))), signature_cell(scores.get(f"{key}_signature"))]
        for key, label in METRICS
    ]
    parts = [
        f"<h4>{esc(_('Split {split}').format(split=evaluation.split))}</h4>\n<p>{esc(facts)}</p>\n",
        table([_("metric"), _("score"), _("sacreBLEU signature")], rows, numeric=(1,)),
    ]
    book_rows = scores.get("book_bleu2")
    if isinstance(book_rows, list) and book_rows:
        mean = number(scores.get("book_bleu2_mean"), 3)
        line = _("The book's BLEU-2 (section 10.7.6 of d2l.ai, the English edition), mean {mean}:")
        parts.append(f"<p>{esc(line.format(mean=mean))}</p>\n")
        parts.append(
            table(
                [_("source"), _("output"), _("reference"), "BLEU-2"],
                (
                    [
                        esc(r.get("source", "")),
                        esc(r.get("output", "")),
                        esc(r.get("reference", "")),
                        esc(number(r.get("bleu2"), 3)),
                    ]
                    for r in book_rows
                    if isinstance(r, dict)
                ),
                numeric=(3,),
            )
        )
    stored = scores.get("compare")
    if isinstance(stored, dict):
        line = esc(_("Paired bootstrap ({samples} samples) against baseline {baseline}:")).format(
            samples=esc(stored.get("n_samples", missing)),
            baseline=f"<code>{esc(stored.get('baseline_name', missing))}</code>",
        )
        parts.append(f"<p>{line}</p>\n")
        parts.append(bootstrap_table(stored))
    return "".join(parts)


def scores_section(run: RunInfo, anchor: str) -> str:
    """Every split the run was evaluated on."""
    if not run.evals:
        body = note(
            _("{run} was never evaluated: run `attn-mt eval {folder}`").format(run=run.name, folder=run.root)
        )
    else:
        body = "".join(scores_block(e) for e in run.evals)
    return f'<section id="{anchor}">\n<h3>{esc(_("Evaluation scores"))}</h3>\n{body}</section>\n'


def per_head(values: Any) -> str:
    """Per-layer, per-head numbers as `layer 1: 0.12, 0.40; layer 2: ...` (empty for a single map)."""
    if not isinstance(values, list):
        return ""
    return "; ".join(
        _("layer {number}: {values}").format(
            number=i, values=", ".join(number(v) for v in (row if isinstance(row, list) else [row]))
        )
        for i, row in enumerate(values, start=1)
    )


def attention_block(dump: AttentionDump, sentence: Sentence, anchor: str) -> str:
    """Summary numbers and heatmaps of one sentence's attention dump."""
    stats = dump.summary.get("stats", {})
    entries = {name: e for name, e in stats.items() if isinstance(e, dict)} if isinstance(stats, dict) else {}
    heads = any(isinstance(e.get("entropy_per_head"), list) for e in entries.values())
    rows = []
    for name, entry in entries.items():
        share = number(entry.get("eos_share"), 3) if "eos_share" in entry else "-"
        row = [esc(_(TITLES.get(name, name))), esc(number(entry.get("entropy"), 3)), esc(share)]
        if heads:
            row += [esc(per_head(entry.get(key))) for key in ("entropy_per_head", "eos_share_per_head")]
        rows.append(row)
    header = [_("attention"), _("entropy (nats, mean over queries)"), _("weight share on the source <eos>")]
    if heads:
        header += [_("entropy per layer and head"), _("<eos> share per layer and head")]
    parts = [table(header, rows, numeric=(1, 2))]
    for name, png in dump.heatmaps.items():
        title = _(TITLES.get(name, name))
        try:
            uri = file_data_uri(png)
        except (OSError, ValueError) as exc:
            parts.append(
                note(_("heatmap {file} could not be read: {reason}").format(file=png.name, reason=exc))
            )
            continue
        alt = _("{title} of sentence {index}").format(title=title, index=sentence.index)
        parts.append(image(uri, alt, _("{title} ({file})").format(title=title, file=png.name)))
    return f'<div class="attention" id="{anchor}">\n' + "".join(parts) + "</div>\n"


def reason_text(reason: str) -> str:
    """A gallery tag (select_gallery's English reason) in the language in force."""
    kind, _separator, rank = reason.partition(" chrF #")
    if kind == "worst" and rank:
        return _("worst chrF #{rank}").format(rank=rank)
    if kind == "best" and rank:
        return _("best chrF #{rank}").format(rank=rank)
    return _("attention dump") if reason == "attention dump" else reason


def tag_class(reason: str) -> str:
    """CSS classes of a gallery tag: red for worst, green for best, grey for an attention dump."""
    if reason.startswith("best"):
        return "tag best"
    return "tag dump" if reason.startswith("attention") else "tag"


def sample_card(
    sentence: Sentence,
    reasons: list[str],
    dump: AttentionDump | None,
    run: RunInfo,
    evaluation: SplitEval,
    anchor: str,
) -> str:
    """One sentence: source, references, output, its chrF and (when dumped) its attention."""
    tags = "".join(f'<span class="{tag_class(r)}">{esc(reason_text(r))}</span>' for r in reasons)
    rows = [(_("source"), esc(sentence.source))]
    rows += [
        (_("reference {number}").format(number=i) if len(sentence.refs) > 1 else _("reference"), esc(ref))
        for i, ref in enumerate(sentence.refs, start=1)
    ]
    rows.append((_("output"), esc(sentence.hyp) if sentence.hyp else f"<em>{esc(_('(empty)'))}</em>"))
    title = _("Sentence {index} · sentence chrF {chrf}").format(
        index=sentence.index, chrf=number(sentence.chrf, 1)
    )
    heading = f"<h5>{esc(title)}{tags}</h5>\n"
    if dump is not None:
        attention = attention_block(dump, sentence, f"{anchor}-attention")
    else:
        command = eval_command(run.root, evaluation.split, evaluation.scores, str(sentence.index + 1))
        attention = note(
            _("no attention dump for sentence {index}: {command} writes it").format(
                index=sentence.index, command=command
            )
        )
    return f'<article class="sample" id="{anchor}">\n{heading}{key_value_table(rows)}{attention}</article>\n'


def samples_section(run: RunInfo, anchor: str) -> str:
    """Per split: the worst and best sentences by sentence chrF and the sentences with attention dumps."""
    parts = []
    for split_number, evaluation in enumerate(run.evals, start=1):
        parts.append(f"<h4>{esc(_('Split {split}').format(split=evaluation.split))}</h4>\n")
        sentences = evaluation.sentences
        if not sentences:
            parts.append(
                note(
                    _("no eval files in eval/{split}: no sample translations").format(split=evaluation.split)
                )
            )
            continue
        values = [s.chrf for s in sentences]
        spread = _("mean {mean}, min {min}, max {max}").format(
            mean=number(sum(values) / len(values), 1), min=number(min(values), 1), max=number(max(values), 1)
        )
        line = _(
            "Sentence-level chrF (sacreBLEU defaults) over {count} sentences: {spread}. Shown: the {shown} "
            "worst, the {shown} best and every sentence with an attention dump."
        ).format(count=len(sentences), spread=spread, shown=GALLERY_PER_END)
        parts.append(f"<p>{esc(line)}</p>\n")
        for position, (sentence, reasons) in enumerate(
            select_gallery(sentences, evaluation.attention, GALLERY_PER_END)
        ):
            card_anchor = f"{anchor}-{split_number}-{position}"
            parts.append(
                sample_card(
                    sentence, reasons, evaluation.attention.get(sentence.index), run, evaluation, card_anchor
                )
            )
    if not run.evals:
        parts.append(note(_("never evaluated: no sample translations")))
    heading = esc(_("Sample translations"))
    return f'<section id="{anchor}">\n<h3>{heading}</h3>\n{"".join(parts)}</section>\n'


def run_section(run: RunInfo, anchor: str) -> str:
    """Everything about one run."""
    parts = [
        overview_section(run, f"{anchor}-overview"),
        config_section(run, f"{anchor}-config"),
        data_section(run, f"{anchor}-data"),
        curves_section(run, f"{anchor}-curves"),
        timeline_section(run.root, f"{anchor}-timeline"),
        scores_section(run, f"{anchor}-scores"),
        samples_section(run, f"{anchor}-samples"),
    ]
    heading = esc(_("Run {name}").format(name=run.name))
    return f'<section class="run" id="{anchor}">\n<h2>{heading}</h2>\n{"".join(parts)}</section>\n'


# ----- several runs -----


def _splits(runs: Sequence[RunInfo]) -> list[str]:
    """Every split any run was evaluated on, in the order the runs list them."""
    seen: list[str] = []
    for run in runs:
        seen += [e.split for e in run.evals if e.split not in seen]
    return seen


def comparison_section(runs: Sequence[RunInfo], comparisons: Sequence[Comparison]) -> str:
    """The runs side by side: training facts, scores per split, paired bootstrap tests and curves."""
    splits = _splits(runs)
    header = [_("run"), _("model"), _("parameters"), _("steps"), _("wall time"), _("tokens/s")]
    header += [f"{split} {label}" for split in splits for _, label in METRICS]
    rows = []
    for run in runs:
        row = [
            esc(run.name),
            esc(model_type(run)),
            esc(run.log.parameters or _("n/a")),
            esc(run.training.last_step if run.training.last_step is not None else _("n/a")),
            esc(duration(run.training.elapsed_s)),
            esc(number(run.training.mean_tokens_per_s, 0)),
        ]
        for split in splits:
            evaluation = run.eval_for(split)
            scores = evaluation.scores if evaluation is not None and evaluation.scores else {}
            row += [esc(number(scores.get(key))) for key, _ in METRICS]
        rows.append(row)
    parts = [
        f"<h2>{esc(_('Runs side by side'))}</h2>\n",
        table(header, rows, numeric=tuple(range(3, len(header)))),
    ]
    for split in splits:
        texts = {scored_text_of(e.path) for run in runs if (e := run.eval_for(split)) is not None}
        if len(texts) > 1:
            parts.append(
                note(
                    _(
                        "{split}: the runs were scored on different text ({texts}); "
                        "their scores are not comparable"
                    ).format(split=split, texts=" / ".join(sorted(texts)))
                )
            )
        for key, label in METRICS:
            signatures = {
                str(e.scores.get(f"{key}_signature"))
                for run in runs
                if (e := run.eval_for(split)) is not None and e.scores
            }
            if len(signatures) > 1:
                message = _(
                    "{split} {metric}: the runs' sacreBLEU signatures differ ({signatures}); "
                    "those scores are not comparable"
                )
                parts.append(
                    note(message.format(split=split, metric=label, signatures=" / ".join(sorted(signatures))))
                )
    parts.append(f"<h3>{esc(_('Paired bootstrap resampling (Koehn 2004)'))}</h3>\n")
    if not comparisons:
        parts.append(note(_("no paired bootstrap result: the runs share no evaluated split")))
    for comparison in comparisons:
        result = comparison.result
        title = _("{split}: {system} against baseline {baseline}").format(
            split=comparison.split, system=comparison.system.name, baseline=comparison.baseline.name
        )
        resamples = _("{count} resamples, {origin}.").format(
            count=result.get("n_samples", _("n/a")), origin=comparison.origin
        )
        parts.append(f"<h4>{esc(title)}</h4>\n<p>{esc(resamples)}</p>\n")
        parts.append(bootstrap_table(result))
    uri = comparison_data_uri({run.name: run.metrics for run in runs})
    if uri is not None:
        parts.append(f"<h3>{esc(_('Curves of all runs'))}</h3>\n")
        parts.append(image(uri, _("validation and training curves of all runs")))
    return '<section id="comparison">\n' + "".join(parts) + "</section>\n"


def missing_section(runs: Sequence[RunInfo], notes: Sequence[str]) -> str:
    """Everything the report could not show, run by run."""
    parts = [f"<h2>{esc(_('Missing'))}</h2>\n"]
    if not notes and not any(run.missing for run in runs):
        parts.append(f"<p>{esc(_('Nothing is missing.'))}</p>\n")
    for run in runs:
        if run.missing:
            items = "".join(f"<li>{esc(line)}</li>\n" for line in run.missing)
            parts.append(f"<h3>{esc(run.name)}</h3>\n<ul>\n{items}</ul>\n")
    if notes:
        items = "".join(f"<li>{esc(line)}</li>\n" for line in notes)
        parts.append(f"<h3>{esc(_('Comparison'))}</h3>\n<ul>\n{items}</ul>\n")
    return '<section id="missing">\n' + "".join(parts) + "</section>\n"


def render_report(runs: Sequence[RunInfo], generated: str | None = None) -> str:
    """The whole HTML page for `runs` (the first is the baseline of any comparison)."""
    if not runs:
        raise ValueError("a report needs at least one run")
    notes: list[str] = []
    comparisons = compare_runs(list(runs), notes)
    names = ", ".join(run.name for run in runs)
    stamp = generated or datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    toc = []
    if len(runs) > 1:
        toc.append(f'<li><a href="#comparison">{esc(_("Runs side by side"))}</a></li>')
    toc += [
        f'<li><a href="#run-{i}">{esc(_("Run {name}").format(name=run.name))}</a></li>'
        for i, run in enumerate(runs, start=1)
    ]
    toc.append(f'<li><a href="#missing">{esc(_("Missing"))}</a></li>')
    summary = ngettext(
        "{count} run: {names}. Generated {stamp}.", "{count} runs: {names}. Generated {stamp}.", len(runs)
    )
    body = [
        f"<header>\n<h1>{esc(_('attn-mt report'))}</h1>\n"
        f"<p>{esc(summary.format(count=len(runs), names=names, stamp=stamp))}</p>\n"
        f"<nav>\n<ul>\n{''.join(toc)}\n</ul>\n</nav>\n</header>\n<main>\n"
    ]
    if len(runs) > 1:
        body.append(comparison_section(runs, comparisons))
    body += [run_section(run, f"run-{i}") for i, run in enumerate(runs, start=1)]
    body.append(missing_section(runs, notes))
    body.append("</main>\n")
    return (
        f'<!DOCTYPE html>\n<html lang="{html_lang()}">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(_('attn-mt report: {names}').format(names=names))}</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n" + "".join(body) + "</body>\n</html>\n"
    )
