"""Lab panel "exercises": questions on each section of the attention chapter, put in the project's own
words. The learner first picks a prediction; only then is the exercise's experiment run, on request,
with attn-mt's functions (or, for the three that need trained runs, the runs opened or the measured
table of measured.yaml, labelled as measured with its machine), and its outcome compared with the
prediction.

The questions, the predictions offered, the readings and the panel links are data (exercises.yaml);
each function here runs one experiment and returns what it found, its tensors, and which of the
offered predictions it bears out, by the choice's id. The page sends and keeps ids; every text it shows
is written in the language in force (the data's English translated where it is shown, `_(text)`).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch
import yaml
from babel.lists import format_list

from attn_mt.config import ModelConfig
from attn_mt.decoding.outputs import prepare_sentence
from attn_mt.decoding.search import beam_search, greedy_search
from attn_mt.decoding.translator import Translator
from attn_mt.demos.nadaraya_watson import (
    NWKernelRegression,
    gaussian_attention_weights,
    make_data,
    mean_squared_error,
    squared_error,
    train_parametric,
)
from attn_mt.i18n import _, current_language, ngettext
from attn_mt.i18n.languages import BABEL_LOCALE
from attn_mt.lab.engines import checkpoint_text, request_engine
from attn_mt.lab.inputs import LabError, choice, text
from attn_mt.lab.scoring import seeded_additive, seeded_bilinear
from attn_mt.lab.self_attention import where_moved
from attn_mt.lab.shown import answer, code, number, shown
from attn_mt.models.attention import (
    DotProductAttention,
    MultiHeadAttention,
    UnprojectedDotProductAttention,
    masked_softmax,
)
from attn_mt.models.build import build_model
from attn_mt.models.positional import LearnedPositionalEncoding, PositionalEncoding, sinusoid_table
from attn_mt.models.transformer import AddNorm
from attn_mt.run.opened import LoadedRun

Exercise = Callable[[dict[str, LoadedRun]], dict[str, Any]]
SEED = 0
HERE = Path(__file__).parent
CLOSE = 0.10  # two losses within 10% of each other count as "about the same"


@cache
def texts() -> dict[str, dict[str, Any]]:
    """The exercises' questions, predictions (id: text), readings and links, in English, by function name
    (exercises.yaml)."""
    return yaml.safe_load((HERE / "exercises.yaml").read_text(encoding="utf-8"))


@cache
def measured() -> dict[str, Any]:
    """The measured tables of the book's runs trained with each switch, and where (measured.yaml)."""
    return yaml.safe_load((HERE / "measured.yaml").read_text(encoding="utf-8"))


def choice_text(name: str, choice: str) -> str:
    """Exercise `name`'s offered prediction `choice` (its id) in the language in force."""
    return _(texts()[name]["choices"][choice])


def result(
    found: str,
    tensors: list,
    outcome: str,
    lines: list,
    also: dict[str, str] | None = None,
    verdict: str = "",
) -> dict[str, Any]:
    """One experiment's answer: what it found, its tensors, the offered prediction it bears out (the id of
    one of its `choices` in exercises.yaml), and the attn-mt code it ran. `also`: other choices (ids) it
    accepts too, each with why (a gap within seed noise, or the book's answer where attn-mt differs by
    design); `verdict`: the outcome in words when more than one choice is accepted."""
    return {
        "found": found,
        "tensors": tensors,
        "outcome": outcome,
        "code": lines,
        "also": also or {},
        "verdict": verdict,
    }


