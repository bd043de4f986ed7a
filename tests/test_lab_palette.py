"""The lab's line colours (COLOURS in lab/page/lab.js) stay apart for readers with the three common
colour-vision deficiencies, and each stands out against the page's white.

Each colour is simulated as a protanope, deuteranope and tritanope sees it (Machado, Oliveira and
Fernandes 2009, severity 1, applied in linear RGB), and every pair must stay at least MIN_DELTA_E apart
in CIELAB (the CIE76 distance; about 2.3 is the smallest difference people notice, and the palette the
lab used before, a darker blue, orange, green, purple, red and teal, had pairs 8.4 apart under
tritanopia and 10.6 under deuteranopia)."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from support.helpers import ROOT

LAB_JS = ROOT / "attn_mt" / "lab" / "page" / "lab.js"
MIN_DELTA_E = 15.0
MIN_CONTRAST = 3.0  # WCAG 2.1's least contrast for graphics against their background
SIMULATIONS = {
    "normal": np.eye(3),
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
    "tritanopia": np.array(
        [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]
    ),
}
SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
WHITE_POINT = np.array([0.95047, 1.0, 1.08883])  # D65


def palette() -> list[str]:
    """The colours lab.js draws heads and plotted series in."""
    found = re.search(r"const COLOURS = \[([^\]]*)\]", LAB_JS.read_text(encoding="utf-8"))
    assert found, "lab.js has no COLOURS"
    return re.findall(r'"(#[0-9a-fA-F]{6})"', found.group(1))


def linear_rgb(colour: str) -> np.ndarray:
    """#rrggbb as linear-light RGB in [0, 1]."""
    c = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def cielab(rgb: np.ndarray) -> np.ndarray:
    """Linear RGB -> CIELAB (D65)."""
    xyz = SRGB_TO_XYZ @ rgb / WHITE_POINT
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def contrast_with_white(colour: str) -> float:
    """WCAG contrast ratio of the colour against white."""
    luminance = float(np.array([0.2126, 0.7152, 0.0722]) @ linear_rgb(colour))
    return 1.05 / (luminance + 0.05)


def test_the_simulation_confuses_what_it_should():
    # red and green, far apart for most readers, nearly meet for a deuteranope: the matrices are live
    seen = {
        name: [cielab(np.clip(m @ linear_rgb(c), 0, 1)) for c in ("#d62728", "#2ca02c")]
        for name, m in SIMULATIONS.items()
    }
    assert np.linalg.norm(seen["normal"][0] - seen["normal"][1]) > 80
    assert np.linalg.norm(seen["deuteranopia"][0] - seen["deuteranopia"][1]) < 40


@pytest.mark.parametrize("vision", list(SIMULATIONS))
def test_every_pair_of_line_colours_stays_apart(vision):
    colours = palette()
    assert len(colours) >= 6  # a colour per head of the book's Transformer (4) and per plotted series
    seen = {c: cielab(np.clip(SIMULATIONS[vision] @ linear_rgb(c), 0, 1)) for c in colours}
    for one, two in itertools.combinations(colours, 2):
        distance = float(np.linalg.norm(seen[one] - seen[two]))
        assert distance >= MIN_DELTA_E, f"{vision}: {one} and {two} are only {distance:.1f} apart"


def test_every_line_colour_stands_out_against_white():
    for colour in palette():
        assert contrast_with_white(colour) >= MIN_CONTRAST, colour
