"""Build the encoder-decoder named by `model.type` from the config's sizes, via a plain mapping."""

from __future__ import annotations

from collections.abc import Callable

from attn_mt.config import ModelConfig
from attn_mt.errors import UserError
from attn_mt.models.bahdanau import GRUBahdanau
from attn_mt.models.base import EncoderDecoder
from attn_mt.models.transformer import Transformer


def build_gru_bahdanau(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> GRUBahdanau:
    """GRU encoder + Bahdanau decoder with embed_size, num_hiddens, depths, dropout, pack_padded, scoring."""
    return GRUBahdanau(
        src_vocab_size,
        tgt_vocab_size,
        cfg.embed_size,
        cfg.num_hiddens,
        tuple(cfg.depths),
        cfg.dropout,
        cfg.pack_padded,
        cfg.scoring,
    )


def build_transformer(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Transformer:
    """Transformer with the model config's sizes, dropout, embedding ties, embedding init and switches.

    The config's validation has checked that the heads divide num_hiddens (MultiHeadAttention checks again).
    """
    return Transformer(
        src_vocab_size,
        tgt_vocab_size,
        cfg.num_hiddens,
        cfg.ffn_num_hiddens,
        cfg.num_heads,
        tuple(cfg.depths),
        cfg.dropout,
        cfg.tie_embeddings,
        cfg.tie_source_embedding,
        cfg.embed_init,
        cfg.positional_encoding,
        cfg.max_positions,
        cfg.norm,
    )


MODEL_BUILDERS: dict[str, Callable[[ModelConfig, int, int], EncoderDecoder]] = {
    "gru_bahdanau": build_gru_bahdanau,
    "transformer": build_transformer,
}


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> EncoderDecoder:
    """The model `cfg.type` names, sized by the config and vocabularies."""
    builder = MODEL_BUILDERS.get(cfg.type)
    if builder is None:
        raise UserError(f"model.type: {cfg.type!r} is not one of {', '.join(MODEL_BUILDERS)}")
    return builder(cfg, src_vocab_size, tgt_vocab_size)