def more_data(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Non-parametric pooling with 10 to 1000 training points and w = 1 and 4 (bandwidths 1 and 1/4)."""
    sizes, ws, draws = (10, 50, 200, 1000), (1.0, 4.0), 5
    errors = torch.zeros(len(ws), len(sizes), dtype=torch.float64)  # (ws, sizes)
    for j, n in enumerate(sizes):
        for seed in range(draws):
            data = make_data(torch.Generator().manual_seed(seed), n_train=n)
            for i, w in enumerate(ws):
                weights = gaussian_attention_weights(data.x_test, data.x_train, w)  # (Q, N)
                errors[i, j] += mean_squared_error(weights @ data.y_train, data.y_truth) / draws
    flat = [bool(errors[i, -1] > (1 - CLOSE) * errors[i, -2]) for i in range(len(ws))]  # no gain 200 -> 1000
    outcome = "wide_levels_off" if flat[0] and not flat[1] else ("neither" if all(flat) else "same_pace")
    found = [
        _(
            "Mean test error over {draws} data sets, from {fewest} to {most} points: w = 1 {wide} → "
            "{wide_last}; w = 4 {narrow} → {narrow_last}."
        ).format(
            draws=draws,
            fewest=sizes[0],
            most=sizes[-1],
            wide=number(errors[0, 0], ".3f"),
            wide_last=number(errors[0, -1], ".3f"),
            narrow=number(errors[1, 0], ".3f"),
            narrow_last=number(errors[1, -1], ".3f"),
        )
    ]
    for w, levels_off in zip(ws, flat, strict=True):
        said = (
            _("From {fewer} to {more} points the error of w = {w} changes by less than 10%.")
            if levels_off
            else _("From {fewer} to {more} points the error of w = {w} still falls by more than 10%.")
        )
        found.append(said.format(fewer=sizes[-2], more=sizes[-1], w=f"{w:g}"))
    return result(
        " ".join(found),
        [
            shown(
                _("test MSE"),
                errors,
                ["w", "n"],
                rows=[f"w = {w:g}" for w in ws],
                columns=[ngettext("{count} point", "{count} points", n).format(count=n) for n in sizes],
                scale="centred",
            )
        ],
        outcome,
        [code(gaussian_attention_weights), code(make_data)],
    )


NW_EPOCHS, NW_LR = 50, 0.5  # the exercise's training; its link opens the panel with the same settings


def without_leave_one_out(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Train the parametric w with each point among its own keys, against leave-one-out; both start from
    the panel's data and initial w (one generator of seed 0, as the Nadaraya–Watson panel draws them)."""
    generator = torch.Generator().manual_seed(SEED)
    data = make_data(generator)
    start = generator.get_state()
    loo_model, loo_losses = train_parametric(data, generator, lr=NW_LR, epochs=NW_EPOCHS)
    n = data.x_train.shape[0]
    model = NWKernelRegression(torch.Generator().set_state(start))  # the same initial w
    optimizer = torch.optim.SGD(model.parameters(), lr=NW_LR)
    keys, values = data.x_train.expand(n, n), data.y_train.expand(n, n)  # (N, N): each point sees itself
    for _epoch in range(NW_EPOCHS):
        optimizer.zero_grad()
        loss = squared_error(model(data.x_train, keys, values), data.y_train).sum()
        loss.backward()
        optimizer.step()
    learned = torch.tensor([loo_model.w.item(), model.w.item()])
    ratio = float(learned[1] / learned[0])
    return result(
        _(
            "Leaving each point out: w = {w} (final loss {loss}). Each point among its own keys: "
            "w = {self_w} (final loss {self_loss}), {ratio} times as large."
        ).format(
            w=number(learned[0], ".3f"),
            loss=number(loo_losses[-1], ".3f"),
            self_w=number(learned[1], ".3f"),
            self_loss=number(loss.item(), ".3f"),
            ratio=number(ratio, ".1f"),
        ),
        [
            shown(
                _("learned w"),
                learned,
                ["run"],
                columns=[_("leave-one-out"), _("self included")],
                scale="sequential",
            )
        ],
        "larger" if ratio > 1.5 else ("smaller" if ratio < 1 / 1.5 else "same"),
        [code(train_parametric), code(NWKernelRegression)],
    )


def equal_keys(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Additive and dot-product weights when every key is the same, and when they differ."""
    queries = torch.tensor([[[1.0, 2.0]]])  # (1, 1, 2)
    values = torch.arange(8.0).reshape(1, 4, 2)  # (1, 4, 2)
    additive, dot = seeded_additive(2, 2, 8, SEED), DotProductAttention(dropout=0.0).eval()
    rows = []
    for keys in (torch.ones(1, 4, 2), torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.5]]])):
        with torch.no_grad():
            additive(queries, keys, values)
            dot(queries, keys, values)
        rows += [additive.attention_weights[0, 0], dot.attention_weights[0, 0]]
    weights = torch.stack(rows)  # (4, K)
    same = [
        float((weights[0] - weights[1]).abs().max()) < 1e-6,
        float((weights[2] - weights[3]).abs().max()) < 1e-6,
    ]
    return result(
        _(
            "Equal keys: largest weight {largest}, smallest {smallest} (uniform is {uniform}). Different "
            "keys: the two functions' weights differ by up to {gap}."
        ).format(
            largest=number(float(weights[:2].max()), ".4f"),
            smallest=number(float(weights[:2].min()), ".4f"),
            uniform=number(0.25),
            gap=number(float((weights[2] - weights[3]).abs().max()), ".4f"),
        ),
        [
            shown(
                _("attention weights"),
                weights,
                ["case", "K"],
                rows=[
                    _("equal keys, additive"),
                    _("equal keys, dot"),
                    _("different keys, additive"),
                    _("different keys, dot"),
                ],
                scale="weights",
            )
        ],
        "both" if all(same) else ("equal_only" if same[0] else "neither"),
        [code(seeded_additive), code(DotProductAttention.forward)],
    )


def scale_spread(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The spread of q·k for d = 4 and 256, with and without the 1/sqrt(d) scale."""
    generator = torch.Generator().manual_seed(SEED)
    spreads = []
    for d in (4, 256):
        q, k = torch.randn(256, 1, d, generator=generator), torch.randn(256, 8, d, generator=generator)
        raw = torch.matmul(q, k.transpose(1, 2))  # (N, 1, K)
        spreads.append([float(raw.std()), float((raw / math.sqrt(d)).std())])
    table = torch.tensor(spreads)  # (2, 2)
    grows = [bool(table[1, c] > 2 * table[0, c]) for c in range(2)]  # d = 256 against d = 4
    return result(
        " ".join(
            _("d = {d}: std {unscaled} unscaled, {scaled} scaled.").format(
                d=d, unscaled=number(table[row, 0], ".2f"), scaled=number(table[row, 1], ".2f")
            )
            for row, d in enumerate((4, 256))
        ),
        [
            shown(
                _("std of the scores"),
                table,
                ["d", "scale"],
                rows=["d = 4", "d = 256"],
                columns=[_("unscaled"), _("scaled by 1/√d")],
                scale="centred",
            )
        ],
        "scaled_stays" if grows[0] and not grows[1] else ("both_grow" if all(grows) else "both_stay"),
        [code(DotProductAttention.attend)],
    )


def bilinear_sizes(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Queries of size 3 against keys of size 2: the bilinear score qᵀ M k with a (3 x 2) matrix M."""
    queries = torch.tensor([[[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]])  # (1, 2, 3)
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)
    values = torch.arange(6.0).reshape(1, 3, 2)  # (1, 3, 2)
    M = seeded_bilinear(3, 2, SEED)  # (3, 2)
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        output = attention(queries @ M, keys, values)  # (1, 2, 2)
    sums = attention.attention_weights.sum(-1)  # (1, 2)
    return result(
        _(
            "With a (3 x 2) matrix M, qᵀ M k is defined for every pair: the weights below are a proper "
            "softmax over the 3 keys for each of the 2 queries (each row sums to {total}), and the outputs "
            "have the values' size {shape}."
        ).format(total=number(float(sums.min()), ".4f"), shape=tuple(output.shape)),
        [
            shown(
                _("attention weights of qᵀ M k / √k"),
                attention.attention_weights,
                ["B", "Q", "K"],
                scale="weights",
            )
        ],
        "possible" if bool(torch.allclose(sums, torch.ones_like(sums))) else "impossible",
        [code(seeded_bilinear), code(DotProductAttention.attend)],
    )


def summed_scores(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Score by summing q + k instead of the dot product: two different queries, four keys."""
    queries = torch.tensor([[[1.0, 2.0], [-3.0, 0.5]]])  # (1, 2, 2)
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 0.5]]])  # (1, 4, 2)
    scores = (queries.unsqueeze(2) + keys.unsqueeze(1)).sum(-1)  # (1, 2, 4): sum_i (q_i + k_i)
    weights = masked_softmax(scores, None)  # (1, 2, 4)
    dot = masked_softmax(torch.matmul(queries, keys.transpose(1, 2)) / math.sqrt(2), None)  # (1, 2, 4)
    gap = float((weights[0, 0] - weights[0, 1]).abs().max())
    like_dot = float((weights - dot).abs().max()) < 1e-6
    return result(
        _("Summing: the two queries' weights differ by at most {gap}. Dot product: by up to {dot}.").format(
            gap=number(gap, ".1e"), dot=number(float((dot[0, 0] - dot[0, 1]).abs().max()), ".3f")
        ),
        [
            shown(_("weights, summed scores"), weights, ["B", "Q", "K"], scale="weights"),
            shown(_("weights, scaled dot product"), dot, ["B", "Q", "K"], scale="weights"),
        ],
        "like_dot" if like_dot else ("worse" if gap < 1e-6 else "better"),
        [code(masked_softmax)],
    )


