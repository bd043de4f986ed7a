"""ONNX export of the Transformer: the encoder and the one-step decoder as two graphs, and greedy search
over them with onnxruntime.

Shapes: B batch, S source steps, L layers, h heads, d head size, t target steps so far, V vocabulary.
    encoder.onnx       src (B, S) int64, src_lens (B,) int64
                       -> cross_keys, cross_values (L, B, h, S, d): each layer's encoder-decoder keys/values
    decoder_step.onnx  tokens (B,) int64, src_lens (B,), cross_keys, cross_values,
                       past_keys, past_values (L, B, h, t, d)
                       -> logits (B, V), new_past_keys, new_past_values (L, B, h, t + 1, d)
The graphs come from torch's TorchScript-based exporter (`torch.onnx.export(..., dynamo=False)`),
which traces `Transformer.encode`, `init_state` and `step`, so they compute what search computes.
Only the Transformer is exported: the GRU + Bahdanau model is refused. `OnnxModel.greedy` runs
greedy search over the two graphs with onnxruntime.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attn_mt.errors import UserError
from attn_mt.models.attention import AttentionMask
from attn_mt.models.transformer import Transformer
from attn_mt.run.run_dir import load_run

OPSET = 17
LONGEST_OUTPUT = 1024  # positional table rows prepared before tracing (outputs are far shorter)


class EncoderGraph(nn.Module):
    """src, src_lens -> every layer's cross-attention keys and values, stacked."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S), (B,) -> cross keys and values, each (L, B, h, S, d)."""
        cross = self.model.init_state(self.model.encode(src, src_lens))["cross"]
        return torch.stack([k for k, _ in cross]), torch.stack([v for _, v in cross])


class StepGraph(nn.Module):
    """One decoder step over stacked caches (see the module docstring)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(
        self,
        tokens: torch.Tensor,
        src_lens: torch.Tensor,
        cross_keys: torch.Tensor,
        cross_values: torch.Tensor,
        past_keys: torch.Tensor,
        past_values: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """tokens (B,) and caches -> logits (B, V) and the caches grown by one step."""
        steps = cross_keys.shape[3]
        src_mask = AttentionMask.from_valid_lens(src_lens, 1, steps).with_heads()  # (B, 1, 1, S)
        state = {
            "src_mask": src_mask,
            "cross": list(zip(cross_keys.unbind(0), cross_values.unbind(0), strict=True)),
            "past": list(zip(past_keys.unbind(0), past_values.unbind(0), strict=True)),
        }
        logits, state, _ = self.model.step(tokens, state)
        keys = torch.stack([k for k, _ in state["past"]])  # (L, B, h, t + 1, d)
        values = torch.stack([v for _, v in state["past"]])
        return logits, keys, values


def export_onnx(run_dir: Path, out: Path, checkpoint: str = "best") -> Path:
    """Write encoder.onnx, decoder_step.onnx, the vocabularies and model.json into the folder `out`."""
    run = load_run(run_dir, checkpoint, "cpu")
    model = run.model
    if not isinstance(model, Transformer):
        raise UserError(f"--format onnx exports the Transformer only; this run is {run.config.model.type}")
    if out.exists() and not out.is_dir():
        raise UserError(f"--format onnx writes a folder, but {out} is a file")
    out.mkdir(parents=True, exist_ok=True)
    for coder in (model.encoder, model.decoder):
        coder.pos_encoding(torch.zeros(1, LONGEST_OUTPUT, coder.num_hiddens))  # grows the table once
    layers, heads = len(model.decoder.blks), model.num_heads
    head_size = model.decoder.num_hiddens // heads
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 1]])
    src_lens = torch.tensor([4, 3])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python ints taken from shapes
        cross_keys, cross_values = EncoderGraph(model)(src, src_lens)
        cross_axes = {1: "batch", 3: "src_steps"}
        past_axes = {1: "batch", 3: "steps"}
        torch.onnx.export(
            EncoderGraph(model), (src, src_lens), str(out / "encoder.onnx"), dynamo=False,
            opset_version=OPSET, input_names=["src", "src_lens"], output_names=["cross_keys", "cross_values"],
            dynamic_axes={"src": {0: "batch", 1: "src_steps"}, "src_lens": {0: "batch"},
                          "cross_keys": cross_axes, "cross_values": cross_axes},
        )
        past = torch.zeros(layers, 2, heads, 3, head_size)
        torch.onnx.export(
            StepGraph(model), (torch.tensor([2, 2]), src_lens, cross_keys, cross_values, past, past),
            str(out / "decoder_step.onnx"), dynamo=False, opset_version=OPSET,
            input_names=["tokens", "src_lens", "cross_keys", "cross_values", "past_keys", "past_values"],
            output_names=["logits", "new_past_keys", "new_past_values"],
            dynamic_axes={"tokens": {0: "batch"}, "src_lens": {0: "batch"},
                          "cross_keys": cross_axes, "cross_values": cross_axes,
                          "past_keys": past_axes, "past_values": past_axes,
                          "logits": {0: "batch"},
                          "new_past_keys": {1: "batch", 3: "new_steps"},
                          "new_past_values": {1: "batch", 3: "new_steps"}},
        )
    run.src_vocab.save(out / "src_vocab.json")
    run.tgt_vocab.save(out / "tgt_vocab.json")
    meta = {"config": run.config.to_dict(), "layers": layers, "heads": heads, "head_size": head_size,
            "step": run.step, "checkpoint": run.checkpoint.name}
    (out / "model.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return out


class OnnxModel:
    """The two graphs of an exported folder in onnxruntime sessions (CPU)."""

    def __init__(self, folder: Path, threads: int = 0):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads  # 0: onnxruntime's default
        self.encoder = onnxruntime.InferenceSession(str(folder / "encoder.onnx"), options,
                                                    ["CPUExecutionProvider"])
        self.step = onnxruntime.InferenceSession(str(folder / "decoder_step.onnx"), options,
                                                 ["CPUExecutionProvider"])
        self.meta = json.loads((folder / "model.json").read_text(encoding="utf-8"))

    def greedy(
        self, src: np.ndarray, src_lens: np.ndarray, bos_id: int, eos_id: int, max_lens: np.ndarray
    ) -> list[list[int]]:
        """Greedy search: src (B, S) int64, src_lens (B,) -> output tokens per sentence (no <eos>).

        The same rule as `greedy_search`: at most `max_lens[i]` tokens incl. <eos>, <eos> forced at
        the last one.
        """
        cross_keys, cross_values = self.encoder.run(None, {"src": src, "src_lens": src_lens})
        batch, meta = src.shape[0], self.meta
        past_keys = np.zeros((meta["layers"], batch, meta["heads"], 0, meta["head_size"]), dtype=np.float32)
        past_values = past_keys
        tokens = np.full((batch,), bos_id, dtype=np.int64)
        outputs: list[list[int]] = [[] for _ in range(batch)]
        done = np.zeros(batch, dtype=bool)
        for t in range(int(max_lens.max())):
            inputs = {"tokens": tokens, "src_lens": src_lens, "cross_keys": cross_keys,
                      "cross_values": cross_values, "past_keys": past_keys, "past_values": past_values}
            logits, past_keys, past_values = self.step.run(None, inputs)
            tokens = logits.argmax(axis=1).astype(np.int64)  # (B,)
            tokens[t + 1 >= max_lens] = eos_id
            for i in np.flatnonzero(~done):
                if tokens[i] == eos_id:
                    done[i] = True
                else:
                    outputs[i].append(int(tokens[i]))
            if done.all():
                break
        return outputs
