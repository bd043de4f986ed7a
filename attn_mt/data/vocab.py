"""Token <-> id mapping as the book's `Vocab`: <unk> = 0, reserved tokens, then tokens by frequency.

d2l.ai section 9.2 (Converting Raw Text into Sequence Data) and 10.5. Saved as JSON in the run
directory so translate/eval rebuild exactly the ids the model was trained with.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from attn_mt.data.preprocess import tokenize
from attn_mt.errors import UserError

UNK = "<unk>"
PAD = "<pad>"
BOS = "<bos>"
EOS = "<eos>"
RESERVED = (PAD, BOS, EOS)
FORMAT = "attn-mt-vocab"
FORMAT_VERSION = 1


class Vocab:
    """Ids in the book's order: <unk>, the reserved tokens, then tokens by descending frequency.

    Ties in frequency keep first-occurrence order (a stable sort, as the book's `sorted`).
    """

    def __init__(self, idx_to_token: Sequence[str]):
        tokens = list(idx_to_token)
        if not tokens or tokens[0] != UNK:
            raise ValueError(f"a vocabulary must start with {UNK}, got {tokens[:1]}")
        self.idx_to_token: list[str] = tokens
        self.token_to_idx: dict[str, int] = {token: i for i, token in enumerate(tokens)}
        if len(self.token_to_idx) != len(tokens):
            duplicates = sorted(t for t, n in collections.Counter(tokens).items() if n > 1)
            raise ValueError(f"duplicate tokens in vocabulary: {duplicates[:5]}")

    @classmethod
    def build(
        cls, token_lists: Iterable[Sequence[str]], min_freq: int, reserved: Sequence[str] = RESERVED
    ) -> Vocab:
        """Count tokens and keep those seen at least `min_freq` times, most frequent first."""
        counts = collections.Counter(token for tokens in token_lists for token in tokens)
        ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
        head = [UNK, *(t for t in reserved if t != UNK)]
        specials = set(head)
        return cls(head + [token for token, n in ranked if n >= min_freq and token not in specials])

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, token: str) -> int:
        return self.token_to_idx.get(token, 0)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_idx

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.idx_to_token == other.idx_to_token

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.idx_to_token[:6]}...)"

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Ids of `tokens`; unknown tokens become the <unk> id."""
        lookup = self.token_to_idx.get
        return [lookup(token, 0) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of `ids` (a list or a 1-d tensor)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return [self.idx_to_token[i] for i in ids]

    # The tokenizer interface, shared with `SubwordVocab`: prepared text <-> ids, labels for pictures.
    def tokenize(self, text: str) -> list[str]:
        """The tokens of preprocessed text: the book's split on spaces."""
        return tokenize(text)

    def encode_text(self, text: str) -> list[int]:
        """Ids of preprocessed text (without <eos>)."""
        return self.encode(tokenize(text))

    def encode_texts(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Ids of many preprocessed texts (`threads` is for sentencepiece's encoder; words need none)."""
        return [self.encode_text(t) for t in texts]

    def detokenize(self, ids: Iterable[int]) -> str:
        """Text of `ids`: tokens joined by spaces, as in the preprocessed corpus."""
        return " ".join(self.decode(ids))

    def labels(self, ids: Iterable[int]) -> list[str]:
        """One readable label per id (for attention pictures): the token itself."""
        return self.decode(ids)

    def word_starts(self, ids: Sequence[int]) -> list[bool]:
        """For each id, whether it starts a new word: always, a token is a word."""
        return [True] * len(ids)

    def _special(self, token: str) -> int:
        """Id of a special token that must be present."""
        if token not in self.token_to_idx:
            raise ValueError(f"vocabulary has no {token} token")
        return self.token_to_idx[token]

    @property
    def unk_id(self) -> int:
        """Id of <unk> (always 0)."""
        return self._special(UNK)

    @property
    def pad_id(self) -> int:
        """Id of <pad>."""
        return self._special(PAD)

    @property
    def bos_id(self) -> int:
        """Id of <bos>."""
        return self._special(BOS)

    @property
    def eos_id(self) -> int:
        """Id of <eos>."""
        return self._special(EOS)

    def fingerprint(self) -> str:
        """SHA-1 of the token list (two vocabularies with equal fingerprints give the same ids)."""
        return hashlib.sha1(json.dumps(self.idx_to_token, ensure_ascii=False).encode()).hexdigest()

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON."""
        payload = {"format": FORMAT, "version": FORMAT_VERSION, "idx_to_token": self.idx_to_token}
        Path(path).write_text(json.dumps(payload, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Read a vocabulary written by `save`; a missing or damaged file is a UserError naming it."""
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"vocabulary file not found: {path}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read vocabulary {path}: {exc}") from None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise UserError(f"{path} is not an attn-mt vocabulary file")
        tokens = payload.get("idx_to_token")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise UserError(f"{path}: idx_to_token must be a list of strings")
        try:
            return cls(tokens)
        except ValueError as exc:
            raise UserError(f"{path}: {exc}") from None