def book_masked_softmax(scores: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """The book's masked_softmax: keys past a query's valid length filled with -1e6, then a softmax."""
    keep = torch.arange(scores.shape[-1]) < valid_lens.view(-1, 1, 1)  # (B, 1, K)
    return torch.softmax(scores.masked_fill(~keep, -1e6), dim=-1)  # (B, Q, K)


def empty_rows(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """masked_softmax of a query with valid length 0: attn-mt's, and the book's. The two differ by
    design, so the book's answer is accepted beside attn-mt's."""
    scores = torch.tensor([[[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]]])  # (2, 1, 3)
    valid_lens = torch.tensor([0, 2])
    weights = masked_softmax(scores, valid_lens)  # (2, 1, 3)
    book = book_masked_softmax(scores, valid_lens)  # (2, 1, 3)
    row, book_row = weights[0, 0], book[0, 0]

    def reading(weights_row: torch.Tensor) -> str:
        """Which offered prediction (its id) a row of weights bears out."""
        if not weights_row.any():
            return "zeros"
        return "uniform" if bool(torch.allclose(weights_row, weights_row.mean().expand(3))) else "first_key"

    outcome, books = reading(row), reading(book_row)
    also, verdict = {}, ""
    if books != outcome:
        also[books] = _(
            "That is the book's masked_softmax: filling every score of the row with -1e6 leaves them equal, "
            "so the softmax spreads the weight evenly ({each} each). attn-mt's gives the row {ours} instead, "
            "by design: a query with nothing to attend to takes nothing from padding."
        ).format(each=number(float(book_row[0]), ".4f"), ours=choice_text("empty_rows", outcome))
        verdict = _("{ours} in attn-mt's masked_softmax; {book} in the book's").format(
            ours=choice_text("empty_rows", outcome), book=choice_text("empty_rows", books)
        )
    return result(
        _(
            "attn-mt's masked_softmax gives the query with valid length 0 the weights {ours}; the book's "
            "(fill -1e6) gives it {book}. The other query's weights sum to {total}, all on its 2 valid keys, "
            "in both."
        ).format(
            ours=[round(v, 4) for v in row.tolist()],
            book=[round(v, 4) for v in book_row.tolist()],
            total=number(float(weights[1, 0].sum()), ".4f"),
        ),
        [
            shown(
                _("the query with valid length 0"),
                torch.stack([row, book_row]),
                ["function", "K"],
                rows=[_("attn-mt's masked_softmax"), _("the book's (-1e6)")],
                scale="weights",
            ),
            shown("masked_softmax(X, [0, 2])", weights, ["B", "Q", "K"]),
        ],
        outcome,
        [
            code(masked_softmax),
            code(book_masked_softmax, _("book_masked_softmax (the lab's copy of the book's)")),
        ],
        also,
        verdict,
    )


def head_parameters(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Parameters of MultiHeadAttention with H = 64 and 1, 2, 4 or 8 heads."""
    heads = (1, 2, 4, 8)
    counts = [sum(p.numel() for p in MultiHeadAttention(64, 64, 64, 64, h, 0.0).parameters()) for h in heads]
    outcome = "same" if len(set(counts)) == 1 else ("more" if counts[-1] > counts[0] else "fewer")
    each = [
        ngettext("{count} with {heads} head", "{count} with {heads} heads", h).format(count=c, heads=h)
        for h, c in zip(heads, counts, strict=True)
    ]
    return result(
        _("Parameters: {counts}.").format(counts=", ".join(each)),
        [
            shown(
                _("parameters"),
                torch.tensor(counts, dtype=torch.float64),
                ["h"],
                columns=[str(h) for h in heads],
                scale="sequential",
            )
        ],
        outcome,
        [code(MultiHeadAttention.split_heads)],
    )


def first_transformer(runs: dict[str, LoadedRun], positions: bool = False) -> str | None:
    """The name of the first opened Transformer run (with a positional encoding, if asked)."""
    for name, run in runs.items():
        if run.config.model.type == "transformer" and not (
            positions and run.config.model.positional_encoding == "none"
        ):
            return name
    return None


def pruned_heads(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """A Transformer run's log-probability of its own translations with each head of each decoder
    layer's encoder-decoder attention switched off in turn (its slice of W_o's input set to 0)."""
    name = first_transformer(runs)
    assert name is not None  # exercises.yaml: needs a transformer
    run = runs[name]
    model = copy.deepcopy(run.model)  # heads are switched off in a copy: other requests use the run's model
    engine = Translator(model, run.src_vocab, run.tgt_vocab, run.config, run.device)
    sentences = ["i lost .", "go home .", "he is calm ."]
    batch = []
    for sentence, translation in zip(sentences, engine.translate(sentences, beam_size=1), strict=True):
        fed, length = engine.source_ids(prepare_sentence(run.config, run.src_vocab, sentence))
        ids = translation.hypotheses[0].tokens if translation.hypotheses else []
        batch.append((fed, length, [run.tgt_vocab.bos_id, *ids], [*ids, run.tgt_vocab.eos_id]))

    def total_log_prob() -> float:
        total = 0.0
        with torch.inference_mode():
            for fed, length, tgt_in, wanted in batch:
                logits = model(
                    torch.tensor([fed]), torch.tensor([length]), torch.tensor([tgt_in])
                )  # (1, T, V)
                log_probs = torch.log_softmax(logits.float(), dim=-1)[0]  # (T, V)
                total += float(log_probs[torch.arange(len(wanted)), torch.tensor(wanted)].sum())
        return total

    heads, layers = model.num_heads, len(model.decoder.blks)
    d = model.decoder.num_hiddens // heads
    model.eval()
    full = total_log_prob()
    drops = torch.zeros(layers, heads, dtype=torch.float64)  # (L, h)
    for layer in range(layers):
        W_o = model.decoder.blks[f"block{layer}"].attention2.W_o
        for head in range(heads):

            def silence(_module: Any, inputs: tuple, head: int = head) -> tuple:
                merged = inputs[0].clone()  # (B, T, H): the heads' outputs side by side
                merged[..., head * d : (head + 1) * d] = 0
                return (merged,)

            hook = W_o.register_forward_pre_hook(silence)
            drops[layer, head] = full - total_log_prob()
            hook.remove()
    least = divmod(int(drops.abs().argmin()), heads)
    spread = float(drops.abs().max())
    return result(
        _(
            "Log-probability of {count} translations: {full} with every head. Switching off one head lowers "
            "it by {low} to {high} (below 0: the translations became more probable); the least needed is "
            "layer {layer}, head {head}. Ran on {checkpoint}."
        ).format(
            count=len(sentences),
            full=number(full, ".3f"),
            low=number(float(drops.min()), ".3f"),
            high=number(float(drops.max()), ".3f"),
            layer=least[0] + 1,
            head=least[1] + 1,
            checkpoint=checkpoint_text(name, run),
        ),
        [
            shown(
                _("log-probability lost with the head off"),
                drops,
                ["L", "h"],
                rows=[_("layer {n}").format(n=k + 1) for k in range(layers)],
                columns=[_("head {n}").format(n=k + 1) for k in range(heads)],
                scale="centred",
            )
        ],
        "some_cheap" if float(drops.abs().min()) < 0.25 * spread else "all_alike",
        [code(MultiHeadAttention.merge_heads)],
    )


def distance_only(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """P[i] · P[i + k] for several i and k: a function of k alone, and the same for -k."""
    table = sinusoid_table(64, 32).double()  # (S, H)
    starts, shifts = (10, 20, 30), (-4, 1, 4)
    dots = torch.tensor([[float(table[i] @ table[i + k]) for k in shifts] for i in starts])  # (3, 3)
    along_i = float((dots - dots[0]).abs().max())
    sign = float((dots[:, 0] - dots[:, 2]).abs().max())
    return result(
        _(
            "Down each column (k fixed, i = {starts}) the values differ by at most {along}; k = 4 and k = -4 "
            "differ by at most {sign}."
        ).format(starts=", ".join(map(str, starts)), along=number(along_i, ".1e"), sign=number(sign, ".1e")),
        [
            shown(
                "P[i] · P[i + k]",
                dots,
                ["i", "k"],
                rows=[f"i = {i}" for i in starts],
                columns=[f"k = {k}" for k in shifts],
            )
        ],
        "varies_with_i" if along_i > 1e-5 else ("symmetric" if sign < 1e-5 else "signed"),
        [code(sinusoid_table)],
    )


ORDERED = (  # the same words, where the order says who did what; the first pair the run knows is used
    ("the dog bit the man .", "the man bit the dog ."),
    ("tom saw you .", "you saw tom ."),  # in the book's 601 pairs' vocabulary
)


def ordered_pair(run: LoadedRun) -> tuple[list[str], list[str]]:
    """Two sentences of the same words in orders that mean different things: the first pair of ORDERED
    whose words the run knows, else three words of its vocabulary as `a b c .` and `c b a .`."""
    for pair in ORDERED:
        first, second = (prepare_sentence(run.config, run.src_vocab, s) for s in pair)
        if all(word in run.src_vocab for word in first):
            return first, second
    words = [w for w in run.src_vocab.idx_to_token if w.isalpha()][:3]
    return [*words, "."], [words[2], words[1], words[0], "."]


def order_without_positions(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """A Transformer run's encoder on two orders of the same words, with and without the positional
    encoding: without it each word's output is the same vector in both orders."""
    name = first_transformer(runs, positions=True)
    assert name is not None  # exercises.yaml: needs a transformer with positions
    run = runs[name]
    model = copy.deepcopy(run.model)  # positions are taken away in a copy: other requests use the run's model
    engine = Translator(model, run.src_vocab, run.tgt_vocab, run.config, run.device)
    orders = ordered_pair(run)
    encoded = []
    for words in orders:
        fed, length = engine.source_ids(words)
        encoded.append((torch.tensor([fed]), torch.tensor([length])))
    length = int(encoded[0][1])
    moved = where_moved(orders[0], orders[1])
    moved += list(range(len(moved), length))  # <eos> and anything the engine appends stay in place
    model.eval()
    with torch.inference_mode():
        with_positions = [model.encode(src, lens)["memory"][0, :length] for src, lens in encoded]  # (S, H)
        model.encoder.pos_encoding.register_forward_hook(
            lambda _module, inputs, _output: inputs[0]  # X without P (dropout is off in eval)
        )
        without = [model.encode(src, lens)["memory"][0, :length] for src, lens in encoded]  # (S, H)
    per_word = torch.stack(
        [(outputs[0] - outputs[1][moved]).abs().amax(-1) for outputs in (with_positions, without)], dim=1
    ).double()  # (S, 2): each word of the first order against itself in the second
    gaps = per_word.amax(0).tolist()
    tokens = [run.src_vocab.idx_to_token[int(i)] for i in encoded[0][0][0, :length]]
    encodings = [_("with positions"), _("without positions")]
    return result(
        _(
            "With positions, a word's output differs between the two orders by up to {with_positions}; "
            "without them, by {without}. The second table gives each word of the first order, with its "
            "place in each order. Ran on {checkpoint}."
        ).format(
            with_positions=number(gaps[0], ".3f"),
            without=number(gaps[1], ".1e"),
            checkpoint=checkpoint_text(name, run),
        ),
        [
            shown(
                _("largest difference between the two orders"),
                torch.tensor(gaps, dtype=torch.float64),
                ["encoding"],
                columns=encodings,
                scale="sequential",
            ),
            shown(
                _("each word's output: largest difference between the two orders"),
                per_word,
                ["S", "encoding"],
                rows=[f"{token} ({i + 1} → {moved[i] + 1})" for i, token in enumerate(tokens)],
                columns=encodings,
                scale="sequential",
                tokens="rows",
            ),
        ],
        "reordered_only" if gaps[1] < 1e-5 else "tells_order",
        [code(PositionalEncoding.forward)],
    )


def batch_against_layer_norm(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """attn-mt's AddNorm (LayerNorm) against the same with BatchNorm: does one sentence's output depend on
    the other sentences of its batch?"""
    generator = torch.Generator().manual_seed(SEED)
    X = torch.randn(2, 4, 8, generator=generator)  # (B, T, H): two sentences of 4 positions
    Y = torch.randn(2, 4, 8, generator=generator)  # (B, T, H) a sublayer's output
    other = X.clone()
    other[1] = 10 * torch.randn(4, 8, generator=generator)  # only the second sentence changes
    layer = AddNorm(8, dropout=0.0).eval()
    batch = AddNorm(8, dropout=0.0, norm="batch").train()  # the batch's statistics, as in training
    changes = []
    for norm in (layer, batch):
        with torch.no_grad():
            changes.append(float((norm(X, Y)[0] - norm(other, Y)[0]).abs().max()))  # (T, H) of sentence 1
    moves = [c > 1e-6 for c in changes]
    return result(
        _(
            "The first sentence's output moves by {layer} with LayerNorm and by {batch} with BatchNorm."
        ).format(layer=number(changes[0], ".1e"), batch=number(changes[1], ".3f")),
        [
            shown(
                _("largest change in sentence 1"),
                torch.tensor(changes, dtype=torch.float64),
                ["norm"],
                columns=["LayerNorm", "BatchNorm"],
                scale="sequential",
            )
        ],
        "both" if all(moves) else ("batch_only" if moves[1] else "neither"),
        [code(AddNorm.forward)],
    )


def beam_one_is_greedy(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """search.py's beam search with a beam of 1 against its greedy search, on a few sentences of a run."""
    name, run = next(iter(runs.items()))
    engine = request_engine(run)
    vocab, dc = run.tgt_vocab, run.config.decode
    common = dict(bos_id=vocab.bos_id, eos_id=vocab.eos_id, max_len_a=dc.max_len_a, max_len_b=dc.max_len_b)
    sentences = ["i lost .", "go home .", "he is calm ."]
    pairs = []
    engine.model.eval()
    for sentence in sentences:
        fed, length = engine.source_ids(prepare_sentence(run.config, run.src_vocab, sentence))
        src, src_lens = (
            torch.tensor([fed], device=engine.device),
            torch.tensor([length], device=engine.device),
        )
        greedy = greedy_search(engine.model, src, src_lens, **common)[0]
        beam = beam_search(engine.model, src, src_lens, beam_size=1, **common)[0][0]
        pairs.append(
            (vocab.detokenize(greedy.tokens), vocab.detokenize(beam.tokens), greedy.score, beam.score)
        )
    same = sum(greedy == beam for greedy, beam, _g, _b in pairs)
    scores = torch.tensor([[g, b] for _greedy, _beam, g, b in pairs], dtype=torch.float64)  # (sentences, 2)
    return result(
        _("{same} of {count} sentences translate identically: {outputs}. Ran on {checkpoint}.").format(
            same=same,
            count=len(sentences),
            outputs="; ".join(repr(greedy) for greedy, _beam, _g, _b in pairs),
            checkpoint=checkpoint_text(name, run),
        ),
        [
            shown(
                _("log-probability"),
                scores,
                ["sentence", "search"],
                rows=sentences,
                columns=[_("greedy"), _("beam 1")],
                scale="centred",
                tokens="rows",
            )
        ],
        "every_sentence" if same == len(sentences) else "some_differ",
        [code(greedy_search), code(beam_search)],
    )


def final_loss(run: LoadedRun) -> float | None:
    """The final training loss an opened run directory's run_summary.json records, if it has one."""
    summary = None if run.source is None else run.source / "run_summary.json"
    if summary is None or not summary.is_file():
        return None
    try:
        value = json.loads(summary.read_text(encoding="utf-8")).get("final_loss")
    except (OSError, ValueError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def other_differences(first: LoadedRun, second: LoadedRun, key: str) -> list[str]:
    """The config keys (section.key) besides model.`key` in which two runs differ."""
    one, two = first.config.to_dict(), second.config.to_dict()
    return [
        f"{section}.{name}"
        for section, values in one.items()
        for name, value in values.items()
        if value != two[section][name] and f"{section}.{name}" != f"model.{key}"
    ]


def labelled(key: str, value: str) -> str:
    """A choice of model.`key` as the tables name it: its value, marked when it is the book's."""
    if value == str(getattr(ModelConfig(), key)):
        return _("{value} (the book's)").format(value=value)
    return value


def switch_results(
    runs: dict[str, LoadedRun], model_type: str, key: str
) -> tuple[str, list, dict[str, list[float]]]:
    """The opened runs' final losses when they differ in model.`key`, else the measured table
    (measured.yaml, labelled as measured with its machine and date); and the final losses by choice
    (model.`key`'s value), one per run (seed), the book's choice first."""
    chosen: dict[str, list[tuple[str, LoadedRun, float]]] = {}
    for name, run in runs.items():
        loss = final_loss(run) if run.config.model.type == model_type else None
        if loss is not None:
            chosen.setdefault(str(getattr(run.config.model, key)), []).append((name, run, loss))
    if len(chosen) >= 2:
        book = str(getattr(ModelConfig(), key))
        picked = sorted(chosen.items(), key=lambda item: item[0] != book)  # the book's choice first
        opened = [(value, name, run, loss) for value, group in picked for name, run, loss in group]
        first = opened[0][2]
        others = sorted(
            {d for _value, _name, run, _loss in opened for d in other_differences(first, run, key)}
        )
        same = (
            _("Their configs differ only in model.{key}.").format(key=key)
            if not others
            else _("Their configs also differ in {keys}, so the switch is not the only change.").format(
                keys=", ".join(others)
            )
        )
        found = _(
            "Computed from the opened runs, final training loss from their run_summary.json: {runs}. {same}"
        ).format(
            runs="; ".join(
                f"{name} (model.{key}: {value}) {number(loss, '.4f')}" for value, name, _run, loss in opened
            ),
            same=same,
        )
        losses = torch.tensor([loss for *_other, loss in opened], dtype=torch.float64)  # (runs,)
        by_choice = {value: [loss for _name, _run, loss in group] for value, group in picked}
        return (
            found,
            [
                shown(
                    _("final training loss"),
                    losses,
                    ["run"],
                    columns=[name for _value, name, _run, _loss in opened],
                    scale="sequential",
                )
            ],
            by_choice,
        )
    model = "transformer" if model_type == "transformer" else "bahdanau"
    table_file = measured()
    rows = table_file["tables"][key]
    machine, date = _(table_file["machine"]), table_file["date"]
    found = _(
        "Measured, not computed now: on {machine}, {date}, the book's run with each choice (`{command}`, "
        "seeds 0 and 1, then `attn-mt eval RUN --split book`): {rows}. Another machine trains to other "
        "numbers. Open run directories that differ in model.{key} (`attn-mt lab RUN_DIR RUN_DIR`) to compare "
        "your own here."
    ).format(
        machine=machine,
        date=date,
        command=table_file["command"].format(model=model, key=f"model.{key}"),
        rows="; ".join(
            _("{choice}: final loss {loss} and {loss2}, BLEU {bleu} and {bleu2}").format(
                choice=labelled(key, value),
                loss=number(v[0], ".4f"),
                loss2=number(v[1], ".4f"),
                bleu=number(v[2], ".1f"),
                bleu2=number(v[3], ".1f"),
            )
            for value, v in rows
        ),
        key=key,
    )
    table = torch.tensor([values for _value, values in rows], dtype=torch.float64)  # (choices, 4)
    return (
        found,
        [
            shown(
                _("measured on {machine}, {date}: loss and BLEU").format(machine=machine, date=date),
                table,
                ["choice", "measure"],
                rows=[labelled(key, value) for value, _values in rows],
                columns=[_(column) for column in table_file["columns"]],
                scale="sequential",
            )
        ],
        {value: list(values[:2]) for value, values in rows},
    )


def mean(values: list[float]) -> float:
    """The mean of a choice's final losses."""
    return sum(values) / len(values)


def seed_noise(losses: dict[str, list[float]]) -> tuple[float, str] | None:
    """How far two runs of one choice, seeds apart, ended: the largest such gap, and its choice; None
    when no choice has two runs."""
    gaps = [(max(v) - min(v), value) for value, v in losses.items() if len(v) >= 2]
    return max(gaps) if gaps else None


def spread_table(losses: dict[str, list[float]], key: str) -> dict[str, Any]:
    """Each choice's mean final loss and the range between its runs (seeds), for the page."""
    table = torch.tensor([[mean(v), max(v) - min(v)] for v in losses.values()], dtype=torch.float64)
    return shown(
        _("final loss: mean and spread between seeds"),
        table,
        ["choice", "measure"],
        rows=[labelled(key, value) for value in losses],
        columns=[_("mean"), _("largest minus smallest")],
        scale="sequential",
    )


def noise_words(gap: float, noise: tuple[float, str] | None, key: str, lowest: bool = False) -> str:
    """A gap between two mean losses (the two lowest of three, if `lowest`) set beside the seed noise, in
    words."""
    if noise is None:
        said = (
            _(
                "The two lowest means differ by {gap}; with one run per choice, how far seeds alone move the "
                "loss is not known here (open runs of two seeds per choice to see it)."
            )
            if lowest
            else _(
                "The means differ by {gap}; with one run per choice, how far seeds alone move the loss is "
                "not known here (open runs of two seeds per choice to see it)."
            )
        )
        return said.format(gap=number(gap, ".5f"))
    if gap <= noise[0]:
        said = (
            _(
                "The two lowest means differ by {gap}; two seeds of one choice ({choice}) ended {noise} "
                "apart, so the gap is within seed noise."
            )
            if lowest
            else _(
                "The means differ by {gap}; two seeds of one choice ({choice}) ended {noise} apart, so the "
                "gap is within seed noise."
            )
        )
    else:
        said = (
            _(
                "The two lowest means differ by {gap}; two seeds of one choice ({choice}) ended {noise} "
                "apart, so the gap is beyond seed noise."
            )
            if lowest
            else _(
                "The means differ by {gap}; two seeds of one choice ({choice}) ended {noise} apart, so the "
                "gap is beyond seed noise."
            )
        )
    return said.format(gap=number(gap, ".5f"), choice=labelled(key, noise[1]), noise=number(noise[0], ".5f"))


def compared(losses: dict[str, list[float]], key: str) -> tuple[str, dict[str, str], str, str]:
    """The second choice's mean loss against the first's (the book's) as one of the choices "lower" (a
    clearly lower loss), "higher", "same" (within 10%); the choices also accepted when the gap is beyond
    10% but within seed noise, the verdict then, and the gap beside the noise in words."""
    means = [mean(v) for v in losses.values()]
    book, other = means[0], means[1]
    gap, noise = abs(other - book), seed_noise(losses)
    words = noise_words(gap, noise, key)
    if gap <= CLOSE * book:
        return "same", {}, "", words
    outcome = "lower" if other < book else "higher"
    if noise is None or gap > noise[0]:
        return outcome, {}, "", words
    also = {"same": _("Within seed noise: {words}").format(words=words)}
    verdict = (
        _("lower by more than 10%, but within seed noise")
        if outcome == "lower"
        else _("higher by more than 10%, but within seed noise")
    )
    return outcome, also, verdict, words


def attention_parameters(scoring: str) -> int:
    """How many parameters the Bahdanau decoder's attention has at the book's sizes (H = 32)."""
    model = build_model(ModelConfig(scoring=scoring), 8, 8)
    return sum(p.numel() for p in model.decoder.attention.parameters())


def dot_in_bahdanau(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The Bahdanau decoder's attention with scaled dot-product scoring (model.scoring: dot): its
    parameters, and the trained runs' losses (opened runs, else the measured table)."""
    counts = [attention_parameters("additive"), attention_parameters("dot")]
    found, tensors, losses = switch_results(runs, "gru_bahdanau", "scoring")
    outcome, also, verdict, words = compared(losses, "scoring")
    sizes = _(
        "At the book's sizes (H = 32) additive attention has {additive} parameters (W_q and W_k, H × H "
        "each, and w_v, H); dot-product scoring has {dot}: the decoder's GRU state and the encoder's outputs "
        "are both H wide and are compared as they are."
    ).format(additive=counts[0], dot=counts[1])
    return result(
        f"{sizes} {found} {words}",
        [
            shown(
                _("attention parameters"),
                torch.tensor(counts, dtype=torch.float64),
                ["scoring"],
                columns=["additive", "dot"],
                scale="sequential",
            ),
            *tensors,
            spread_table(losses, "scoring"),
        ],
        outcome,
        [code(UnprojectedDotProductAttention.attend)],
        also,
        verdict,
    )


def learned_or_no_positions(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The book's Transformer with sinusoidal, learned or no positions (model.positional_encoding, the
    choices' ids); every choice whose mean final loss is within seed noise of the lowest is accepted."""
    key = "positional_encoding"
    found, tensors, losses = switch_results(runs, "transformer", key)
    means = {value: mean(v) for value, v in losses.items()}
    lowest = min(means, key=lambda value: means[value])
    noise = seed_noise(losses)
    tied = [
        value
        for value in means
        if value != lowest and noise is not None and means[value] - means[lowest] <= noise[0]
    ]
    also = {
        value: _("Within seed noise of {choice}: {words}").format(
            choice=choice_text("learned_or_no_positions", lowest),
            words=noise_words(means[value] - means[lowest], noise, key),
        )
        for value in tied
    }
    choices = list(texts()["learned_or_no_positions"]["choices"])
    verdict = (
        _("{choices}: within seed noise of each other").format(
            choices=format_list(
                [choice_text("learned_or_no_positions", c) for c in choices if c == lowest or c in also],
                style="or",
                locale=BABEL_LOCALE[current_language()],
            )
        )
        if also
        else ""
    )
    runner_up = min((v for value, v in means.items() if value != lowest), default=means[lowest])
    words = noise_words(runner_up - means[lowest], noise, key, lowest=True)
    return result(
        f"{found} {words}",
        [*tensors, spread_table(losses, key)],
        lowest,
        [code(LearnedPositionalEncoding.forward)],
        also,
        verdict,
    )


def batch_norm_trained(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The book's Transformer trained with BatchNorm in every add & norm (model.norm: batch)."""
    found, tensors, losses = switch_results(runs, "transformer", "norm")
    outcome, also, verdict, words = compared(losses, "norm")
    return result(
        f"{found} {words}",
        [*tensors, spread_table(losses, "norm")],
        outcome,
        [code(AddNorm.forward)],
        also,
        verdict,
    )


EXERCISES: dict[str, Exercise] = {
    run_exercise.__name__: run_exercise
    for run_exercise in (
        empty_rows,
        equal_keys,
        bilinear_sizes,
        summed_scores,
        scale_spread,
        more_data,
        without_leave_one_out,
        dot_in_bahdanau,
        head_parameters,
        pruned_heads,
        distance_only,
        order_without_positions,
        learned_or_no_positions,
        batch_against_layer_norm,
        batch_norm_trained,
        beam_one_is_greedy,
    )
}


def available(runs: dict[str, LoadedRun]) -> dict[str, dict[str, Any]]:
    """The exercises the opened runs allow (exercises.yaml's `needs`), in order, each with its section,
    question, choices ({"id", "text"}), reading and link in the language in force, the question and link
    naming the run it experiments on."""
    names = {
        "run": next(iter(runs), None),
        "transformer": first_transformer(runs),
        "positions_transformer": first_transformer(runs, positions=True),
    }
    listing = {}
    for name, entry in texts().items():
        need = entry.get("needs")
        if need is not None and names[need] is None:
            continue
        run = names.get(need) or ""

        def filled(template: str, run: str = run) -> str:
            return template.replace("{transformer}", run).replace("{run}", run)

        listing[name] = {
            "name": name,
            "section": _(entry["section"]),
            "question": filled(_(entry["question"])),
            "choices": [{"id": choice, "text": _(words)} for choice, words in entry["choices"].items()],
            "reading": _(entry["reading"]),
            "link": filled(entry["link"]),
        }
    return listing


def exercises_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """Without `exercise`: every exercise's question and offered predictions, nothing computed. With
    `exercise` and a `prediction` (the id of one of its choices, the same in every language): that
    exercise's experiment, run now, and whether it bears the prediction out (`accepted`: the ids of the
    choices it bears out; `outcome`: that in words)."""
    listing = available(runs)
    name = text(state, "exercise", "", 64).strip()
    if not name:
        asked = ("name", "section", "question", "choices")
        return answer([], [], [], exercises=[{k: e[k] for k in asked} for e in listing.values()])
    entry = listing.get(name)
    if entry is None:
        raise LabError(
            _("exercise: {name} is not one of {names}").format(name=repr(name[:40]), names=", ".join(listing))
        )
    words = {c["id"]: c["text"] for c in entry["choices"]}
    prediction = choice(state, "prediction", "", tuple(words))
    found = EXERCISES[name](runs)
    also, verdict, outcome = found.pop("also"), found.pop("verdict"), found.pop("outcome")
    answered = {
        **entry,
        **found,
        "outcome": verdict or words[outcome],
        "accepted": [c for c in words if c == outcome or c in also],
        "why": also.get(prediction, ""),
        "prediction": prediction,
        "right": prediction == outcome or prediction in also,
    }
    return answer([], [], [], exercises=[answered])
