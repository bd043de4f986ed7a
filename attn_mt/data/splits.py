"""Split mode: a deterministic train / valid / test split grouped by English sentence.

Tatoeba often gives one English sentence several French translations. All pairs of one English
sentence go to the same split, so no English sentence is both trained on and tested; valid and
test keep every French translation as a reference.

Shapes: N pairs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attn_mt.data.trainset import SEED_MODULUS
from attn_mt.errors import UserError


@dataclass
class EvalExample:
    """One held-out English sentence with all its French references (preprocessed text)."""

    src: str
    refs: list[str]


@dataclass
class Split:
    """Pair indices of the training split, and grouped held-out examples."""

    train: list[int]
    valid: list[EvalExample]
    test: list[EvalExample]


def grouped_split(src_keys: Sequence[str], tgt_texts: Sequence[str], valid_size: int, test_size: int,
                  seed: int) -> Split:
    """Shuffle the distinct English sentences with `seed`: first valid, then test, the rest train.

    `src_keys` is the preprocessed English of each pair (the grouping key) and `tgt_texts` its
    French. `valid_size` and `test_size` count English sentences. Pairs keep file order inside each
    split; held-out references keep file order and drop exact duplicates.
    """
    group_of: dict[str, int] = {}
    members: list[list[int]] = []
    group_ids = np.empty(len(src_keys), dtype=np.int64)  # (N,)
    for index, key in enumerate(src_keys):
        group = group_of.setdefault(key, len(members))
        if group == len(members):
            members.append([])
        members[group].append(index)
        group_ids[index] = group
    held_out = valid_size + test_size
    if held_out >= len(members):
        raise UserError(
            f"data.valid_size + data.test_size = {held_out} leaves no training data: the corpus has only "
            f"{len(members)} distinct English sentences"
        )
    shuffled = np.random.default_rng(seed % SEED_MODULUS).permutation(len(members))
    valid_groups = np.sort(shuffled[:valid_size])
    test_groups = np.sort(shuffled[valid_size:held_out])
    in_train = np.ones(len(members), dtype=bool)
    in_train[shuffled[:held_out]] = False

    def examples(groups: np.ndarray) -> list[EvalExample]:
        """Held-out examples of these groups, in file order."""
        out = []
        for group in groups.tolist():
            pair_indices = members[group]
            refs = list(dict.fromkeys(tgt_texts[i] for i in pair_indices))
            out.append(EvalExample(src_keys[pair_indices[0]], refs))
        return out

    train = np.flatnonzero(in_train[group_ids]).tolist()
    return Split(train, examples(valid_groups), examples(test_groups))
