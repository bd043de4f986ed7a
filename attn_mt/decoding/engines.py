"""Which engine translates a loaded run: torch's `Translator`, or CTranslate2 over an exported folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attn_mt.config import Config
from attn_mt.decoding.ctranslate2_engine import Ctranslate2Translator
from attn_mt.run.ctranslate2_folder import Ctranslate2Model, import_ctranslate2
from attn_mt.run.run_dir import LoadedRun

if TYPE_CHECKING:
    import torch

    from attn_mt.decoding.translator import Translator


def translator_for(
    run: LoadedRun, cfg: Config, device: torch.device | str = "cpu"
) -> Translator | Ctranslate2Translator:
    """The translator of the run's model (torch, or a CTranslate2 folder's), decoding with `cfg`."""
    if isinstance(run.model, Ctranslate2Model):
        return Ctranslate2Translator(run.model, run.src_vocab, run.tgt_vocab, cfg)
    from attn_mt.decoding.translator import Translator  # torch, imported only for a torch model

    return Translator(run.model, run.src_vocab, run.tgt_vocab, cfg, device)


def engine_description(run: LoadedRun) -> str:
    """Which engine runs the model and how, for scores.json, /info and the explorer page."""
    model = run.model
    if not isinstance(model, Ctranslate2Model):
        return "torch"
    ctranslate2 = import_ctranslate2()
    weights = f"{model.weights} weights" + (f" ({model.int8_bits} bits)" if model.int8_bits else "")
    return (
        f"ctranslate2 {ctranslate2.__version__} on {model.device}, {weights} computed in "
        f"{model.compute_type}, {model.workers} worker(s) x {model.threads_per_worker} thread(s)"
    )


def parameter_count(run: LoadedRun) -> int:
    """How many parameters the run's model has."""
    if isinstance(run.model, Ctranslate2Model):
        return run.model.num_parameters
    return sum(p.numel() for p in run.model.parameters())
