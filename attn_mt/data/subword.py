"""Subword vocabularies learned with the `sentencepiece` library (Kudo & Richardson 2018).

`SubwordVocab` is a `Vocab` whose tokens are sentencepiece pieces, so batching, decoding and
evaluation treat it exactly like the book's word vocabulary; what differs is how text becomes
tokens and tokens become text again (`tokenize`, `encode_text`, `detokenize`, `labels`).

The model is learned from the training split only, with:
  * byte fallback: a character the model never saw becomes its UTF-8 bytes (`<0xE6>` ...), never <unk>;
  * identity normalisation: case, accents, U+202F before French punctuation and every other
    character are kept as they are, so detokenising gives back the text exactly;
  * the book's special ids: <unk> = 0, <pad> = 1, <bos> = 2, <eos> = 3 (as `Vocab.build` gives them).
The learned `.model` file is saved beside the JSON vocabulary in the run directory (and, with
the encoded training split, in the prepared-corpus store: `prepare.py`).

A big training split is learned from a seeded random sample (`data.subword_sample`): the sample
is drawn here, not with sentencepiece's own `input_sentence_size` / `shuffle_input_sentence`,
whose draw differs from run to run even after `set_random_generator_seed` (sentencepiece 0.2.3).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from attn_mt.data.splits import SEED_MODULUS
from attn_mt.data.vocab import BOS, EOS, PAD, UNK, Vocab
from attn_mt.errors import UserError

WORD_START = "\u2581"  # sentencepiece's "▁": the piece begins a new word
CONTINUATION = "\u00b7"  # labels mark a piece that continues a word with a leading "·"
VISIBLE_SPACE = "\u2423"  # the label of a lone "▁" piece
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")
SPECIAL_IDS = {UNK: 0, PAD: 1, BOS: 2, EOS: 3}
MODEL_TYPES = ("unigram", "bpe")
ASCII_SPACES = re.compile(r" {2,}")
LEARN_THREADS = 2  # fixed: the unigram trainer's pieces change with its thread count
# C0 and C1 control characters (tab and line breaks included), DEL and the Unicode line and paragraph
# separators: what an output's byte pieces may spell but no translation holds -> U+FFFD
NOT_TEXT = {c: "\ufffd" for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]}
SAMPLE_STREAM = 1  # keeps the subword sample's random stream apart from the split's (same seed)


def prepare_text(text: str, normalize_apostrophes: bool = False) -> str:
    """Raw text as the subword models see it: NFC, runs of spaces made one, no outer spaces; case kept.

    With `normalize_apostrophes` the typographic ’ and ‘ become ', as in the book pipeline.
    """
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
        if normalize_apostrophes:
            text = text.replace("\u2019", "'").replace("\u2018", "'")
    return single_spaced(text)


def single_spaced(text: str) -> str:
    """`text` with runs of spaces made one and no outer spaces: the spacing rule of `prepare_text` on the
    way in and of every output's text on the way out (`SubwordVocab.detokenize`)."""
    if "  " in text:
        text = ASCII_SPACES.sub(" ", text)
    return text.strip(" ")


