"""Run a learner's blocks against attn-mt's, case by case, and name the mistake behind a difference.

For each case both modules are built with the case's sizes, attn-mt's parameters are drawn from a
seeded generator and copied into the learner's by the book's names, and both run on the same inputs
(in train mode from the same torch seed, so equal code draws equal dropout masks). The caller's inputs
must come back unchanged, and where the outputs agree a backward pass through both must give the
inputs the same gradients. A difference is explained, in this order, by: an exception (with the line
of the learner's code, and the probes that recognise a mistake behind it), a shape, in train mode the
same case in eval mode (a difference there is no dropout's), dropout behaving differently in eval and
train mode, the book's own convention for a valid length of 0 or another convention a case accepts
(passed, with a note), and the variants of `variants.py` with one mistake each; else the smallest
slice that differs is shown with the case's inputs. Where several mistakes fit one case, the one that
fits most of the block's cases is named. What it says of a case (its detail, its note, a LearnerError) is
in the language in force.
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable, Mapping

import torch
from torch import nn

from attn_mt.check import variants
from attn_mt.check.blocks import BLOCKS, Block, Case, Outputs, Probe, Tensors
from attn_mt.check.mistakes import BY_ID
from attn_mt.check.results import BlockResult, CaseResult
from attn_mt.i18n import N_, _

RTOL, ATOL = 1e-4, 1e-5  # float32 results of the same formula in another order of operations
GRAD_RTOL, GRAD_ATOL = 1e-3, 1e-4  # gradients sum more terms, in another order
DROPOUT_NOTE = N_("the same case passes in eval mode; the book applies dropout to {where}")
DROPOUT_MISTAKES = {"dropout-in-eval", "dropout-not-in-training"}
SHOWN_ELEMENTS = 8  # a differing slice up to this many elements is shown in full
SEED = 20260
BOOK_EMPTY_NOTE = N_(
    "with a valid length of 0 your weights are uniform over all keys, as the book's -1e6 fill gives; "
    "attn-mt gives such a query all-zero weights (it attends to nothing)"
)


class LearnerError(Exception):
    """The learner's block cannot be built or given the case's parameters (`mistake`: the one it shows)."""

    def __init__(self, message: str, mistake: str = "") -> None:
        super().__init__(message)
        self.mistake = mistake


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
                _(
                    "{what}.__init__ asks for '{name}', which is none of the book's arguments here ({known})"
                ).format(what=what, name=name, known=known)
            )
    try:
        module = cls(**arguments)
    except Exception as exc:
        raise LearnerError(
            _("{call} raised {error}").format(call=f"{what}({describe(arguments)})", error=error_line(exc))
        ) from exc
    if not isinstance(module, nn.Module):
        raise LearnerError(_("{what} is not an nn.Module subclass").format(what=what))
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
    if (missing or extra) and all(name.endswith(".bias") for name in missing + extra):
        raise LearnerError(biases(what, missing, extra), "bias-hard-coded")
    hidden = unregistered(learner, missing)
    if hidden:
        raise LearnerError(
            _(
                "your {what} has no parameter named {names}: {hidden} is not registered with the module"
            ).format(what=what, names=", ".join(missing), hidden=hidden),
            "parameters-not-registered",
        )
    if missing or extra:
        parts = [_("no parameter named {names}").format(names=", ".join(missing))] if missing else []
        if extra:
            parts.append(
                _("parameters the book's {what} does not have: {names}").format(
                    what=what, names=", ".join(extra)
                )
            )
        raise LearnerError(
            _("your {what} has {parts}; name the layers as the book does (its parameters: {names})").format(
                what=what, parts="; ".join(parts), names=", ".join(sorted(ours))
            )
        )
    with torch.no_grad():
        for name, parameter in theirs.items():
            if isinstance(parameter, nn.parameter.UninitializedParameter):
                parameter.materialize(ours[name].shape)  # a LazyLinear the learner's forward never called
            if parameter.shape != ours[name].shape:
                raise LearnerError(
                    _("your {what}'s {name} has shape {shape}, the book's {book_shape}").format(
                        what=what, name=name, shape=tuple(parameter.shape), book_shape=tuple(ours[name].shape)
                    )
                )
            parameter.copy_(ours[name])


def unregistered(learner: nn.Module, missing: list[str]) -> str:
    """`self.w (a plain tensor)` or `self.blks (a Python list)`: the attribute holding a missing parameter
    out of the module's sight, or ""."""
    for name in missing:
        attribute = name.split(".")[0]
        value = learner.__dict__.get(attribute)
        if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
            return _("self.{attribute} (a plain tensor, not an nn.Parameter)").format(attribute=attribute)
        if isinstance(value, list | tuple | dict):
            items = value.values() if isinstance(value, dict) else value
            if any(isinstance(item, nn.Module) for item in items):
                return _("self.{attribute} (a Python {kind} of modules)").format(
                    attribute=attribute, kind=type(value).__name__
                )
    return ""


