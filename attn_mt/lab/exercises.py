"""Lab panel "exercises": questions on each section of the attention chapter, put in the project's own
words, each answered by an experiment the server runs with attn-mt's functions, with a short reading.

Each exercise is a function of the opened runs returning its question, what the experiment found (a
sentence and tensors), a reading of the result, and a link to the panel where the learner can vary it.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

import torch

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
from attn_mt.lab.engines import request_engine
from attn_mt.lab.scoring import seeded_additive, seeded_bilinear
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
# The book's two runs trained with each exercise switch (docs/lab.md, "The chapter's exercises, trained"): the
# final training loss and the BLEU of `attn-mt eval RUN --split book` (the book's 4 sentences), seeds 0 and 1
MEASURED_ON = "a 2-core AMD EPYC (Zen 3, AVX2), 2026-11-26"
MEASURED_COMMAND = "attn-mt train configs/d2l_{model}.yaml --set {key}={value} --set train.seed={seed}"
MEASURED: dict[str, list[tuple[str, list[float]]]] = {
    "positional_encoding": [
        ("sinusoidal (the book's)", [0.03211, 0.03288, 100.0, 100.0]),
        ("learned", [0.0305, 0.03087, 100.0, 75.8]),
        ("none", [0.03087, 0.03071, 100.0, 75.8]),
    ],
    "norm": [
        ("layer (the book's)", [0.03211, 0.03288, 100.0, 100.0]),
        ("batch", [0.03275, 0.03228, 75.8, 75.8]),
    ],
    "scoring": [
        ("additive (the book's)", [0.01866, 0.02171, 75.8, 53.2]),
        ("dot", [0.01934, 0.01988, 78.9, 75.8]),
    ],
}
READINGS = {
    "scoring": "Additive attention learns how to compare a query with a key. Dot-product scoring has nothing "
    "to learn there: training must instead make the decoder's state and the encoder's outputs point the same "
    "way where a word should be attended, which the GRUs and the embeddings must learn. Two seeds on the "
    "book's 601 pairs and a BLEU over its 4 test sentences are far too little to rank the two; they show "
    "whether the "
    "parameter-free scoring trains at all, and how far apart the losses land.",
    "positional_encoding": "Without positions the encoder sees a bag of words (the exercise above). The "
    "decoder keeps its causal mask, so it can still count how many tokens came before (Haviv et al. 2022 "
    "found decoders without positions learn them so). A learned table has H numbers per position to fit, "
    "here from 601 sentences of at most 10 tokens, and stops at model.max_positions; the sinusoidal table "
    "has nothing to fit and extends to any length.",
    "norm": "BatchNorm's statistics mix the sentences of a batch and their padding (the exercise above, and "
    "its comment in AddNorm.forward): in training each add & norm uses the batch's mean and variance, in "
    "prediction the running averages, so the model predicts with other statistics than it trained with. "
    "LayerNorm normalises each position by itself, the same in training and prediction.",
}
MEASURED_COLUMNS = ["final loss, seed 0", "final loss, seed 1", "book BLEU, seed 0", "book BLEU, seed 1"]


def exercise(
    section: str, question: str, found: str, reading: str, tensors: list, link: str, lines: list
) -> dict[str, Any]:
    """One exercise's answer."""
    return {
        "section": section,
        "question": question,
        "found": found,
        "reading": reading,
        "tensors": tensors,
        "link": link,
        "code": lines,
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
    return exercise(
        "Nadaraya–Watson",
        "Does the non-parametric estimator keep improving as the number of noisy training points grows? "
        "Compare a wide kernel (w = 1) with a narrow one (w = 4).",
        f"Mean test error over {draws} data sets, from {sizes[0]} to {sizes[-1]} points: "
        f"w = 1 {errors[0, 0]:.3f} → {errors[0, -1]:.3f}; w = 4 {errors[1, 0]:.3f} → {errors[1, -1]:.3f}.",
        "More points put more samples under each kernel, so their noise averages out. A wide kernel also "
        "blurs the curve itself, and that error (the bias) does not shrink with more data, so its error "
        "levels off; a narrow kernel has little bias and keeps gaining until its few neighbours' noise "
        "is averaged away.",
        [
            shown(
                "test MSE",
                errors,
                ["w", "n"],
                rows=[f"w = {w:g}" for w in ws],
                columns=[f"{n} points" for n in sizes],
            )
        ],
        "#nadaraya_watson?w=4",
        [code(gaussian_attention_weights), code(make_data)],
    )


def without_leave_one_out(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Train the parametric w with each point among its own keys, against leave-one-out."""
    data = make_data(torch.Generator().manual_seed(SEED))
    n = data.x_train.shape[0]
    loo_model, loo_losses = train_parametric(data, torch.Generator().manual_seed(SEED), lr=0.5, epochs=50)
    model = NWKernelRegression(torch.Generator().manual_seed(SEED))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    keys, values = data.x_train.expand(n, n), data.y_train.expand(n, n)  # (N, N): each point sees itself
    for _ in range(50):
        optimizer.zero_grad()
        loss = squared_error(model(data.x_train, keys, values), data.y_train).sum()
        loss.backward()
        optimizer.step()
    learned = torch.tensor([loo_model.w.item(), model.w.item()])
    return exercise(
        "Nadaraya–Watson",
        "Why does the parametric model leave each training point out of its own keys? Train it both ways "
        "for 50 epochs and compare the learned w (the inverse of the kernel's bandwidth).",
        f"Leaving each point out: w = {learned[0]:.3f} (final loss {loo_losses[-1]:.3f}). "
        f"Each point among its own keys: w = {learned[1]:.3f} (final loss {loss.item():.3f}).",
        "When a point is among its keys, the loss falls as w grows: a narrow kernel puts all weight on the "
        "point itself and predicts its own noisy y exactly. The model would learn to copy the noise; leaving "
        "the point out makes it predict each y from its neighbours, as it must for new inputs.",
        [shown("learned w", learned, ["run"], columns=["leave-one-out", "self included"])],
        "#nadaraya_watson?epochs=50",
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
    return exercise(
        "Scoring functions",
        "Do additive and scaled dot-product attention give the same weights? Try keys that are all equal, "
        "then keys that differ.",
        f"Equal keys: largest weight {float(weights[:2].max()):.4f}, smallest {float(weights[:2].min()):.4f} "
        f"(uniform is 0.25). Different keys: the two functions' weights differ by up to "
        f"{float((weights[2] - weights[3]).abs().max()):.4f}.",
        "A scoring function that sees the same key four times gives four equal scores, so any softmax of "
        "them is uniform. Once keys differ, each function scores them its own way: additive attention "
        "through its learned layers, dot-product attention by the angle and length of q and k.",
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
        "#scoring?keys=" + "[[[1, 1], [1, 1], [1, 1], [1, 1]]]",
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
    return exercise(
        "Scoring functions",
        "Queries and keys have entries of variance 1. How spread out are their dot products for d = 4 and "
        "d = 256, with and without dividing by √d?",
        f"d = 4: std {table[0, 0]:.2f} unscaled, {table[0, 1]:.2f} scaled. "
        f"d = 256: std {table[1, 0]:.2f} unscaled, {table[1, 1]:.2f} scaled.",
        "A sum of d products of unit-variance numbers has variance d, so the unscaled spread grows like √d "
        "(2 and 16 here); dividing by √d keeps it near 1 for every d, and the softmax away from saturation.",
        [
            shown(
                "std of the scores",
                table,
                ["d", "scale"],
                rows=["d = 4", "d = 256"],
                columns=["none", "1/√d"],
            )
        ],
        "#keysize?d=256&scaled=false",
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
    return exercise(
        "Scoring functions",
        "Using matrix multiplications only, can you score queries of size 3 against keys of size 2?",
        f"With a (3 x 2) matrix M, qᵀ M k is defined for every pair: the weights below are a proper "
        f"softmax over the 3 keys for each of the 2 queries, and the outputs have the values' size "
        f"{tuple(output.shape)}.",
        "qᵀ M k maps the query into the keys' space with M (or the key into the queries' space with Mᵀ) "
        "and then takes a dot product; M is learned with the model. Dot-product attention is the case "
        "M = I, which forces equal sizes; additive attention is another answer, with a hidden layer.",
        [shown("attention weights of qᵀ M k / √k", attention.attention_weights, ["B", "Q", "K"])],
        "#scoring?queries=" + "[[[1, 0, 2], [0, 1, -1]]]",
        [code(seeded_bilinear), code(DotProductAttention.attend)],
    )


def summed_scores(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Score by summing q + k instead of the dot product: two different queries, four keys."""
    queries = torch.tensor([[[1.0, 2.0], [-3.0, 0.5]]])  # (1, 2, 2)
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 0.5]]])  # (1, 4, 2)
    scores = (queries.unsqueeze(2) + keys.unsqueeze(1)).sum(-1)  # (1, 2, 4): sum_i (q_i + k_i)
    weights = masked_softmax(scores, None)  # (1, 2, 4)
    dot = masked_softmax(torch.matmul(queries, keys.transpose(1, 2)) / math.sqrt(2), None)  # (1, 2, 4)
    return exercise(
        "Scoring functions",
        "When queries and keys have the same size, is summing them, score = Σᵢ (qᵢ + kᵢ), a better "
        "scoring function than the dot product? Try two very different queries.",
        "Summing: the two queries' weights differ by at most "
        f"{float((weights[0, 0] - weights[0, 1]).abs().max()):.1e}. "
        f"Dot product: by up to {float((dot[0, 0] - dot[0, 1]).abs().max()):.3f}.",
        "Σ (qᵢ + kᵢ) = Σ qᵢ + Σ kᵢ: the query's part is the same for every key, and a softmax ignores a "
        "constant added to all its scores. So every query gets the same weights, set by the keys alone: "
        "the query is never compared with the key. The dot product multiplies them, so it depends on both.",
        [
            shown("weights, summed scores", weights, ["B", "Q", "K"]),
            shown("weights, scaled dot product", dot, ["B", "Q", "K"]),
        ],
        "#scoring",
        [code(masked_softmax)],
    )


