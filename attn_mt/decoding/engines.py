"""Which engine translates an opened model: torch's `Translator`, or CTranslate2 over an exported folder.

The opened model says which engine runs it (`LoadedRun.kind.engine`, run/opened.py); this is the one
place that reads it. Both engines implement decoding/engine.py's `Engine`.
"""

from __future__ import annotations

from attn_mt.config import Config
from attn_mt.decoding.engine import Engine
from attn_mt.run.opened import LoadedRun


def translator_for(run: LoadedRun, cfg: Config | None = None) -> Engine:
    """The engine of the opened model on its device, decoding with `cfg` (None: the run's own config)."""
    cfg = run.config if cfg is None else cfg
    if run.kind.engine == "ctranslate2":
        from attn_mt.decoding.ctranslate2_engine import Ctranslate2Translator

        return Ctranslate2Translator(run.model, run.src_vocab, run.tgt_vocab, cfg)
    from attn_mt.decoding.translator import Translator  # torch, imported only for a torch model

    return Translator(run.model, run.src_vocab, run.tgt_vocab, cfg, run.device)
