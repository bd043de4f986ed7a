"""Lab panel of the book section "Multi-Head Attention": how h heads split a (B, N, H) tensor into
(B, h, N, d) and merge it back, and, with a trained Transformer, every head of every layer on a sentence.

Shapes: B batch, N steps, H hidden, h heads, d = H / h; L layers, S source and T target positions.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attn_mt.decoding.attention import TITLES, collect_attention
from attn_mt.decoding.outputs import output_length_limits, prepare_sentence
from attn_mt.decoding.translator import Translator
from attn_mt.i18n import _
from attn_mt.lab.engines import checkpoint_text, request_engine, unknown_words
from attn_mt.lab.inputs import MAX_ELEMENTS, LabError, choice, limit_elements, text, whole
from attn_mt.lab.shown import answer, code, number, shown
from attn_mt.models.attention import MultiHeadAttention
from attn_mt.run.opened import LoadedRun

MAX_HEADS = 16
MAX_MAP = 16 * MAX_ELEMENTS  # numbers in a trained run's attention map, every layer and head together
AXES = {
    "encoder_self": ["L", "h", "S", "S"],
    "decoder_self": ["L", "h", "T", "T"],
    "cross": ["L", "h", "T", "S"],
}


def switched_off(state: dict[str, Any], heads: int) -> list[int]:
    """The heads (counted from 1, as on the page) the learner switched off: `off` as "1, 3"."""
    raw = text(state, "off", "", 100)
    chosen = []
    for part in raw.replace(",", " ").split():
        if not part.isdigit() or not 1 <= int(part) <= heads:
            raise LabError(
                _("off: expected head numbers from 1 to {heads}, got {value}").format(
                    heads=heads, value=repr(part[:10])
                )
            )
        chosen.append(int(part))
    return sorted(set(chosen))


def split_merge_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Self-attention of h heads on X (B, N, H): W_q X split into (B, h, N, d) (the book's (B * h, N, d)),
    each head's weights, the heads merged (any switched off set to 0) and mixed by W_o."""
    batch = whole(state, "batch", 2, 1, 8)
    steps = whole(state, "steps", 3, 1, 32)
    hiddens = whole(state, "num_hiddens", 8, 1, 256)
    heads = whole(state, "num_heads", 2, 1, MAX_HEADS)
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    if hiddens % heads:
        raise LabError(
            _("num_hiddens = {hiddens} is not divisible by num_heads = {heads}").format(
                hiddens=hiddens, heads=heads
            )
        )
    limit_elements("X", batch, steps, hiddens)
    limit_elements(_("the weights"), batch, heads, steps, steps)
    off = switched_off(state, heads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attention = MultiHeadAttention(hiddens, hiddens, hiddens, hiddens, heads, dropout=0.0).eval()
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(batch, steps, hiddens, generator=generator)  # (B, N, H)
    d = hiddens // heads
    with torch.no_grad():
        projected = attention.W_q(X)  # (B, N, H): every column mixes all H features of X
        split = attention.split_heads(projected)  # (B, h, N, d)
        keys, values = attention.project_keys_values(X, X)  # (B, h, N, d) each
        per_head, weights = attention.attention.attend(split, keys, values, None, True)  # (B, h, N, d)
        kept = per_head.clone()
        for head in off:
            kept[:, head - 1] = 0  # the head's d columns of the merged output
        merged = attention.merge_heads(kept)  # (B, N, H)
        output = attention.W_o(merged)  # (B, N, H)
        full = attention.W_o(attention.merge_heads(per_head))  # (B, N, H) with every head
    tensors = [
        shown("X", X, ["B", "N", "H"]),
        shown(_("W_q X: the queries, projected"), projected, ["B", "N", "H"]),
        shown("split_heads(W_q X)", split, ["B", "h", "N", "d"]),
        shown(
            _("the book's layout: split_heads(W_q X).flatten(0, 1)"), split.flatten(0, 1), ["B·h", "N", "d"]
        ),
        shown(_("each head's attention weights"), weights, ["B", "h", "N", "N"], scale="weights"),
        shown(
            _("merge_heads(heads' outputs) with heads off") if off else _("merge_heads(heads' outputs)"),
            merged,
            ["B", "N", "H"],
        ),
        shown(_("W_o: the output"), output, ["B", "N", "H"]),
    ]
    columns = ", ".join(f"{d * k + 1}–{d * (k + 1)}" for k in range(min(heads, 3))) + (
        ", …" if heads > 3 else ""
    )
    merging = _("merge_heads puts the heads' outputs side by side again, and W_o mixes them.")
    if off:
        merging += " " + _(
            "Heads {heads} switched off (their columns of the merged output set to 0): the output moves by "
            "up to {moved}."
        ).format(heads=", ".join(map(str, off)), moved=number(float((output - full).abs().max()), ".4f"))
    else:
        merging += " " + _("Switch heads off to see what each contributes to the output.")
    notes = [
        _(
            "The model does not split X. W_q first maps each step's H = {hiddens} features to {hiddens} new "
            "ones, each a weighted mix of all of X's features; W_q X (B={batch}, N={steps}, H={hiddens}) is "
            "then viewed as (B, N, h={heads}, d={d}) and its N and h axes swapped, so head 1, 2, … takes "
            "columns {columns} (counted from 1) of W_q X, and the same columns of W_k X and W_v X. Every "
            "head therefore sees every input feature, through its own slice of the projections, and "
            "attends over all N steps."
        ).format(hiddens=hiddens, batch=batch, steps=steps, heads=heads, d=d, columns=columns),
        merging,
        _(
            "merge_heads(split_heads(W_q X)) gives W_q X back: {equal}. W_q, W_k, W_v, W_o and X are drawn "
            "from seed {seed}, as a model starts before training."
        ).format(equal=bool(torch.equal(attention.merge_heads(split), projected)), seed=seed),
    ]
    lines = [
        code(MultiHeadAttention.split_heads),
        code(MultiHeadAttention.attend),
        code(MultiHeadAttention.merge_heads),
    ]
    return answer(tensors, lines, notes)


def limit_map(engine: Translator, sentence: str, which: str) -> None:
    """Refuse a sentence whose map could hold over MAX_MAP numbers, before translating it: the rows
    and columns are source tokens (as fed) or target tokens (at most the decoding's length limit)."""
    fed, src_len = engine.source_ids(prepare_sentence(engine.cfg, engine.src_vocab, sentence))
    decode = engine.cfg.decode
    targets = output_length_limits([src_len], decode.max_len_a, decode.max_len_b)[0] + 1  # with <bos>
    rows = len(fed) if which == "encoder_self" else targets
    columns = targets if which == "decoder_self" else len(fed)
    model = engine.cfg.model
    sizes = (model.num_layers, model.num_heads, rows, columns)
    if math.prod(sizes) > MAX_MAP:
        raise LabError(
            _(
                "sentence: its {map} map could be {sizes} (L, h, rows, columns), {count} numbers, more than "
                "the lab's limit of {limit}; try a shorter sentence"
            ).format(map=which, sizes=sizes, count=math.prod(sizes), limit=MAX_MAP)
        )


def trained_heads_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """A sentence translated by a trained run -> a Transformer's every head of every layer of one
    attention map, or the GRU + Bahdanau decoder's one map over the whole sentence."""
    if not runs:
        raise LabError(_("no run: start the lab as `attn-mt lab RUN_DIR` to see a trained run's attention"))
    transformers = [name for name, run in runs.items() if run.config.model.type == "transformer"]
    name = choice(state, "run", (transformers or list(runs))[0], tuple(runs))
    run = runs[name]
    which = choice(state, "map", "cross", tuple(AXES))
    transformer = run.config.model.type == "transformer"
    if not transformer and which != "cross":
        raise LabError(
            _("map: {name} is a GRU + Bahdanau run, whose one attention is cross (encoder-decoder)").format(
                name=name
            )
        )
    sentence = text(state, "sentence", "", 300).strip()
    if not sentence:
        raise LabError(_("sentence: type an English sentence"))
    engine = request_engine(run)
    if transformer:
        limit_map(engine, sentence, which)
    translation = engine.translate([sentence], beam_size=1)[0]
    if not translation.hypotheses:
        raise LabError(_("sentence: nothing to translate"))
    attention = engine.attention(translation)
    weights = torch.from_numpy(attention.maps[which])  # (L, h, rows, columns), or (T, S) for the GRU
    rows, columns = attention.labels(which)
    title = _("{map} of {run}").format(map=_(TITLES[which]), run=name)
    texts = {"translation": translation.text, "checkpoint": checkpoint_text(name, run)}
    lines = [code(Translator.attention), code(collect_attention)]
    if not transformer:
        notes = [
            *unknown_words(run, sentence),
            _(
                "Above: the greedy translation. The GRU + Bahdanau decoder has one attention, over the whole "
                "source sentence at every output step: rows are the output tokens (the queries: the "
                "decoder's state before it picks each), columns the source tokens (the keys), and each row "
                "sums to 1. It has no layers and no heads."
            ),
        ]
        tensor = shown(title, weights, ["T", "S"], rows=rows, columns=columns, scale="weights", tokens=True)
        return answer([tensor], lines, notes, text=texts)
    tensor = shown(title, weights, AXES[which], rows=rows, columns=columns, scale="weights", tokens=True)
    tensor["views"] = ["lines", "grid"]  # the page also draws token-to-token lines and a layer x head grid
    notes = [
        *unknown_words(run, sentence),
        _(
            "Above: the greedy translation, and every head of every layer (L × h = {layers} × {heads}): "
            "each slice is one head, rows are queries, columns keys, and each row sums to 1."
        ).format(layers=weights.shape[0], heads=weights.shape[1]),
        _(
            "Lines: for each layer, every query token (left) is joined to every key token (right) by one "
            "line per head, in the head's colour, as opaque as its weight; all heads are overlaid, and "
            "unticking a head in the key under the lines hides its own. The grid shows each layer × head map "
            "small, to spot heads that look at the diagonal, the previous token or <eos>."
        ),
    ]
    return answer([tensor], lines, notes, text=texts)
