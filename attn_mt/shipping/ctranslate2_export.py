"""`attn-mt export RUN OUT --format ctranslate2`: the Transformer as a CTranslate2 model folder.

The book's Transformer (models/transformer.py) maps onto CTranslate2's `TransformerSpec` as:
  * post-norm blocks (`pre_norm=False`: LayerNorm(x + sublayer(x)), the book's AddNorm), LayerNorm
    epsilon from the model (torch's 1e-5), ReLU feed-forward layers, embeddings times sqrt(H);
  * the book's sinusoid table (sines in even columns, cosines in odd ones, from position 0;
    models/positional.py) stored as explicit position encodings, since CTranslate2's built-in
    table lays sines and cosines out in halves;
  * W_q, W_k, W_v of self-attention fused into one (3H, H) projection, W_k and W_v of the
    encoder-decoder attention into one (2H, H), no biases (the book's attention has none);
  * the output layer with its bias, tied to the target embedding when the run ties them, and the
    encoder embedding shared with the decoder's under `tie_source_embedding` (CTranslate2 stores a
    matrix that appears twice once);
  * no automatic source <eos>: attn-mt's engine feeds the ids `attn-mt translate` feeds, <eos>
    included (or cut off with a truncated source).
int8 weights: CTranslate2 scales each row into +-127. On a CPU without VNNI its int8 products add
two u8 x s8 products in 16 bits, which saturate for such weights; weights kept within +-63 (7 bits)
never do, so the export writes those there, and says so (docs/shipping.md has the measurements).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

import attn_mt
from attn_mt.decoding.outputs import max_source_tokens
from attn_mt.errors import UserError
from attn_mt.machine import cpu_has_vnni
from attn_mt.models.positional import sinusoid_table
from attn_mt.models.transformer import AddNorm, PositionWiseFFN, Transformer
from attn_mt.run.ctranslate2_folder import (
    FOLDER_FORMAT,
    FOLDER_FORMAT_VERSION,
    META_FILE,
    WEIGHT_TYPES,
    import_ctranslate2,
)
from attn_mt.run.opened import LoadedRun
from attn_mt.run.run_dir import RunPaths, load_run
from attn_mt.shipping.switches import refuse_switches

EXPORT_FORMATS = ("pt", "onnx", "ctranslate2")  # what `attn-mt export --format` writes
SEVEN_BIT_RANGE = 63  # int8 weights kept within +-63 where the CPU's int8 products would saturate
log = logging.getLogger("attn_mt")


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A parameter as a float32 numpy array."""
    return tensor.detach().to(torch.float32).cpu().numpy().copy()


def _set_linear(spec: Any, *layers: torch.nn.Linear) -> None:
    """One CTranslate2 linear layer from one torch Linear, or several fused along the output rows."""
    spec.weight = np.concatenate([_array(layer.weight) for layer in layers])  # (sum of outputs, inputs)
    if all(layer.bias is not None for layer in layers):
        spec.bias = np.concatenate([_array(layer.bias) for layer in layers])


def _set_norm(spec: Any, add_norm: AddNorm) -> None:
    """A post-norm sublayer's LayerNorm."""
    spec.gamma, spec.beta = _array(add_norm.ln.weight), _array(add_norm.ln.bias)


def _set_ffn(spec: Any, ffn: PositionWiseFFN, add_norm: AddNorm) -> None:
    """The feed-forward sublayer: dense1, ReLU, dense2, then add & norm."""
    _set_linear(spec.linear_0, ffn.dense1)
    _set_linear(spec.linear_1, ffn.dense2)
    _set_norm(spec.layer_norm, add_norm)


def max_positions(cfg: Any) -> int:
    """Rows of the position table: the longest source translate feeds, or the longest output, plus <eos>."""
    longest_source = max_source_tokens(cfg)
    longest_output = math.floor(cfg.decode.max_len_a * longest_source + cfg.decode.max_len_b)
    return max(longest_source, longest_output) + 1


def transformer_spec(model: Transformer, positions: int) -> Any:
    """CTranslate2's `TransformerSpec` holding the weights of attn-mt's Transformer (module docstring)."""
    specs = import_ctranslate2().specs
    layers, heads = len(model.encoder.blks), model.num_heads
    spec = specs.TransformerSpec.from_config(
        (layers, len(model.decoder.blks)),
        heads,
        pre_norm=False,
        activation=specs.Activation.RELU,
        alignment_layer=-1,
        alignment_heads=heads,
    )
    table = sinusoid_table(positions, model.encoder.num_hiddens).numpy()  # (positions, H)
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = _array(model.encoder.embedding.weight)  # (V_src, H)
    encoder.position_encodings.encodings = table
    for block, layer in zip(model.encoder.blks.values(), encoder.layer, strict=True):
        attention = block.attention
        _set_linear(layer.self_attention.linear[0], attention.W_q, attention.W_k, attention.W_v)
        _set_linear(layer.self_attention.linear[1], attention.W_o)
        _set_norm(layer.self_attention.layer_norm, block.addnorm1)
        _set_ffn(layer.ffn, block.ffn, block.addnorm2)
    decoder.embeddings.weight = _array(model.decoder.embedding.weight)  # (V_tgt, H)
    decoder.position_encodings.encodings = table
    for block, layer in zip(model.decoder.blks.values(), decoder.layer, strict=True):
        own, cross = block.attention1, block.attention2
        _set_linear(layer.self_attention.linear[0], own.W_q, own.W_k, own.W_v)
        _set_linear(layer.self_attention.linear[1], own.W_o)
        _set_norm(layer.self_attention.layer_norm, block.addnorm1)
        _set_linear(layer.attention.linear[0], cross.W_q)
        _set_linear(layer.attention.linear[1], cross.W_k, cross.W_v)
        _set_linear(layer.attention.linear[2], cross.W_o)
        _set_norm(layer.attention.layer_norm, block.addnorm2)
        _set_ffn(layer.ffn, block.ffn, block.addnorm3)
    _set_linear(decoder.projection, model.decoder.dense)  # (V_tgt, H) and its bias
    return spec


