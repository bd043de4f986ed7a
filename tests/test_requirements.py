"""pyproject.toml's torch floor is a release that has every torch API attn-mt calls."""

from __future__ import annotations

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
# the torch APIs attn-mt uses that came late, with the first release that has them (checked in
# the 2.4 release notes and the pull requests that added them: pytorch#124479, #124359, #123074)
NEWEST_APIS = {
    "torch.get_autocast_dtype(device_type)": (2, 4),  # training/loss.py
    "torch.is_autocast_enabled(device_type)": (2, 4),  # models/attention.py, bahdanau.py, loss.py
    "torch.optim.Adam(fused=True) on the CPU": (2, 4),  # training/optim.py
    "torch.amp.GradScaler('cuda')": (2, 3),  # training/trainer.py
}


def torch_floor() -> tuple[int, int]:
    """The minimum torch version pyproject.toml asks for."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'"torch>=(\d+)\.(\d+)', text)
    assert found, "pyproject.toml has no torch>=X.Y requirement"
    return int(found.group(1)), int(found.group(2))


def test_torch_floor_has_every_api_used():
    assert torch_floor() >= max(NEWEST_APIS.values()), NEWEST_APIS


def test_the_newest_apis_exist_in_the_installed_torch():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], fused=True)
    assert optimizer.defaults["fused"] is True
