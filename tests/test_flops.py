"""MFU's one definition (training/flops.py): the FLOPs of real tokens, counted by hand; the card peaks by
name; the steady state's MFU in a session's result."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attn_mt.machine import gpu_peak_tflops
from attn_mt.models import Transformer
from attn_mt.training.flops import ModelFlops, mfu
from attn_mt.training.run_state import STEADY_AFTER, Progress, Session
from attn_mt.training.stopping import StopReason

H, F, V = 16, 24, 60


def test_the_flops_count_the_blocks_weights_and_every_query_key_pair_of_real_tokens():
    model = Transformer(V, V, H, F, 4, (3, 2), 0.1, tie_embeddings=True)
    counts = ModelFlops.of(model)
    assert (counts.encoder, counts.decoder, counts.output) == (
        3 * (4 * H * H + 2 * H * F),  # W_q, W_k, W_v, W_o and the FFN's two matrices; no biases or tables
        2 * (8 * H * H + 2 * H * F),  # two attentions
        V * H,
    )
    src_lens, tgt_lens = torch.tensor([5, 2]), torch.tensor([3, 4])
    dense = 6 * (counts.encoder * 7 + (counts.decoder + counts.output) * 7)
    pairs = 3 * (25 + 4) + 2 * ((9 + 16) + (15 + 8))  # encoder S^2; decoder T^2 and S T
    assert counts.step(src_lens, tgt_lens) == pytest.approx(dense + 12 * H * pairs)
    assert ModelFlops.of(torch.nn.Linear(2, 2)) is None  # no blocks: no MFU


def test_mfu_is_the_flops_a_second_over_the_peak_and_names_the_cards():
    assert mfu(2e12, 2.0, 1.0) == pytest.approx(1.0)
    assert mfu(2e12, 2.0, None) is None and mfu(2e12, 0.0, 1.0) is None
    assert gpu_peak_tflops("NVIDIA H100 PCIe") == 756.0 and gpu_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu_peak_tflops("NVIDIA H200") == 989.0 and gpu_peak_tflops("Tesla T4") is None


def test_a_sessions_mfu_counts_only_the_steps_after_the_warm_up():
    session = Session(training_start=0.0)
    for _ in range(STEADY_AFTER):
        session.time_step(100.0, 10, flops=1e15)  # compiling and warming up: left out
    for _ in range(4):
        session.time_step(0.5, 10, flops=2e12)
    result = session.result(Path("run"), Progress(), StopReason.MAX_STEPS, peak_tflops=8.0)
    assert result.steady_mfu == pytest.approx(8e12 / 2.0 / 8e12)
    assert session.result(Path("run"), Progress(), StopReason.MAX_STEPS).steady_mfu is None  # no peak
