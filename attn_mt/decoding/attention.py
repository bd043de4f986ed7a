"""Attention dumps: every attention matrix of one translated sentence, trimmed, with summary numbers.

Shapes: B batch, L layers, h heads, S source positions (incl. the source <eos>), T target
positions (the output tokens and the closing <eos>).

The maps come from the model's teacher-forced `attention_maps` pass over the output, fed as
decoder input `<bos> y1 .. yn`. Target position j reads decoder input j and predicts output j
(`y1 .. yn <eos>`). After trimming padding, each sentence has
  Bahdanau (Bahdanau et al. 2014; d2l.ai section 11.4): "cross" (T, S);
  Transformer (Vaswani et al. 2017; d2l.ai section 11.7): "encoder_self" (L, h, S, S),
  "decoder_self" (L, h, T, T) and "cross" (L, h, T, S).
Rows are query positions, columns key positions. Labels: source positions by their source token,
target query rows by the token they predict, decoder-self key columns by their input token (so
row y_j shows what was visible when y_j was chosen: <bos> .. y_j-1, itself included).

Per map: the entropy (nats) of each query row over its keys, averaged over rows, and for maps
whose keys are the source, the share of weight on the source <eos> averaged over rows (left out
for a truncated source, which has no <eos>); both are also given per layer and head.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attn_mt.decoding import display
from attn_mt.i18n import N_, _
from attn_mt.models.base import EncoderDecoder

SOURCE, TARGET = "source", "target"
SIDES = {  # map name -> (query side, key side)
    "encoder_self": (SOURCE, SOURCE),
    "decoder_self": (TARGET, TARGET),
    "cross": (TARGET, SOURCE),
}
TITLES = {  # English; a page in another language shows gettext(title)
    "encoder_self": N_("encoder self-attention"),
    "decoder_self": N_("decoder self-attention"),
    "cross": N_("encoder-decoder attention"),
}


def trim_maps(maps: dict[str, torch.Tensor], index: int, src_len: int, tgt_len: int) -> dict[str, np.ndarray]:
    """Sentence `index` of a batch of attention maps, cut to its `src_len` and `tgt_len` positions."""
    sizes = {SOURCE: src_len, TARGET: tgt_len}
    trimmed = {}
    for name, batch in maps.items():
        if name not in SIDES:
            raise ValueError(f"unknown attention map {name!r}; expected one of {', '.join(SIDES)}")
        shape = tuple(batch.shape)
        if batch.dim() not in (3, 5):
            raise ValueError(f"attention map {name!r} must be (B, Q, K) or (B, L, h, Q, K), got {shape}")
        queries, keys = (sizes[side] for side in SIDES[name])
        if shape[-2] < queries or shape[-1] < keys:
            raise ValueError(f"attention map {name!r} of shape {shape} is smaller than {queries} x {keys}")
        trimmed[name] = batch[index, ..., :queries, :keys].detach().float().cpu().numpy()
    return trimmed


def attention_entropy(weights: np.ndarray) -> np.ndarray:
    """Mean over query rows of -sum_k p log p (nats); one value per leading index ((L, h) or ())."""
    p = np.asarray(weights, dtype=np.float64)
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -plogp.sum(axis=-1).mean(axis=-1)


def key_share(weights: np.ndarray, key: int) -> np.ndarray:
    """Mean over query rows of the weight on key position `key`; one value per leading index."""
    return np.asarray(weights, dtype=np.float64)[..., key].mean(axis=-1)


def _number(values: np.ndarray) -> Any:
    """A scalar or nested list of floats for JSON."""
    return values.tolist() if values.ndim else float(values)


def attention_stats(
    maps: dict[str, np.ndarray], source_ends_with_eos: bool = True
) -> dict[str, dict[str, Any]]:
    """Per map: mean entropy and (source keys ending in <eos>) mean share on it, per layer and head too."""
    stats = {}
    for name, weights in maps.items():
        entropy = attention_entropy(weights)
        entry: dict[str, Any] = {"entropy": float(entropy.mean()), "entropy_per_head": _number(entropy)}
        if SIDES[name][1] == SOURCE and source_ends_with_eos:
            share = key_share(weights, weights.shape[-1] - 1)  # the source <eos> is the last source position
            entry.update(eos_share=float(share.mean()), eos_share_per_head=_number(share))
        stats[name] = entry
    return stats


@dataclass
class SentenceAttention:
    """Every trimmed attention map of one sentence with the token labels of both sides."""

    maps: dict[str, np.ndarray]
    source_tokens: list[str]  # S labels, ending with the source <eos> unless the source was truncated
    output_tokens: list[str]  # T labels: the output tokens and <eos> (what each target position predicts)
    decoder_input_tokens: list[str]  # T labels: <bos> and the output tokens (what each position reads)
    source_ends_with_eos: bool = True  # False for a truncated source: no <eos> share is computed

    def __post_init__(self) -> None:
        if len(self.output_tokens) != len(self.decoder_input_tokens):
            raise ValueError(
                f"{len(self.output_tokens)} output but {len(self.decoder_input_tokens)} decoder input labels"
            )
        for name, weights in self.maps.items():
            rows, cols = self.labels(name)
            if weights.shape[-2:] != (len(rows), len(cols)):
                raise ValueError(
                    f"attention map {name!r} has shape {weights.shape}, "
                    f"but there are {len(rows)} query and {len(cols)} key labels"
                )

    def labels(self, name: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of map `name`."""
        query_side, key_side = SIDES[name]
        rows = self.source_tokens if query_side == SOURCE else self.output_tokens
        cols = self.source_tokens if key_side == SOURCE else self.decoder_input_tokens
        return rows, cols

    def summary(self) -> dict[str, Any]:
        """The JSON description: tokens, shapes, axes and statistics."""
        stats = attention_stats(self.maps, self.source_ends_with_eos)
        return {
            "source_tokens": self.source_tokens,
            "output_tokens": self.output_tokens,
            "decoder_input_tokens": self.decoder_input_tokens,
            "shapes": {name: list(w.shape) for name, w in self.maps.items()},
            "axes": {
                name: (["layer", "head"] if w.ndim == 4 else [])
                + [f"query ({SIDES[name][0]})", f"key ({SIDES[name][1]})"]
                for name, w in self.maps.items()
            },
            "entropy": stats["cross"]["entropy"] if "cross" in stats else None,
            "eos_share": stats["cross"].get("eos_share") if "cross" in stats else None,
            "stats": stats,
        }

    def _repr_png_(self) -> bytes:
        """Jupyter's picture: heatmaps of the cross-attention (else the first map), tokens on the axes."""
        return attention_png(self)

    def _repr_html_(self) -> str:
        """Jupyter's view: every map as heatmaps under its title and shape, with both sides' tokens."""
        return attention_html(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Both views in one call, so that Jupyter draws each map once rather than the main map twice."""
        return attention_bundle(self)


def main_map(attention: SentenceAttention) -> str:
    """The map a single picture shows: the cross-attention when there is one, else the first."""
    return "cross" if "cross" in attention.maps else next(iter(attention.maps))


def attention_png(attention: SentenceAttention, name: str | None = None) -> bytes:
    """PNG heatmaps of one map (every layer and head), tokens on both axes; the main map by default."""
    name = main_map(attention) if name is None else name
    rows, cols = attention.labels(name)
    return display.heatmap_png(attention.maps[name], rows, cols, _(TITLES[name]))


def attention_html(attention: SentenceAttention, pictures: dict[str, bytes] | None = None) -> str:
    """Every map as a heatmap under its title, shape and the tokens of both sides.

    `pictures` holds maps already drawn (name -> PNG), so that none is drawn twice.
    """
    pictures = pictures or {}
    parts = [
        f"<p><b>{html.escape(_('source'))}</b> {display.tokens_html(attention.source_tokens)}</p>",
        f"<p><b>{html.escape(_('output'))}</b> {display.tokens_html(attention.output_tokens)}</p>",
    ]
    for name, weights in attention.maps.items():
        shape = " x ".join(str(size) for size in weights.shape)
        png = pictures[name] if name in pictures else attention_png(attention, name)
        parts.append(f"<p><b>{html.escape(_(TITLES[name]))}</b> <code>{name}</code> ({shape})</p>")
        parts.append(display.image_tag(png, _("{title}: heatmap").format(title=_(TITLES[name]))))
    return f"<div>{''.join(parts)}</div>"


def attention_bundle(attention: SentenceAttention) -> dict[str, Any]:
    """Jupyter's whole view of the maps at once, HTML and the main map's PNG, each map drawn once."""
    pictures = {name: attention_png(attention, name) for name in attention.maps}
    return {"text/html": attention_html(attention, pictures), "image/png": pictures[main_map(attention)]}


@torch.inference_mode()
def collect_attention(
    model: EncoderDecoder,
    src_ids: Sequence[int],
    out_ids: Sequence[int],
    *,
    bos_id: int,
    source_tokens: Sequence[str],
    output_tokens: Sequence[str],
    bos_token: str,
    src_len: int | None = None,
    source_ends_with_eos: bool = True,
) -> SentenceAttention:
    """Run the model's teacher-forced attention pass on one sentence and its output.

    `src_ids` is the source as decoding fed it: its first `src_len` ids (all by default) are the
    sentence, ending with <eos> unless truncated, and any rest is padding the model reads (book
    mode). `out_ids` is the output without <bos>/<eos>. `source_tokens` labels the first `src_len`
    ids; `output_tokens` labels `out_ids` followed by <eos>.
    """
    src_len = len(src_ids) if src_len is None else src_len
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)  # (1, S incl. padding)
    src_lens = torch.tensor([src_len], device=device)  # (1,)
    tgt_in = torch.tensor([[bos_id, *out_ids]], dtype=torch.long, device=device)  # (1, T)
    was_training = model.training
    model.eval()
    try:
        maps = model.attention_maps(src, src_lens, tgt_in)
    finally:
        model.train(was_training)
    trimmed = trim_maps(maps, 0, src_len, len(out_ids) + 1)
    outputs = list(output_tokens)
    return SentenceAttention(
        trimmed, list(source_tokens), outputs, [bos_token, *outputs[:-1]], source_ends_with_eos
    )


def word_groups(starts: Sequence[bool]) -> list[list[int]]:
    """Positions grouped into words: a new group begins at every position whose flag is True."""
    groups: list[list[int]] = []
    for position, start in enumerate(starts):
        if start or not groups:
            groups.append([])
        groups[-1].append(position)
    return groups


def _pool(weights: np.ndarray, axis: int, groups: list[list[int]], how: str) -> np.ndarray:
    """Sum (`how` = "sum") or average ("mean") `weights` over each group of positions along `axis`."""
    reduce = np.sum if how == "sum" else np.mean
    return np.stack([reduce(np.take(weights, group, axis=axis), axis=axis) for group in groups], axis=axis)


def merge_words(
    attention: SentenceAttention,
    source_groups: list[list[int]],
    output_groups: list[list[int]],
    source_words: list[str],
    output_words: list[str],
) -> SentenceAttention:
    """Word-level maps from subword-level ones: the weights a word's pieces receive are summed, the rows
    of a word's pieces (its queries) averaged, so every row still sums to 1.

    On the cross-attention map (target queries, source keys) this sums over source pieces and averages
    over target pieces; self-attention maps do both on one side. `output_groups` covers the output
    tokens and the closing <eos> (its own group, last); the decoder-input side is the same groups
    shifted by one behind <bos>.
    """
    if output_groups[-1] != [len(attention.output_tokens) - 1]:
        raise ValueError("the closing <eos> must be the last output group on its own")
    input_groups = [[0], *([p + 1 for p in group] for group in output_groups[:-1])]
    groups = {SOURCE: source_groups, TARGET: output_groups}
    maps = {}
    for name, weights in attention.maps.items():
        query_side, key_side = SIDES[name]
        keys = input_groups if name == "decoder_self" else groups[key_side]
        merged = _pool(weights, weights.ndim - 1, keys, "sum")
        maps[name] = _pool(merged, weights.ndim - 2, groups[query_side], "mean")
    inputs = [attention.decoder_input_tokens[0], *output_words[:-1]]
    return SentenceAttention(maps, list(source_words), list(output_words), inputs)
