"""Split mode: a deterministic train / valid / test split grouped by English sentence.

Tatoeba often gives one English sentence several French translations. All pairs of one English
sentence go to the same split, so no English sentence is both trained on and tested; valid and
test keep every French translation as a reference.

Shapes: N pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attn_mt.errors import UserError

SEED_MODULUS = 1 << 64  # numpy seeds must be non-negative; negative seeds wrap around


@dataclass
class EvalExample:
    """One held-out English sentence with all its French references (preprocessed text)."""

    src: str
    refs: list[str]


@dataclass
class Split:
    """Pair indices of the training split with their source-sentence groups, and grouped held-out examples."""

    train: list[int]
    valid: list[EvalExample]
    test: list[EvalExample]
    train_groups: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32), compare=False)  # (train,)


def grouped_split(
    src_keys: Sequence[str], tgt_texts: Sequence[str], valid_size: int, test_size: int, seed: int
) -> Split:
    """Shuffle the distinct English sentences with `seed`: first valid, then test, the rest train.

    `src_keys` is the preprocessed English of each pair (the grouping key) and `tgt_texts` its
    French. `valid_size` and `test_size` count English sentences. Pairs keep file order inside each
    split; held-out references keep file order and drop exact duplicates. Groups are numbered in
    order of first appearance.
    """
    group_of: dict[str, int] = {}
    group_ids = np.fromiter(
        (group_of.setdefault(key, len(group_of)) for key in src_keys), dtype=np.int64, count=len(src_keys)
    )  # (N,)
    num_groups = len(group_of)
    del group_of
    held_out = valid_size + test_size
    if held_out >= num_groups:
        raise UserError(
            f"data.valid_size + data.test_size = {held_out} leaves no training data: the corpus has only "
            f"{num_groups} distinct English sentences"
        )
    shuffled = np.random.default_rng(seed % SEED_MODULUS).permutation(num_groups)
    in_train = np.ones(num_groups, dtype=bool)
    in_train[shuffled[:held_out]] = False
    pair_in_train = in_train[group_ids]  # (N,)
    held_pairs: dict[int, list[int]] = {}
    for index in np.flatnonzero(~pair_in_train).tolist():
        held_pairs.setdefault(int(group_ids[index]), []).append(index)

    def examples(groups: np.ndarray) -> list[EvalExample]:
        """Held-out examples of these groups, in file order."""
        out = []
        for group in np.sort(groups).tolist():
            pair_indices = held_pairs[group]
            refs = list(dict.fromkeys(tgt_texts[i] for i in pair_indices))
            out.append(EvalExample(src_keys[pair_indices[0]], refs))
        return out

    train = np.flatnonzero(pair_in_train)  # (train,)
    return Split(
        train.tolist(),
        examples(shuffled[:valid_size]),
        examples(shuffled[valid_size:held_out]),
        group_ids[train].astype(np.int32),
    )