def biases(what: str, missing: list[str], extra: list[str]) -> str:
    """The message for layers whose bias differs from the book's, and nothing else."""
    parts = (
        [_("biases the book's {what} does not have here: {names}").format(what=what, names=", ".join(extra))]
        if extra
        else []
    )
    if missing:
        parts.append(_("no {names}, which the book's {what} has").format(names=", ".join(missing), what=what))
    return _("your {what} has {parts}").format(what=what, parts="; ".join(parts))


def has_lazy(module: nn.Module) -> bool:
    """Whether a LazyLinear (d2l 1.0) still waits for its first call to get its sizes."""
    return any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())


def error_line(exc: BaseException) -> str:
    """`TypeError: message (line 12 of the learner's file)`: the learner's deepest frame, not torch's."""
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not any(part in frame.filename for part in ("/torch/", "/attn_mt/")):
            where = " " + _("(line {line}, in {function})").format(line=frame.lineno, function=frame.name)
            break
    hint = (
        _("; attn-mt check gives the file no input, so input() fails at once")
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
    """The first output where the learner's differs from attn-mt's, as the smallest slice holding every
    element that differs."""
    for name in expected:
        if name not in got:
            continue
        mine, ours = got[name].detach(), expected[name].detach()
        if mine.shape != ours.shape:
            return _("{name} has shape {shape}, attn-mt's {expected}").format(
                name=name, shape=tuple(mine.shape), expected=tuple(ours.shape)
            )
        bad = ~torch.isclose(mine.float(), ours.float(), rtol=RTOL, atol=ATOL, equal_nan=True)
        if bool(bad.any()):
            return slice_difference(name, mine, ours, bad)
    return ""


def slice_difference(name: str, mine: torch.Tensor, ours: torch.Tensor, bad: torch.Tensor) -> str:
    """`output[1, 0:2, 3] is [0.5, 0.5], attn-mt's [0, 0]`: the box around the elements that differ."""
    where = bad.nonzero()
    low, high = where.min(dim=0).values.tolist(), where.max(dim=0).values.tolist()
    box = tuple(slice(a, b + 1) for a, b in zip(low, high, strict=True))
    index = ", ".join(str(a) if a == b else f"{a}:{b + 1}" for a, b in zip(low, high, strict=True))
    squeeze = [dim for dim, (a, b) in enumerate(zip(low, high, strict=True)) if a == b]
    mine_box, ours_box = mine[box], ours[box]
    if mine_box.numel() <= SHOWN_ELEMENTS:
        if squeeze:
            mine_box, ours_box = mine_box.squeeze(squeeze), ours_box.squeeze(squeeze)
        return _("{where} is {mine}, attn-mt's {ours}").format(
            where=f"{name}[{index}]", mine=numbers(mine_box), ours=numbers(ours_box)
        )
    first = tuple(int(i) for i in where[0])
    return _("{where} differs ({count} of its {total} elements); {first} is {mine}, attn-mt's {ours}").format(
        where=f"{name}[{index}]",
        count=int(bad.sum()),
        total=mine_box.numel(),
        first=f"{name}{list(first)}",
        mine=number(mine[first]),
        ours=number(ours[first]),
    )


def numbers(values: torch.Tensor) -> str:
    """A tensor's values as a (nested) list of numbers in 4 significant digits."""
    if values.dim() == 0:
        return number(values)
    return "[" + ", ".join(numbers(row) for row in values) + "]"


def case_inputs(case: Case, inputs: Tensors) -> str:
    """The case's inputs in words: each tensor's shape, valid_lens by value, the heads and the mode."""
    parts = []
    for name, value in inputs.items():
        if value is None:
            parts.append(f"{name} None")
        elif name == "valid_lens":
            parts.append(f"{name} {value.tolist()}")
        else:
            parts.append(f"{name} {tuple(value.shape)}")
    if "num_heads" in case.sizes:
        parts.append(f"num_heads {int(case.sizes['num_heads'])}")
    if case.train:
        parts.append(_("train mode"))
    return ", ".join(parts)


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
        raise LearnerError(
            _("{block} should be a class (an nn.Module), got {kind}").format(
                block=block.name, kind=type(obj).__name__
            )
        )
    module = build(obj, case.sizes, block.name)
    module.eval()
    if has_lazy(module):
        with torch.no_grad():
            try:
                block.run_learner(module, {**inputs}, case.sizes)
            except Exception as exc:
                raise LearnerError(_("its first call raised {error}").format(error=error_line(exc))) from exc
    assert reference is not None
    copy_parameters(reference, module, block.name)
    return module.train(case.train)


def run(block: Block, call: object, inputs: dict, case: Case, seed: int) -> Outputs:
    """One forward pass without gradients, from torch seed `seed`."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return {name: value.detach() for name, value in block.run_learner(call, inputs, case.sizes).items()}


def run_reference(block: Block, reference: nn.Module | None, inputs: dict, case: Case) -> Outputs:
    """attn-mt's outputs for the inputs, from the case's seed, without gradients."""
    torch.manual_seed(SEED)
    with torch.no_grad():
        return block.run_reference(reference, inputs, case.sizes)


def run_case(block: Block, obj: object, case: Case, index: int) -> tuple[CaseResult, tuple[str, ...]]:
    """Run one case of a block and explain any difference: its result, and every mistake that fits it."""
    inputs = case.inputs(torch.Generator().manual_seed(SEED + index))
    pristine = {name: None if value is None else value.clone() for name, value in inputs.items()}
    reference = reference_for(block, case)
    expected = run_reference(block, reference, inputs, case)
    shown = " " + _("(inputs: {inputs})").format(inputs=case_inputs(case, inputs))
    try:
        call = learner_for(block, obj, case, reference, inputs)
        got = run(block, call, inputs, case, SEED)
    except LearnerError as exc:
        found = (exc.mistake,) if exc.mistake else probe(block, obj, case, reference, pristine)
        said = str(exc) + ("" if exc.mistake else shown)
        return CaseResult(case.name, False, said, found[0] if found else ""), found
    except Exception as exc:
        found = probe(block, obj, case, reference, pristine)
        said = _("raised {error}").format(error=error_line(exc)) + shown
        return CaseResult(case.name, False, said, found[0] if found else ""), found
    changed = changed_inputs(inputs, pristine)
    if changed:
        said = _("your {block} changed the caller's {names} in place").format(
            block=block.name, names=", ".join(changed)
        )
        return CaseResult(case.name, False, said, "changes-its-input"), ("changes-its-input",)
    if all_close(got, expected):
        return gradient_result(block, obj, case, reference, pristine)
    if case.train:
        return train_difference(block, call, reference, inputs, case, got, shown)
    detail = first_difference(got, expected) + shown
    if not all_close(run(block, call, inputs, case, SEED + 1), got):
        return CaseResult(case.name, False, detail, "dropout-in-eval"), ("dropout-in-eval",)
    if case.zero_length and all_close(got, block.variant(reference, inputs, case.sizes, book_empty())):
        return CaseResult(case.name, True, note=_(BOOK_EMPTY_NOTE)), ()
    for knobs, note in case.accepted:
        if fits(block, reference, inputs, case, got, variants.with_knob(variants.BOOK, **knobs)):
            return CaseResult(case.name, True, note=_(note)), ()
    found = matching_mistakes(block, reference, inputs, case, got) or probe(
        block, obj, case, reference, pristine
    )
    return CaseResult(case.name, False, detail, found[0] if found else ""), found


def changed_inputs(inputs: Tensors, pristine: Tensors) -> list[str]:
    """The inputs the learner's call wrote into (their values, or their shape, no longer as given)."""
    changed = []
    for name, before in pristine.items():
        after = inputs[name]
        if before is None or after is None:
            continue
        if after.shape != before.shape or not torch.equal(after, before):
            changed.append(name)
    return changed


def probe(
    block: Block, obj: object, case: Case, reference: nn.Module | None, inputs: Tensors
) -> tuple[str, ...]:
    """The mistakes that the probes recognise behind a failure that no variant explains."""

    def learner(other: Tensors) -> Outputs:
        return run(block, learner_for(block, obj, case, reference, other), other, case, SEED)

    context = Probe(
        learner=learner,
        reference=lambda other: run_reference(block, reference, other, case),
        build=lambda: build(obj, case.sizes, block.name) if isinstance(obj, type) else obj,
        same=all_close,
        inputs=dict(inputs),
        sizes=case.sizes,
    )
    found = []
    valid = inputs.get("valid_lens")
    if (
        valid is not None
        and valid.dim() == 2
        and not runs(learner, inputs)
        and runs(learner, {**inputs, "valid_lens": valid[:, -1].clone()})
    ):
        found.append("valid-lens-2d-as-1d")
    for check in block.probes:
        try:
            mistake = check(context)
        except Exception:  # a probe that cannot run on this learner's code says nothing
            mistake = ""
        if mistake:
            found.append(mistake)
    return tuple(found)


def runs(learner: Callable[[Tensors], Outputs], inputs: Tensors) -> bool:
    """Whether the learner's block runs on `inputs` without raising."""
    try:
        learner({name: None if value is None else value.clone() for name, value in inputs.items()})
    except Exception:
        return False
    return True


def gradient_result(
    block: Block, obj: object, case: Case, reference: nn.Module | None, inputs: Tensors
) -> tuple[CaseResult, tuple[str, ...]]:
    """A case whose outputs agree: a backward pass through the learner's block must reach its inputs as
    attn-mt's does (skipped in train mode and for a valid length of 0, where the book's and attn-mt's
    conventions part)."""
    floats = [value for value in inputs.values() if value is not None and value.is_floating_point()]
    if case.train or case.zero_length or not floats:
        return CaseResult(case.name, True), ()
    weights: dict[str, torch.Tensor] = {}
    ours = gradients(lambda x: block.run_reference(reference, x, case.sizes), inputs, weights)
    try:
        call = learner_for(block, obj, case, reference, inputs)
        theirs = gradients(lambda x: block.run_learner(call, x, case.sizes), inputs, weights)
    except Exception as exc:
        said = _("the outputs agree, but with gradients on (as in training) it raised {error}").format(
            error=error_line(exc)
        )
        return CaseResult(case.name, False, said), ()
    for name, grad in ours.items():
        if grad is None or not bool(grad.any()):
            continue
        mine = theirs.get(name)
        if mine is None or not bool(mine.any()):
            said = _("the outputs agree, but a backward pass gives {name} no gradient").format(name=name)
            return CaseResult(case.name, False, said, "gradient-cut"), ("gradient-cut",)
        if not torch.allclose(mine, grad, rtol=GRAD_RTOL, atol=GRAD_ATOL):
            bad = ~torch.isclose(mine, grad, rtol=GRAD_RTOL, atol=GRAD_ATOL)
            said = _("the outputs agree, but their gradients differ: {difference}").format(
                difference=slice_difference(_("grad of {name}").format(name=name), mine, grad, bad)
            )
            return CaseResult(case.name, False, said), ()
    return CaseResult(case.name, True), ()


def gradients(
    forward: Callable[[Tensors], Outputs], inputs: Tensors, weights: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor | None]:
    """The gradients of the float inputs of a weighted sum of the output (the weights drawn once, shared)."""
    leaves = {
        name: value.detach().clone().requires_grad_()
        for name, value in inputs.items()
        if value is not None and value.is_floating_point()
    }
    others = {name: None if value is None else value.clone() for name, value in inputs.items()}
    torch.manual_seed(SEED)
    with torch.enable_grad():
        output = forward({**others, **leaves})["output"]
        if "output" not in weights:
            weights["output"] = torch.randn(output.shape, generator=torch.Generator().manual_seed(SEED))
        if not output.requires_grad:
            return dict.fromkeys(leaves)
        (output * weights["output"]).sum().backward()
    return {name: leaf.grad for name, leaf in leaves.items()}


def book_empty() -> variants.Knobs:
    """The book's masked softmax: an all-masked row is uniform."""
    return variants.with_knob(variants.BOOK, empty="uniform")


def matching_mistakes(
    block: Block, reference: nn.Module | None, inputs: dict, case: Case, got: Outputs
) -> tuple[str, ...]:
    """Every one of the block's mistakes whose variant gives the learner's outputs (either empty-row rule),
    in the block's order."""
    found = []
    with torch.no_grad():
        for mistake_id in block.mistakes:
            tries = [
                variants.with_knob(variants.BOOK, **knobs, empty=empty)
                for knobs in BY_ID[mistake_id].knob_sets()
                for empty in ("zero", "uniform")
            ]
            if any(fits(block, reference, inputs, case, got, knobs) for knobs in tries):
                found.append(mistake_id)
    return tuple(found)


def fits(
    block: Block, reference: nn.Module | None, inputs: dict, case: Case, got: Outputs, knobs: variants.Knobs
) -> bool:
    """Whether the variant with `knobs` gives the learner's outputs (a variant that cannot run does not)."""
    try:
        return all_close(got, block.variant(reference, inputs, case.sizes, knobs))
    except (RuntimeError, ValueError, IndexError):
        return False


def train_difference(
    block: Block,
    call: object,
    reference: nn.Module | None,
    inputs: dict,
    case: Case,
    got: Outputs,
    shown: str,
) -> tuple[CaseResult, tuple[str, ...]]:
    """A train-mode difference: one the eval mode shows too (no dropout's), no dropout at all, or dropout
    somewhere other than the book's place."""
    detail = first_difference(got, run_reference(block, reference, inputs, case)) + shown
    module = call if isinstance(call, nn.Module) else None
    if module is not None and reference is not None:
        module.eval()
        reference.eval()
        plain = run(block, call, inputs, case, SEED)
        again = run(block, call, inputs, case, SEED + 1)
        expected = run_reference(block, reference, inputs, case)
        passes_in_eval = all_close(plain, expected)
        in_eval = () if passes_in_eval else matching_mistakes(block, reference, inputs, case, plain)
        module.train()
        reference.train()
        if not passes_in_eval:
            if not all_close(again, plain):
                return CaseResult(case.name, False, detail, "dropout-in-eval"), ("dropout-in-eval",)
            fits = in_eval
            said = (
                _("in eval mode too, {difference}").format(difference=first_difference(plain, expected))
                + shown
            )
            return CaseResult(case.name, False, said, fits[0] if fits else ""), fits
        fits = matching_mistakes(block, reference, inputs, case, got)  # a train-only mistake (causal)
        if fits:
            return CaseResult(case.name, False, detail, fits[0]), fits
        if all_close(got, plain):
            mistake = "dropout-not-in-training"
            return CaseResult(case.name, False, detail, mistake), (mistake,)
    return CaseResult(case.name, False, detail, note=dropout_note(block)), ()


def dropout_note(block: Block) -> str:
    """Where the book applies dropout in `block`, for a train-mode difference; "" for a block without it."""
    return _(DROPOUT_NOTE).format(where=_(block.dropout_where)) if block.dropout_where else ""


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
    """Every case of one block; where several mistakes fit a case, the one that fits most cases is named."""
    if obj is None:
        return BlockResult(block.name, False)
    runs = [run_case(block, obj, case, index) for index, case in enumerate(block.cases)]
    counts: dict[str, int] = {}
    for _result, fits in runs:
        for mistake in fits:
            counts[mistake] = counts.get(mistake, 0) + 1
    named = set(counts) - DROPOUT_MISTAKES
    hint = dropout_note(block)
    cases = []
    for result, fits in runs:
        if len(fits) > 1:
            result.mistake = max(fits, key=lambda mistake: counts[mistake])  # the first of the most common
        if named and hint and result.note == hint:  # the mistake named elsewhere, not dropout
            result.note = ""
        cases.append(result)
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
    raise LearnerError(
        _("'{name}' is none of the chapter's blocks ({known}); name it as the book does").format(
            name=wanted, known=known
        )
    )
