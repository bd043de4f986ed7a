"""One request's own engine over an opened run: the model's modules copied, its weights shared.

The lab answers requests on a pool of threads, so two panels may run the same model at once. What a
module keeps between calls (the attention weights it saw last, the forward hooks step-through decoding
adds, train or eval mode) must then belong to one request: `private_model` copies every module object
but hands the copy the very parameter and buffer tensors of the original, so a request costs no copy
of the weights and never changes the shared model.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from attn_mt.decoding.outputs import prepare_sentence
from attn_mt.decoding.translator import Translator
from attn_mt.i18n import _
from attn_mt.run.opened import LoadedRun


def private_model(model: nn.Module) -> nn.Module:
    """The model's modules copied for one request, sharing every tensor they hold with the original."""
    shared: dict[int, object] = {}
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor):  # e.g. the attention weights a module kept last
                shared[id(value)] = value
        for tensor in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
            shared[id(tensor)] = tensor
    private = copy.deepcopy(model, memo=shared)
    return private.eval()


def request_engine(run: LoadedRun) -> Translator:
    """A Translator over a private copy of the run's model (see the module docstring)."""
    return Translator(private_model(run.model), run.src_vocab, run.tgt_vocab, run.config, run.device)


def checkpoint_text(name: str, run: LoadedRun) -> str:
    """Which weights a panel ran: the run's name and the checkpoint the lab opened, with its step."""
    return _("run {name}: {checkpoint}, step {step} (the checkpoint the lab opened)").format(
        name=name, checkpoint=run.checkpoint.name, step=run.step
    )


def unknown_words(run: LoadedRun, sentence: str, target: bool = False) -> list[str]:
    """A note naming the words of `sentence` the run's source (or target) vocabulary lacks, which the
    model reads as <unk>; no note when it knows them all."""
    vocab = run.tgt_vocab if target else run.src_vocab
    missing = [w for w in prepare_sentence(run.config, vocab, sentence) if w not in vocab]
    if not missing:
        return []
    words = ", ".join(repr(w) for w in dict.fromkeys(missing))
    if target:
        note = _("Not in the run's French vocabulary, so the model reads each as <unk>: {words}.")
    else:
        note = _("Not in the run's English vocabulary, so the model reads each as <unk>: {words}.")
    return [note.format(words=words)]
