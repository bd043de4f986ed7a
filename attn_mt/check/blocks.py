"""The chapter's blocks `attn-mt check` knows: the book's names, attn-mt's module for each, and its cases.

Shapes as in variants.py. A block's cases cover the edge cases where implementations part: no
valid_lens, 1-D and 2-D valid_lens, a valid length of 0, a batch of 1, odd sizes, and dropout in eval
and in train mode. Sizes are passed to the learner's constructor by the book's argument names (both
the d2l 1.0 signatures, `AdditiveAttention(num_hiddens, dropout)`, and the older ones with
`key_size`, `query_size`, ...), so either edition's code is checked. The whole Transformer decoder
also runs as the book predicts, one token at a time with its state passed on; the kernel regression,
whose attn-mt module lives in demos/ beside check/, is compared with the book's formula instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attn_mt.check import variants
from attn_mt.i18n import N_
from attn_mt.models.attention import (
    AdditiveAttention,
    AttentionMask,
    DotProductAttention,
    MultiHeadAttention,
    masked_softmax,
)
from attn_mt.models.bahdanau import BahdanauDecoder, GRUEncoder
from attn_mt.models.positional import PositionalEncoding
from attn_mt.models.transformer import (
    AddNorm,
    DecoderBlock,
    EncoderBlock,
    PositionWiseFFN,
    TransformerDecoder,
    TransformerEncoder,
)

Tensors = dict[str, torch.Tensor | None]
Outputs = dict[str, torch.Tensor]
DROPOUT = 0.5  # the dropout of the dropout cases, high so that a dropout in the wrong place shows


@dataclass(frozen=True)
class Case:
    """One call: its name, the constructor's sizes, how to draw its inputs, and the mode it runs in."""

    name: str
    sizes: dict[str, float]
    inputs: Callable[[torch.Generator], Tensors]
    train: bool = False
    zero_length: bool = False  # a valid length of 0: the book's uniform row is accepted too
    accepted: tuple[tuple[dict[str, object], str], ...] = ()  # other conventions passed, each with a note


@dataclass(frozen=True)
class Probe:
    """What a probe may do to recognise a mistake behind a failed case: run the learner's block and
    attn-mt's on other inputs (`learner` builds the learner's afresh each time and may raise), build the
    learner's module with the case's sizes, and compare outputs."""

    learner: Callable[[Tensors], Outputs]
    reference: Callable[[Tensors], Outputs]
    build: Callable[[], object]
    same: Callable[[Outputs, Outputs], bool]
    inputs: Tensors
    sizes: dict[str, float]


@dataclass(frozen=True)
class Block:
    """One block of the chapter, how to run attn-mt's module and a learner's, and how each case goes."""

    name: str
    names: tuple[str, ...]  # the learner's names for it, the book's first
    reference: Callable[[dict[str, float]], nn.Module | None]
    run_reference: Callable[[nn.Module | None, Tensors, dict[str, float]], Outputs]
    run_learner: Callable[[object, Tensors, dict[str, float]], Outputs]
    variant: Callable[[nn.Module | None, Tensors, dict[str, float], variants.Knobs], Outputs]
    cases: tuple[Case, ...]
    mistakes: tuple[str, ...]
    dropout_where: str = ""  # where the book applies dropout, for a train-mode difference
    is_class: bool = True
    method_of: str = ""  # a d2l 1.0 method (transpose_qkv of MultiHeadAttention) when no function is found
    probes: tuple[Callable[[Probe], str], ...] = ()  # each names a mistake it recognises, or gives ""


