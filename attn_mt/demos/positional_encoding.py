"""The sinusoidal positional encoding figures of the book section "Self-Attention and Positional Encoding".

Shapes: S positions (rows), H encoding dimensions (columns).
P[i, 2j] = sin(i / 10000^(2j/H)), P[i, 2j+1] = cos(i / 10000^(2j/H)) (Vaswani et al. 2017,
section 3.5). Lower columns oscillate faster, as the lower bits of a binary number alternate
more often than the higher ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attn_mt.demos.figures import draw_heatmap, new_figure, prepare_out_dir, save_figure, to_lists, write_json
from attn_mt.i18n import _
from attn_mt.models.positional import PositionalEncoding

NAME = "positional-encoding"
NUM_STEPS = 60
ENCODING_DIM = 32
PLOTTED_COLUMNS = (6, 7, 8, 9)
BINARY_BITS = 3


def encoding_matrix(num_steps: int = NUM_STEPS, num_hiddens: int = ENCODING_DIM) -> torch.Tensor:
    """The (S, H) table the project's PositionalEncoding adds to an input of S steps."""
    encoding = PositionalEncoding(num_hiddens, dropout=0.0, max_len=num_steps)
    encoding.eval()
    with torch.no_grad():
        return encoding(torch.zeros(1, num_steps, num_hiddens))[0]  # (S, H): zeros in, table out


def binary_codes(bits: int = BINARY_BITS) -> torch.Tensor:
    """(2^bits, bits) 0/1 table: row i is i in binary, most significant bit first."""
    numbers = torch.arange(2**bits).unsqueeze(1)  # (2^bits, 1)
    shifts = torch.arange(bits - 1, -1, -1)  # (bits,)
    return (numbers >> shifts) & 1  # (2^bits, bits)


def _plot_columns(matrix: torch.Tensor, path: Path) -> str:
    fig, (ax,) = new_figure(panel_size=(5.0, 2.6))
    positions = torch.arange(matrix.shape[0])
    for column in PLOTTED_COLUMNS:
        ax.plot(positions, matrix[:, column], label=_("Col {column}").format(column=column))
    ax.set(xlabel=_("Row (position)"), ylabel=_("encoding value"))
    ax.legend(fontsize="small", loc="lower left")
    return save_figure(fig, path)


def _plot_matrix(matrix: torch.Tensor, path: Path) -> str:
    fig, (ax,) = new_figure(panel_size=(4.0, 3.5))
    draw_heatmap(
        fig,
        ax,
        matrix,
        xlabel=_("Column (encoding dimension)"),
        ylabel=_("Row (position)"),
        legend=_("encoding value"),
        centred=True,
    )
    return save_figure(fig, path)


def _plot_binary(codes: torch.Tensor, matrix: torch.Tensor, path: Path) -> str:
    """The chapter's comparison side by side: the bits of 0..2^bits - 1 next to the encoding matrix.

    The bit columns are ordered by place value 1, 2, 4, ... so that, as in the encoding, the column
    that changes fastest is on the left and each column to its right changes more slowly.
    """
    fig, (bits_ax, encoding_ax) = new_figure(ncols=2, panel_size=(3.6, 3.4))
    by_place_value = codes.flip(1)  # (2^bits, bits): lowest place value first
    bits = codes.shape[1]
    title = _("binary: 0 to {last}").format(last=codes.shape[0] - 1)
    draw_heatmap(
        fig,
        bits_ax,
        by_place_value,
        xlabel=_("bit (place value)"),
        ylabel=_("number"),
        title=title,
        legend=_("bit"),
    )
    bits_ax.set_xticks(range(bits), [str(2**place) for place in range(bits)])
    bits_ax.set_yticks(range(codes.shape[0]))
    for row, code in enumerate(by_place_value.tolist()):
        for col, bit in enumerate(code):
            color = "white" if bit else "black"
            bits_ax.text(col, row, str(bit), ha="center", va="center", fontsize="small", color=color)
    draw_heatmap(
        fig,
        encoding_ax,
        matrix,
        xlabel=_("Column (encoding dimension)"),
        ylabel=_("Row (position)"),
        title=_("sinusoidal positional encoding"),
        legend=_("encoding value"),
        centred=True,
    )
    fig.suptitle(_("frequency falls from left to right in both"), fontsize="medium")
    return save_figure(fig, path)


def run(out_dir: Path, seed: int) -> dict[str, Any]:
    """Write the column plot, matrix heatmap and binary table PNGs and positional_encoding.json.

    The encoding is deterministic; `seed` is accepted for a uniform demo interface and recorded.
    """
    out_dir = prepare_out_dir(out_dir)
    matrix = encoding_matrix()  # (S, H)
    codes = binary_codes()  # (2^bits, bits)
    figures = [
        _plot_columns(matrix, out_dir / "positional_encoding_columns.png"),
        _plot_matrix(matrix, out_dir / "positional_encoding_heatmap.png"),
        _plot_binary(codes, matrix, out_dir / "positional_encoding_binary.png"),
    ]
    results = {
        "demo": NAME,
        "seed": seed,
        "num_steps": NUM_STEPS,
        "encoding_dim": ENCODING_DIM,
        "plotted_columns": list(PLOTTED_COLUMNS),
        "binary": [f"{number:0{BINARY_BITS}b}" for number in range(2**BINARY_BITS)],
        "encoding": to_lists(matrix),
        "figures": figures,
    }
    write_json(out_dir / "positional_encoding.json", results)
    return results
