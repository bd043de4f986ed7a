"""The Python API: `attn_mt.load("model.pt").translate(["I lost."], beam=4)`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Translation
from attn_mt.run.open import open_model
from attn_mt.run.opened import LoadedRun

if TYPE_CHECKING:
    from attn_mt.decoding.attention import SentenceAttention  # torch: not needed to open a CTranslate2 folder


class TranslationModel:
    """A loaded model that turns raw sentences into translations (see `load`)."""

    def __init__(self, run: LoadedRun):
        self.run = run
        self.config = run.config
        self.device = run.device
        self.translator = translator_for(run)

    def translate_full(
        self, sentences: list[str], beam: int | None = None, nbest: int = 1
    ) -> list[Translation]:
        """Every sentence's n-best outputs, hypotheses (token ids, scores) and input warnings."""
        if isinstance(sentences, str):
            raise TypeError("translate takes a list of sentences, e.g. ['I lost.']")
        return self.translator.translate(list(sentences), beam_size=beam, nbest=nbest)

    def translate(self, sentences: list[str], beam: int | None = None) -> list[str]:
        """One translation per sentence; `beam` defaults to the model's decode.beam_size (1 = greedy)."""
        return [result.text for result in self.translate_full(sentences, beam)]

    def attention(self, translation: Translation, words: bool = False) -> SentenceAttention:
        """Every attention map of a translated sentence's best output; shows as heatmaps in Jupyter.

        `words` merges subword pieces into words (book and word-level runs already are).
        """
        return self.translator.attention(translation, words)


def load(
    path: str | Path, device: str = "cpu", quantize: str | None = None, checkpoint: str = "best"
) -> TranslationModel:
    """An export file or CTranslate2 folder (`attn-mt export`) or a run directory, ready to translate.

    `device`: auto, cpu, cuda, cuda:N or mps; `quantize="int8"`: int8 linear layers (CPU only).
    """
    return TranslationModel(open_model(Path(path), checkpoint, device, quantize))
