"""Fonts that can draw every catalogue's characters: a CSS stack for the pages, families for the plots.

Chinese needs a CJK font (Debian's fonts-noto-cjk, which `make browser` installs); Vietnamese's letters
are in DejaVu Sans, matplotlib's own font. Plots name DejaVu Sans first and the first CJK family found
after it, so Latin text looks as it always did and matplotlib takes each Chinese character from the next.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PAGE_FONT_STACK = (
    'system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK SC", "Source Han Sans SC", '
    '"PingFang SC", "Microsoft YaHei", "WenQuanYi Zen Hei", sans-serif'
)
LATIN_FAMILY = "DejaVu Sans"  # ships with matplotlib
CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Microsoft YaHei",
    "PingFang SC",
    "SimHei",
    "Droid Sans Fallback",
)
CJK_FILE = re.compile(r"cjk|wqy|wenquanyi|droidsansfallback|sourcehan|simhei|msyh|pingfang", re.IGNORECASE)


def _installed_families() -> set[str]:
    from matplotlib import font_manager

    return {entry.name for entry in font_manager.fontManager.ttflist}


@functools.cache
def cjk_family() -> str | None:
    """The first CJK family matplotlib can use, or None; fonts installed after matplotlib cached its list
    of fonts are found on disk and added."""
    from matplotlib import font_manager

    names = _installed_families()
    if not any(family in names for family in CJK_FAMILIES):
        for path in font_manager.findSystemFonts():
            if CJK_FILE.search(Path(path).name):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        names = _installed_families()
    return next((family for family in CJK_FAMILIES if family in names), None)


def plot_families() -> list[str]:
    """The font families a plot's text is drawn in: DejaVu Sans, then a CJK family where there is one."""
    family = cjk_family()
    return [LATIN_FAMILY] if family is None else [LATIN_FAMILY, family]


def with_plot_fonts(fig: Figure) -> Figure:
    """Give every text `fig` holds (titles, labels, legends, tick labels set so far) the plot families."""
    from matplotlib.text import Text

    families = plot_families()
    for text in fig.findobj(Text):
        text.set_fontfamily(families)
    return fig
