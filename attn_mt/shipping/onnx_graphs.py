"""ONNX export of both models: the encoder and the one-step decoder as two graphs, and greedy search
over them with onnxruntime.

Shapes: B batch, S source steps, H hidden, L layers, h heads, d head size, t target steps so far,
V vocabulary.
Every export holds the same two graphs, joined by tensor names (model.json lists the step constants
as decoder_step_constants and the state as decoder_step_state):
    encoder.onnx       src (B, S) int64, src_lens (B,) int64 -> the step constants, then the first state
    decoder_step.onnx  tokens (B,) int64, src_lens (B,), the step constants, the state
                       -> logits (B, V), then the new state, each tensor named new_<name>
The step constants are encoder outputs every step reads unchanged; the state is what one step hands
to the next. Per model:
    transformer   constants cross_keys, cross_values (L, B, h, S, d): each layer's encoder-decoder keys/values
                  state past_keys, past_values (L, B, h, t, d): the self-attention caches, t = 0 at first
    gru_bahdanau  constants memory (B, S, H): the encoder outputs (the values); keys (B, S, H): W_k memory
                  state hidden (L, B, H): the decoder GRU's hidden state, the encoder's final one at first
The graphs come from torch's TorchScript-based exporter (`torch.onnx.export(..., dynamo=False)`),
which traces the models' own `encode`, `init_state` and `step`, so they compute what search computes.
The packed GRU encoder's pack_padded_sequence becomes the ONNX GRU's `sequence_lens`, so its final
hidden state is the one at each sentence's last real token, as in torch; the book's unpacked encoder
reads the padding in both, and its graph has no src_lens input. `OnnxModel.greedy` runs greedy
search over the two graphs of either model with onnxruntime.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from attn_mt.models.attention import AttentionMask
from attn_mt.models.bahdanau import GRUBahdanau
from attn_mt.models.base import EncoderDecoder
from attn_mt.models.transformer import Transformer
from attn_mt.run.opened import LoadedRun
from attn_mt.shipping.switches import refuse_switches

if TYPE_CHECKING:
    import onnxruntime

OPSET = 17
LONGEST_OUTPUT = 1024  # positional table rows prepared before tracing (outputs are far shorter)
BATCH = {0: "batch"}  # dynamic axes of a (B, ...) tensor
SOURCE = {0: "batch", 1: "src_steps"}  # ... of a (B, S, ...) tensor


def stack_pairs(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """L x (keys, values), each (B, h, n, d) -> keys and values, each (L, B, h, n, d)."""
    return torch.stack([k for k, _ in pairs]), torch.stack([v for _, v in pairs])


class ModelGraph(nn.Module):
    """A module for the exporter to trace: its forward calls methods of the model it holds."""

    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model


class TransformerEncoderGraph(ModelGraph):
    """src, src_lens -> every layer's cross-attention keys and values and the empty caches, stacked."""

    model: Transformer

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, S), (B,) -> cross keys and values (L, B, h, S, d), past keys and values (L, B, h, 0, d)."""
        state = self.model.init_state(self.model.encode(src, src_lens))
        return (*stack_pairs(state["cross"]), *stack_pairs(state["past"]))


class TransformerStepGraph(ModelGraph):
    """One Transformer decoder step over stacked caches (see the module docstring)."""

    model: Transformer

    def forward(
        self,
        tokens: torch.Tensor,
        src_lens: torch.Tensor,
        cross_keys: torch.Tensor,
        cross_values: torch.Tensor,
        past_keys: torch.Tensor,
        past_values: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """tokens (B,) and caches -> logits (B, V) and the caches grown by one step, (L, B, h, t + 1, d)."""
        steps = cross_keys.shape[3]
        src_mask = AttentionMask.from_valid_lens(src_lens, 1, steps).with_heads()  # (B, 1, 1, S)
        state = {
            "src_mask": src_mask,
            "cross": list(zip(cross_keys.unbind(0), cross_values.unbind(0), strict=True)),
            "past": list(zip(past_keys.unbind(0), past_values.unbind(0), strict=True)),
        }
        logits, state, _ = self.model.step(tokens, state)
        return (logits, *stack_pairs(state["past"]))


class GRUBahdanauEncoderGraph(ModelGraph):
    """src, src_lens -> the encoder outputs, their key projection and the encoder's final hidden state."""

    model: GRUBahdanau

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, S), (B,) -> memory (B, S, H), keys (B, S, H), hidden (L, B, H)."""
        state = self.model.init_state(self.model.encode(src, src_lens))
        return state["memory"], state["keys"], state["hidden"]


class GRUBahdanauStepGraph(ModelGraph):
    """One Bahdanau decoder step (see the module docstring)."""

    model: GRUBahdanau

    def forward(
        self,
        tokens: torch.Tensor,
        src_lens: torch.Tensor,
        memory: torch.Tensor,
        keys: torch.Tensor,
        hidden: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B,), src_lens (B,), memory, keys (B, S, H), hidden (L, B, H) -> logits (B, V), hidden."""
        src_mask = AttentionMask.from_valid_lens(src_lens, 1, memory.shape[1])  # (B, 1, S)
        state = {"memory": memory, "keys": keys, "src_mask": src_mask, "hidden": hidden}
        logits, state, _ = self.model.step(tokens, state)
        return logits, state["hidden"]  # (B, V), (L, B, H)