def empty_rows(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """masked_softmax of a query with valid length 0."""
    scores = torch.tensor([[[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]]])  # (2, 1, 3)
    weights = masked_softmax(scores, torch.tensor([0, 2]))  # (2, 1, 3)
    return exercise(
        "Masked softmax",
        "What weights does a query get when its valid length is 0, so that no key may be attended?",
        f"The query with valid length 0 gets weights {weights[0, 0].tolist()}; the other's sum to "
        f"{float(weights[1, 0].sum()):.4f}, all on its 2 valid keys.",
        "The book fills masked scores with -1e6 (minus a million, not 10⁻⁶). While a query has at least one "
        "valid key, exp(-1e6 - max) underflows to exactly 0, so masked keys get weight 0 as with -inf. "
        "Only a query with no valid key differs: all its scores are -1e6, so the book's softmax spreads "
        "the weight evenly over keys it should ignore. attn-mt gives that query an all-zero row (and zero "
        "gradients), so padding never leaks into a result.",
        [shown("masked_softmax(X, [0, 2])", weights, ["B", "Q", "K"])],
        "#softmax?valid_lens=[0, 2]&scores=[[[1, 2, 3]], [[1, 2, 3]]]",
        [code(masked_softmax)],
    )


def head_parameters(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """Parameters of MultiHeadAttention with H = 64 and 1, 2, 4 or 8 heads."""
    heads = (1, 2, 4, 8)
    counts = [sum(p.numel() for p in MultiHeadAttention(64, 64, 64, 64, h, 0.0).parameters()) for h in heads]
    return exercise(
        "Multi-head attention",
        "With the hidden size fixed at 64, does using more heads add parameters?",
        "Parameters: " + ", ".join(f"{h} heads {c}" for h, c in zip(heads, counts, strict=True)) + ".",
        "No: W_q, W_k, W_v and W_o stay 64 × 64 whatever h is; the heads only cut the projected 64 "
        "columns into h slices of d = 64 / h, so each head works in a smaller space at no extra cost.",
        [
            shown(
                "parameters",
                torch.tensor(counts, dtype=torch.float64),
                ["h"],
                columns=[str(h) for h in heads],
            )
        ],
        "#heads?num_hiddens=8&num_heads=4",
        [code(MultiHeadAttention.split_heads)],
    )


def pruned_heads(runs: dict[str, LoadedRun]) -> dict[str, Any] | None:
    """A Transformer run's log-probability of its own translations with each head of each decoder
    layer's encoder-decoder attention switched off in turn (its slice of W_o's input set to 0)."""
    transformers = [(n, r) for n, r in runs.items() if r.config.model.type == "transformer"]
    if not transformers:
        return None
    name, run = transformers[0]
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
    return exercise(
        "Multi-head attention",
        f"Can some heads be pruned? Switch off each head of {name}'s encoder-decoder attention in turn and "
        "see how much less probable the model finds its own translations.",
        f"Log-probability of {len(sentences)} translations: {full:.3f} with every head. Switching off "
        f"one head lowers it by {float(drops.min()):.3f} to {float(drops.max()):.3f} (below 0: the "
        f"translations became more probable); the least needed is layer {least[0] + 1}, head "
        f"{least[1] + 1}.",
        "Heads are not equally useful: a head whose removal costs little can be pruned (its slice of W_o "
        "dropped) with small harm, the idea of Michel et al. (2019) and Voita et al. (2019); removing a "
        "head that carries the alignment costs the most. Retraining after pruning recovers more.",
        [
            shown(
                "log-probability lost with the head off",
                drops,
                ["L", "h"],
                rows=[f"layer {k + 1}" for k in range(layers)],
                columns=[f"head {k + 1}" for k in range(heads)],
            )
        ],
        f"#trained_heads?run={name}&map=cross",
        [code(MultiHeadAttention.merge_heads)],
    )


def distance_only(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """P[i] · P[i + k] for several i and k: a function of k alone, and the same for -k."""
    table = sinusoid_table(64, 32).double()  # (S, H)
    starts, shifts = (10, 20, 30), (-4, 1, 4)
    dots = torch.tensor([[float(table[i] @ table[i + k]) for k in shifts] for i in starts])  # (3, 3)
    return exercise(
        "Positional encoding",
        "Is the dot product of the encodings of positions i and i + k the same for every i? "
        "And for k and -k?",
        f"Down each column (k fixed, i = {', '.join(map(str, starts))}) the values differ by at most "
        f"{float((dots - dots[0]).abs().max()):.1e}; k = 4 and k = -4 differ by at most "
        f"{float((dots[:, 0] - dots[:, 2]).abs().max()):.1e}.",
        "P[i] · P[i + k] sums sin(iω)sin((i+k)ω) + cos(iω)cos((i+k)ω) = cos(kω) over the frequencies ω, "
        "which depends on the distance k only, and cos is even: the dot product tells how far apart two "
        "positions are but not which comes first (learned projections can still tell).",
        [
            shown(
                "P[i] · P[i + k]",
                dots,
                ["i", "k"],
                rows=[f"i = {i}" for i in starts],
                columns=[f"k = {k}" for k in shifts],
            )
        ],
        "#positions?shift=4",
        [code(sinusoid_table)],
    )


def order_without_positions(runs: dict[str, LoadedRun]) -> dict[str, Any] | None:
    """A Transformer run's encoder on a sentence and on its words in reverse, with and without the
    positional encoding: without it the outputs are the same vectors, reordered."""
    transformers = [
        (n, r)
        for n, r in runs.items()
        if r.config.model.type == "transformer" and r.config.model.positional_encoding != "none"
    ]
    if not transformers:
        return None
    name, run = transformers[0]
    model = copy.deepcopy(run.model)  # positions are taken away in a copy: other requests use the run's model
    engine = Translator(model, run.src_vocab, run.tgt_vocab, run.config, run.device)
    words = prepare_sentence(run.config, run.src_vocab, "he is calm .")
    encoded = []
    for order in (words, words[::-1]):
        fed, length = engine.source_ids(order)
        encoded.append((torch.tensor([fed]), torch.tensor([length])))
    length = int(encoded[0][1])
    reverse = [*range(length - 2, -1, -1), length - 1]  # the words reversed, <eos> kept last
    model.eval()
    with torch.inference_mode():
        with_positions = [model.encode(src, lens)["memory"][0, :length] for src, lens in encoded]  # (S, H)
        model.encoder.pos_encoding.register_forward_hook(
            lambda _module, inputs, _output: inputs[0]  # X without P (dropout is off in eval)
        )
        without = [model.encode(src, lens)["memory"][0, :length] for src, lens in encoded]  # (S, H)
    gaps = [float((outputs[0] - outputs[1][reverse]).abs().max()) for outputs in (with_positions, without)]
    return exercise(
        "Positional encoding",
        f"Without the positional encoding, can {name}'s encoder tell 'he is calm .' from its words in "
        "reverse order? Compare each word's encoder output in the two orders.",
        f"With positions, a word's output differs between the orders by up to {gaps[0]:.3f}; without them, "
        f"by {gaps[1]:.1e}.",
        "Self-attention treats its input as a set: permute the tokens and its outputs are permuted the "
        "same way, nothing else changes. Only the positional encoding added to the embeddings tells the "
        "encoder where each word stands; without it 'he is calm' and 'calm is he' look the same to it.",
        [
            shown(
                "largest difference between the two orders",
                torch.tensor(gaps, dtype=torch.float64),
                ["encoding"],
                columns=["with positions", "without"],
            )
        ],
        "#positions",
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
    return exercise(
        "The Transformer",
        "The Transformer normalises with LayerNorm. What would change with BatchNorm? Change the second "
        "sentence of a batch and see whether the first sentence's output moves.",
        f"The first sentence's output moves by {changes[0]:.1e} with LayerNorm and by {changes[1]:.3f} with "
        "BatchNorm.",
        "LayerNorm normalises each position over its own H features, so a sentence's output never depends on "
        "the others. BatchNorm normalises each feature over every position of every sentence in the batch: "
        "one sentence's output then depends on its neighbours and on padding, changes between training and "
        "prediction (running averages), and suits the variable lengths of NLP badly.",
        [
            shown(
                "largest change in sentence 1",
                torch.tensor(changes, dtype=torch.float64),
                ["norm"],
                columns=["LayerNorm", "BatchNorm"],
            )
        ],
        "#transformer",
        [code(AddNorm.forward)],
    )


def beam_one_is_greedy(runs: dict[str, LoadedRun]) -> dict[str, Any] | None:
    """search.py's beam search with a beam of 1 against its greedy search, on a few sentences of a run."""
    if not runs:
        return None
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
    return exercise(
        "Decoding",
        f"Does beam search with a beam of 1 give the same translations as greedy search ({name})?",
        f"{same} of {len(sentences)} sentences translate identically: "
        + "; ".join(f"{g!r}" for g, _, _, _ in pairs)
        + ".",
        "With one live hypothesis, beam search keeps the single best extension at every step, which is "
        "greedy search's choice, so outputs and scores agree.",
        [
            shown(
                "log-probability",
                scores,
                ["sentence", "search"],
                rows=sentences,
                columns=["greedy", "beam 1"],
            )
        ],
        f"#decoding?run={name}&beam=1",
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


def switch_results(runs: dict[str, LoadedRun], model_type: str, key: str) -> tuple[str, list]:
    """The opened runs' final losses when they differ in model.`key`, else the measured table (MEASURED)."""
    chosen: dict[str, tuple[str, LoadedRun, float]] = {}
    for name, run in runs.items():
        loss = final_loss(run) if run.config.model.type == model_type else None
        if loss is not None:
            chosen.setdefault(getattr(run.config.model, key), (name, run, loss))
    if len(chosen) >= 2:
        picked = list(chosen.items())
        first = picked[0][1][1]
        others = sorted({d for _, (_, run, _) in picked[1:] for d in other_differences(first, run, key)})
        same = (
            f"Their configs differ only in model.{key}."
            if not others
            else f"Their configs also differ in {', '.join(others)}, so the switch is not the only change."
        )
        found = (
            "The opened runs, final training loss from their run_summary.json: "
            + "; ".join(f"{name} (model.{key}: {value}) {loss:.4f}" for value, (name, _, loss) in picked)
            + f". {same}"
        )
        losses = torch.tensor([loss for _, (_, _, loss) in picked], dtype=torch.float64)
        names = [name for _, (name, _, _) in picked]
        return found, [shown("final training loss", losses, ["run"], columns=names)]
    model = "transformer" if model_type == "transformer" else "bahdanau"
    rows = MEASURED[key]
    found = (
        f"Measured on {MEASURED_ON}, the book's run with each choice (`"
        + MEASURED_COMMAND.format(model=model, key=f"model.{key}", value="VALUE", seed="SEED")
        + "`, seeds 0 and 1, then `attn-mt eval RUN --split book`): "
        + "; ".join(
            f"{label}: final loss {v[0]:.4f} and {v[1]:.4f}, BLEU {v[2]:.1f} and {v[3]:.1f}"
            for label, v in rows
        )
        + f". Open run directories that differ in model.{key} (`attn-mt lab RUN_DIR RUN_DIR`) to compare "
        "them here."
    )
    table = torch.tensor([values for _, values in rows], dtype=torch.float64)  # (choices, 4)
    return found, [
        shown(
            "measured: loss and BLEU",
            table,
            ["choice", "measure"],
            rows=[label for label, _ in rows],
            columns=MEASURED_COLUMNS,
            scale="centred",
        )
    ]


def attention_parameters(scoring: str) -> int:
    """How many parameters the Bahdanau decoder's attention has at the book's sizes (H = 32)."""
    model = build_model(ModelConfig(scoring=scoring), 8, 8)
    return sum(p.numel() for p in model.decoder.attention.parameters())


def dot_in_bahdanau(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The Bahdanau decoder's attention with scaled dot-product scoring (model.scoring: dot): its
    parameters, and the trained runs' losses (opened runs, else the measured table)."""
    counts = [attention_parameters("additive"), attention_parameters("dot")]
    found, tensors = switch_results(runs, "gru_bahdanau", "scoring")
    return exercise(
        "Bahdanau attention",
        "Replace the additive attention of the Bahdanau decoder with scaled dot-product attention "
        "(model.scoring: dot). Does the trained model reach a lower or a higher loss, and how many "
        "parameters does its attention keep?",
        f"At the book's sizes (H = 32) additive attention has {counts[0]} parameters (W_q and W_k, H × H "
        f"each, and w_v, H); dot-product scoring has {counts[1]}: the decoder's GRU state and the "
        f"encoder's outputs are both H wide and are compared as they are. {found}",
        READINGS["scoring"],
        [
            shown(
                "attention parameters",
                torch.tensor(counts, dtype=torch.float64),
                ["scoring"],
                columns=["additive", "dot"],
            ),
            *tensors,
        ],
        "#scoring",
        [code(UnprojectedDotProductAttention.attend)],
    )


def learned_or_no_positions(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The book's Transformer with sinusoidal, learned or no positions (model.positional_encoding)."""
    found, tensors = switch_results(runs, "transformer", "positional_encoding")
    return exercise(
        "Positional encoding",
        "Train the book's Transformer with a learned position table (model.positional_encoding: "
        "learned) and with no positions at all (none). Which of the three reaches the lowest loss, and "
        "does the model without positions still translate?",
        found,
        READINGS["positional_encoding"],
        tensors,
        "#positions",
        [code(LearnedPositionalEncoding.forward)],
    )


def batch_norm_trained(runs: dict[str, LoadedRun]) -> dict[str, Any]:
    """The book's Transformer trained with BatchNorm in every add & norm (model.norm: batch)."""
    found, tensors = switch_results(runs, "transformer", "norm")
    return exercise(
        "The Transformer",
        "Train the book's Transformer with BatchNorm instead of LayerNorm in every add & norm "
        "(model.norm: batch). Does it reach the loss of the LayerNorm model?",
        found,
        READINGS["norm"],
        tensors,
        "#transformer",
        [code(AddNorm.forward)],
    )


EXERCISES: tuple[Exercise, ...] = (
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


def exercises_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """Every exercise, each computed now."""
    done = [found for found in (run_exercise(runs) for run_exercise in EXERCISES) if found is not None]
    return answer([], [], [], exercises=done)
