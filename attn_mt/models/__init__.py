"""Attention building blocks (the book's names), the GRU-Bahdanau and Transformer models, and builders."""

from attn_mt.models.attention import (
    AdditiveAttention,
    AttentionMask,
    DotProductAttention,
    MultiHeadAttention,
    masked_softmax,
)
from attn_mt.models.bahdanau import BahdanauDecoder, GRUBahdanau, GRUEncoder
from attn_mt.models.base import DecoderState, EncoderDecoder
from attn_mt.models.book_import import BookModel, import_book_model, load_book_checkpoint
from attn_mt.models.build import MODEL_BUILDERS, build_model
from attn_mt.models.positional import PositionalEncoding
from attn_mt.models.transformer import (
    AddNorm,
    DecoderBlock,
    EncoderBlock,
    PositionWiseFFN,
    Transformer,
    TransformerDecoder,
    TransformerEncoder,
)

__all__ = [
    "MODEL_BUILDERS",
    "AddNorm",
    "AdditiveAttention",
    "AttentionMask",
    "BahdanauDecoder",
    "BookModel",
    "DecoderBlock",
    "DecoderState",
    "DotProductAttention",
    "EncoderBlock",
    "EncoderDecoder",
    "GRUBahdanau",
    "GRUEncoder",
    "MultiHeadAttention",
    "PositionWiseFFN",
    "PositionalEncoding",
    "Transformer",
    "TransformerDecoder",
    "TransformerEncoder",
    "build_model",
    "import_book_model",
    "load_book_checkpoint",
    "masked_softmax",
]
