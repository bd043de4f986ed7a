"""CUDA's kernel rules held on the CPU (support/cuda_rules.py): the harness refuses what CUDA refuses, the
training step (bf16, fp16 with the scaler), validation and decoding pass it, and each attention call's CUDA
backends are the ones docs/gpu.md states."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.cuda_rules import CudaRuleError, CudaRules, sdpa_backends
from support.synthetic import TINY, TINY_RUN_SETTINGS, write_corpus

from attn_mt.config import load_config
from attn_mt.data.dataset import NMTData, load_data
from attn_mt.models import attention as attention_module
from attn_mt.run.run_dir import RunPaths
from attn_mt.training.trainer import Trainer

# tiny.yaml's data on the reverse task, with configs/transformer-gpu.yaml's head size (64) and dropout
SETTINGS = [
    *TINY_RUN_SETTINGS[:3],
    "train.valid_max_sentences=4",
    "train.threads=1",
    "model.num_hiddens=128",
    "model.num_heads=2",
    "model.ffn_num_hiddens=64",
    "model.dropout=0.2",
    "decode.beam_size=2",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> NMTData:
    """The reverse task's 300 pairs, loaded once for this module's trainers."""
    corpus = write_corpus(tmp_path_factory.mktemp("cuda-rules") / "reverse.txt", n=300)
    return load_data(load_config(TINY, SETTINGS).data, str(corpus))


def trainer(tmp_path: Path, data: NMTData, amp: str, monkeypatch: pytest.MonkeyPatch) -> Trainer:
    """A CPU reference trainer made to step under `amp` as it would on CUDA (the scaler for fp16).

    Training with dropout takes the fused attention on CUDA, where the CPU takes the explicit softmax
    (models/attention.py, EXPLICIT_WITH_DROPOUT); here it takes the fused path too, so the harness sees
    the calls a card gets.
    """
    monkeypatch.setattr(attention_module, "EXPLICIT_WITH_DROPOUT", ())
    cfg = load_config(TINY, [*SETTINGS, "train.kernels=reference"])
    made = Trainer(cfg, RunPaths(tmp_path / amp), data, torch.device("cpu"), quiet=True)
    made.amp = amp  # the CPU falls back to float32 where its bf16 is emulated; CUDA's kernels would not
    made.scaler = torch.amp.GradScaler("cpu", enabled=amp == "fp16")
    return made


def first_step(made: Trainer) -> None:
    """The trainer's own step (forward, backward, clipping, the scaler, the optimiser) on its first batch."""
    plan = made.data.train.plan(0, made.cfg.train.seed)
    made._step([made.collate(plan[0])], False, 0.0)


# ----- the rules -----
def test_the_rules_refuse_what_cuda_refuses_and_pass_what_it_takes():
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    norm = torch.nn.LayerNorm(8)
    assert F.layer_norm(x, (8,), norm.weight, norm.bias).dtype == torch.bfloat16  # the CPU forgives the mix
    with CudaRules() as rules:
        with pytest.raises(CudaRuleError, match="layer_norm: input is torch.bfloat16 but its weight"):
            F.layer_norm(x, (8,), norm.weight, norm.bias)
        F.layer_norm(x, (8,), norm.weight.bfloat16(), norm.bias.bfloat16())
        with pytest.raises(CudaRuleError, match="addmm"):
            F.linear(x, torch.randn(4, 8, dtype=torch.bfloat16), torch.zeros(4))  # float32 bias
        F.linear(x, torch.randn(4, 8, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.bfloat16))
        values = torch.randn(5)
        with pytest.raises(CudaRuleError, match="gather: index of dtype torch.int32"):
            values.gather(0, torch.tensor([1, 2], dtype=torch.int32))  # the CPU takes int32 here
        values.index_select(0, torch.tensor([1, 2], dtype=torch.int32))
        with pytest.raises(CudaRuleError, match="scatter_add"):
            torch.zeros(5).scatter_add(0, torch.tensor([1, 2]), torch.ones(2, dtype=torch.bfloat16))
    assert rules.checked["layer_norm"] == 2 and rules.checked["matmul"] >= 2 and rules.checked["index"] >= 3


