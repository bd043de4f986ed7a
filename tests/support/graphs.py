"""What an autograd graph is made of, for tests that check which path (kernel or book) ran."""

from __future__ import annotations

import torch


def graph_names(tensor: torch.Tensor) -> set[str]:
    """Names of every autograd node behind `tensor`."""
    names, todo, seen = set(), [tensor.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return names
