"""One flat tensor for the optimiser on the CPU, in place of one tensor per parameter.

Shapes: N trainable numbers in all.
A book-size model has ~60 small tensors, and on the CPU the optimiser and the gradient clipping
cost about one call per tensor (torch's multi-tensor kernels loop over them there). With the
parameters viewing one flat tensor, each is one call.
"""

from __future__ import annotations

import torch
from torch import nn


class FlatParameters:
    """Every trainable parameter's values as a slice of one flat tensor, with one flat gradient.

    The parameters stay ordinary leaves, so autograd, state_dict and load_state_dict see no
    difference: autograd writes each parameter's gradient as usual, and `gather_grads` copies them
    all into the flat gradient with one concatenation before clipping and the update. Optimiser
    state is converted to and from the per-parameter layout, so checkpoints are the same with or
    without flattening.
    """

    def __init__(self, model: nn.Module):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.sizes = [p.numel() for p in self.params]
        self.flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.params]))  # (N,)
        self.flat.grad = torch.zeros_like(self.flat)  # (N,)
        for param, values in zip(self.params, self.flat.data.split(self.sizes), strict=True):
            param.data = values.view_as(param)

    @property
    def tensors(self) -> list[torch.Tensor]:
        """What the optimiser updates and the gradient clipping measures: the flat tensor."""
        return [self.flat]

    def zero_grad(self) -> None:
        """Forget the parameters' gradients, so the next backward writes them afresh."""
        for param in self.params:
            param.grad = None

    def gather_grads(self) -> None:
        """Copy every parameter's gradient into the flat gradient in one call (zeros where there is none)."""
        grads = [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in self.params]
        torch.cat(grads, out=self.flat.grad)

    def to_checkpoint(self, state: dict) -> dict:
        """The flat optimiser's state_dict in the layout of an optimiser over the separate parameters."""
        flat_state = state["state"].get(0, {})
        count = len(self.params)
        split = {key: self._split(value) for key, value in flat_state.items()}  # key -> per-parameter list
        per_param = {i: {key: pieces[i] for key, pieces in split.items()} for i in range(count)}
        groups = [{**group, "params": list(range(count))} for group in state["param_groups"]]
        return {"state": per_param if flat_state else {}, "param_groups": groups}

    def from_checkpoint(self, state: dict) -> dict:
        """The inverse of to_checkpoint: a per-parameter state_dict for the flat optimiser."""
        pieces = state["state"]
        flat_state = {}
        if pieces:
            for key, first in pieces[0].items():
                if torch.is_tensor(first) and first.numel() == self.sizes[0] and first.dim() > 0:
                    flat_state[key] = torch.cat([pieces[i][key].reshape(-1) for i in range(len(self.params))])
                else:
                    flat_state[key] = first
        groups = [{**group, "params": [0]} for group in state["param_groups"]]
        return {"state": {0: flat_state} if flat_state else {}, "param_groups": groups}

    def _split(self, value: object) -> list:
        """A flat state tensor as per-parameter views; a scalar (the step count) shared by all."""
        if torch.is_tensor(value) and value.dim() == 1 and value.numel() == self.flat.numel():
            return [piece.view_as(p) for piece, p in zip(value.split(self.sizes), self.params, strict=True)]
        return [value] * len(self.params)
