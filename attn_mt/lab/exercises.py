"""Lab panel "exercises": questions on each section of the attention chapter, put in the project's own
words. The learner first picks a prediction; only then is the exercise's experiment run, on request,
with attn-mt's functions (or, for the three that need trained runs, the runs opened or the measured
table of measured.yaml, labelled as measured with its machine), and its outcome compared with the
prediction.

The questions, the predictions offered, the readings and the panel links are data (exercises.yaml);
each function here runs one experiment and returns what it found, its tensors, and which of the
offered predictions it bears out.
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
from attn_mt.lab.engines import checkpoint_text, request_engine
from attn_mt.lab.inputs import LabError, choice, text
from attn_mt.lab.scoring import seeded_additive, seeded_bilinear
from attn_mt.lab.self_attention import where_moved
from attn_mt.lab.shown import answer, code, shown
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
    """The exercises' questions, predictions, readings and links, by function name (exercises.yaml)."""
    return yaml.safe_load((HERE / "exercises.yaml").read_text(encoding="utf-8"))


@cache
def measured() -> dict[str, Any]:
    """The measured tables of the book's runs trained with each switch, and where (measured.yaml)."""
    return yaml.safe_load((HERE / "measured.yaml").read_text(encoding="utf-8"))


def result(
    found: str,
    tensors: list,
    outcome: int,
    lines: list,
    also: dict[int, str] | None = None,
    verdict: str = "",
) -> dict[str, Any]:
    """One experiment's answer: what it found, its tensors, the offered prediction it bears out (one of
    its `choices` in exercises.yaml, by index), and the attn-mt code it ran. `also`: other choices it
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
    outcome = 1 if flat[0] and not flat[1] else (2 if all(flat) else 0)
    return result(
        f"Mean test error over {draws} data sets, from {sizes[0]} to {sizes[-1]} points: "
        f"w = 1 {errors[0, 0]:.3f} → {errors[0, -1]:.3f}; w = 4 {errors[1, 0]:.3f} → {errors[1, -1]:.3f}. "
        f"From {sizes[-2]} to {sizes[-1]} points the error of w = 1 "
        + ("changes by less than 10%" if flat[0] else "still falls by more than 10%")
        + ", that of w = 4 "
        + ("changes by less than 10%." if flat[1] else "still falls by more than 10%."),
        [
            shown(
                "test MSE",
                errors,
                ["w", "n"],
                rows=[f"w = {w:g}" for w in ws],
                columns=[f"{n} points" for n in sizes],
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
    for _ in range(NW_EPOCHS):
        optimizer.zero_grad()
        loss = squared_error(model(data.x_train, keys, values), data.y_train).sum()
        loss.backward()
        optimizer.step()
    learned = torch.tensor([loo_model.w.item(), model.w.item()])
    ratio = float(learned[1] / learned[0])
    return result(
        f"Leaving each point out: w = {learned[0]:.3f} (final loss {loo_losses[-1]:.3f}). "
        f"Each point among its own keys: w = {learned[1]:.3f} (final loss {loss.item():.3f}), "
        f"{ratio:.1f} times as large.",
        [
            shown(
                "learned w", learned, ["run"], columns=["leave-one-out", "self included"], scale="sequential"
            )
        ],
        0 if ratio > 1.5 else (2 if ratio < 1 / 1.5 else 1),
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
        f"Equal keys: largest weight {float(weights[:2].max()):.4f}, smallest {float(weights[:2].min()):.4f} "
        f"(uniform is 0.25). Different keys: the two functions' weights differ by up to "
        f"{float((weights[2] - weights[3]).abs().max()):.4f}.",
        [
            shown(
                "attention weights",
                weights,
                ["case", "K"],
                rows=[
                    "equal keys, additive",
                    "equal keys, dot",
                    "different keys, additive",
                    "different keys, dot",
                ],
            )
        ],
        0 if all(same) else (1 if same[0] else 2),
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
        f"d = 4: std {table[0, 0]:.2f} unscaled, {table[0, 1]:.2f} scaled. "
        f"d = 256: std {table[1, 0]:.2f} unscaled, {table[1, 1]:.2f} scaled.",
        [
            shown(
                "std of the scores",
                table,
                ["d", "scale"],
                rows=["d = 4", "d = 256"],
                columns=["none", "1/√d"],
            )
        ],
        0 if grows[0] and not grows[1] else (2 if all(grows) else 1),
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
        f"With a (3 x 2) matrix M, qᵀ M k is defined for every pair: the weights below are a proper "
        f"softmax over the 3 keys for each of the 2 queries (each row sums to {float(sums.min()):.4f}), "
        f"and the outputs have the values' size {tuple(output.shape)}.",
        [shown("attention weights of qᵀ M k / √k", attention.attention_weights, ["B", "Q", "K"])],
        0 if bool(torch.allclose(sums, torch.ones_like(sums))) else 1,
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
        f"Summing: the two queries' weights differ by at most {gap:.1e}. "
        f"Dot product: by up to {float((dot[0, 0] - dot[0, 1]).abs().max()):.3f}.",
        [
            shown("weights, summed scores", weights, ["B", "Q", "K"]),
            shown("weights, scaled dot product", dot, ["B", "Q", "K"]),
        ],
        2 if like_dot else (1 if gap < 1e-6 else 0),
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

    def reading(weights_row: torch.Tensor) -> int:
        """Which offered prediction a row of weights bears out."""
        if not weights_row.any():
            return 0
        return 1 if bool(torch.allclose(weights_row, weights_row.mean().expand(3))) else 2

    outcome, books = reading(row), reading(book_row)
    choices = texts()["empty_rows"]["choices"]
    also, verdict = {}, ""
    if books != outcome:
        also[books] = (
            f"That is the book's masked_softmax: filling every score of the row with -1e6 leaves them "
            f"equal, so the softmax spreads the weight evenly ({float(book_row[0]):.4f} each). attn-mt's "
            f"gives the row {choices[outcome]} instead, by design: a query with nothing to attend to "
            "takes nothing from padding."
        )
        verdict = f"{choices[outcome]} in attn-mt's masked_softmax; {choices[books]} in the book's"
    return result(
        f"attn-mt's masked_softmax gives the query with valid length 0 the weights "
        f"{[round(v, 4) for v in row.tolist()]}; the book's (fill -1e6) gives it "
        f"{[round(v, 4) for v in book_row.tolist()]}. The other query's weights sum to "
        f"{float(weights[1, 0].sum()):.4f}, all on its 2 valid keys, in both.",
        [
            shown(
                "the query with valid length 0",
                torch.stack([row, book_row]),
                ["function", "K"],
                rows=["attn-mt's masked_softmax", "the book's (-1e6)"],
                scale="weights",
            ),
            shown("masked_softmax(X, [0, 2])", weights, ["B", "Q", "K"]),
        ],
        outcome,
        [
            code(masked_softmax),
            code(book_masked_softmax, "book_masked_softmax (the lab's copy of the book's)"),
        ],
        also,
        verdict,
    )


def head_parameters(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Parameters of MultiHeadAttention with H = 64 and 1, 2, 4 or 8 heads."""
    heads = (1, 2, 4, 8)
    counts = [sum(p.numel() for p in MultiHeadAttention(64, 64, 64, 64, h, 0.0).parameters()) for h in heads]
    outcome = 1 if len(set(counts)) == 1 else (0 if counts[-1] > counts[0] else 2)
    return result(
        "Parameters: " + ", ".join(f"{h} heads {c}" for h, c in zip(heads, counts, strict=True)) + ".",
        [
            shown(
                "parameters",
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
        f"Log-probability of {len(sentences)} translations: {full:.3f} with every head. Switching off "
        f"one head lowers it by {float(drops.min()):.3f} to {float(drops.max()):.3f} (below 0: the "
        f"translations became more probable); the least needed is layer {least[0] + 1}, head "
        f"{least[1] + 1}. Ran on {checkpoint_text(name, run)}.",
        [
            shown(
                "log-probability lost with the head off",
                drops,
                ["L", "h"],
                rows=[f"layer {k + 1}" for k in range(layers)],
                columns=[f"head {k + 1}" for k in range(heads)],
            )
        ],
        0 if float(drops.abs().min()) < 0.25 * spread else 1,
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
        f"Down each column (k fixed, i = {', '.join(map(str, starts))}) the values differ by at most "
        f"{along_i:.1e}; k = 4 and k = -4 differ by at most {sign:.1e}.",
        [
            shown(
                "P[i] · P[i + k]",
                dots,
                ["i", "k"],
                rows=[f"i = {i}" for i in starts],
                columns=[f"k = {k}" for k in shifts],
            )
        ],
        2 if along_i > 1e-5 else (0 if sign < 1e-5 else 1),
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
    gaps = [float((outputs[0] - outputs[1][moved]).abs().max()) for outputs in (with_positions, without)]
    return result(
        f"{' '.join(orders[0])!r} against {' '.join(orders[1])!r}: with positions, a word's output differs "
        f"between the orders by up to {gaps[0]:.3f}; without them, by {gaps[1]:.1e}. Ran on "
        f"{checkpoint_text(name, run)}.",
        [
            shown(
                "largest difference between the two orders",
                torch.tensor(gaps, dtype=torch.float64),
                ["encoding"],
                columns=["with positions", "without"],
                scale="sequential",
            )
        ],
        1 if gaps[1] < 1e-5 else 0,
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
        f"The first sentence's output moves by {changes[0]:.1e} with LayerNorm and by {changes[1]:.3f} with "
        "BatchNorm.",
        [
            shown(
                "largest change in sentence 1",
                torch.tensor(changes, dtype=torch.float64),
                ["norm"],
                columns=["LayerNorm", "BatchNorm"],
                scale="sequential",
            )
        ],
        0 if all(moves) else (1 if moves[1] else 2),
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
    same = sum(g == b for g, b, _, _ in pairs)
    scores = torch.tensor([[g, b] for _, _, g, b in pairs], dtype=torch.float64)  # (sentences, 2)
    return result(
        f"{same} of {len(sentences)} sentences translate identically: "
        + "; ".join(f"{g!r}" for g, _, _, _ in pairs)
        + f". Ran on {checkpoint_text(name, run)}.",
        [
            shown(
                "log-probability",
                scores,
                ["sentence", "search"],
                rows=sentences,
                columns=["greedy", "beam 1"],
            )
        ],
        0 if same == len(sentences) else 1,
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


def switch_results(
    runs: dict[str, LoadedRun], model_type: str, key: str
) -> tuple[str, list, dict[str, list[float]]]:
    """The opened runs' final losses when they differ in model.`key`, else the measured table
    (measured.yaml, labelled as measured with its machine and date); and the final losses by choice,
    one per run (seed), the book's choice first."""
    chosen: dict[str, list[tuple[str, LoadedRun, float]]] = {}
    for name, run in runs.items():
        loss = final_loss(run) if run.config.model.type == model_type else None
        if loss is not None:
            chosen.setdefault(str(getattr(run.config.model, key)), []).append((name, run, loss))
    if len(chosen) >= 2:
        book = str(getattr(ModelConfig(), key))
        picked = sorted(chosen.items(), key=lambda item: item[0] != book)  # the book's choice first
        first = picked[0][1][0][1]
        others = sorted(
            {d for _, group in picked for _, run, _ in group for d in other_differences(first, run, key)}
        )
        same = (
            f"Their configs differ only in model.{key}."
            if not others
            else f"Their configs also differ in {', '.join(others)}, so the switch is not the only change."
        )
        found = (
            "Computed from the opened runs, final training loss from their run_summary.json: "
            + "; ".join(
                f"{name} (model.{key}: {value}) {loss:.4f}"
                for value, group in picked
                for name, _, loss in group
            )
            + f". {same}"
        )
        runs_shown = [(name, loss) for _, group in picked for name, _, loss in group]
        losses = torch.tensor([loss for _, loss in runs_shown], dtype=torch.float64)
        by_choice = {value: [loss for _, _, loss in group] for value, group in picked}
        return (
            found,
            [
                shown(
                    "final training loss",
                    losses,
                    ["run"],
                    columns=[name for name, _ in runs_shown],
                    scale="sequential",
                )
            ],
            by_choice,
        )
    model = "transformer" if model_type == "transformer" else "bahdanau"
    table_file = measured()
    rows = table_file["tables"][key]
    where = f"{table_file['machine']}, {table_file['date']}"
    found = (
        f"Measured, not computed now: on {where}, the book's run with each choice (`"
        + table_file["command"].format(model=model, key=f"model.{key}")
        + "`, seeds 0 and 1, then `attn-mt eval RUN --split book`): "
        + "; ".join(
            f"{label}: final loss {v[0]:.4f} and {v[1]:.4f}, BLEU {v[2]:.1f} and {v[3]:.1f}"
            for label, v in rows
        )
        + ". Another machine trains to other numbers. Open run directories that differ in "
        f"model.{key} (`attn-mt lab RUN_DIR RUN_DIR`) to compare your own here."
    )
    table = torch.tensor([values for _, values in rows], dtype=torch.float64)  # (choices, 4)
    return (
        found,
        [
            shown(
                f"measured on {where}: loss and BLEU",
                table,
                ["choice", "measure"],
                rows=[label for label, _ in rows],
                columns=table_file["columns"],
                scale="sequential",
            )
        ],
        {label: list(values[:2]) for label, values in rows},
    )


def mean(values: list[float]) -> float:
    """The mean of a choice's final losses."""
    return sum(values) / len(values)


def seed_noise(losses: dict[str, list[float]]) -> tuple[float, str] | None:
    """How far two runs of one choice, seeds apart, ended: the largest such gap, and its choice; None
    when no choice has two runs."""
    gaps = [(max(v) - min(v), label) for label, v in losses.items() if len(v) >= 2]
    return max(gaps) if gaps else None


def spread_table(losses: dict[str, list[float]]) -> dict[str, Any]:
    """Each choice's mean final loss and the range between its runs (seeds), for the page."""
    table = torch.tensor([[mean(v), max(v) - min(v)] for v in losses.values()], dtype=torch.float64)
    return shown(
        "final loss: mean and spread between seeds",
        table,
        ["choice", "measure"],
        rows=list(losses),
        columns=["mean", "largest minus smallest"],
        scale="sequential",
    )


def noise_words(gap: float, noise: tuple[float, str] | None) -> str:
    """A gap between two mean losses set beside the seed noise, in words."""
    if noise is None:
        return (
            f"The means differ by {gap:.5f}; with one run per choice, how far seeds alone move the loss is "
            "not known here (open runs of two seeds per choice to see it)."
        )
    return (
        f"The means differ by {gap:.5f}; two seeds of one choice ({noise[1]}) ended {noise[0]:.5f} apart, "
        + ("so the gap is within seed noise." if gap <= noise[0] else "so the gap is beyond seed noise.")
    )


def compared(losses: dict[str, list[float]]) -> tuple[int, dict[int, str], str, str]:
    """The second choice's mean loss against the first's (the book's) as one of "a clearly lower loss",
    "a clearly higher loss", "about the same (within 10%)"; the choices also accepted when the gap is
    beyond 10% but within seed noise, the verdict then, and the gap beside the noise in words."""
    means = [mean(v) for v in losses.values()]
    book, other = means[0], means[1]
    gap, noise = abs(other - book), seed_noise(losses)
    words = noise_words(gap, noise)
    if gap <= CLOSE * book:
        return 2, {}, "", words
    outcome = 0 if other < book else 1
    if noise is None or gap > noise[0]:
        return outcome, {}, "", words
    also = {2: f"Within seed noise: {words}"}
    direction = "lower" if outcome == 0 else "higher"
    return outcome, also, f"{direction} by more than 10%, but within seed noise", words


def attention_parameters(scoring: str) -> int:
    """How many parameters the Bahdanau decoder's attention has at the book's sizes (H = 32)."""
    model = build_model(ModelConfig(scoring=scoring), 8, 8)
    return sum(p.numel() for p in model.decoder.attention.parameters())


def dot_in_bahdanau(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The Bahdanau decoder's attention with scaled dot-product scoring (model.scoring: dot): its
    parameters, and the trained runs' losses (opened runs, else the measured table)."""
    counts = [attention_parameters("additive"), attention_parameters("dot")]
    found, tensors, losses = switch_results(runs, "gru_bahdanau", "scoring")
    outcome, also, verdict, words = compared(losses)
    return result(
        f"At the book's sizes (H = 32) additive attention has {counts[0]} parameters (W_q and W_k, H × H "
        f"each, and w_v, H); dot-product scoring has {counts[1]}: the decoder's GRU state and the "
        f"encoder's outputs are both H wide and are compared as they are. {found} {words}",
        [
            shown(
                "attention parameters",
                torch.tensor(counts, dtype=torch.float64),
                ["scoring"],
                columns=["additive", "dot"],
                scale="sequential",
            ),
            *tensors,
            spread_table(losses),
        ],
        outcome,
        [code(UnprojectedDotProductAttention.attend)],
        also,
        verdict,
    )


def learned_or_no_positions(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The book's Transformer with sinusoidal, learned or no positions (model.positional_encoding); every
    choice whose mean final loss is within seed noise of the lowest is accepted."""
    found, tensors, losses = switch_results(runs, "transformer", "positional_encoding")
    means = {label: mean(v) for label, v in losses.items()}
    lowest = min(means, key=lambda label: means[label])
    noise = seed_noise(losses)
    names = ("sinus", "learned", "none")

    def index(label: str) -> int:
        return next((k for k, n in enumerate(names) if label.startswith(n)), 0)

    tied = [
        label
        for label in means
        if label != lowest and noise is not None and means[label] - means[lowest] <= noise[0]
    ]
    also = {
        index(label): f"Within seed noise of {lowest}: {noise_words(means[label] - means[lowest], noise)}"
        for label in tied
    }
    choices = texts()["learned_or_no_positions"]["choices"]
    verdict = (
        " or ".join(choices[k] for k in sorted({index(lowest), *also})) + ": within seed noise of each other"
        if also
        else ""
    )
    runner_up = min((v for label, v in means.items() if label != lowest), default=means[lowest])
    words = noise_words(runner_up - means[lowest], noise).replace("The means", "The two lowest means", 1)
    return result(
        f"{found} {words}",
        [*tensors, spread_table(losses)],
        index(lowest),
        [code(LearnedPositionalEncoding.forward)],
        also,
        verdict,
    )


def batch_norm_trained(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The book's Transformer trained with BatchNorm in every add & norm (model.norm: batch)."""
    found, tensors, losses = switch_results(runs, "transformer", "norm")
    outcome, also, verdict, words = compared(losses)
    return result(
        f"{found} {words}",
        [*tensors, spread_table(losses)],
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
    """The exercises the opened runs allow (exercises.yaml's `needs`), in order, each with its question
    and link naming the run it experiments on."""
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
            **entry,
            "name": name,
            "question": filled(entry["question"]),
            "link": filled(entry["link"]),
        }
    return listing


def exercises_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """Without `exercise`: every exercise's question and offered predictions, nothing computed. With
    `exercise` and a `prediction` (one of its choices): that exercise's experiment, run now, and
    whether it bears the prediction out."""
    listing = available(runs)
    name = text(state, "exercise", "", 64).strip()
    if not name:
        asked = ("name", "section", "question", "choices")
        return answer([], [], [], exercises=[{k: e[k] for k in asked} for e in listing.values()])
    entry = listing.get(name)
    if entry is None:
        raise LabError(f"exercise: {name[:40]!r} is not one of {', '.join(listing)}")
    prediction = choice(state, "prediction", "", tuple(entry["choices"]))
    found = EXERCISES[name](runs)
    choices = entry["choices"]
    also = {choices[k]: why for k, why in found.pop("also").items()}
    outcome = choices[found["outcome"]]
    answered = {
        **entry,
        **found,
        "outcome": found.pop("verdict") or outcome,
        "accepted": [c for c in choices if c == outcome or c in also],
        "why": also.get(prediction, ""),
        "prediction": prediction,
        "right": prediction == outcome or prediction in also,
    }
    return answer([], [], [], exercises=[answered])