@dataclass
class Graphs:
    """A model's two modules to trace and the names and dynamic axes that join them."""

    encoder: nn.Module  # src, src_lens -> *constants, *state
    step: nn.Module  # tokens, src_lens, *constants, *state -> logits, *new state
    constants: list[str]  # encoder outputs fed unchanged to every step
    state: list[str]  # tensors a step reads and returns updated, as new_<name>
    axes: dict[str, dict[int, str]]  # dynamic axes of each constant, state and new state tensor


def transformer_graphs(model: Transformer) -> Graphs:
    """The Transformer's graphs: cross-attention keys/values are constant, the self-attention caches grow."""
    for coder in (model.encoder, model.decoder):
        coder.pos_encoding(torch.zeros(1, LONGEST_OUTPUT, coder.num_hiddens))  # grows the table once
    cross = {1: "batch", 3: "src_steps"}
    past, new_past = {1: "batch", 3: "steps"}, {1: "batch", 3: "new_steps"}
    return Graphs(
        TransformerEncoderGraph(model),
        TransformerStepGraph(model),
        constants=["cross_keys", "cross_values"],
        state=["past_keys", "past_values"],
        axes={
            "cross_keys": cross,
            "cross_values": cross,
            "past_keys": past,
            "past_values": past,
            "new_past_keys": new_past,
            "new_past_values": new_past,
        },
    )


def gru_bahdanau_graphs(model: GRUBahdanau) -> Graphs:
    """The GRU + Bahdanau model's graphs: memory and keys are constant, the decoder's hidden state changes."""
    hidden = {1: "batch"}
    return Graphs(
        GRUBahdanauEncoderGraph(model),
        GRUBahdanauStepGraph(model),
        constants=["memory", "keys"],
        state=["hidden"],
        axes={"memory": SOURCE, "keys": SOURCE, "hidden": hidden, "new_hidden": hidden},
    )


GRAPH_BUILDERS: dict[str, Callable[..., Graphs]] = {
    "gru_bahdanau": gru_bahdanau_graphs,
    "transformer": transformer_graphs,
}


def export_graph(
    module: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    path: Path,
    names: tuple[list[str], list[str]],
    axes: dict[str, dict[int, str]],
) -> None:
    """Trace `module` on `inputs` into the ONNX file `path`; `names` are its input and output names."""
    input_names, output_names = names
    torch.onnx.export(
        module,
        inputs,
        str(path),
        dynamo=False,
        opset_version=OPSET,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes={name: axes[name] for name in (*input_names, *output_names)},
    )