def normal(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard normal entries from the case's generator."""
    return torch.randn(*shape, generator=g)


def lens(*values: int | list[int]) -> torch.Tensor:
    """valid_lens as the book gives them: a (B,) or (B, Q) integer tensor."""
    return torch.tensor(list(values))


def params(module: nn.Module | None) -> variants.Params:
    """A module's parameters by name (what the variants read)."""
    return {} if module is None else {name: p.detach() for name, p in module.named_parameters()}


# masked softmax ----------------------------------------------------------------------------------


def softmax_case(name: str, shape: tuple[int, int, int], valid: torch.Tensor | None, **extra: bool) -> Case:
    """A masked_softmax case over scores of `shape` (B, Q, K)."""
    return Case(name, {}, lambda g: {"X": normal(g, *shape), "valid_lens": valid}, **extra)


MASKED_SOFTMAX = Block(
    name="masked_softmax",
    names=("masked_softmax",),
    reference=lambda sizes: None,
    run_reference=lambda ref, x, sizes: {"output": masked_softmax(x["X"], x["valid_lens"])},
    run_learner=lambda fn, x, sizes: {"output": fn(x["X"].clone(), x["valid_lens"])},
    variant=lambda ref, x, sizes, k: {"output": variants.masked_softmax(x["X"], x["valid_lens"], k)},
    cases=(
        softmax_case(N_("no valid_lens"), (2, 2, 4), None),
        softmax_case(N_("1-D valid_lens"), (2, 2, 4), lens(2, 3)),
        softmax_case(N_("2-D valid_lens"), (2, 3, 5), lens([1, 3, 5], [2, 4, 4])),
        softmax_case(N_("a valid length of 0"), (2, 2, 4), lens(0, 3), zero_length=True),
        softmax_case(N_("batch 1"), (1, 3, 4), lens(2)),
        softmax_case(N_("odd sizes"), (3, 5, 7), lens(7, 1, 4)),
    ),
    mistakes=(
        "mask-with-zero",
        "mask-with-minus-infinity",
        "valid-lens-ignored",
        "mask-inverted",
        "mask-off-by-one",
        "softmax-wrong-axis",
        "valid-lens-wrong-axis",
    ),
    is_class=False,
)

SOFTMAX_MISTAKES = MASKED_SOFTMAX.mistakes


# additive and scaled dot-product attention ---------------------------------------------------------


def attention_cases(query_size: int, key_size: int) -> tuple[Case, ...]:
    """The cases of a single attention: queries (B, Q, query_size), keys (B, K, key_size), values."""

    def case(name: str, b: int, q: int, k: int, v: int, valid: torch.Tensor | None, **extra: object) -> Case:
        dropout = DROPOUT if extra.pop("dropout", False) else 0.0
        sizes = {"query_size": query_size, "key_size": key_size, "num_hiddens": 8, "dropout": dropout}

        def inputs(g: torch.Generator) -> Tensors:
            return {
                "queries": normal(g, b, q, query_size),
                "keys": normal(g, b, k, key_size),
                "values": normal(g, b, k, v),
                "valid_lens": valid,
            }

        return Case(name, sizes, inputs, **extra)  # type: ignore[arg-type]

    return (
        case(N_("no valid_lens"), 2, 1, 10, 4, None),
        case(N_("1-D valid_lens"), 2, 1, 10, 4, lens(2, 6)),
        case(N_("2-D valid_lens"), 2, 3, 5, 4, lens([1, 3, 5], [2, 4, 4])),
        case(N_("a valid length of 0"), 2, 2, 4, 3, lens(0, 3), zero_length=True),
        case(N_("batch 1"), 1, 2, 5, 3, lens(4)),
        case(N_("odd sizes"), 3, 5, 7, 3, lens(7, 1, 4)),
        case(N_("dropout 0.5 in eval mode"), 2, 3, 6, 4, lens(3, 5), dropout=True),
        case(N_("dropout 0.5 in train mode"), 2, 3, 6, 4, lens(3, 5), dropout=True, train=True),
    )


def run_attention(module: object, x: Tensors, sizes: dict[str, float]) -> Outputs:
    """Call an attention module as the book does and keep its attention_weights when it has them."""
    output = module(x["queries"], x["keys"], x["values"], x["valid_lens"])  # type: ignore[operator]
    weights = getattr(module, "attention_weights", None)
    return {"output": output} | ({"attention_weights": weights} if isinstance(weights, torch.Tensor) else {})


def attention_variant(score: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[..., Outputs]:
    """A variant of a single attention from its scoring function."""

    def variant(ref: nn.Module | None, x: Tensors, sizes: dict[str, float], k: variants.Knobs) -> Outputs:
        output, weights = score(ref, x["queries"], x["keys"], x["values"], x["valid_lens"], k)
        return {"output": output, "attention_weights": weights}

    return variant


DOT_PRODUCT = Block(
    name="DotProductAttention",
    names=("DotProductAttention",),
    reference=lambda s: DotProductAttention(s["dropout"]),
    run_reference=run_attention,
    run_learner=run_attention,
    variant=attention_variant(lambda ref, q, k, v, vl, kn: variants.dot_product(q, k, v, vl, kn)),
    cases=attention_cases(6, 6),
    mistakes=(*SOFTMAX_MISTAKES, "no-scaling", "scaled-by-d"),
    dropout_where=N_("the attention weights, after the softmax and before they multiply the values"),
)

ADDITIVE = Block(
    name="AdditiveAttention",
    names=("AdditiveAttention",),
    reference=lambda s: AdditiveAttention(s["key_size"], s["query_size"], s["num_hiddens"], s["dropout"]),
    run_reference=run_attention,
    run_learner=run_attention,
    variant=attention_variant(lambda ref, q, k, v, vl, kn: variants.additive(params(ref), q, k, v, vl, kn)),
    cases=attention_cases(5, 3),
    mistakes=(*SOFTMAX_MISTAKES, "no-tanh"),
    dropout_where=N_("the attention weights, after the softmax and before they multiply the values"),
)


# multi-head attention and its two transposes --------------------------------------------------------


def heads_case(name: str, shape: tuple[int, int, int], num_heads: int, split: bool = True) -> Case:
    """A transpose case: X of `shape`, (B, N, H) to split or (B * h, N, d) to merge, and `num_heads` heads."""
    hidden = shape[-1] if split else shape[-1] * num_heads
    return Case(name, mha_sizes(hidden, 0.0, num_heads), lambda g: {"X": normal(g, *shape)})


def mha_sizes(num_hiddens: int, dropout: float, num_heads: int = 2) -> dict[str, float]:
    """A MultiHeadAttention's constructor sizes, in both editions' names."""
    return {
        "key_size": 3,
        "query_size": 5,
        "value_size": 4,
        "num_hiddens": num_hiddens,
        "num_heads": num_heads,
        "dropout": dropout,
        "bias": False,
    }


def reference_mha(s: dict[str, float]) -> MultiHeadAttention:
    """attn-mt's multi-head attention with a case's sizes."""
    return MultiHeadAttention(
        int(s["key_size"]),
        int(s["query_size"]),
        int(s["value_size"]),
        int(s["num_hiddens"]),
        int(s["num_heads"]),
        s["dropout"],
        bias=False,
    )


def split_reference(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's split_heads in the book's (B * h, N, d) layout."""
    assert isinstance(ref, MultiHeadAttention) and x["X"] is not None
    return {"output": ref.split_heads(x["X"]).flatten(0, 1)}


def merge_reference(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's merge_heads of the book's (B * h, N, d) layout."""
    assert isinstance(ref, MultiHeadAttention) and x["X"] is not None
    X = x["X"]
    return {"output": ref.merge_heads(X.view(-1, ref.num_heads, *X.shape[1:]))}


def heads_block(name: str, split: bool) -> Block:
    """One of multi-head attention's two transposes: transpose_qkv (`split`) or transpose_output."""
    shapes = ((2, 4, 6), (1, 3, 8), (3, 5, 15)) if split else ((6, 4, 2), (2, 3, 4), (15, 5, 3))
    names = (N_("3 heads"), N_("batch 1"), N_("odd sizes"))
    transpose = variants.split_heads if split else variants.merge_heads
    return Block(
        name=name,
        names=(name,),
        reference=reference_mha,
        run_reference=split_reference if split else merge_reference,
        run_learner=lambda fn, x, s: {"output": fn(x["X"], int(s["num_heads"]))},  # type: ignore[operator]
        variant=lambda ref, x, s, k: {"output": transpose(x["X"], int(s["num_heads"]), k)},  # type: ignore[arg-type]
        cases=tuple(
            heads_case(case, shape, heads, split)
            for case, shape, heads in zip(names, shapes, (3, 2, 5), strict=True)
        ),
        mistakes=("heads-split-wrong",) if split else ("heads-merged-wrong",),
        is_class=False,
        method_of="MultiHeadAttention",
    )


TRANSPOSE_QKV = heads_block("transpose_qkv", split=True)
TRANSPOSE_OUTPUT = heads_block("transpose_output", split=False)


def mha_cases() -> tuple[Case, ...]:
    """Multi-head attention's cases: queries (B, Q, 5), keys (B, K, 3), values (B, K, 4)."""

    def case(name: str, b: int, q: int, k: int, valid: torch.Tensor | None, **extra: object) -> Case:
        dropout = DROPOUT if extra.pop("dropout", False) else 0.0
        heads = int(extra.pop("heads", 2))  # type: ignore[call-overload]
        sizes = mha_sizes(int(extra.pop("hidden", 8)), dropout, heads)  # type: ignore[call-overload]

        def inputs(g: torch.Generator) -> Tensors:
            return {
                "queries": normal(g, b, q, 5),
                "keys": normal(g, b, k, 3),
                "values": normal(g, b, k, 4),
                "valid_lens": valid,
            }

        return Case(name, sizes, inputs, **extra)  # type: ignore[arg-type]

    return (
        case(N_("no valid_lens"), 2, 3, 4, None),
        case(N_("1-D valid_lens"), 2, 4, 6, lens(3, 2)),
        case(N_("2-D valid_lens"), 2, 3, 5, lens([1, 3, 5], [2, 4, 4])),
        case(N_("a valid length of 0"), 2, 2, 4, lens(0, 3), zero_length=True),
        case(N_("batch 1"), 1, 2, 5, lens(4)),
        case(N_("odd sizes"), 3, 5, 7, lens(7, 1, 4), hidden=15, heads=5),
        case(N_("dropout 0.5 in eval mode"), 2, 3, 6, lens(3, 5), dropout=True),
        case(N_("dropout 0.5 in train mode"), 2, 3, 6, lens(3, 5), dropout=True, train=True),
    )


def run_mha(module: object, x: Tensors, sizes: dict[str, float]) -> Outputs:
    """Call a multi-head attention as the book does."""
    return {"output": module(x["queries"], x["keys"], x["values"], x["valid_lens"])}  # type: ignore[operator]


MULTI_HEAD = Block(
    name="MultiHeadAttention",
    names=("MultiHeadAttention",),
    reference=reference_mha,
    run_reference=run_mha,
    run_learner=run_mha,
    variant=lambda ref, x, s, k: {
        "output": variants.multi_head(
            params(ref), x["queries"], x["keys"], x["values"], x["valid_lens"], int(s["num_heads"]), k
        )
    },
    cases=mha_cases(),
    mistakes=(
        *SOFTMAX_MISTAKES,
        "no-scaling",
        "scaled-by-d",
        "heads-scaled-by-hidden",
        "heads-split-wrong",
        "heads-merged-wrong",
        "valid-lens-tiled",
        "no-output-projection",
    ),
    dropout_where=N_("the attention weights of every head, after the softmax"),
)


# positional encoding, FFN, add & norm ----------------------------------------------------------------


def x_case(
    name: str, shape: tuple[int, ...], sizes: dict[str, float], two: bool = False, **extra: bool
) -> Case:
    """A case whose input is X of `shape` (and Y of the same shape when `two`)."""

    def inputs(g: torch.Generator) -> Tensors:
        return {"X": normal(g, *shape), "Y": normal(g, *shape) if two else None}

    return Case(name, sizes, inputs, **extra)


def pe_sizes(num_hiddens: int, dropout: float = 0.0) -> dict[str, float]:
    """PositionalEncoding's constructor sizes."""
    return {"num_hiddens": num_hiddens, "dropout": dropout, "max_len": 1000}


def sliced_by_batch(probe: Probe) -> str:
    """pe-sliced-by-batch: the learner's encoding is right when the batch is as long as the sequence."""
    X = probe.inputs["X"]
    assert X is not None
    batch, steps, hidden = X.shape
    if batch == steps:
        return ""
    square = {"X": torch.randn(steps, steps, hidden, generator=torch.Generator().manual_seed(steps))}
    return "pe-sliced-by-batch" if probe.same(probe.learner(square), probe.reference(square)) else ""


POSITIONAL = Block(
    name="PositionalEncoding",
    names=("PositionalEncoding",),
    reference=lambda s: PositionalEncoding(int(s["num_hiddens"]), s["dropout"]),
    run_reference=lambda ref, x, s: {"output": ref(x["X"])},  # type: ignore[misc]
    run_learner=lambda m, x, s: {"output": m(x["X"])},  # type: ignore[operator]
    variant=lambda ref, x, s, k: {"output": variants.positional(x["X"], k)},  # type: ignore[arg-type]
    cases=(
        x_case(N_("12 steps"), (1, 12, 8), pe_sizes(8)),
        x_case(N_("batch 2"), (2, 9, 16), pe_sizes(16)),
        x_case(N_("odd steps"), (3, 7, 6), pe_sizes(6)),
        x_case(N_("dropout 0.5 in eval mode"), (2, 5, 8), pe_sizes(8, DROPOUT)),
        x_case(N_("dropout 0.5 in train mode"), (2, 5, 8), pe_sizes(8, DROPOUT), train=True),
    ),
    mistakes=("sin-cos-swapped", "frequency-exponent", "pe-sliced-by-batch"),
    dropout_where=N_("X + P, after the table is added"),
    probes=(sliced_by_batch,),
)


def ffn_sizes(num_hiddens: int, ffn_num_hiddens: int) -> dict[str, float]:
    """PositionWiseFFN's sizes in both editions' names."""
    return {"ffn_num_input": num_hiddens, "ffn_num_hiddens": ffn_num_hiddens, "ffn_num_outputs": num_hiddens}


FFN = Block(
    name="PositionWiseFFN",
    names=("PositionWiseFFN",),
    reference=lambda s: PositionWiseFFN(
        int(s["ffn_num_input"]), int(s["ffn_num_hiddens"]), int(s["ffn_num_outputs"])
    ),
    run_reference=lambda ref, x, s: {"output": ref(x["X"])},  # type: ignore[misc]
    run_learner=lambda m, x, s: {"output": m(x["X"])},  # type: ignore[operator]
    variant=lambda ref, x, s, k: {"output": variants.ffn(params(ref), x["X"], k)},  # type: ignore[arg-type]
    cases=(
        x_case(N_("batch 2"), (2, 3, 4), ffn_sizes(4, 8)),
        x_case(N_("batch 1"), (1, 1, 6), ffn_sizes(6, 3)),
        x_case(N_("odd sizes"), (3, 5, 7), ffn_sizes(7, 9)),
    ),
    mistakes=("no-relu",),
)


def addnorm_sizes(num_hiddens: int, dropout: float = 0.0) -> dict[str, float]:
    """AddNorm's sizes in both editions' names."""
    return {"normalized_shape": num_hiddens, "norm_shape": num_hiddens, "dropout": dropout}


ADD_NORM = Block(
    name="AddNorm",
    names=("AddNorm",),
    reference=lambda s: AddNorm(int(s["normalized_shape"]), s["dropout"]),
    run_reference=lambda ref, x, s: {"output": ref(x["X"], x["Y"])},  # type: ignore[misc]
    run_learner=lambda m, x, s: {"output": m(x["X"], x["Y"])},  # type: ignore[operator]
    variant=lambda ref, x, s, k: {"output": variants.add_norm(params(ref), x["X"], x["Y"], k)},  # type: ignore[arg-type]
    cases=(
        x_case(N_("batch 2"), (2, 3, 4), addnorm_sizes(4), two=True),
        x_case(N_("batch 1"), (1, 1, 6), addnorm_sizes(6), two=True),
        x_case(N_("odd sizes"), (3, 5, 7), addnorm_sizes(7), two=True),
        x_case(N_("dropout 0.5 in eval mode"), (2, 3, 4), addnorm_sizes(4, DROPOUT), two=True),
        x_case(N_("dropout 0.5 in train mode"), (2, 3, 4), addnorm_sizes(4, DROPOUT), two=True, train=True),
    ),
    mistakes=("norm-before-add", "no-residual"),
    dropout_where=N_("Y, the sublayer's output, before the residual sum"),
)


# the Transformer encoder block ------------------------------------------------------------------------


def block_sizes(num_hiddens: int, num_heads: int, dropout: float = 0.0) -> dict[str, float]:
    """An encoder block's sizes in both editions' names."""
    return {
        "num_hiddens": num_hiddens,
        "ffn_num_hiddens": 2 * num_hiddens,
        "num_heads": num_heads,
        "dropout": dropout,
        "use_bias": False,
        "key_size": num_hiddens,
        "query_size": num_hiddens,
        "value_size": num_hiddens,
        "norm_shape": num_hiddens,
        "ffn_num_input": num_hiddens,
    }


def encoder_case(
    name: str, shape: tuple[int, int, int], heads: int, valid: torch.Tensor | None, **extra: object
) -> Case:
    """An encoder block case over X of `shape` (B, N, H)."""
    dropout = DROPOUT if extra.pop("dropout", False) else 0.0
    return Case(
        name,
        block_sizes(shape[-1], heads, dropout),
        lambda g: {"X": normal(g, *shape), "valid_lens": valid},
        **extra,  # type: ignore[arg-type]
    )


def run_reference_block(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's encoder block, given the book's valid_lens."""
    assert isinstance(ref, EncoderBlock) and x["X"] is not None
    steps = x["X"].shape[1]
    valid = x["valid_lens"]
    mask = None if valid is None else AttentionMask.from_valid_lens(valid, steps, steps).with_heads()
    return {"output": ref(x["X"], mask, False)[0]}


ENCODER_BLOCK = Block(
    name="TransformerEncoderBlock",
    names=("TransformerEncoderBlock", "EncoderBlock"),
    reference=lambda s: EncoderBlock(
        int(s["num_hiddens"]), int(s["ffn_num_hiddens"]), int(s["num_heads"]), s["dropout"]
    ),
    run_reference=run_reference_block,
    run_learner=lambda m, x, s: {"output": m(x["X"], x["valid_lens"])},  # type: ignore[operator]
    variant=lambda ref, x, s, k: {
        "output": variants.encoder_block(params(ref), x["X"], x["valid_lens"], int(s["num_heads"]), k)  # type: ignore[arg-type]
    },
    cases=(
        encoder_case(N_("no valid_lens"), (2, 4, 8), 2, None),
        encoder_case(N_("1-D valid_lens"), (2, 5, 8), 2, lens(3, 2)),
        encoder_case(N_("batch 1"), (1, 3, 6), 3, lens(2)),
        encoder_case(N_("odd sizes"), (3, 7, 10), 5, lens(7, 1, 4)),
        encoder_case(N_("dropout 0.5 in eval mode"), (2, 4, 8), 2, lens(3, 4), dropout=True),
        encoder_case(N_("dropout 0.5 in train mode"), (2, 4, 8), 2, lens(3, 4), dropout=True, train=True),
    ),
    mistakes=(
        "block-without-mask",
        *SOFTMAX_MISTAKES,
        "no-scaling",
        "heads-scaled-by-hidden",
        "heads-split-wrong",
        "heads-merged-wrong",
        "valid-lens-tiled",
        "no-output-projection",
        "no-relu",
        "norm-before-add",
        "no-residual",
        "block-residual-from-input",
    ),
    dropout_where=N_("the attention weights and, in each add & norm, the sublayer's output"),
)


# the Transformer decoder block ------------------------------------------------------------------------


def decoder_block_case(
    name: str, b: int, t: int, s: int, hidden: int, heads: int, valid: torch.Tensor | None, **extra: object
) -> Case:
    """A decoder block case: new steps X (B, T, H), encoder outputs (B, S, H), and (with `past`, in eval
    mode) the block's inputs of the steps before, (B, past, H)."""
    dropout = DROPOUT if extra.pop("dropout", False) else 0.0
    past = int(extra.pop("past", 0))  # type: ignore[call-overload]

    def inputs(g: torch.Generator) -> Tensors:
        return {
            "X": normal(g, b, t, hidden),
            "memory": normal(g, b, s, hidden),
            "valid_lens": valid,
            "past": normal(g, b, past, hidden) if past else None,
        }

    return Case(name, block_sizes(hidden, heads, dropout) | {"i": 0}, inputs, **extra)  # type: ignore[arg-type]


def run_reference_decoder_block(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's decoder block as the book's is used: causal over all the steps in training, in eval mode
    the new steps after the cached ones, seeing them all."""
    assert isinstance(ref, DecoderBlock)
    X, memory, valid, past = x["X"], x["memory"], x["valid_lens"], x["past"]
    assert X is not None and memory is not None
    cross = ref.attention2.project_keys_values(memory, memory)  # (B, h, S, d) each
    src_mask = None if valid is None else AttentionMask.from_valid_lens(valid, X.shape[1], memory.shape[1])
    cached = None if past is None else ref.attention1.project_keys_values(past, past)
    self_mask = AttentionMask.causal(X.shape[1]).with_heads() if ref.training else None
    heads_mask = None if src_mask is None else src_mask.with_heads()
    return {"output": ref(X, cached, self_mask, cross, heads_mask, False)[0]}  # type: ignore[arg-type]


def run_learner_decoder_block(module: object, x: Tensors, s: dict[str, float]) -> Outputs:
    """The book's decoder block: forward(X, state) with state [enc_outputs, enc_valid_lens, [cached]]."""
    state = [x["memory"], x["valid_lens"], [x["past"]]]
    output, _ = module(x["X"], state)  # type: ignore[operator]
    return {"output": output}


DECODER_BLOCK = Block(
    name="TransformerDecoderBlock",
    names=("TransformerDecoderBlock", "DecoderBlock"),
    reference=lambda s: DecoderBlock(
        int(s["num_hiddens"]), int(s["ffn_num_hiddens"]), int(s["num_heads"]), s["dropout"]
    ),
    run_reference=run_reference_decoder_block,
    run_learner=run_learner_decoder_block,
    variant=lambda ref, x, s, k: {
        "output": variants.decoder_block(
            params(ref),
            x["X"],  # type: ignore[arg-type]
            x["past"],
            x["memory"],  # type: ignore[arg-type]
            x["valid_lens"],
            int(s["num_heads"]),
            bool(ref is not None and ref.training),
            k,
        )
    },
    cases=(
        decoder_block_case(N_("training: causal self-attention"), 2, 4, 5, 8, 2, lens(3, 5), train=True),
        decoder_block_case(N_("no valid_lens"), 2, 3, 4, 8, 2, None),
        decoder_block_case(N_("1-D valid_lens"), 2, 3, 5, 8, 2, lens(2, 5)),
        decoder_block_case(N_("one step after 3 (prediction)"), 2, 1, 5, 8, 2, lens(4, 2), past=3),
        decoder_block_case(N_("batch 1"), 1, 3, 3, 6, 3, lens(2)),
        decoder_block_case(N_("odd sizes"), 3, 5, 7, 10, 5, lens(7, 1, 4)),
        decoder_block_case(N_("dropout 0.5 in eval mode"), 2, 4, 5, 8, 2, lens(3, 5), dropout=True),
        decoder_block_case(
            N_("dropout 0.5 in train mode"), 2, 4, 5, 8, 2, lens(3, 5), dropout=True, train=True
        ),
    ),
    mistakes=(
        "decoder-not-causal",
        "cross-attention-without-mask",
        *SOFTMAX_MISTAKES,
        "no-scaling",
        "heads-scaled-by-hidden",
        "heads-split-wrong",
        "heads-merged-wrong",
        "valid-lens-tiled",
        "no-output-projection",
        "no-relu",
        "norm-before-add",
        "no-residual",
    ),
    dropout_where=N_("the attention weights and, in each add & norm, the sublayer's output"),
)


# the seq2seq encoder ----------------------------------------------------------------------------------


def encoder_sizes(num_layers: int, dropout: float = 0.0) -> dict[str, float]:
    """The seq2seq encoder's sizes: V 11, E 6, H 8."""
    return {"vocab_size": 11, "embed_size": 6, "num_hiddens": 8, "num_layers": num_layers, "dropout": dropout}


def seq2seq_case(name: str, b: int, s: int, layers: int, dropout: float = 0.0) -> Case:
    """An encoder case: source ids (B, S)."""
    return Case(
        name, encoder_sizes(layers, dropout), lambda g: {"X": torch.randint(0, 11, (b, s), generator=g)}
    )


def run_reference_encoder(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's GRU encoder, reading every step as the book's does: outputs (B, S, H), state (L, B, H)."""
    assert isinstance(ref, GRUEncoder) and x["X"] is not None
    outputs, state = ref(x["X"], torch.full((x["X"].shape[0],), x["X"].shape[1]))
    return {"output": outputs, "state": state}


def run_learner_encoder(module: object, x: Tensors, s: dict[str, float]) -> Outputs:
    """The book's Seq2SeqEncoder: X (B, S) -> outputs (S, B, H), state (L, B, H); outputs batch-first here."""
    outputs, state = module(x["X"])  # type: ignore[operator]
    return {"output": outputs.permute(1, 0, 2), "state": state}


SEQ2SEQ_ENCODER = Block(
    name="Seq2SeqEncoder",
    names=("Seq2SeqEncoder",),
    reference=lambda s: GRUEncoder(
        int(s["vocab_size"]),
        int(s["embed_size"]),
        int(s["num_hiddens"]),
        int(s["num_layers"]),
        s["dropout"],
        False,
    ),
    run_reference=run_reference_encoder,
    run_learner=run_learner_encoder,
    variant=lambda ref, x, s, k: run_reference_encoder(ref, x, s),
    cases=(
        seq2seq_case(N_("2 layers"), 2, 5, 2),
        seq2seq_case(N_("batch 1"), 1, 3, 1),
        seq2seq_case(N_("odd sizes"), 3, 7, 3),
        seq2seq_case(N_("dropout 0.5 in eval mode"), 2, 4, 2, DROPOUT),
    ),
    mistakes=(),
)


# the Bahdanau decoder ------------------------------------------------------------------------------------


def decoder_sizes(num_layers: int, dropout: float = 0.0) -> dict[str, float]:
    """The Bahdanau decoder's sizes: V 11, E 6, H 8."""
    return {"vocab_size": 11, "embed_size": 6, "num_hiddens": 8, "num_layers": num_layers, "dropout": dropout}


def decoder_case(
    name: str, b: int, s: int, t: int, layers: int, valid: torch.Tensor | None, **extra: object
) -> Case:
    """A decoder case: encoder outputs (B, S, H), final states (L, B, H), target ids (B, T)."""
    dropout = DROPOUT if extra.pop("dropout", False) else 0.0
    sizes = decoder_sizes(layers, dropout)

    def inputs(g: torch.Generator) -> Tensors:
        return {
            "memory": normal(g, b, s, 8),
            "hidden": normal(g, layers, b, 8),
            "tgt": torch.randint(0, 11, (b, t), generator=g),
            "valid_lens": valid,
        }

    return Case(name, sizes, inputs, **extra)  # type: ignore[arg-type]


def run_reference_decoder(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's BahdanauDecoder, teacher-forced over the case's target ids."""
    assert isinstance(ref, BahdanauDecoder)
    memory, valid = x["memory"], x["valid_lens"]
    assert memory is not None
    mask = None if valid is None else AttentionMask.from_valid_lens(valid, 1, memory.shape[1])
    state = ref.init_state(memory, x["hidden"], mask)  # type: ignore[arg-type]
    logits, weights = ref(x["tgt"], state, need_weights=True)
    return {"output": logits, "attention_weights": weights}


def run_learner_decoder(module: object, x: Tensors, s: dict[str, float]) -> Outputs:
    """The book's Seq2SeqAttentionDecoder: init_state from time-major encoder outputs, then forward."""
    memory = x["memory"]
    assert memory is not None
    state = module.init_state((memory.permute(1, 0, 2), x["hidden"]), x["valid_lens"])  # type: ignore[attr-defined]
    logits, _ = module(x["tgt"], state)  # type: ignore[operator]
    outputs = {"output": logits}
    weights = getattr(module, "attention_weights", None)
    if isinstance(weights, list | tuple) and weights and all(isinstance(w, torch.Tensor) for w in weights):
        outputs["attention_weights"] = torch.cat(list(weights), dim=1)  # T x (B, 1, S) -> (B, T, S)
    return outputs


def decoder_variant(ref: nn.Module | None, x: Tensors, s: dict[str, float], k: variants.Knobs) -> Outputs:
    """The book's decoder with one mistake, on attn-mt's GRU."""
    assert isinstance(ref, BahdanauDecoder)
    logits, weights = variants.bahdanau_decoder(
        params(ref),
        ref.rnn,
        x["tgt"],
        x["memory"],
        x["hidden"],
        x["valid_lens"],
        k,  # type: ignore[arg-type]
    )
    return {"output": logits, "attention_weights": weights}


def time_major_state(probe: Probe) -> str:
    """init-state-not-transposed: the state's first entry is the encoder outputs as given, (S, B, H)."""
    memory = probe.inputs["memory"]
    assert memory is not None
    module = probe.build()
    state = module.init_state((memory.permute(1, 0, 2), probe.inputs["hidden"]), probe.inputs["valid_lens"])  # type: ignore[attr-defined]
    first = state[0] if isinstance(state, list | tuple) and state else None
    time_major = (memory.shape[1], memory.shape[0], memory.shape[2])
    kept = isinstance(first, torch.Tensor) and first.shape == time_major
    return "init-state-not-transposed" if kept else ""


DECODER = Block(
    name="Seq2SeqAttentionDecoder",
    names=("Seq2SeqAttentionDecoder",),
    reference=lambda s: BahdanauDecoder(
        int(s["vocab_size"]), int(s["embed_size"]), int(s["num_hiddens"]), int(s["num_layers"]), s["dropout"]
    ),
    run_reference=run_reference_decoder,
    run_learner=run_learner_decoder,
    variant=decoder_variant,
    cases=(
        decoder_case(N_("no valid_lens"), 2, 4, 3, 2, None),
        decoder_case(N_("1-D valid_lens"), 2, 5, 4, 2, lens(3, 5)),
        decoder_case(N_("batch 1"), 1, 3, 2, 1, lens(2)),
        decoder_case(N_("odd sizes"), 3, 7, 5, 3, lens(7, 1, 4)),
        decoder_case(N_("dropout 0.5 in eval mode"), 2, 4, 3, 2, lens(3, 4), dropout=True),
        decoder_case(N_("dropout 0.5 in train mode"), 2, 4, 3, 2, lens(3, 4), dropout=True, train=True),
    ),
    mistakes=(
        "decoder-without-mask",
        "query-from-first-layer",
        "concat-order-swapped",
        *SOFTMAX_MISTAKES,
        "no-tanh",
    ),
    dropout_where=N_("the attention weights at each step, and between the GRU's layers"),
    probes=(time_major_state,),
)

# the Transformer encoder and decoder ----------------------------------------------------------------


TRANSFORMER_DROPOUT = N_(
    "the positional encoding's sum and, in every block, the attention weights and each add & norm's "
    "sublayer output"
)


def transformer_sizes(
    num_hiddens: int, num_heads: int, num_layers: int, dropout: float = 0.0
) -> dict[str, float]:
    """The whole encoder's or decoder's sizes in both editions' names: V 11, F 2H."""
    layers = {"num_layers": num_layers, "num_blks": num_layers}
    return block_sizes(num_hiddens, num_heads, dropout) | layers | {"vocab_size": 11}


def kept_weights(weights: object, batch: int, heads: int) -> torch.Tensor | None:
    """The book's list of each block's weights, L x (B * h, Q, K), as one (B, L, h, Q, K); a single tensor
    counts as a list of one; None when they are not kept so."""
    if isinstance(weights, torch.Tensor):
        weights = [weights]
    if not isinstance(weights, list | tuple) or not weights:
        return None
    if not all(isinstance(w, torch.Tensor) and w.dim() == 3 and w.shape[0] == batch * heads for w in weights):
        return None
    return torch.stack([w.reshape(batch, heads, *w.shape[1:]) for w in weights], dim=1)


def ids_case(
    name: str, sizes: dict[str, float], inputs: Callable[[torch.Generator], Tensors], **extra: bool
) -> Case:
    """A case of the whole encoder or decoder."""
    return Case(name, sizes, inputs, **extra)


def encoder_inputs(b: int, s: int, valid: torch.Tensor | None) -> Callable[[torch.Generator], Tensors]:
    """Source ids (B, S) and their valid_lens."""
    return lambda g: {"X": torch.randint(0, 11, (b, s), generator=g), "valid_lens": valid}


def run_reference_transformer_encoder(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's TransformerEncoder: outputs (B, S, H) and each block's weights (B, L, h, S, S)."""
    assert isinstance(ref, TransformerEncoder) and x["X"] is not None
    steps, valid = x["X"].shape[1], x["valid_lens"]
    mask = None if valid is None else AttentionMask.from_valid_lens(valid, 1, steps).with_heads()
    output, weights = ref(x["X"], mask, True)  # type: ignore[arg-type]
    return {"output": output, "attention_weights": torch.stack(weights, dim=1)}


def run_learner_transformer_encoder(module: object, x: Tensors, s: dict[str, float]) -> Outputs:
    """The book's TransformerEncoder: forward(X, valid_lens), each block's weights in attention_weights."""
    output = module(x["X"], x["valid_lens"])  # type: ignore[operator]
    assert x["X"] is not None
    weights = kept_weights(getattr(module, "attention_weights", None), x["X"].shape[0], int(s["num_heads"]))
    return {"output": output} | ({} if weights is None else {"attention_weights": weights})


def encoder_variant(ref: nn.Module | None, x: Tensors, s: dict[str, float], k: variants.Knobs) -> Outputs:
    """The book's encoder with one mistake."""
    output, weights = variants.transformer_encoder(
        params(ref),
        x["X"],
        x["valid_lens"],
        int(s["num_heads"]),
        int(s["num_layers"]),
        k,  # type: ignore[arg-type]
    )
    return {"output": output, "attention_weights": weights}


BLOCK_MISTAKES = (  # a block's mistakes that show through the whole encoder or decoder
    *SOFTMAX_MISTAKES,
    "no-scaling",
    "heads-scaled-by-hidden",
    "heads-split-wrong",
    "heads-merged-wrong",
    "valid-lens-tiled",
    "no-output-projection",
    "no-relu",
    "norm-before-add",
    "no-residual",
)


def stack_of(cls: type, sizes: dict) -> torch.nn.Module:
    """attn-mt's whole Transformer encoder or decoder `cls` at a case's sizes, over 11 tokens."""
    return cls(
        11,
        int(sizes["num_hiddens"]),
        int(sizes["ffn_num_hiddens"]),
        int(sizes["num_heads"]),
        int(sizes["num_layers"]),
        sizes["dropout"],
    )


TRANSFORMER_ENCODER = Block(
    name="TransformerEncoder",
    names=("TransformerEncoder",),
    reference=lambda s: stack_of(TransformerEncoder, s),
    run_reference=run_reference_transformer_encoder,
    run_learner=run_learner_transformer_encoder,
    variant=encoder_variant,
    cases=(
        ids_case(N_("no valid_lens"), transformer_sizes(8, 2, 2), encoder_inputs(2, 4, None)),
        ids_case(N_("1-D valid_lens"), transformer_sizes(8, 2, 2), encoder_inputs(2, 5, lens(3, 2))),
        ids_case(N_("batch 1, one block"), transformer_sizes(6, 3, 1), encoder_inputs(1, 3, lens(2))),
        ids_case(N_("odd sizes, 3 blocks"), transformer_sizes(10, 5, 3), encoder_inputs(3, 7, lens(7, 1, 4))),
        ids_case(
            N_("dropout 0.5 in eval mode"),
            transformer_sizes(8, 2, 2, DROPOUT),
            encoder_inputs(2, 4, lens(3, 4)),
        ),
        ids_case(
            N_("dropout 0.5 in train mode"),
            transformer_sizes(8, 2, 2, DROPOUT),
            encoder_inputs(2, 4, lens(3, 4)),
            train=True,
        ),
    ),
    mistakes=(
        "embedding-not-scaled",
        "embedding-scaled-after-positions",
        "positions-left-out",
        "weights-of-last-block-only",
        "block-without-mask",
        *BLOCK_MISTAKES,
        "block-residual-from-input",
    ),
    dropout_where=TRANSFORMER_DROPOUT,
)


STEP_POSITIONS_NOTE = N_(
    "one token at a time, your decoder gives step t the positional encoding of position t; the book's gives "
    "every one-token input position 0 (P[:, :1]), which attn-mt's decoding does not: both pass"
)


def decoder_inputs(
    b: int, t: int, s: int, hidden: int, valid: torch.Tensor | None
) -> Callable[[torch.Generator], Tensors]:
    """Target ids (B, T), encoder outputs (B, S, H) and their valid_lens."""

    def inputs(g: torch.Generator) -> Tensors:
        return {
            "tgt": torch.randint(0, 11, (b, t), generator=g),
            "memory": normal(g, b, s, hidden),
            "valid_lens": valid,
        }

    return inputs


def transformer_decoder_case(
    name: str,
    b: int,
    t: int,
    s: int,
    sizes: tuple[int, int, int],
    valid: torch.Tensor | None,
    **extra: object,
) -> Case:
    """A whole decoder case; `sizes` (H, h, L); `predict` feeds the target one token at a time."""
    hidden, heads, layers = sizes
    dropout = DROPOUT if extra.pop("dropout", False) else 0.0
    predict = bool(extra.pop("predict", False))
    case_sizes = transformer_sizes(hidden, heads, layers, dropout) | {"one_at_a_time": float(predict)}
    accepted = (({"step_positions": "offset"}, STEP_POSITIONS_NOTE),) if predict else ()
    return Case(name, case_sizes, decoder_inputs(b, t, s, hidden, valid), accepted=accepted, **extra)  # type: ignore[arg-type]


def run_reference_transformer_decoder(ref: nn.Module | None, x: Tensors, s: dict[str, float]) -> Outputs:
    """attn-mt's TransformerDecoder as the book's is used: all steps at once (causal in training, seeing
    every step in eval mode, as the book's), or one token at a time, each block's cache growing by a
    step and every token at position 0 as the book's predict_seq2seq gives it."""
    assert isinstance(ref, TransformerDecoder)
    tgt, memory, valid = x["tgt"], x["memory"], x["valid_lens"]
    assert tgt is not None and memory is not None
    cross = ref.project_memory(memory)  # L x ((B, h, S, d), (B, h, S, d))
    mask = None if valid is None else AttentionMask.from_valid_lens(valid, 1, memory.shape[1]).with_heads()
    blocks = list(ref.blks.values())
    if not s["one_at_a_time"]:
        X = ref.embed(tgt)  # (B, T, H)
        causal = AttentionMask.causal(tgt.shape[1]).with_heads() if ref.training else None
        for i, blk in enumerate(blocks):
            X = blk(X, None, causal, cross[i], mask, False)[0]
        return {"output": ref.dense(X)}
    past: list = [None] * len(blocks)
    logits = []
    for step in range(tgt.shape[1]):
        X = ref.embed(tgt[:, step : step + 1], 0)  # (B, 1, H)
        for i, blk in enumerate(blocks):
            X, past[i] = blk(X, past[i], None, cross[i], mask, False)[:2]
        logits.append(ref.dense(X))
    return {"output": torch.cat(logits, dim=1)}


def run_learner_transformer_decoder(module: object, x: Tensors, s: dict[str, float]) -> Outputs:
    """The book's TransformerDecoder: init_state(enc_outputs, enc_valid_lens), then forward(X, state) with
    every target token at once, or one at a time, the returned state passed on as predict_seq2seq does."""
    tgt = x["tgt"]
    assert tgt is not None
    state = module.init_state(x["memory"], x["valid_lens"])  # type: ignore[attr-defined]
    if not s["one_at_a_time"]:
        return {"output": module(tgt, state)[0]}  # type: ignore[operator]
    logits = []
    for step in range(tgt.shape[1]):
        output, state = module(tgt[:, step : step + 1], state)  # type: ignore[operator]
        logits.append(output)
    return {"output": torch.cat(logits, dim=1)}


def decoder_model_variant(
    ref: nn.Module | None, x: Tensors, s: dict[str, float], k: variants.Knobs
) -> Outputs:
    """The book's decoder with one mistake."""
    logits = variants.transformer_decoder(
        params(ref),
        x["tgt"],  # type: ignore[arg-type]
        x["memory"],  # type: ignore[arg-type]
        x["valid_lens"],
        int(s["num_heads"]),
        int(s["num_layers"]),
        bool(ref is not None and ref.training),
        bool(s["one_at_a_time"]),
        k,
    )
    return {"output": logits}


def cache_slots(probe: Probe) -> str:
    """cache-not-per-block: init_state's cache list has fewer slots than the decoder has blocks."""
    layers = int(probe.sizes["num_layers"])
    state = probe.build().init_state(probe.inputs["memory"], probe.inputs["valid_lens"])  # type: ignore[attr-defined]
    cache = state[2] if isinstance(state, list | tuple) and len(state) > 2 else None
    return "cache-not-per-block" if isinstance(cache, list | tuple) and len(cache) < layers else ""


TRANSFORMER_DECODER = Block(
    name="TransformerDecoder",
    names=("TransformerDecoder",),
    reference=lambda s: stack_of(TransformerDecoder, s),
    run_reference=run_reference_transformer_decoder,
    run_learner=run_learner_transformer_decoder,
    variant=decoder_model_variant,
    cases=(
        transformer_decoder_case(
            N_("training: all steps, causal"), 2, 4, 5, (8, 2, 2), lens(3, 5), train=True
        ),
        transformer_decoder_case(N_("training, no valid_lens"), 2, 3, 4, (8, 2, 2), None, train=True),
        transformer_decoder_case(
            N_("prediction: one token at a time"), 2, 4, 5, (8, 2, 2), lens(4, 2), predict=True
        ),
        transformer_decoder_case(N_("batch 1, one block"), 1, 3, 3, (6, 3, 1), lens(2), train=True),
        transformer_decoder_case(
            N_("odd sizes, 3 blocks, one token at a time"), 3, 5, 7, (10, 5, 3), lens(7, 1, 4), predict=True
        ),
        transformer_decoder_case(
            N_("dropout 0.5 in eval mode, one token at a time"),
            2,
            3,
            5,
            (8, 2, 2),
            lens(3, 5),
            dropout=True,
            predict=True,
        ),
        transformer_decoder_case(
            N_("dropout 0.5 in train mode"), 2, 4, 5, (8, 2, 2), lens(3, 5), dropout=True, train=True
        ),
    ),
    mistakes=(
        "embedding-not-scaled",
        "embedding-scaled-after-positions",
        "positions-left-out",
        "cache-not-kept",
        "cache-overwritten",
        "decoder-not-causal",
        "cross-attention-without-mask",
        *BLOCK_MISTAKES,
    ),
    dropout_where=TRANSFORMER_DROPOUT,
    probes=(cache_slots,),
)


# Nadaraya-Watson kernel regression ----------------------------------------------------------------------


class KernelRegression(nn.Module):
    """The book's parametric NWKernelRegression at the book's settings of variants.nadaraya_watson.

    attn-mt's own (demos/nadaraya_watson.py) sits beside check/ in the layers, which keep the two
    apart; tests/test_check.py proves this one equal to it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Queries (n,), keys and values (n, K) -> predictions (n,); the (n, K) weights kept."""
        output, self.attention_weights = variants.nadaraya_watson(
            self.w, queries, keys, values, variants.BOOK
        )
        return output


def nw_case(name: str, inputs: Callable[[torch.Generator], torch.Tensor]) -> Case:
    """A kernel-regression case: `inputs` draws the (n,) queries and their (n, K) keys as one (n, 1 + K)."""

    def draw(g: torch.Generator) -> Tensors:
        both = inputs(g)
        keys = both[:, 1:]
        return {
            "queries": both[:, 0].contiguous(),
            "keys": keys.contiguous(),
            "values": normal(g, *keys.shape),
        }

    return Case(name, {}, draw)


def leave_one_out(g: torch.Generator, n: int) -> torch.Tensor:
    """Sorted training inputs in [0, 5), each a query against all the others (the book's training)."""
    x = torch.sort(torch.rand(n, generator=g) * 5).values
    others = x.expand(n, n)[~torch.eye(n, dtype=torch.bool)].reshape(n, n - 1)
    return torch.cat((x.unsqueeze(1), others), dim=1)


def shared_keys(g: torch.Generator, n: int, pairs: int, far: float = 0.0) -> torch.Tensor:
    """n test inputs in [0, 5) against the same `pairs` training inputs (moved `far` away), as the book
    predicts."""
    queries = torch.rand(n, 1, generator=g) * 5
    keys = (torch.rand(1, pairs, generator=g) * 5 + far).expand(n, pairs)
    return torch.cat((queries, keys), dim=1)


def run_nw(module: object, x: Tensors, s: dict[str, float]) -> Outputs:
    """Call a kernel regression as the book does and keep its attention_weights when it has them."""
    output = module(x["queries"], x["keys"], x["values"])  # type: ignore[operator]
    weights = getattr(module, "attention_weights", None)
    return {"output": output} | ({"attention_weights": weights} if isinstance(weights, torch.Tensor) else {})


NW_KERNEL_REGRESSION = Block(
    name="NWKernelRegression",
    names=("NWKernelRegression",),
    reference=lambda s: KernelRegression(),
    run_reference=run_nw,
    run_learner=run_nw,
    variant=lambda ref, x, s, k: dict(
        zip(
            ("output", "attention_weights"),
            variants.nadaraya_watson(params(ref)["w"], x["queries"], x["keys"], x["values"], k),  # type: ignore[arg-type]
            strict=True,
        )
    ),
    cases=(
        nw_case(N_("each training input against the others"), lambda g: leave_one_out(g, 6)),
        nw_case(N_("test inputs against shared keys"), lambda g: shared_keys(g, 4, 7)),
        nw_case(N_("one query"), lambda g: shared_keys(g, 1, 5)),
        nw_case(N_("one key per query"), lambda g: shared_keys(g, 3, 1)),
        nw_case(N_("keys far from the queries"), lambda g: shared_keys(g, 3, 4, far=60.0)),
    ),
    mistakes=("nw-exponent-sign", "softmax-wrong-axis", "nw-queries-tiled", "nw-w-on-squared-distance"),
)

BLOCKS = (
    NW_KERNEL_REGRESSION,
    MASKED_SOFTMAX,
    ADDITIVE,
    DOT_PRODUCT,
    TRANSPOSE_QKV,
    TRANSPOSE_OUTPUT,
    MULTI_HEAD,
    POSITIONAL,
    FFN,
    ADD_NORM,
    ENCODER_BLOCK,
    DECODER_BLOCK,
    TRANSFORMER_ENCODER,
    TRANSFORMER_DECODER,
    SEQ2SEQ_ENCODER,
    DECODER,
)