class SubwordVocab(Vocab):
    """A `Vocab` over sentencepiece pieces; ids are the sentencepiece model's own."""

    def __init__(self, model_proto: bytes):
        self.processor = spm.SentencePieceProcessor(model_proto=model_proto)
        self.model_proto = model_proto
        pieces = [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]
        super().__init__(pieces)
        for token, expected in SPECIAL_IDS.items():
            if self.token_to_idx.get(token) != expected:
                raise ValueError(
                    f"sentencepiece model has {token} at id {self.token_to_idx.get(token)}, "
                    f"expected {expected}"
                )
        self._hidden = set(SPECIAL_IDS.values())

    def tokenize(self, text: str) -> list[str]:
        """The pieces of prepared text."""
        return self.processor.encode(text, out_type=str)

    def encode_text(self, text: str) -> list[int]:
        """Ids of prepared text (without <eos>)."""
        return self.processor.encode(text)

    def encode_texts(self, texts: Sequence[str], threads: int = 2) -> list[list[int]]:
        """Ids of many prepared texts at once (sentencepiece's batch encoder on `threads` threads)."""
        return self.processor.encode(list(texts), num_threads=threads)

    def __reduce__(self) -> tuple[type, tuple[bytes]]:
        """Pickle as the model bytes (the sentencepiece processor itself cannot be pickled)."""
        return SubwordVocab, (self.model_proto,)

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of an output: pieces joined, "▁" back to spaces, bytes back to characters, then
        spaced as text is on the way in (`single_spaced`).

        This is the one place an output's ids become its text, for every engine and surface. A lone "▁"
        piece (a space on its own) at the start or end adds no space, and one after a word adds no
        second space; the ids keep it, so labels and alignments still count every piece. Special ids
        (<unk>, <pad>, <bos>, <eos>) are dropped, so no output ever shows them. A control character or
        line break that byte pieces spell (a sampled output can: the 256 byte pieces cover every byte)
        becomes U+FFFD, so one output stays one line of text.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        text = self.processor.decode([i for i in ids if i not in self._hidden])
        return single_spaced(text.translate(NOT_TEXT))

    def labels(self, ids: Iterable[int]) -> list[str]:
        """Readable piece labels: a word-initial piece without its "▁", a continuation piece as "·piece".

        A lone "▁" piece (a space before a piece that has no word-initial form) shows as "␣", and the
        piece after it as a word start.
        """
        out: list[str] = []
        for piece in self.decode(ids):
            after_space = bool(out) and out[-1] == VISIBLE_SPACE
            if piece in SPECIAL_IDS or BYTE_PIECE.fullmatch(piece):
                out.append(piece)
            elif piece == WORD_START:
                out.append(VISIBLE_SPACE)
            elif piece.startswith(WORD_START):
                out.append(piece[1:])
            else:
                out.append(piece if after_space or not out else CONTINUATION + piece)
        return out

    def word_starts(self, ids: Sequence[int]) -> list[bool]:
        """For each id, whether its piece starts a new word (special tokens count as their own word).

        A lone "▁" is a space, never a word of its own: the lone "▁"s right before a word begin that
        word (the piece after them starts it, with or without its own "▁"), and those with no word
        after them (before <eos>, or at the end) end the word before. So the words are the words of the
        output's text (`detokenize`), and word indices (alignments) count them.
        """
        pieces = self.decode(ids)
        starts = [False] * len(pieces)
        spaces = 0  # lone "▁"s since the last other piece
        for k, (i, piece) in enumerate(zip(ids, pieces, strict=True)):
            if i in self._hidden:
                starts[k], spaces = True, 0
            elif piece == WORD_START:
                spaces += 1
            else:
                if spaces or piece.startswith(WORD_START) or k == 0:
                    starts[k - spaces] = True
                spaces = 0
        if starts:
            starts[0] = True
        return starts

    def save(self, path: str | Path) -> None:
        """Write the JSON piece list at `path` and the sentencepiece model beside it (`.model`)."""
        super().save(path)
        model_path(path).write_bytes(self.model_proto)

    @classmethod
    def load(cls, path: str | Path) -> SubwordVocab:
        """Read the `.model` file beside the JSON vocabulary `path`; a missing or bad one is a UserError."""
        where = model_path(path)
        try:
            proto = where.read_bytes()
        except FileNotFoundError:
            raise UserError(f"sentencepiece model not found: {where}") from None
        except OSError as exc:
            raise UserError(f"cannot read sentencepiece model {where}: {exc.strerror or exc}") from None
        try:
            return cls(proto)
        except (RuntimeError, ValueError) as exc:
            raise UserError(f"{where} is not a usable sentencepiece model: {exc}") from None

    def fingerprint(self) -> str:
        """SHA-1 of the model bytes (two runs with equal fingerprints share their pieces and ids)."""
        return hashlib.sha1(self.model_proto).hexdigest()


def model_path(vocab_path: str | Path) -> Path:
    """The `.model` file that sits beside a JSON vocabulary (`src_vocab.json` -> `src_vocab.model`)."""
    return Path(vocab_path).with_suffix(".model")


def sample_sentences(texts: Sequence[str], size: int, seed: int) -> Sequence[str]:
    """`size` of `texts` drawn with `seed` without replacement, in their order; all if size is 0 or more."""
    if not size or size >= len(texts):
        return texts
    rng = np.random.default_rng([seed % SEED_MODULUS, SAMPLE_STREAM])
    chosen = np.sort(rng.choice(len(texts), size, replace=False))  # (size,)
    return [texts[i] for i in chosen.tolist()]


def learn_subwords(
    texts: Sequence[str], model_type: str, vocab_size: int, what: str, **trainer_options: Any
) -> SubwordVocab:
    """Learn a sentencepiece model of `vocab_size` pieces from `texts` (training sentences, prepared).

    `trainer_options` are passed on to sentencepiece's trainer (the tests use them to vary a model).
    Nothing is written to disk: the sentences go in through an iterator and the model comes back
    as bytes. A vocabulary size the text cannot fill is a UserError naming the largest possible.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model type {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    model = _ModelBytes()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            model_type=model_type,
            vocab_size=vocab_size,
            byte_fallback=True,
            normalization_rule_name="identity",
            character_coverage=0.9995,
            unk_id=SPECIAL_IDS[UNK],
            pad_id=SPECIAL_IDS[PAD],
            bos_id=SPECIAL_IDS[BOS],
            eos_id=SPECIAL_IDS[EOS],
            unk_piece=UNK,
            pad_piece=PAD,
            bos_piece=BOS,
            eos_piece=EOS,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=LEARN_THREADS,
            minloglevel=2,
            **trainer_options,
        )
    except RuntimeError as exc:
        message = str(exc)
        too_high = re.search(r"Vocabulary size too high .*value <= (\d+)", message)
        too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
        if too_high:
            raise UserError(
                f"data.vocab_size = {vocab_size} is larger than the {what} training text allows "
                f"(at most {too_high.group(1)}); lower data.vocab_size"
            ) from None
        if too_small:
            raise UserError(
                f"data.vocab_size = {vocab_size} is smaller than the {what} training text needs "
                f"(its characters, the byte pieces and the specials: {too_small.group(1)}); "
                "raise data.vocab_size"
            ) from None
        reason = message.splitlines()[-1]
        raise UserError(f"sentencepiece could not learn the {what} model: {reason}") from None
    return SubwordVocab(model.data)


class _ModelBytes:
    """The `model_writer` sentencepiece writes the learned model into."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        """Keep the model bytes."""
        self.data += data
