"""Import a model trained with the book's own code (d2l.ai sections 11.4 and 11.7) into attn-mt.

The book trains `EncoderDecoder(Seq2SeqEncoder, Seq2SeqAttentionDecoder)` or
`EncoderDecoder(TransformerEncoder, TransformerDecoder)`. attn-mt's modules carry the book's names
(`encoder.rnn.weight_ih_l0`, `decoder.attention.W_k.weight`, `encoder.blks.block0.attention.W_q.weight`,
`decoder.blks.block1.addnorm3.ln.bias`, ...), so every key of the book's state dict is the same key in
attn-mt; the sizes are read from the tensors' shapes. Usage:

    book = load_book_checkpoint("book.pt")     # the {'state_dict', 'src_vocab', 'tgt_vocab'} file
    logits = book.model(src, src_lens, tgt_in)  # the book's logits, in eval mode

The imported GRU model reads <pad> steps as the book's does (`pack_padded: false`). The Transformer's
logits are the book's teacher-forced (training-mode, causal) logits. The book's own `predict_seq2seq`
adds the position-0 encoding to every one-token decoder input, so its Transformer translations can
differ from attn-mt's, which give step t position t as in training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from attn_mt.config import ModelConfig
from attn_mt.data.vocab import BOS, EOS, PAD, UNK, Vocab
from attn_mt.errors import UserError
from attn_mt.models.base import EncoderDecoder
from attn_mt.models.build import build_model

BOOK_SPECIALS = (UNK, PAD, BOS, EOS)  # the book's first four ids
BOOK_NUM_HEADS = 4  # the book's Transformer; the state dict does not record it
BOOK_DROPOUT = 0.1  # the book's, used only if the imported model is trained further
BAHDANAU_KEY = "decoder.attention.W_k.weight"
TRANSFORMER_KEY = "decoder.blks.block0.attention1.W_q.weight"
SHOWN_KEYS = 5


@dataclass
class BookModel:
    """An imported book model (in eval mode) with the config that rebuilds it and its vocabularies."""

    model: EncoderDecoder
    config: ModelConfig
    src_vocab: Vocab
    tgt_vocab: Vocab


def _vocab(tokens: Sequence[str], name: str) -> Vocab:
    """A Vocab from the book's idx_to_token list, which must start with the book's special tokens."""
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        raise UserError(f"{name}: expected a list of tokens (the book's vocab.idx_to_token)")
    if tuple(tokens[: len(BOOK_SPECIALS)]) != BOOK_SPECIALS:
        raise UserError(
            f"{name}: must start with {', '.join(BOOK_SPECIALS)}, got {list(tokens[: len(BOOK_SPECIALS)])}"
        )
    try:
        return Vocab(tokens)
    except ValueError as exc:
        raise UserError(f"{name}: {exc}") from None


def _shape(state_dict: Mapping[str, torch.Tensor], key: str) -> torch.Size:
    """The shape of one tensor the import needs; a missing key is a UserError."""
    if key not in state_dict:
        raise UserError(f"the book state dict has no {key!r}")
    return state_dict[key].shape


def _count(state_dict: Mapping[str, torch.Tensor], pattern: str) -> int:
    """How many layers i have `pattern.format(i)` in the state dict."""
    layers = 0
    while pattern.format(layers) in state_dict:
        layers += 1
    return layers


def book_model_config(
    state_dict: Mapping[str, torch.Tensor], num_heads: int = BOOK_NUM_HEADS, dropout: float = BOOK_DROPOUT
) -> ModelConfig:
    """The attn-mt model config of a book state dict: the type from its keys, the sizes from its shapes."""
    if BAHDANAU_KEY in state_dict:
        return ModelConfig(
            type="gru_bahdanau",
            embed_size=_shape(state_dict, "encoder.embedding.weight")[1],
            num_hiddens=_shape(state_dict, "encoder.rnn.weight_hh_l0")[1],
            num_layers=_count(state_dict, "encoder.rnn.weight_hh_l{}"),
            dropout=dropout,
            pack_padded=False,
        )
    if TRANSFORMER_KEY in state_dict:
        num_hiddens = _shape(state_dict, "encoder.embedding.weight")[1]
        if num_heads < 1 or num_hiddens % num_heads:
            raise UserError(
                f"num_heads = {num_heads} does not divide the book model's num_hiddens = {num_hiddens}"
            )
        return ModelConfig(
            type="transformer",
            num_hiddens=num_hiddens,
            num_layers=_count(state_dict, "encoder.blks.block{}.attention.W_q.weight"),
            num_heads=num_heads,
            ffn_num_hiddens=_shape(state_dict, "encoder.blks.block0.ffn.dense1.weight")[0],
            dropout=dropout,
            pack_padded=False,
        )
    raise UserError(
        f"not a state dict of the book's EncoderDecoder: it has neither {BAHDANAU_KEY!r} (Bahdanau) "
        f"nor {TRANSFORMER_KEY!r} (Transformer)"
    )


def _listed(keys: set[str]) -> str:
    """A few of `keys`, sorted, for an error message."""
    shown = sorted(keys)[:SHOWN_KEYS]
    return ", ".join(shown) + (f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def import_book_model(
    state_dict: Mapping[str, torch.Tensor],
    src_vocab: Sequence[str],
    tgt_vocab: Sequence[str],
    *,
    num_heads: int = BOOK_NUM_HEADS,
    dropout: float = BOOK_DROPOUT,
) -> BookModel:
    """An attn-mt model giving the book model's logits, from its state dict and its two token lists."""
    sources, targets = _vocab(src_vocab, "src_vocab"), _vocab(tgt_vocab, "tgt_vocab")
    cfg = book_model_config(state_dict, num_heads, dropout)
    for name, key, size in (
        ("src_vocab", "encoder.embedding.weight", len(sources)),
        ("tgt_vocab", "decoder.embedding.weight", len(targets)),
    ):
        rows = _shape(state_dict, key)[0]
        if rows != size:
            raise UserError(f"{name} has {size} tokens but the book model's {key} has {rows} rows")
    model = build_model(cfg, len(sources), len(targets))
    expected, given = set(model.state_dict()), set(state_dict)
    if expected - given:
        raise UserError(f"the book state dict lacks {_listed(expected - given)}")
    if given - expected:
        raise UserError(
            f"the book state dict has keys an attn-mt {cfg.type} model does not: {_listed(given - expected)}"
        )
    try:
        model.load_state_dict(dict(state_dict))
    except RuntimeError as exc:
        raise UserError(f"the book state dict does not fit an attn-mt {cfg.type} model: {exc}") from None
    model.eval()
    return BookModel(model, cfg, sources, targets)


def load_book_checkpoint(
    path: str | Path, *, num_heads: int = BOOK_NUM_HEADS, dropout: float = BOOK_DROPOUT
) -> BookModel:
    """Import the file book_reference.py `--save` writes: {'state_dict', 'src_vocab', 'tgt_vocab'}."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"book checkpoint not found: {path}")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for damaged or foreign files
        raise UserError(f"cannot read book checkpoint {path}: {exc}") from None
    needed = ("state_dict", "src_vocab", "tgt_vocab")
    if not isinstance(saved, dict) or any(key not in saved for key in needed):
        raise UserError(f"{path}: expected a dict with keys {', '.join(needed)} (book_reference.py --save)")
    return import_book_model(
        saved["state_dict"], saved["src_vocab"], saved["tgt_vocab"], num_heads=num_heads, dropout=dropout
    )
