"""CUDA's kernel rules, applied on the CPU: refuse what a CUDA kernel refuses, record what SDPA could pick.

The CPU's kernels forgive some argument mixes that CUDA's stop at (a bfloat16 layer norm input with
float32 weight and bias runs on the CPU; CUDA's eager kernel reads the weight as the input's type
and fails, pytorch issue 135969). A test suite that runs only on the CPU proves the arithmetic, not
the kernels a GPU will pick, so `CudaRules` watches every aten op a block of code runs (a
TorchDispatchMode: it sees the ops after autograd and autocast, with the dtypes a kernel would get)
and raises `CudaRuleError` where a CUDA kernel would refuse the call:

- layer norm (forward and backward): weight and bias in the input's dtype (aten/src/ATen/native/
  cuda/layer_norm_kernel.cu reads gamma and beta with the input's scalar type);
- matrix products (mm, bmm, addmm, baddbmm, addmv, linear): every operand, the bias included, in
  one dtype (cuBLAS takes one type for A, B and C);
- index and scatter ops: gather, scatter and index_put indices int64, index_select, index_add,
  index_copy and embedding indices int32 or int64 (the dtypes every kernel of torch >= 2.4, the
  floor of pyproject.toml, accepts on both devices); the values written in the destination's dtype.

`scaled_dot_product_attention` is watched one level up (a TorchFunctionMode: its arguments before
torch picks a kernel), and each call is recorded with the CUDA backends its arguments would allow
on an Ampere-or-later card, following torch's own filters in aten/src/ATen/native/transformers/
cuda/sdp_utils.cpp (`can_use_flash_attention`, `can_use_cudnn_attention`,
`can_use_mem_efficient_attention`) and attention.cpp's `preprocess_mask`:

- flash: no attn_mask (check_for_attn_mask), fp16 or bf16 (check_dtypes_low_precision), q, k and v
  of one head size <= 256 (check_head_dim_size_flash) that is a multiple of 8 (flash pads other
  sizes with a copy), is_causal only where queries and keys are equally many
  (check_flash_causal_non_square_seqlens);
- cuDNN: fp16 or bf16, a dropout that is a multiple of 1/16 (check_cudnn_dropout), head size a
  multiple of 8 and <= 128 (<= 256 on sm90 with a recent cuDNN, check_cudnn_tensor_shapes: the
  harness asks for 128), more than one key;
- memory-efficient: head size a multiple of the GEMM alignment (8 for fp16/bf16, 4 for float32,
  check_head_dim_size_mem_efficient), q, k and v storage offsets aligned to 16 bytes
  (check_data_ptr_alignment_mem_efficient), and an additive bias in the query's dtype whose strides
  but the last are multiples of 16: attention.cpp's preprocess_mask pads and copies a bias on every
  call unless its strides are multiples of 8 (aligned_tensor<8> in recent torch; some releases
  checked instead that the last size is a multiple of 16, which copies any bias of another S);
- math: always.
Under autocast the recorded dtype is the autocast dtype (SDPA is on CUDA autocast's lower-precision
list). What the harness cannot know: the card's compute capability, the cuDNN version, and which
ops CUDA's autocast (rather than the CPU's) casts; docs/gpu.md says which calls take which backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
HALF = (torch.float16, torch.bfloat16)
BACKENDS = ("flash", "cudnn", "efficient", "math")
CUDNN_HEAD_LIMIT = 128  # 256 only on sm90/sm10x with cuDNN > 9.22 (check_cudnn_tensor_shapes)
FLASH_HEAD_LIMIT = 256
BIAS_STRIDE_ALIGNMENT = (
    16  # elements: stricter than recent preprocess_mask's 8, as additive_bias lays rows out
)
POINTER_ALIGNMENT_BYTES = 16  # minimum_gemm_alignment x element size on sm80+ for fp16/bf16 (and float32)


class CudaRuleError(RuntimeError):
    """A call that a CUDA kernel would refuse, though the CPU ran it."""


def _tensors(values: Any) -> list[torch.Tensor]:
    """The tensors among `values` (one level of lists and tuples)."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _same_dtype(name: str, operands: list[torch.Tensor]) -> None:
    """Refuse operands of more than one dtype."""
    dtypes = {t.dtype for t in operands}
    if len(dtypes) > 1:
        raise CudaRuleError(f"{name}: operands of dtypes {sorted(map(str, dtypes))}; CUDA takes one")