def test_each_backends_rules_follow_torchs_filters():
    def q(steps: int, d: int = 64, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.zeros(2, 8, steps, d, dtype=dtype)  # (B, h, N, d)

    bf16 = torch.bfloat16
    bias = torch.zeros(2, 1, 1, 16, dtype=bf16)[..., :5]  # (B, 1, 1, S): rows 16 wide, as additive_bias
    assert sdpa_backends(q(5), q(5), q(5), None, 0.0, True, bf16)[0] == (
        "flash",
        "cudnn",
        "efficient",
        "math",
    )
    assert sdpa_backends(q(5), q(5), q(5), bias, 0.0, False, bf16)[0] == ("cudnn", "efficient", "math")
    backends, refused = sdpa_backends(q(5), q(5), q(5), None, 0.2, True, bf16)
    assert backends == ("flash", "efficient", "math") and "1/16" in refused["cudnn"]
    assert sdpa_backends(q(5), q(5), q(5), None, 0.125, True, bf16)[0][:2] == ("flash", "cudnn")
    assert "is_causal" in sdpa_backends(q(1), q(5), q(5), None, 0.0, True, bf16)[1]["flash"]
    assert sdpa_backends(q(5, 192), q(5, 192), q(5, 192), None, 0.0, False, bf16)[0] == (
        "flash",
        "efficient",
        "math",
    )
    assert sdpa_backends(q(5, 68), q(5, 68), q(5, 68), None, 0.0, False, bf16)[0] == (
        "math",
    )  # not 8-aligned
    assert "flash" not in sdpa_backends(q(5, 260), q(5, 260), q(5, 260), None, 0.0, False, bf16)[0]
    fp32 = sdpa_backends(
        q(5, dtype=torch.float32),
        q(5, dtype=torch.float32),
        q(5, dtype=torch.float32),
        None,
        0.0,
        True,
        torch.float32,
    )
    assert fp32[0] == ("efficient", "math")
    unaligned = torch.zeros(2, 1, 1, 5, dtype=bf16)  # rows 5 wide: the kernel would pad and copy it
    assert "strides" in sdpa_backends(q(5), q(5), q(5), unaligned, 0.0, False, bf16)[1]["efficient"]
    wrong_dtype = torch.zeros(2, 1, 1, 16)[..., :5]
    assert "bias of dtype" in sdpa_backends(q(5), q(5), q(5), wrong_dtype, 0.0, False, bf16)[1]["efficient"]


# ----- the training step, validation and decoding -----
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_the_step_passes_and_its_attention_takes_the_stated_backends(tmp_path, data, amp, monkeypatch):
    made = trainer(tmp_path, data, amp, monkeypatch)
    assert made.speed.name == "reference"
    before = {name: p.detach().clone() for name, p in made.model.named_parameters()}
    with CudaRules() as rules:
        first_step(made)
    assert all(not torch.equal(p, before[name]) for name, p in made.model.named_parameters())  # updated
    assert rules.checked["layer_norm"] > 0 and rules.checked["matmul"] > 0 and rules.checked["index"] > 0
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    assert {c.dtype for c in rules.sdpa} == {dtype} and {c.dropout for c in rules.sdpa} == {0.2}
    assert len(rules.sdpa) == 3 * made.cfg.model.num_layers  # encoder, decoder and cross attention
    assert not any(c.is_causal for c in rules.sdpa)  # flash's backward lost on an H200 (docs/gpu.md)
    assert all(c.mask == str(dtype) for c in rules.sdpa)  # an aligned bias, no boolean mask
    # every call (the causal one too, a bias) takes the memory-efficient kernel; cuDNN refuses all
    # three for dropout 0.2 (not a multiple of 1/16), flash any mask
    assert {c.backends for c in rules.sdpa} == {("efficient", "math")}


def test_validation_and_decoding_pass(tmp_path, data, monkeypatch):
    made = trainer(tmp_path, data, "bf16", monkeypatch)
    with CudaRules() as rules:
        first_step(made)
        scores = made.validator.run()
        outputs = made.validator.translator.translate(
            [ex.src for ex in made.validator.examples[:2]], beam_size=2
        )
    assert set(scores) == {"valid_loss", "valid_bleu"} and len(outputs) == 2
    evaluation = [c for c in rules.sdpa if c.dropout == 0.0]
    assert evaluation and all(
        c.dtype == torch.float32 for c in evaluation
    )  # validation runs without autocast
    assert all(c.backends[0] == "efficient" for c in evaluation)  # float32: neither flash nor cuDNN
    assert all(c.mask in ("none", "torch.float32") for c in evaluation)  # a bias of the queries' dtype
