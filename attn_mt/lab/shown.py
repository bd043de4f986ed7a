"""What a lab panel answers: tensors labelled with the book's axis names, plots, and the code that ran.

Every answer is a JSON object: `tensors` (name, axes such as ["B", "Q", "K"], shape, values (NaN as
null), the colour scale it is drawn on, and an optional mask of entries the computation set aside, or
hover texts per entry), `plots` (lines over x), `code` (the attn-mt functions the panel ran, as file and
line, linked to /source/FILE#LLINE) and `notes` (sentences that say what the numbers show).

Axes use short names (see docs/lab.md's notation table): B batch size, Q number of queries, K number of
key-value pairs (the book's code comments: batch_size, no. of queries, no. of key-value pairs; its
equations: n queries, m key-value pairs), q, k, v the query, key and value sizes, d = q = k.

Colour scales: attention weights (`scale` "weights") and probabilities ("probability") on the fixed
sequential scale 0 to 1, so that equal values look equal everywhere; masks ("binary") in two colours,
0 and 1; counts and lengths ("sequential") from 0 to their largest value; any other tensor ("centred")
on a diverging scale centred at 0 reaching the tensor's largest absolute value. The page draws a legend
under each tensor.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import torch
from babel.numbers import get_decimal_symbol, get_group_symbol

from attn_mt.i18n import current_language
from attn_mt.i18n.languages import BABEL_LOCALE

PACKAGE = Path(__file__).resolve().parents[1]  # attn_mt/
ROOT = PACKAGE.parent


def shown(
    name: str,
    value: torch.Tensor,
    axes: list[str],
    mask: torch.Tensor | None = None,
    hover: Any = None,
    note: str = "",
    rows: list[str] | None = None,
    columns: list[str] | None = None,
    scale: str | None = None,
    tokens: bool | str = False,
) -> dict[str, Any]:
    """A tensor for the page: its name, axes, shape and values (and mask, hover, labels of the rows and
    columns of its 2-D slices, such as tokens); `scale` one of SCALES, by default chosen from the name and
    values (scale_for); `tokens` True when those labels are tokens (an input or a model's output, shown in
    no language's words but their own), "rows" when only the rows' are."""
    if value.dim() != len(axes):
        raise ValueError(f"{name}: {value.dim()}-D tensor labelled with {len(axes)} axes {axes}")
    numbers = value.detach().double()
    nan = torch.isnan(numbers)
    if scale is None:
        scale = scale_for(name, numbers[~nan])
    if scale not in SCALES:
        raise ValueError(f"{name}: scale must be one of {', '.join(SCALES)}, got {scale!r}")
    entry: dict[str, Any] = {
        "name": name,
        "axes": axes,
        "shape": list(value.shape),
        "values": _with_nulls(numbers.tolist(), nan.tolist()) if bool(nan.any()) else numbers.tolist(),
        "scale": scale,
    }
    if mask is not None:
        entry["masked"] = mask.expand_as(value).tolist()
    if hover is not None:
        entry["hover"] = hover
    if note:
        entry["note"] = note
    if rows is not None:
        entry["rows"] = rows
    if columns is not None:
        entry["columns"] = columns
    if tokens not in (False, True, "rows"):
        raise ValueError(f"{name}: tokens must be True, False or 'rows', got {tokens!r}")
    if tokens:
        entry["tokens"] = tokens
    return entry


SCALES = ("weights", "probability", "binary", "sequential", "centred")


def scale_for(name: str, kept: torch.Tensor) -> str:
    """The colour scale a tensor's name and (non-NaN) values call for: "weights" for weights or a softmax
    in [0, 1], "probability" for p(...) in [0, 1], "binary" for a mask of 0s and 1s, else "centred"."""
    lowered = name.lower()
    in_range = kept.numel() == 0 or (float(kept.min()) >= 0 and float(kept.max()) <= 1)
    if in_range and re.search(r"(?<![a-z])weights?(?![a-z])|softmax", lowered):
        return "weights"
    if in_range and re.search(r"(?<![a-z])p\(|probabilit", lowered):
        return "probability"
    if re.search(r"(?<![a-z])mask(?![a-z])", lowered) and bool(((kept == 0) | (kept == 1)).all()):
        return "binary"
    return "centred"


def _with_nulls(values: Any, nan: Any) -> Any:
    """Nested lists of numbers with the NaN entries (True in `nan`) as None, which JSON can hold."""
    if isinstance(values, list):
        return [_with_nulls(v, n) for v, n in zip(values, nan, strict=True)]
    return None if nan else values


def code(function: Any, label: str = "") -> dict[str, Any]:
    """Where an attn-mt function or class is defined: file relative to the repository, line, link."""
    target = inspect.unwrap(function)
    path = Path(inspect.getsourcefile(target)).resolve()
    lines, start = inspect.getsourcelines(target)
    line = start + next(  # the `def` or `class` line, below any decorators
        k for k, text in enumerate(lines) if text.lstrip().startswith(("def ", "class ", "async def "))
    )
    file = path.relative_to(ROOT).as_posix()
    return {
        "label": label or getattr(target, "__qualname__", str(target)),
        "file": file,
        "line": line,
        "url": f"/source/{file}#L{line}",
    }


def line_of(function: Any, needle: str, label: str) -> dict[str, Any]:
    """The line of `function`'s source holding `needle` (the statement that computes what is shown)."""
    entry = code(function, label)
    lines, start = inspect.getsourcelines(inspect.unwrap(function))
    for offset, source in enumerate(lines):
        if needle in source:
            entry["line"] = start + offset
            entry["url"] = f"/source/{entry['file']}#L{entry['line']}"
            return entry
    raise ValueError(f"{needle!r} is not in the source of {entry['label']}")


def plot(
    title: str, xlabel: str, ylabel: str, series: list[tuple[str, Any, Any]], points: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Lines over x: each series is (label, x values, y values); those named in `points` are dots."""
    return {
        "title": title,
        "xlabel": xlabel,
        "ylabel": ylabel,
        "series": [
            {"label": label, "x": _floats(x), "y": _floats(y), "points": label in points}
            for label, x, y in series
        ],
    }


def _floats(values: Any) -> list[float]:
    """A 1-D tensor or sequence as a list of floats."""
    if isinstance(values, torch.Tensor):
        return values.detach().double().reshape(-1).tolist()
    return [float(v) for v in values]


def number(value: float, spec: str = "g") -> str:
    """`value` in a sentence, as format(value, spec) writes it with the separators of the language in
    force: 0.125 in English and Chinese, 0,125 in Vietnamese (tensors and lists stay as the code prints)."""
    locale = BABEL_LOCALE[current_language()]
    symbols = {",": get_group_symbol(locale), ".": get_decimal_symbol(locale)}
    return format(value, spec).translate(str.maketrans(symbols))


def answer(
    tensors: list, code_lines: list, notes: list[str], plots: list | None = None, **extra: Any
) -> dict:
    """One panel's answer."""
    return {"tensors": tensors, "code": code_lines, "notes": notes, "plots": plots or [], **extra}