def _check_layer_norm(func: Any, args: tuple, kwargs: dict) -> None:
    """native_layer_norm(input, shape, weight, bias, eps) and its backward(grad, input, shape, ...)."""
    if func is aten.native_layer_norm.default:
        x, weight, bias = args[0], args[2], args[3]
    else:
        x, weight, bias = args[1], args[5], args[6]
    for what, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.dtype != x.dtype:
            raise CudaRuleError(
                f"layer_norm: input is {x.dtype} but its {what} is {param.dtype}; CUDA's kernel reads "
                f"the {what} as the input's type (expected scalar type ... but found ...)"
            )


def _check_index(func: Any, args: tuple, kwargs: dict) -> None:
    """Index dtypes and written values' dtypes of the index and scatter ops."""
    name = func.__name__.split(".")[0]
    long_only = name in ("gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce")
    if name in ("index_put", "index_put_", "_index_put_impl_"):
        indices = [i for i in args[1] if i is not None]
        if any(i.dtype not in (torch.int64, torch.bool) for i in indices):
            raise CudaRuleError(f"{name}: indices {[str(i.dtype) for i in indices]}; use int64")
        if args[2].dtype != args[0].dtype:
            raise CudaRuleError(f"{name}: values {args[2].dtype} into {args[0].dtype}")
        return
    if name == "embedding":
        index = args[1]
    elif (
        name in ("gather", "index_select", "index_add", "index_add_", "index_copy", "index_copy_")
        or long_only
    ):
        index = args[2]
    else:
        return
    allowed = (torch.int64,) if long_only else (torch.int32, torch.int64)
    if index.dtype not in allowed:
        raise CudaRuleError(f"{name}: index of dtype {index.dtype}; CUDA takes {allowed}")
    source = args[3] if len(args) > 3 and isinstance(args[3], torch.Tensor) else kwargs.get("src")
    writes = name not in ("gather", "index_select", "embedding") and source is not None
    if writes and source.dtype != args[0].dtype:
        raise CudaRuleError(f"{name}: source {source.dtype} written into {args[0].dtype}")


MATMULS = {
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten.addmv.default,
    aten.mv.default,
    aten._addmm_activation.default,
    aten.linear.default,
}
LAYER_NORMS = {aten.native_layer_norm.default, aten.native_layer_norm_backward.default}
INDEX_OPS = {
    aten.gather.default,
    aten.scatter.src,
    aten.scatter_.src,
    aten.scatter_add.default,
    aten.scatter_add_.default,
    aten.index_select.default,
    aten.index_add.default,
    aten.index_add_.default,
    aten.index_copy.default,
    aten.index_copy_.default,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten.embedding.default,
}


@dataclass
class SdpaCall:
    """One scaled_dot_product_attention call: its arguments in brief and the CUDA backends they allow."""

    query: tuple[int, ...]  # (B, h, Q, d)
    key: tuple[int, ...]  # (B, h, K, d)
    dtype: torch.dtype  # what the kernel gets (the autocast dtype under autocast)
    mask: str  # "none", "bool" or the additive bias's dtype
    dropout: float
    is_causal: bool
    backends: tuple[str, ...]
    refused: dict[str, str] = field(default_factory=dict)  # backend -> the first rule it fails


def _aligned_offset(t: torch.Tensor) -> bool:
    """Whether `t`'s storage offset is POINTER_ALIGNMENT_BYTES aligned."""
    return (t.storage_offset() * t.element_size()) % POINTER_ALIGNMENT_BYTES == 0


