"""Run a learner's blocks against attn-mt's, case by case, and name the mistake behind a difference.

For each case both modules are built with the case's sizes, attn-mt's parameters are drawn from a
seeded generator and copied into the learner's by the book's names, and both run on the same inputs
(in train mode from the same torch seed, so equal code draws equal dropout masks). A difference is
explained, in this order, by: an exception (with the line of the learner's code), a shape, dropout
behaving differently in eval and train mode, the book's own convention for a valid length of 0
(accepted, with a note), and the variants of `variants.py` with one mistake each; else the first
element that differs is shown.
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable, Mapping

import torch
from torch import nn

from attn_mt.check import variants
from attn_mt.check.blocks import BLOCKS, Block, Case, Outputs
from attn_mt.check.mistakes import BY_ID, Mistake
from attn_mt.check.results import BlockResult, CaseResult

RTOL, ATOL = 1e-4, 1e-5  # float32 results of the same formula in another order of operations
SEED = 20260
BOOK_EMPTY_NOTE = (
    "with a valid length of 0 your weights are uniform over all keys, as the book's -1e6 fill gives; "
    "attn-mt gives such a query all-zero weights (it attends to nothing)"
)


class LearnerError(Exception):
    """The learner's block cannot be built or given the case's parameters."""


# building the learner's block ------------------------------------------------------------------------


def build(cls: type, sizes: Mapping[str, float], what: str) -> nn.Module:
    """An instance of the learner's class, its constructor's arguments given by the book's names."""
    arguments = {}
    for name, parameter in inspect.signature(cls).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name in sizes:
            value = sizes[name]
            arguments[name] = (
                int(value) if isinstance(value, float) and value.is_integer() and name != "dropout" else value
            )
        elif parameter.default is parameter.empty:
            known = ", ".join(sorted(sizes))
            raise LearnerError(
                f"{what}.__init__ asks for '{name}', which is none of the book's arguments here ({known})"
            )
    try:
        module = cls(**arguments)
    except Exception as exc:
        raise LearnerError(f"{what}({describe(arguments)}) raised {error_line(exc)}") from exc
    if not isinstance(module, nn.Module):
        raise LearnerError(f"{what} is not an nn.Module subclass")
    return module


def describe(arguments: Mapping[str, object]) -> str:
    """key=value, ... for a message."""
    return ", ".join(f"{name}={value}" for name, value in arguments.items())


def copy_parameters(reference: nn.Module, learner: nn.Module, what: str) -> None:
    """Copy attn-mt's parameters into the learner's module by the book's names."""
    ours = dict(reference.named_parameters())
    theirs = dict(learner.named_parameters())
    missing = sorted(set(ours) - set(theirs))
    extra = sorted(set(theirs) - set(ours))
    if missing or extra:
        parts = [f"no parameter named {', '.join(missing)}"] if missing else []
        parts += [f"parameters the book's {what} does not have: {', '.join(extra)}"] if extra else []
        raise LearnerError(
            f"your {what} has {'; '.join(parts)}; name the layers as the book does "
            f"(its parameters: {', '.join(sorted(ours))})"
        )
    with torch.no_grad():
        for name, parameter in theirs.items():
            if isinstance(parameter, nn.parameter.UninitializedParameter):
                parameter.materialize(ours[name].shape)  # a LazyLinear the learner's forward never called
            if parameter.shape != ours[name].shape:
                raise LearnerError(
                    f"your {what}'s {name} has shape {tuple(parameter.shape)}, the book's "
                    f"{tuple(ours[name].shape)}"
                )
            parameter.copy_(ours[name])


def has_lazy(module: nn.Module) -> bool:
    """Whether a LazyLinear (d2l 1.0) still waits for its first call to get its sizes."""
    return any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())


def error_line(exc: BaseException) -> str:
    """`TypeError: message (line 12 of the learner's file)`: the learner's deepest frame, not torch's."""
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not any(part in frame.filename for part in ("/torch/", "/attn_mt/")):
            where = f" (line {frame.lineno}, in {frame.name})"
            break
    hint = (
        "; attn-mt check gives the file no input, so input() fails at once"
        if isinstance(exc, EOFError)
        else ""
    )
    return f"{type(exc).__name__}: {exc}{where}{hint}"


# comparing --------------------------------------------------------------------------------------------


def close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal shapes and values within float32's tolerance (NaN equal to NaN)."""
    return got.shape == expected.shape and bool(
        torch.allclose(got.float(), expected.float(), rtol=RTOL, atol=ATOL, equal_nan=True)
    )


def all_close(got: Outputs, expected: Outputs) -> bool:
    """Every output both give is close."""
    return all(close(got[name], expected[name]) for name in expected if name in got)


def first_difference(got: Outputs, expected: Outputs) -> str:
    """The first output and element where the learner's differs from attn-mt's, in words."""
    for name in expected:
        if name not in got:
            continue
        mine, ours = got[name].detach(), expected[name].detach()
        if mine.shape != ours.shape:
            return f"{name} has shape {tuple(mine.shape)}, attn-mt's {tuple(ours.shape)}"
        bad = ~torch.isclose(mine.float(), ours.float(), rtol=RTOL, atol=ATOL, equal_nan=True)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            return f"{name}{list(index)} is {number(mine[index])}, attn-mt's is {number(ours[index])}"
    return ""


def number(value: torch.Tensor) -> str:
    """A scalar tensor in 4 significant digits."""
    x = float(value)
    return str(x) if math.isnan(x) or math.isinf(x) else f"{x:.4g}"


# one case ----------------------------------------------------------------------------------------------