def write_onnx(run: LoadedRun, out: Path) -> Path:
    """Write `run` as encoder.onnx, decoder_step.onnx, the vocabularies and model.json in the folder `out`."""
    refuse_switches(run.config.model, "--format onnx")
    out.mkdir(parents=True, exist_ok=True)
    graphs = GRAPH_BUILDERS[run.config.model.type](run.model)
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 1]])  # (2, 4): an example batch to trace
    src_lens = torch.tensor([4, 3])
    tokens = torch.tensor([2, 2])
    passed = [*graphs.constants, *graphs.state]
    axes = {"src": SOURCE, "src_lens": BATCH, "tokens": BATCH, "logits": BATCH, **graphs.axes}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python ints taken from shapes
        first = graphs.encoder(src, src_lens)
        constants = first[: len(graphs.constants)]
        state = graphs.step(tokens, src_lens, *first)[1:]  # traced after one step, so no axis is empty
        export_graph(
            graphs.encoder, (src, src_lens), out / "encoder.onnx", (["src", "src_lens"], passed), axes
        )
        export_graph(
            graphs.step,
            (tokens, src_lens, *constants, *state),
            out / "decoder_step.onnx",
            (["tokens", "src_lens", *passed], ["logits", *(f"new_{name}" for name in graphs.state)]),
            axes,
        )
    run.src_vocab.save(out / "src_vocab.json")
    run.tgt_vocab.save(out / "tgt_vocab.json")
    meta = {
        "config": run.config.to_dict(),
        "step": run.step,
        "checkpoint": run.checkpoint.name,
        "decoder_step_constants": graphs.constants,
        "decoder_step_state": graphs.state,
    }
    (out / "model.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return out


def graph_inputs(
    session: onnxruntime.InferenceSession, values: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The entries of `values` the session's graph takes (the unpacked GRU encoder's takes no src_lens)."""
    return {graph_input.name: values[graph_input.name] for graph_input in session.get_inputs()}


class OnnxModel:
    """The two graphs of an exported folder in onnxruntime sessions (CPU)."""

    def __init__(self, folder: Path, threads: int = 0):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads  # 0: onnxruntime's default
        self.encoder = onnxruntime.InferenceSession(
            str(folder / "encoder.onnx"), options, ["CPUExecutionProvider"]
        )
        self.step = onnxruntime.InferenceSession(
            str(folder / "decoder_step.onnx"), options, ["CPUExecutionProvider"]
        )
        self.meta = json.loads((folder / "model.json").read_text(encoding="utf-8"))

    def greedy(
        self, src: np.ndarray, src_lens: np.ndarray, bos_id: int, eos_id: int, max_lens: np.ndarray
    ) -> list[list[int]]:
        """Greedy search: src (B, S) int64, src_lens (B,) -> output tokens per sentence (no <eos>).

        The same rule as `greedy_search`: at most `max_lens[i]` tokens incl. <eos>, <eos> forced at
        the last one.
        """
        state_names = self.meta["decoder_step_state"]
        passed = [*self.meta["decoder_step_constants"], *state_names]
        encoded = self.encoder.run(passed, graph_inputs(self.encoder, {"src": src, "src_lens": src_lens}))
        values = {"src_lens": src_lens, **dict(zip(passed, encoded, strict=True))}
        new_state = [f"new_{name}" for name in state_names]
        batch = src.shape[0]
        tokens = np.full((batch,), bos_id, dtype=np.int64)
        outputs: list[list[int]] = [[] for _ in range(batch)]
        done = np.zeros(batch, dtype=bool)
        for t in range(int(max_lens.max())):
            inputs = graph_inputs(self.step, {**values, "tokens": tokens})
            logits, *state = self.step.run(["logits", *new_state], inputs)  # (B, V), then the new state
            values.update(zip(state_names, state, strict=True))
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