def quantize_seven_bits(spec: Any) -> None:
    """int8 weights within +-63 (per-row scale 63 / max |w|) for every weight CTranslate2 quantises."""
    specs = import_ctranslate2().specs

    def visit(layer: Any) -> None:
        for name, value in list(vars(layer).items()):
            if isinstance(value, list):
                for item in value:
                    visit(item)
            elif isinstance(value, specs.LayerSpec):
                visit(value)
            elif isinstance(value, np.ndarray) and value.ndim == 2 and hasattr(layer, f"{name}_scale"):
                largest = np.abs(value).max(axis=1)  # (rows,)
                scale = (SEVEN_BIT_RANGE / np.where(largest > 0, largest, SEVEN_BIT_RANGE)).astype(np.float32)
                setattr(layer, name, np.rint(value * scale[:, None]).astype(np.int8))
                setattr(layer, f"{name}_scale", scale)

    visit(spec)


def _check_transformer(run: LoadedRun) -> Transformer:
    """The run's model, or a UserError naming the formats a GRU run or an exercise switch can use."""
    refuse_switches(run.config.model, "--format ctranslate2")
    if not isinstance(run.model, Transformer):
        others = " or ".join(f"--format {f}" for f in EXPORT_FORMATS if f != "ctranslate2")
        raise UserError(
            f"--format ctranslate2 exports Transformer runs only; this run is a "
            f"{run.config.model.type} model: export it with {others}"
        )
    return run.model


def int8_bits_for_this_cpu(quantize: str) -> int | None:
    """7 for int8 weights where this CPU's int8 products saturate (no VNNI), 8 where they do not."""
    if not quantize.startswith("int8"):
        return None
    return 8 if cpu_has_vnni() else 7


def export_ctranslate2(
    run_dir: Path, out: Path, checkpoint: str = "best", quantize: str | None = None
) -> Path:
    """Write the run's Transformer as a CTranslate2 folder `out` that translates alone (module docstring)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            f"{out} exists and is not an empty folder; give a new folder for the CTranslate2 model"
        )
    if quantize is not None and quantize not in WEIGHT_TYPES:
        raise UserError(f"--quantize {quantize!r}: choose one of {', '.join(WEIGHT_TYPES)}")
    import_ctranslate2()
    report = RunPaths(Path(run_dir)).data_report
    return write_ctranslate2(
        load_run(run_dir, checkpoint, "cpu"), out, quantize or "float32", report if report.is_file() else None
    )


def write_ctranslate2(run: LoadedRun, out: Path, weights: str, data_report: Path | None = None) -> Path:
    """The folder of `export_ctranslate2` for a loaded run, with `weights` (float32, int8, ...)."""
    ctranslate2 = import_ctranslate2()
    model = _check_transformer(run)
    spec = transformer_spec(model, max_positions(run.config))
    spec.config.layer_norm_epsilon = float(model.encoder.blks["block0"].addnorm1.ln.eps)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = "<unk>", "<bos>", "<eos>"
    spec.config.decoder_start_token = "<bos>"
    spec.config.add_source_eos = False
    spec.register_source_vocabulary(list(run.src_vocab.idx_to_token))
    spec.register_target_vocabulary(list(run.tgt_vocab.idx_to_token))
    bits = int8_bits_for_this_cpu(weights)
    if bits == 7:
        quantize_seven_bits(spec)
    try:
        spec.validate()
        if bits == 7:
            spec.optimize(quantization=None)  # aliases shared matrices; the int8 weights stay as set
        else:
            spec.optimize(quantization=weights)
        out.mkdir(parents=True, exist_ok=True)
        spec.save(str(out))
    except (ValueError, RuntimeError) as exc:
        shutil.rmtree(out, ignore_errors=True)
        raise UserError(
            f"ctranslate2 {ctranslate2.__version__} could not convert {run.checkpoint}: {exc}"
        ) from None
    paths = RunPaths(out)
    run.src_vocab.save(paths.src_vocab)
    run.tgt_vocab.save(paths.tgt_vocab)
    if data_report is not None:  # eval checks a corpus against the run's training split with it
        shutil.copyfile(data_report, paths.data_report)
    meta = {
        "format": FOLDER_FORMAT,
        "format_version": FOLDER_FORMAT_VERSION,
        "attn_mt_version": attn_mt.__version__,
        "ctranslate2_version": ctranslate2.__version__,
        "weights": weights,
        "int8_bits": bits,
        "parameters": sum(p.numel() for p in model.parameters()),
        "checkpoint": run.checkpoint.name,
        "step": run.step,
        "config": run.config.to_dict(),
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if bits == 7:
        log.warning(
            "--quantize %s: this CPU has no VNNI, where CTranslate2's 8-bit int8 products saturate "
            "and lose accuracy; the int8 weights are kept within +-%d (7 bits)",
            weights,
            SEVEN_BIT_RANGE,
        )
    if weights not in ctranslate2.get_supported_compute_types("cpu"):
        log.warning(
            "--quantize %s: ctranslate2 cannot run %s weights on this CPU (it runs %s); the folder "
            "runs where it can (float16: CUDA)",
            weights,
            weights,
            ", ".join(sorted(ctranslate2.get_supported_compute_types("cpu"))),
        )
    return out