def reference_for(block: Block, case: Case) -> nn.Module | None:
    """attn-mt's module for the case, its parameters drawn from a fixed seed (not their usual init)."""
    module = block.reference(case.sizes)
    if module is None:
        return None
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return module.train(case.train)


def learner_for(block: Block, obj: object, case: Case, reference: nn.Module | None, inputs: dict) -> object:
    """The learner's callable for the case: its function, a method of its module, or its module."""
    if block.method_of:
        if not isinstance(obj, type):
            return obj
        instance = build(obj, case.sizes, block.method_of)
        return lambda X, num_heads: getattr(instance, block.name)(X)
    if not block.is_class:
        return obj
    if not isinstance(obj, type):
        raise LearnerError(f"{block.name} should be a class (an nn.Module), got {type(obj).__name__}")
    module = build(obj, case.sizes, block.name)
    module.eval()
    if has_lazy(module):
        with torch.no_grad():
            try:
                block.run_learner(module, inputs, case.sizes)
            except Exception as exc:
                raise LearnerError(f"its first call raised {error_line(exc)}") from exc
    assert reference is not None
    copy_parameters(reference, module, block.name)
    return module.train(case.train)


def run(block: Block, call: object, inputs: dict, case: Case, seed: int) -> Outputs:
    """One forward pass without gradients, from torch seed `seed`."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return {name: value.detach() for name, value in block.run_learner(call, inputs, case.sizes).items()}


def run_case(block: Block, obj: object, case: Case, index: int) -> CaseResult:
    """Run one case of a block and explain any difference."""
    inputs = case.inputs(torch.Generator().manual_seed(SEED + index))
    reference = reference_for(block, case)
    torch.manual_seed(SEED)
    with torch.no_grad():
        expected = block.run_reference(reference, inputs, case.sizes)
    try:
        call = learner_for(block, obj, case, reference, inputs)
        got = run(block, call, inputs, case, SEED)
    except LearnerError as exc:
        return CaseResult(case.name, False, str(exc))
    except Exception as exc:
        return CaseResult(case.name, False, f"raised {error_line(exc)}")
    if all_close(got, expected):
        return CaseResult(case.name, True)
    detail = first_difference(got, expected)
    if case.train:
        return train_difference(block, call, inputs, case, got, detail)
    if not all_close(run(block, call, inputs, case, SEED + 1), got):
        return CaseResult(case.name, False, detail, "dropout-in-eval")
    if case.zero_length and all_close(got, block.variant(reference, inputs, case.sizes, book_empty())):
        return CaseResult(case.name, True, note=BOOK_EMPTY_NOTE)
    mistake = matching_mistake(block, reference, inputs, case, got)
    return CaseResult(case.name, False, detail, mistake.id if mistake else "")


def book_empty() -> variants.Knobs:
    """The book's masked softmax: an all-masked row is uniform."""
    return variants.with_knob(variants.BOOK, empty="uniform")


def matching_mistake(
    block: Block, reference: nn.Module | None, inputs: dict, case: Case, got: Outputs
) -> Mistake | None:
    """The first of the block's mistakes whose variant gives the learner's outputs (either empty-row rule)."""
    with torch.no_grad():
        for mistake_id in block.mistakes:
            mistake = BY_ID[mistake_id]
            for empty in ("zero", "uniform"):
                knobs = variants.with_knob(variants.BOOK, empty=empty, **mistake.knobs)
                if all_close(got, block.variant(reference, inputs, case.sizes, knobs)):
                    return mistake
    return None


def train_difference(
    block: Block, call: object, inputs: dict, case: Case, got: Outputs, detail: str
) -> CaseResult:
    """A train-mode difference: no dropout at all, or dropout somewhere other than the book's place."""
    module = call if isinstance(call, nn.Module) else None
    if module is not None:
        module.eval()
        plain = run(block, call, inputs, case, SEED)
        module.train()
        if all_close(got, plain):
            return CaseResult(case.name, False, detail, "dropout-not-in-training")
    where = f"; the book applies dropout to {block.dropout_where}" if block.dropout_where else ""
    return CaseResult(case.name, False, detail + where)


# a whole namespace --------------------------------------------------------------------------------------


def find(namespace: Mapping[str, object], block: Block) -> object | None:
    """The learner's object for a block: by the book's names, or the d2l 1.0 method."""
    for name in block.names:
        if name in namespace:
            return namespace[name]
    owner = namespace.get(block.method_of) if block.method_of else None
    if isinstance(owner, type) and hasattr(owner, block.name):
        return owner
    return None


def check_block(block: Block, obj: object | None) -> BlockResult:
    """Every case of one block."""
    if obj is None:
        return BlockResult(block.name, False)
    cases = [run_case(block, obj, case, index) for index, case in enumerate(block.cases)]
    return BlockResult(block.name, True, cases)


def check_namespace(
    namespace: Mapping[str, object],
    only: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
    done: Callable[[BlockResult], None] | None = None,
) -> list[BlockResult]:
    """Check every block found in `namespace` (a module's or a notebook's globals), or those in `only`."""
    results = []
    for block in BLOCKS:
        if only and block.name not in only:
            continue
        if progress:
            progress(block.name)
        results.append(check_block(block, find(namespace, block)))
        if done:
            done(results[-1])
    return results


def block_named(obj: object, name: str | None = None) -> Block:
    """The block `name`, or else the one a learner's function or class stands for by its own name."""
    wanted = name or getattr(obj, "__name__", "")
    for block in BLOCKS:
        if wanted == block.name or (not name and wanted in block.names):
            return block
    known = ", ".join(block.name for block in BLOCKS)
    raise LearnerError(f"'{wanted}' is none of the chapter's blocks ({known}); name it as the book does")
