"""int8 inference on the CPU: torch's dynamic quantisation of the models' linear layers, applied as a
model is opened (`--quantize int8`, run/open_run_dir.py and run/open_export.py).

`torch.ao.quantization.quantize_dynamic` stores each chosen `nn.Linear`'s weights as int8 (one
scale per output row) and quantises its input on the fly at every call, so nothing is calibrated
and the model's code is unchanged: search still calls `encode`, `init_state`, `step` and
`reorder_state`. The layers a model names in `EncoderDecoder.direct_weight_layers` stay in float32
(the GRU + Bahdanau model names its additive attention's W_q and w_v).
The Transformer's feed-forward `dense1` and its ReLU are first fused into one `LinearReLU`
(torch's `fuse_modules`), so the int8 kernel applies the ReLU as it writes its output.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from attn_mt.errors import UserError
from attn_mt.models.base import EncoderDecoder

QUANTIZE_CHOICES = ("int8",)


def quantizable_linears(model: EncoderDecoder) -> set[str]:
    """Names of the `nn.Linear` layers that dynamic int8 quantisation may replace."""
    skip = set(model.direct_weight_layers)
    linears = {name for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    return linears - skip


def linear_relu_pairs(model: EncoderDecoder, linears: set[str]) -> list[list[str]]:
    """[dense1, relu] name pairs of the feed-forward layers, to quantise as one fused LinearReLU."""
    pairs = []
    for name, module in model.named_modules():
        dense, relu = getattr(module, "dense1", None), getattr(module, "relu", None)
        if isinstance(dense, nn.Linear) and isinstance(relu, nn.ReLU) and f"{name}.dense1" in linears:
            pairs.append([f"{name}.dense1", f"{name}.relu"])
    return pairs


def quantize_model(model: EncoderDecoder, kind: str, device: torch.device) -> EncoderDecoder:
    """A copy of `model` with int8 linear layers (`kind` "int8"); refuses devices other than the CPU."""
    if kind not in QUANTIZE_CHOICES:
        raise UserError(f"--quantize {kind!r}: choose one of {', '.join(QUANTIZE_CHOICES)}")
    if device.type != "cpu":
        raise UserError(
            f"--quantize {kind} runs on the CPU only (torch's dynamic int8 kernels), not on {device.type}; "
            "add --device cpu"
        )
    if torch.backends.quantized.engine == "none":
        raise UserError(f"--quantize {kind}: this torch build has no quantized CPU engine")
    model = model.to("cpu").eval()
    linears = quantizable_linears(model)
    pairs = linear_relu_pairs(model, linears)
    with warnings.catch_warnings():  # torch announces torchao as the successor of these (working) tools
        warnings.filterwarnings("ignore", message=".*deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor", category=UserWarning)
        if pairs:  # the ReLU runs inside the int8 kernel's output pass (nn.Identity takes its place)
            model = torch.ao.quantization.fuse_modules(model, pairs, inplace=False)
        return torch.ao.quantization.quantize_dynamic(model, linears, dtype=torch.qint8)
