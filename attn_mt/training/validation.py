"""Validation during training: teacher-forced loss and greedy BLEU on the valid split.

Shapes: B batch, S source steps, T target steps, V target vocabulary.
"""

from __future__ import annotations

import torch

from attn_mt.config import Config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import NMTData
from attn_mt.data.splits import EvalExample
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.scores import corpus_scores
from attn_mt.models.base import EncoderDecoder
from attn_mt.training.loss import masked_cross_entropy


def pad_batch(src: list[list[int]], tgt: list[list[int]], pad_id: int) -> Batch:
    """Pad id lists (each already ending in <eos>) into one Batch."""

    def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        lens = torch.tensor([len(r) for r in rows])
        out = torch.full((len(rows), int(lens.max())), pad_id, dtype=torch.long)  # (B, max len)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row)
        return out, lens

    return Batch(*pad(src), *pad(tgt))


def spread_subset(examples: list[EvalExample], limit: int) -> list[EvalExample]:
    """At most `limit` examples (0 = all) spread evenly over the list, which keeps file order.

    fra.txt is sorted by length, so the first N held-out sentences would be the N shortest ones and
    validation BLEU would score (and choose the best checkpoint on) short sentences only.
    """
    if not limit or limit >= len(examples):
        return list(examples)
    return [examples[i * len(examples) // limit] for i in range(limit)]


class Validator:
    """Holds the encoded valid pairs (every reference) and scores a model on them."""

    def __init__(self, model: EncoderDecoder, data: NMTData, cfg: Config, device: torch.device):
        self.model, self.cfg, self.device = model, cfg, device
        self.examples = spread_subset(data.valid, cfg.train.valid_max_sentences)
        sv, tv = data.src_vocab, data.tgt_vocab
        pairs = [
            (sv.encode_text(ex.src) + [sv.eos_id], tv.encode_text(ref) + [tv.eos_id])
            for ex in self.examples
            for ref in ex.refs
        ]
        pairs.sort(key=lambda p: (len(p[0]), len(p[1])))
        size = cfg.decode.batch_size
        self.batches = [
            pad_batch([p[0] for p in pairs[i : i + size]], [p[1] for p in pairs[i : i + size]], sv.pad_id)
            for i in range(0, len(pairs), size)
        ]
        self.translator = Translator(model, sv, tv, cfg, device)

    @torch.inference_mode()
    def loss(self) -> float:
        """Mean per-token cross-entropy over every (source, reference) pair."""
        bos_id = self.translator.tgt_vocab.bos_id
        total, tokens = 0.0, 0
        for batch in self.batches:
            batch = batch.to(self.device)
            bos = torch.full((batch.tgt.shape[0], 1), bos_id, dtype=batch.tgt.dtype, device=self.device)
            logits = self.model(
                batch.src, batch.src_lens, torch.cat([bos, batch.tgt[:, :-1]], dim=1)
            )  # (B, T, V)
            summed = masked_cross_entropy(logits, batch.tgt, batch.tgt_lens)
            total, tokens = total + float(summed), tokens + batch.num_tgt_tokens
        return total / max(tokens, 1)

    def run(self) -> dict[str, float]:
        """valid_loss and greedy valid_bleu (sacreBLEU, every reference)."""
        was_training = self.model.training
        self.model.eval()
        loss = self.loss()
        outputs = self.translator.translate([ex.src for ex in self.examples], beam_size=1)
        bleu = corpus_scores([t.text for t in outputs], [ex.refs for ex in self.examples])["bleu"]
        self.model.train(was_training)
        return {"valid_loss": loss, "valid_bleu": float(bleu)}
