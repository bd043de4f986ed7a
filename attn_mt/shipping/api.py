"""The Python API: `attn_mt.load("model.pt").translate(["I lost."], beam=4)`.

`translate_full(sentences, prefix=["Je"])` forces each output to start with its prefix text;
`translate_full(sentences, sampling=Sampling(samples=3, temperature=0.8, seed=1))` draws outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Sampling, Translation
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
        self,
        sentences: list[str],
        beam: int | None = None,
        nbest: int = 1,
        prefix: list[str] | None = None,
        sampling: Sampling | None = None,
    ) -> list[Translation]:
        """Every sentence's n-best outputs (or samples), hypotheses (token ids, scores) and input warnings.

        `prefix[i]`: the text sentence i's outputs start with ('' for none); `sampling`: draw the outputs.
        """
        if isinstance(sentences, str):
            raise TypeError("translate takes a list of sentences, e.g. ['I lost.']")
        if isinstance(prefix, str):
            raise TypeError("prefix takes one text per sentence, e.g. ['Je']")
        return self.translator.translate(
            list(sentences), beam_size=beam, nbest=nbest, prefix=prefix, sampling=sampling
        )

    def translate(
        self, sentences: list[str], beam: int | None = None, prefix: list[str] | None = None
    ) -> list[str]:
        """One translation per sentence; `beam` defaults to the model's decode.beam_size (1 = greedy)."""
        return [result.text for result in self.translate_full(sentences, beam, prefix=prefix)]

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
