"""Lab panel of the book section "The Transformer Architecture", on a trained Transformer run: the
encoder-decoder's blocks with the live shapes of the learner's sentence, the causal mask against the
source's valid_lens, training (every target position at once, teacher forcing) against prediction (one
step at a time with the decoder's key-value cache growing), add & norm and the position-wise FFN.

Everything is computed by the run's own model: its encoder and decoder called as `attn-mt translate`
and training call them, and encoder block 0's layers called one by one for its add & norm and FFN.

Shapes: S source positions, T target positions, t steps cached so far, H hidden (num_hiddens), F the
FFN's hidden size (ffn_num_hiddens), h heads, d = H / h, L layers, V target vocabulary.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import torch

from attn_mt.decoding.outputs import prepare_sentence
from attn_mt.decoding.translator import Translator
from attn_mt.i18n import _, ngettext
from attn_mt.lab.engines import checkpoint_text, unknown_words
from attn_mt.lab.inputs import LabError, choice, limit_elements, text
from attn_mt.lab.shown import answer, code, line_of, number, shown
from attn_mt.models.attention import AttentionMask
from attn_mt.models.transformer import AddNorm, EncoderBlock, PositionWiseFFN, Transformer
from attn_mt.run.opened import LoadedRun


def first_block(model: Transformer, src: torch.Tensor, src_mask: AttentionMask) -> dict[str, torch.Tensor]:
    """Encoder block 0's steps on the embedded source, each by the block's own layers: X, its
    self-attention's output Y, LayerNorm(X + Y), the FFN's hidden layer after ReLU and its output.

    The layers are called one by one, as EncoderBlock.forward calls them, rather than watched with hooks,
    so no other request running the same model can change what is kept."""
    block = model.encoder.blks.block0
    X = model.encoder.embed(src)  # (1, S, H)
    keys, values = block.attention.project_keys_values(X, X)  # (1, h, S, d) each
    Y, _weights = block.attention.attend(X, keys, values, src_mask, False)  # (1, S, H)
    normed = block.addnorm1(X, Y)  # (1, S, H)
    hidden = block.ffn.relu(block.ffn.dense1(normed))  # (1, S, F)
    return {"X": X, "Y": Y, "normed": normed, "ffn_hidden": hidden, "ffn_out": block.ffn(normed)}


def diagram(model: Transformer, S: int, T: int, run: str = "", sentence: str = "") -> dict[str, Any]:
    """The encoder-decoder's blocks, in order, each with its id, its name in the language in force, its
    live shape and the panel that shows it, opened on the same run and sentence."""
    same = urlencode({"run": run, "sentence": sentence}, quote_via=quote)  # the learner's, not the default
    H = model.encoder.num_hiddens
    F = model.encoder.blks.block0.ffn.dense1.out_features
    h, L = model.num_heads, len(model.encoder.blks)
    V = model.decoder.dense.out_features
    here = f"#transformer?{same}"
    embedding = _("embedding · √H + positional encoding")
    add_norm = _("add & norm")
    ffn = _("position-wise FFN")

    def block(key: str, name: str, shape: str, link: str = here) -> dict[str, str]:
        """One box of the diagram."""
        return {"id": key, "name": name, "shape": shape, "link": link}

    return {
        "layers": L,
        "encoder": [
            block("source_tokens", _("source tokens"), f"(1, S) = (1, {S})"),
            block("embedding", embedding, f"(1, S, H) = (1, {S}, {H})", "#positions"),
            block(
                "self_attention",
                ngettext(
                    "multi-head self-attention ({count} head)", "multi-head self-attention ({count} heads)", h
                ).format(count=h),
                f"(1, h, S, S) = (1, {h}, {S}, {S})",
                f"#trained_heads?map=encoder_self&{same}",
            ),
            block("add_norm", add_norm, f"(1, S, H) = (1, {S}, {H})"),
            block("ffn", ffn, f"(1, S, F) = (1, {S}, {F}) → (1, S, H)"),
            block("add_norm", add_norm, f"(1, S, H) = (1, {S}, {H})"),
        ],
        "decoder": [
            block("target_tokens", _("target tokens (shifted right: <bos> first)"), f"(1, T) = (1, {T})"),
            block("embedding", embedding, f"(1, T, H) = (1, {T}, {H})", "#positions"),
            block(
                "masked_self_attention",
                _("masked multi-head self-attention (causal)"),
                f"(1, h, T, T) = (1, {h}, {T}, {T})",
                f"#trained_heads?map=decoder_self&{same}",
            ),
            block("add_norm", add_norm, f"(1, T, H) = (1, {T}, {H})"),
            block(
                "cross_attention",
                _("multi-head encoder-decoder attention"),
                f"(1, h, T, S) = (1, {h}, {T}, {S})",
                f"#trained_heads?map=cross&{same}",
            ),
            block("add_norm", add_norm, f"(1, T, H) = (1, {T}, {H})"),
            block("ffn", ffn, f"(1, T, F) = (1, {T}, {F}) → (1, T, H)"),
            block("add_norm", add_norm, f"(1, T, H) = (1, {T}, {H})"),
            block(
                "output",
                _("dense → softmax over the vocabulary"),
                f"(1, T, V) = (1, {T}, {V})",
                f"#decoding?{same}",
            ),
        ],
    }


def transformer_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """A sentence through a trained Transformer: diagram shapes, masks, training against prediction with
    the key-value cache, add & norm and the FFN of block 0."""
    transformers = {name: run for name, run in runs.items() if run.config.model.type == "transformer"}
    if not transformers:
        raise LabError(_("no Transformer run: start the lab as `attn-mt lab RUN_DIR` with a Transformer run"))
    name = choice(state, "run", next(iter(transformers)), tuple(transformers))
    run = transformers[name]
    model = run.model
    if not isinstance(model, Transformer):
        raise LabError(_("run: {name} is not attn-mt's Transformer").format(name=name))
    if run.config.model.switches:
        switches = ", ".join(f"{key}: {value}" for key, value in run.config.model.switches.items())
        raise LabError(
            _(
                "run: {name} has {switches}; this panel draws the book's Transformer (sinusoidal positions, "
                "LayerNorm)"
            ).format(name=name, switches=switches)
        )
    engine = Translator(model, run.src_vocab, run.tgt_vocab, run.config, run.device)
    sentence = text(state, "sentence", "", 300).strip()
    tokens = prepare_sentence(run.config, run.src_vocab, sentence)
    if not tokens:
        raise LabError(_("sentence: type an English sentence"))
    target = text(state, "target", "", 300).strip()
    typed = bool(target)
    if not target:
        target = engine.translate([sentence], beam_size=1)[0].text
    vocab = run.tgt_vocab
    ids = vocab.encode(prepare_sentence(run.config, vocab, target))
    fed, src_len = engine.source_ids(tokens)
    src = torch.tensor([fed], device=engine.device)  # (1, S)
    src_lens = torch.tensor([src_len], device=engine.device)  # (1,)
    tgt_in = torch.tensor([[vocab.bos_id, *ids]], device=engine.device)  # (1, T)
    S, T = src.shape[1], tgt_in.shape[1]
    H = model.encoder.num_hiddens
    F = model.encoder.blks.block0.ffn.dense1.out_features
    limit_elements(_("the FFN's hidden layer (S, F)"), max(S, T), F)
    source_labels = run.src_vocab.labels(fed)
    target_labels = vocab.labels(tgt_in[0].tolist())
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            enc = model.encode(src, src_lens)
            probe = first_block(model, src, enc["src_mask"])
            forced = torch.log_softmax(model(src, src_lens, tgt_in).float(), dim=-1)  # (1, T, V)
            maps = model.attention_maps(src, src_lens, tgt_in)
            decode_state = model.init_state(enc)
            cache_sizes, stepped = [], []
            for t in range(T):
                logits, decode_state, _weights = model.step(tgt_in[:, t], decode_state)
                stepped.append(torch.log_softmax(logits.float(), dim=-1))  # (1, V)
                cache_sizes.append(list(decode_state["past"][0][0].shape))  # (1, h, t + 1, d)
    finally:
        model.train(was_training)
    stepped_all = torch.stack(stepped, dim=1)  # (1, T, V)
    difference = float((stepped_all - forced.float()).abs().max())
    causal = AttentionMask.causal(T).keep[0].float()  # (T, T)
    source_keep = AttentionMask.from_valid_lens(src_lens.cpu(), 1, S).keep[0, 0].float()  # (S,)
    X, Y, normed = probe["X"][0], probe["Y"][0], probe["normed"][0]  # (S, H) each
    summed = X + Y  # (S, H): dropout is off in eval
    hidden = probe["ffn_hidden"][0]  # (S, F)
    picks = vocab.labels(forced[0].argmax(-1).tolist())
    tensors = [
        shown(
            _("causal mask of the decoder's self-attention (1: may attend)"),
            causal,
            ["T", "T"],
            rows=target_labels,
            columns=target_labels,
            scale="weights",
            tokens=True,
        ),
        shown(
            _("source mask from valid_lens (1: may attend)"),
            source_keep,
            ["S"],
            columns=source_labels,
            scale="weights",
            tokens=True,
        ),
        shown(
            _("decoder self-attention weights, layer 1, mean of heads"),
            maps["decoder_self"][0, 0].mean(0).float(),
            ["T", "T"],
            rows=target_labels,
            columns=target_labels,
            scale="weights",
            tokens=True,
        ),
        shown(
            _("cached keys per layer after each step: shape (B, h, t, d)"),
            torch.tensor(cache_sizes, dtype=torch.float64),
            ["step", "axis"],
            rows=[_("fed {token}").format(token=label) for label in target_labels],
            columns=["B", "h", "t", "d"],
        ),
        shown(
            _("log p(next token): training (all at once) | prediction (step by step)"),
            torch.stack([forced[0].max(-1).values.float(), stepped_all[0].max(-1).values], dim=1),
            ["T", "way"],
            rows=[f"{a} → {b}" for a, b in zip(target_labels, picks, strict=True)],
            tokens=True,
        ),
        shown(
            _("add & norm: mean and std over H of X + Y | of LayerNorm(X + Y)"),
            torch.stack(
                [
                    summed.mean(-1),
                    summed.std(-1, unbiased=False),
                    normed.mean(-1),
                    normed.std(-1, unbiased=False),
                ],
                dim=1,
            ).float(),
            ["S", "stat"],
            rows=source_labels,
            columns=[_("mean X+Y"), _("std X+Y"), _("mean LN"), _("std LN")],
            tokens="rows",
        ),
        shown(
            _("FFN hidden layer after ReLU (encoder block 1)"),
            hidden.float(),
            ["S", "F"],
            rows=source_labels,
            tokens=True,
        ),
        shown(
            _("FFN output (encoder block 1)"),
            probe["ffn_out"][0].float(),
            ["S", "H"],
            rows=source_labels,
            tokens=True,
        ),
    ]
    zeros = float((hidden == 0).float().mean())
    if typed:
        fed_note = _(
            "The target fed to the decoder, shown above, is <bos> then your target; the source has {S} "
            "positions, {valid} of them valid."
        )
    else:
        fed_note = _(
            "The target fed to the decoder, shown above, is <bos> then the greedy translation; the source "
            "has {S} positions, {valid} of them valid."
        )
    notes = [
        *unknown_words(run, sentence),
        fed_note.format(S=S, valid=src_len),
        _(
            "Two masks: the source mask from valid_lens hides padding from every attention over the source; "
            "the causal mask lets target position i attend to positions 0..i only, so training can feed all "
            "T positions at once (teacher forcing) without a position seeing the tokens it must predict. "
            "Above the diagonal the decoder's self-attention weights are 0."
        ),
        _(
            "Prediction feeds one token at a time: each step adds its keys and values to every layer's "
            "cache, (1, h, t, d) growing t = 1 … {T}, and attends to all of them, so no causal mask is "
            "needed. Its log-probabilities equal training's to {difference}."
        ).format(T=T, difference=number(difference, ".1e")),
        _(
            "Add & norm: LayerNorm(X + Y) adds the sublayer's output Y to its input X (the residual "
            "connection) and normalises each position over its H features (mean 0, std 1, then a learned "
            "scale and shift), unlike BatchNorm, which would normalise each feature over the batch."
        ),
        _(
            "The FFN applies the same two dense layers to every position on its own: H = {H} → F = {F} "
            "(ReLU: {zeros} of its hidden values are 0) → H. Its shape changes only the last axis."
        ).format(H=H, F=F, zeros=number(zeros, ".0%")),
    ]
    lines = [
        code(AttentionMask.causal, "AttentionMask.causal"),
        code(AttentionMask.from_valid_lens, "AttentionMask.from_valid_lens"),
        line_of(Transformer.step, "self.decoder(", "Transformer.step"),
        code(AddNorm.forward, "AddNorm.forward"),
        code(EncoderBlock.forward, "EncoderBlock.forward"),
        code(PositionWiseFFN.forward, "PositionWiseFFN.forward"),
    ]
    return answer(
        tensors,
        lines,
        notes,
        diagram=diagram(model, S, T, name, sentence),
        text={"target": " ".join(target_labels), "checkpoint": checkpoint_text(name, run)},
    )
