"""Lab panel of the book section "Self-Attention and Positional Encoding": the sinusoidal table, one row
and one column of it, and the shift by k positions as one fixed linear map.

Shapes: S positions (rows; the book's n tokens), H encoding dimensions (columns, even; the book's d).
As in the book, j numbers a frequency, that is a pair of columns: column 2j holds sin(i w_j) and column
2j + 1 holds cos(i w_j), w_j = 1 / 10000^(2j / H). A column of the table is c (c = 2j or 2j + 1).
Moving to row i + k turns each pair j by the angle k w_j, so P[i + k] = M_k P[i] with M_k
block-diagonal of 2 x 2 rotations that depend on k but not on i.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.demos.positional_encoding import encoding_matrix
from attn_mt.i18n import _
from attn_mt.lab.inputs import LabError, limit_elements, whole
from attn_mt.lab.shown import answer, code, line_of, number, plot, shown
from attn_mt.models.positional import WAVELENGTH_BASE, PositionalEncoding, sinusoid_table

MAX_STEPS = 512
MAX_HIDDENS = 64  # M_k is (H, H)
CHAPTER_COLUMNS = (6, 7, 8, 9)  # the columns the book plots


def shift_map(k: int, num_hiddens: int) -> torch.Tensor:
    """M_k (H, H): the linear map taking row i of the table to row i + k, the same for every i."""
    frequencies = 1.0 / torch.pow(
        WAVELENGTH_BASE, torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens
    )  # (H / 2,)
    angles = k * frequencies  # (H / 2,)
    M = torch.zeros(num_hiddens, num_hiddens, dtype=torch.float64)  # (H, H)
    M[0::2, 0::2] = torch.diag(torch.cos(angles))  # new sin = cos(k w) sin + sin(k w) cos
    M[0::2, 1::2] = torch.diag(torch.sin(angles))
    M[1::2, 0::2] = torch.diag(-torch.sin(angles))  # new cos = -sin(k w) sin + cos(k w) cos
    M[1::2, 1::2] = torch.diag(torch.cos(angles))
    return M


def positional_panel(state: dict[str, Any]) -> dict[str, Any]:
    """The (S, H) table, its row i and the pair of columns holding column c, and P[i + k] = M_k P[i]."""
    steps = whole(state, "num_steps", 60, 1, MAX_STEPS)
    hiddens = whole(state, "num_hiddens", 32, 2, MAX_HIDDENS)
    if hiddens % 2:
        raise LabError(
            _("num_hiddens: the encoding pairs sines with cosines, so H must be even, got {value}").format(
                value=hiddens
            )
        )
    limit_elements(_("the table P"), steps, hiddens)
    i = whole(state, "position", 10, 0, steps - 1)
    c = whole(state, "dimension", 6, 0, hiddens - 1)  # a column; its pair (frequency) is j = c // 2
    k = whole(state, "shift", 3, 0, MAX_STEPS)
    table = encoding_matrix(steps, hiddens)  # (S, H), through PositionalEncoding.forward
    shifted_row = sinusoid_table(i + k + 1, hiddens)[i + k]  # (H,)
    M = shift_map(k, hiddens)  # (H, H)
    mapped = M @ table[i].double()  # (H,)
    positions = torch.arange(steps)
    pair = c // 2
    column = _("column {c}")
    columns = [(column.format(c=n), positions, table[:, n]) for n in (2 * pair, 2 * pair + 1)]
    whole_table = shown(
        _("P (positional encoding)"),
        table,
        ["S", "H"],
        note=_("outlined: row i = {i} and column c = {c}, the ones drawn below").format(i=i, c=c),
    )
    whole_table["marks"] = {"rows": [i], "columns": [c]}  # the page outlines the chosen row and column
    tensors = [
        whole_table,
        shown(_("P[{i}] (row i = {i})").format(i=i), table[i], ["H"]),
        shown(_("M_{k} (shift by k = {k})").format(k=k), M, ["H", "H"]),
        shown(f"M_{k} · P[{i}]", mapped, ["H"]),
        shown(_("P[{row}] (row i + k)").format(row=i + k), shifted_row, ["H"]),
    ]
    error = float((mapped - shifted_row.double()).abs().max())
    if c % 2 == 0:
        wave = _(
            "Column c = {c} is the sine of frequency j = {j} (the book's p_(i, 2j) = sin(i / 10000^(2j/d)) "
            "and p_(i, 2j+1) = cos(i / 10000^(2j/d)), here d = H = {d}): it oscillates with wavelength "
            "2π · 10000^({twice}/{d}), and lower columns change faster, as the low bits of a binary count do."
        )
    else:
        wave = _(
            "Column c = {c} is the cosine of frequency j = {j} (the book's p_(i, 2j) = sin(i / 10000^(2j/d)) "
            "and p_(i, 2j+1) = cos(i / 10000^(2j/d)), here d = H = {d}): it oscillates with wavelength "
            "2π · 10000^({twice}/{d}), and lower columns change faster, as the low bits of a binary count do."
        )
    notes = [
        wave.format(c=c, j=pair, d=hiddens, twice=2 * pair),
        _(
            "M_{k} rotates each (sin, cos) pair j, columns 2j and 2j + 1, by the angle {k} · w_j. It does "
            "not depend on i, so attention can learn to look k positions away by a linear map. "
            "M_{k} · P[{i}] and P[{row}] differ by at most {error} (float32 rounding of the table)."
        ).format(k=k, i=i, row=i + k, error=number(error, ".1e")),
    ]
    lines = [
        code(sinusoid_table),
        line_of(PositionalEncoding.forward, "return self.dropout(X + self.P", "PositionalEncoding.forward"),
        code(shift_map, _("shift_map (the lab's)")),
    ]
    title = _("pair j = {j}: columns {first} and {second} of P").format(
        j=pair, first=2 * pair, second=2 * pair + 1
    )
    plots = [plot(title, _("position i"), "P[i, c]", columns)]
    if hiddens > max(CHAPTER_COLUMNS):
        chapter = [(column.format(c=c), positions, table[:, c]) for c in CHAPTER_COLUMNS]
        plots.append(plot(_("the chapter's columns 6 to 9"), _("position i"), "P[i, c]", chapter))
    return answer(tensors, lines, notes, plots)