def sdpa_backends(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    dtype: torch.dtype,
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The backends (of BACKENDS) a CUDA sm80+ card could run this call on, and why each other is refused."""
    d, d_v = query.shape[-1], value.shape[-1]
    refused: dict[str, str] = {}
    half = dtype in HALF
    if attn_mask is not None:
        refused["flash"] = "an attn_mask (flash takes none)"
    elif not half:
        refused["flash"] = f"dtype {dtype} (fp16 or bf16 only)"
    elif d != key.shape[-1] or d != d_v or d > FLASH_HEAD_LIMIT or d % 8:
        refused["flash"] = f"head size {d} (one size, <= {FLASH_HEAD_LIMIT}, a multiple of 8)"
    elif is_causal and query.shape[-2] != key.shape[-2]:
        refused["flash"] = f"is_causal with {query.shape[-2]} queries and {key.shape[-2]} keys"
    if not half:
        refused["cudnn"] = f"dtype {dtype} (fp16 or bf16 only)"
    elif dropout_p * 16 != math.floor(dropout_p * 16):
        refused["cudnn"] = f"dropout {dropout_p} (a multiple of 1/16 only)"
    elif d % 8 or d_v % 8 or d > CUDNN_HEAD_LIMIT or d_v > CUDNN_HEAD_LIMIT:
        refused["cudnn"] = f"head size {d} (a multiple of 8, <= {CUDNN_HEAD_LIMIT})"
    elif key.shape[-2] == 1:
        refused["cudnn"] = "one key"
    alignment = 8 if half else 4
    if d % alignment or d_v % alignment:
        refused["efficient"] = f"head size {d} (a multiple of {alignment})"
    elif not all(_aligned_offset(t) for t in (query, key, value)):
        refused["efficient"] = f"q, k or v storage offset not {POINTER_ALIGNMENT_BYTES}-byte aligned"
    elif attn_mask is not None and attn_mask.dtype != torch.bool:
        if attn_mask.dtype != dtype:
            refused["efficient"] = f"bias of dtype {attn_mask.dtype} for {dtype} queries"
        elif any(s % BIAS_STRIDE_ALIGNMENT for s in attn_mask.stride()[:-1]):
            refused["efficient"] = f"bias strides {attn_mask.stride()} (a copy every call)"
    return tuple(b for b in BACKENDS if b not in refused), refused


class _SdpaRecorder(TorchFunctionMode):
    """Records every F.scaled_dot_product_attention call into `calls`."""

    def __init__(self, calls: list[SdpaCall]):
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.calls.append(self.describe(*args, **kwargs))
        return func(*args, **kwargs)

    @staticmethod
    def describe(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        **_: Any,
    ) -> SdpaCall:
        """The call in brief, with its backends."""
        kind = query.device.type
        autocast = torch.is_autocast_enabled(kind)
        dtype = torch.get_autocast_dtype(kind) if autocast else query.dtype
        if autocast and attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(dtype)  # CUDA's autocast casts every floating argument of SDPA
        backends, refused = sdpa_backends(query, key, value, attn_mask, dropout_p, is_causal, dtype)
        mask = (
            "none" if attn_mask is None else "bool" if attn_mask.dtype == torch.bool else str(attn_mask.dtype)
        )
        return SdpaCall(
            tuple(query.shape), tuple(key.shape), dtype, mask, dropout_p, is_causal, backends, refused
        )


class _KernelRules(TorchDispatchMode):
    """Raises CudaRuleError on an aten op CUDA would refuse; counts the ops it checked."""

    def __init__(self, checked: dict[str, int]):
        super().__init__()
        self.checked = checked

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in LAYER_NORMS:
            self.checked["layer_norm"] += 1
            _check_layer_norm(func, args, kwargs)
        elif func in MATMULS:
            self.checked["matmul"] += 1
            _same_dtype(func.__name__, _tensors(args))
        elif func in INDEX_OPS:
            self.checked["index"] += 1
            _check_index(func, args, kwargs)
        return func(*args, **kwargs)


class CudaRules:
    """`with CudaRules() as rules:` runs a block under CUDA's rules; `rules.sdpa` lists its SDPA calls."""

    def __init__(self) -> None:
        self.sdpa: list[SdpaCall] = []
        self.checked = {"layer_norm": 0, "matmul": 0, "index": 0}
        self._modes = (_SdpaRecorder(self.sdpa), _KernelRules(self.checked))

    def __enter__(self) -> CudaRules:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
