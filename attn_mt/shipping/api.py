"""The Python API: `attn_mt.load("model.pt").translate(["I lost."], beam=4)`.

`translate` and `score` split each text into sentences as `attn-mt translate` and `attn-mt score` do
(`split=False`: each text whole), and every setting has the bounds of attn_mt/limits.py, as on the
command line and in `serve`. `translate(texts, prefix=["Je"])` forces each output to start with its
prefix text; `translate_full(sentences, sampling=Sampling(samples=3, temperature=0.8, seed=1))` draws
outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.lines import translate_lines
from attn_mt.decoding.outputs import Sampling, Translation
from attn_mt.decoding.scoring import Scored, score_lines
from attn_mt.decoding.settings import DecodeSettings
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
        """Every sentence's n-best outputs (or samples), hypotheses (token ids, scores) and input warnings;
        each entry is taken as one sentence (unsplit).

        `prefix[i]`: the text sentence i's outputs start with ('' for none); `sampling`: draw the outputs.
        """
        if isinstance(prefix, str):
            raise TypeError("prefix takes one text per sentence, e.g. ['Je']")
        settings = DecodeSettings.resolve(self.config.decode, beam, nbest, sampling=sampling)
        return self.translator.translate(as_list(sentences), prefix=prefix, settings=settings)

    def translate(
        self,
        sentences: list[str],
        beam: int | None = None,
        split: bool = True,
        prefix: list[str] | None = None,
    ) -> list[str]:
        """One translation per text, each translated sentence by sentence and joined with its own spacing
        (`split=False`, or a text with a prefix: as one sentence); `beam` defaults to the model's
        decode.beam_size."""
        if isinstance(prefix, str):
            raise TypeError("prefix takes one text per sentence, e.g. ['Je']")
        texts = as_list(sentences)
        settings = DecodeSettings.resolve(self.config.decode, beam)
        lines = translate_lines(self.translator, texts, split, settings, prefix=prefix)
        return [line.text for line in lines]

    def score(
        self,
        sources: list[str],
        targets: list[str],
        length_penalty: float | None = None,
        split: bool = True,
        alignments: bool = False,
    ) -> list[Scored]:
        """How probable the model finds each target as a translation of its source (what `attn-mt score`
        writes), sentence by sentence and added up unless `split=False`; `alignments=True` fills each
        result's `alignment` (what `score --alignments` writes)."""
        alpha = DecodeSettings.resolve(self.config.decode, length_penalty=length_penalty).length_penalty
        return score_lines(
            self.translator, as_list(sources), as_list(targets), split, alpha, alignments=alignments
        )

    def attention(self, translation: Translation, words: bool = False) -> SentenceAttention:
        """Every attention map of a translated sentence's best output; shows as heatmaps in Jupyter.

        `words` merges subword pieces into words (book and word-level runs already are).
        """
        return self.translator.attention(translation, words)


def as_list(texts: list[str]) -> list[str]:
    """The texts as a list; a single string is refused (it would be taken letter by letter)."""
    if isinstance(texts, str):
        raise TypeError("give a list of texts, e.g. ['I lost.']")
    return list(texts)


def load(
    path: str | Path, device: str = "cpu", quantize: str | None = None, checkpoint: str = "best"
) -> TranslationModel:
    """An export file or CTranslate2 folder (`attn-mt export`) or a run directory, ready to translate.

    `device`: auto, cpu, cuda, cuda:N or mps; `quantize="int8"`: int8 linear layers (CPU only).
    """
    return TranslationModel(open_model(Path(path), checkpoint, device, quantize))
