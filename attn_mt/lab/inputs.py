"""What a lab request may hold: tensors written as JSON text or lists, whole numbers and reals in ranges.

Every panel's inputs arrive as one JSON object whose values are the text of the page's fields (or,
from a script, numbers and nested lists). A value that is not what the field needs, a tensor of the
wrong rank or shape, or one over `MAX_ELEMENTS` numbers raises `LabError`, which the server answers
with its message and 422, so no input reaches torch unchecked and none can make the server work long.
Panels check the tensors they will compute the same way before computing them: one they return may
hold `MAX_ELEMENTS` numbers (`limit_elements`), one they compute on the way `MAX_WORK` (`limit_work`).
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from attn_mt.i18n import N_, _

MAX_ELEMENTS = 4096  # numbers in one tensor a request may send, or have computed and returned (docs/lab.md)
MAX_WORK = 64 * MAX_ELEMENTS  # numbers in one intermediate tensor a request may have computed (1 MiB)
MAX_TEXT = 100_000  # characters of one field (4096 numbers of up to 20 characters fit)
MAX_RANK = 4  # axes of a tensor a request may send
MAX_MAGNITUDE = 1e6  # largest absolute value of a tensor entry, so no product overflows float32
LONG_INTEGER = 20  # digits from which a JSON integer is read as a float (Python refuses ints of 4,300)


class LabError(ValueError):
    """An input the lab refuses, with a message for the page."""


def _integer(digits: str) -> int | float:
    """A JSON integer: a Python int when short, a float (perhaps inf) when long, so no length fails."""
    return int(digits) if len(digits) <= LONG_INTEGER else float(digits)


def loads(text: str | bytes) -> Any:
    """JSON text as Python values; integers of any length are read (see `_integer`), never refused."""
    return json.loads(text, parse_int=_integer)


def field(state: dict[str, Any], key: str, default: Any) -> Any:
    """The value of `key`, or `default` when the request leaves it out or blank."""
    value = state.get(key, default)
    return default if value is None or value == "" else value


def _number(value: Any, key: str, what: str) -> float:
    """A JSON number, or text holding one, as a finite float; LabError naming `what` was expected."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise LabError(
                _("{key}: expected {what}, got {value}").format(key=key, what=_(what), value=repr(value[:40]))
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LabError(
            _("{key}: expected {what}, got {value}").format(key=key, what=_(what), value=repr(value))
        )
    return float(value)


def whole(state: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    """A whole number from `low` to `high` (text such as "3" is read as a number)."""
    value = _number(field(state, key, default), key, N_("a whole number"))
    if not value.is_integer():
        raise LabError(
            _("{key}: expected {what}, got {value}").format(key=key, what=_("a whole number"), value=value)
        )
    if not low <= value <= high:
        raise LabError(
            _("{key}: must be between {low} and {high}, got {value}").format(
                key=key, low=low, high=high, value=int(value)
            )
        )
    return int(value)


def real(state: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    """A finite number from `low` to `high`."""
    value = _number(field(state, key, default), key, N_("a number"))
    if not low <= value <= high:
        raise LabError(
            _("{key}: must be between {low} and {high}, got {value}").format(
                key=key, low=low, high=high, value=value
            )
        )
    return value


def choice(state: dict[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    """One of `allowed`."""
    value = field(state, key, default)
    if value not in allowed:
        raise LabError(
            _("{key}: expected one of {allowed}, got {value}").format(
                key=key, allowed=", ".join(allowed), value=repr(str(value)[:40])
            )
        )
    return value


def text(state: dict[str, Any], key: str, default: str, max_chars: int = 1000) -> str:
    """A string of at most `max_chars` characters."""
    value = field(state, key, default)
    if not isinstance(value, str):
        raise LabError(_("{key}: expected text, got {type}").format(key=key, type=type(value).__name__))
    if len(value) > max_chars:
        raise LabError(
            _("{key}: at most {limit} characters, got {length}").format(
                key=key, limit=max_chars, length=len(value)
            )
        )
    return value


def _check_numbers(value: Any, key: str, where: str, depth: int = 0) -> int:
    """Walk nested lists of numbers; the number of elements, or LabError naming the first bad entry."""
    if isinstance(value, list):
        if depth == MAX_RANK:
            raise LabError(
                _("{key}: lists nested more than {rank} deep (a tensor here has at most {rank} axes)").format(
                    key=key, rank=MAX_RANK
                )
            )
        return sum(_check_numbers(item, key, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LabError(
            _("{key}: expected {what}, got {value}").format(
                key=key + where, what=_("a number"), value=json.dumps(value)[:40]
            )
        )
    if abs(value) > MAX_MAGNITUDE:
        raise LabError(
            _("{key}: {value} is larger than the lab's limit of {limit} in size").format(
                key=key + where, value=value, limit=f"{MAX_MAGNITUDE:g}"
            )
        )
    return 1


def tensor(state: dict[str, Any], key: str, default: Any, ranks: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor of one of `ranks` dimensions, written as JSON text ("[[1, 2], [3, 4]]") or lists."""
    value = field(state, key, default)
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise LabError(
                _("{key}: at most {limit} characters, got {length}").format(
                    key=key, limit=MAX_TEXT, length=len(value)
                )
            )
        try:
            value = loads(value)
        except json.JSONDecodeError as exc:
            raise LabError(
                _("{key}: not a list of numbers such as [[1, 2], [3, 4]] ({reason})").format(
                    key=key, reason=exc.msg
                )
            ) from None
        except RecursionError:
            raise LabError(
                _("{key}: lists nested too deep; the lab's tensors have at most {rank} axes").format(
                    key=key, rank=MAX_RANK
                )
            ) from None
    count = _check_numbers(value, key, "")
    if count > MAX_ELEMENTS:
        raise LabError(
            _("{key}: {count} numbers, more than the lab's limit of {limit}").format(
                key=key, count=count, limit=MAX_ELEMENTS
            )
        )
    try:
        result = torch.tensor(value, dtype=torch.float32)
    except (ValueError, TypeError):
        raise LabError(
            _("{key}: the rows must all have the same length (a rectangular tensor)").format(key=key)
        ) from None
    if result.dim() not in ranks or result.numel() == 0:
        wanted = _(" or ").join(f"{r}-D" for r in ranks)
        raise LabError(
            _("{key}: expected a non-empty {ranks} tensor, got shape {shape}").format(
                key=key, ranks=wanted, shape=tuple(result.shape)
            )
        )
    return result


def limit_elements(key: str, *sizes: int) -> None:
    """Refuse a tensor of shape `sizes` a request asks the lab to make when it is over MAX_ELEMENTS."""
    if math.prod(sizes) > MAX_ELEMENTS:
        raise LabError(
            _("{key}: shape {shape} holds {count} numbers, more than the lab's limit of {limit}").format(
                key=key, shape=tuple(sizes), count=math.prod(sizes), limit=MAX_ELEMENTS
            )
        )


def limit_work(key: str, *sizes: int) -> None:
    """Refuse an intermediate tensor of shape `sizes` (computed, not returned) over MAX_WORK numbers."""
    if math.prod(sizes) > MAX_WORK:
        raise LabError(
            _(
                "{key}: shape {shape} holds {count} numbers, more than the lab's limit of {limit} for a "
                "tensor it computes on the way"
            ).format(key=key, shape=tuple(sizes), count=math.prod(sizes), limit=MAX_WORK)
        )
