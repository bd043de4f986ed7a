"""Step-through decoding: the search of `attn-mt translate` run on a trained model with every step kept.

`StepRecorder` stands in for the model in decoding/search.py's greedy and beam search: it passes each
`encode`, `init_state`, `step` and `reorder_state` through unchanged and keeps, per step, the live
hypotheses, the model's next-token log-probabilities and what the encoder-decoder attention computed
(captured with forward hooks on the attention's own layers, so nothing is decoded twice). The tokens
it steps through are therefore the search's, and its weights the search's. The hooks go on the
request's own copy of the model (lab/engines.py), never on the model other requests share,
and only the step asked for (and the one after it) is kept whole, so a long search keeps little.

Shapes: N live rows (hypotheses), S source positions, H hidden, h heads, d = H / h, V target vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from attn_mt.decoding.outputs import gnmt_length_penalty, prepare_sentence
from attn_mt.decoding.search import beam_search, greedy_search
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.i18n import _, ngettext, pgettext
from attn_mt.lab.engines import checkpoint_text, request_engine, unknown_words
from attn_mt.lab.inputs import LabError, choice, text, whole
from attn_mt.lab.shown import answer, code, line_of, number, shown
from attn_mt.models.attention import AdditiveAttention, DotProductAttention
from attn_mt.models.bahdanau import BahdanauDecoder, GRUBahdanau
from attn_mt.models.base import DecoderState, EncoderDecoder
from attn_mt.run.opened import LoadedRun

TOP = 5  # alternatives shown per step
MAX_BEAM = 8


@dataclass
class StepRecord:
    """What one decoder step saw and computed, for every live row."""

    prefixes: list[list[int]]  # the tokens each row had chosen before this step
    scores: list[float]  # their summed log-probabilities
    log_probs: torch.Tensor  # (N, V) the next-token distribution
    weights: torch.Tensor  # (N, S) Bahdanau, (N, L, h, S) Transformer
    captured: dict[str, torch.Tensor] = field(default_factory=dict)  # query, scores, mask, context


class StepRecorder:
    """A model for the search that records every step (see the module docstring)."""

    def __init__(
        self, model: EncoderDecoder, layer: int, keep: int | None = None, prefix: list[int] | None = None
    ):
        self.model, self.layer = model, layer
        self.prefix = prefix or []  # the forced first tokens: search.py scores every other choice -inf
        self.keep = keep  # the step to keep (with the next one's hypotheses); None: every step
        self.count = 0  # steps taken
        self.steps: dict[int, StepRecord] = {}
        self.history: list[tuple[list[list[int]], list[float]]] = []  # every step's prefixes and scores
        self.prefixes: list[list[int]] = [[]]
        self.scores: list[float] = [0.0]
        self.last: torch.Tensor | None = None  # (N, V) the previous step's log-probabilities

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """The model's encode."""
        return self.model.encode(src, src_lens)

    def init_state(self, enc: DecoderState) -> DecoderState:
        """The model's init_state."""
        return self.model.init_state(enc)

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """The model's reorder_state; the recorded rows follow the same index."""
        rows = index.tolist()
        self.prefixes = [list(self.prefixes[i]) for i in rows]
        self.scores = [self.scores[i] for i in rows]
        self.last = None if self.last is None else self.last[index]
        return self.model.reorder_state(state, index)

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """The model's step (always with attention, which the search gets only if it asked)."""
        if self.last is not None:
            for row, token in enumerate(tokens.tolist()):
                at = len(self.prefixes[row])
                self.prefixes[row].append(token)
                forced_away = at < len(self.prefix) and token != self.prefix[at]
                # a row the search scored -inf (another token than a forced one) stays dead: it only
                # fills the beam's width and no output ever comes from it
                dead = forced_away or self.scores[row] == -math.inf
                self.scores[row] = -math.inf if dead else self.scores[row] + float(self.last[row, token])
        self.history.append(([list(p) for p in self.prefixes], list(self.scores)))
        kept = self.keep is None or self.count in (self.keep, self.keep + 1)
        with self.capture(state) if kept else nullcontext({}) as captured:
            logits, new_state, attention = self.model.step(tokens, state, True)
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
        if kept:
            weights = attention["cross"].float()
            prefixes = [list(p) for p in self.prefixes]
            self.steps[self.count] = StepRecord(prefixes, list(self.scores), log_probs, weights, captured)
        self.count += 1
        self.last = log_probs
        return logits, new_state, attention if need_attention else {}

    @contextmanager
    def capture(self, state: DecoderState) -> Iterator[dict[str, torch.Tensor]]:
        """Hooks on the encoder-decoder attention's layers that keep its query, scores, mask and context."""
        captured: dict[str, torch.Tensor] = {}
        model = self.model
        hooks = []
        if isinstance(model, GRUBahdanau):
            attention = model.decoder.attention
            captured["mask"] = state["src_mask"].keep[:, 0]  # (N, S)
            hooks = [
                attention.W_q.register_forward_hook(
                    lambda _m, inputs, _o: captured.__setitem__("query", inputs[0][:, 0])  # (N, H)
                ),
                attention.w_v.register_forward_hook(
                    lambda _m, _i, output: captured.__setitem__("scores", output[:, 0, :, 0])  # (N, S)
                ),
                model.decoder.rnn.register_forward_pre_hook(
                    lambda _m, inputs: captured.__setitem__(
                        "context",
                        inputs[0][:, 0, : attention.W_k.out_features],  # (N, H)
                    )
                ),
            ]
        else:
            block = model.decoder.blks[f"block{self.layer}"].attention2
            keys = state["cross"][self.layer][0]  # (N, h, S, d)
            captured["mask"] = state["src_mask"].keep[:, 0, 0]  # (N, S)

            def keep_query(_m: Any, _i: Any, output: torch.Tensor) -> None:
                query = block.split_heads(output)  # (N, h, 1, d)
                captured["query"] = query[:, :, 0]  # (N, h, d)
                scores = torch.matmul(query, keys.transpose(-1, -2)) / math.sqrt(query.shape[-1])
                captured["scores"] = scores[:, :, 0]  # (N, h, S)

            hooks = [
                block.W_q.register_forward_hook(keep_query),
                block.W_o.register_forward_pre_hook(
                    lambda _m, inputs: captured.__setitem__("context", inputs[0][:, 0])  # (N, H)
                ),
            ]
        try:
            yield captured
        finally:
            for hook in hooks:
                hook.remove()


def run_search(
    engine: Translator,
    sentence: str,
    settings: DecodeSettings,
    layer: int,
    keep: int | None = None,
    prefix: list[int] | None = None,
) -> tuple[StepRecorder, list, list]:
    """The search `translate` runs on one sentence with `settings`, recorded (only step `keep` and the
    next in full, when given); (recorder, hypotheses, source labels). The engine's model gets hooks: give it a
    request's own copy.

    `prefix` (target ids) forces the output's first tokens through the search's own prefix, as
    `attn-mt translate --prefix` does; the rest is decoded freely from there."""
    tokens = prepare_sentence(engine.cfg, engine.src_vocab, sentence)
    if not tokens:
        raise LabError(_("sentence: type an English sentence"))
    fed, src_len = engine.source_ids(tokens)
    src = torch.tensor([fed], device=engine.device)  # (1, S incl. padding)
    src_lens = torch.tensor([src_len], device=engine.device)  # (1,)
    recorder = StepRecorder(engine.model, layer, keep, prefix)
    common = {**engine.search_arguments(need_attention=True), "prefix": [prefix] if prefix else None}
    was_training = engine.model.training
    engine.model.eval()
    try:
        if settings.beam_size == 1:
            hypotheses = greedy_search(recorder, src, src_lens, **common)  # type: ignore[arg-type]
        else:
            hypotheses = beam_search(
                recorder,
                src,
                src_lens,
                beam_size=settings.beam_size,
                nbest=settings.nbest,
                length_penalty=settings.length_penalty,
                **common,
            )[0]  # type: ignore[arg-type]
    finally:
        engine.model.train(was_training)
    return recorder, hypotheses, engine.src_vocab.labels(fed[:src_len])


def teacher_forced(engine: Translator, sentence: str, reference: str) -> dict[str, Any]:
    """The model run along a reference translation: its pick at each position and both log-probabilities."""
    tokens = prepare_sentence(engine.cfg, engine.src_vocab, sentence)
    fed, src_len = engine.source_ids(tokens)
    ids = engine.tgt_vocab.encode(prepare_sentence(engine.cfg, engine.tgt_vocab, reference))
    src = torch.tensor([fed], device=engine.device)  # (1, S)
    src_lens = torch.tensor([src_len], device=engine.device)  # (1,)
    tgt_in = torch.tensor([[engine.tgt_vocab.bos_id, *ids]], device=engine.device)  # (1, T)
    with torch.inference_mode():
        log_probs = torch.log_softmax(engine.model(src, src_lens, tgt_in).float(), dim=-1)[0]  # (T, V)
        maps = engine.model.attention_maps(src, src_lens, tgt_in)
    wanted = [*ids, engine.tgt_vocab.eos_id]
    picks = log_probs.argmax(dim=-1).tolist()  # (T,)
    return {
        "reference": engine.tgt_vocab.labels(wanted),
        "picks": engine.tgt_vocab.labels(picks),
        "reference_log_probs": log_probs[torch.arange(len(wanted)), torch.tensor(wanted)],  # (T,)
        "pick_log_probs": log_probs.max(dim=-1).values,  # (T,)
        "cross": maps["cross"][0, ..., :src_len].float(),  # (T, S) or (L, h, T, S)
    }


def live(prefixes: list[list[int]], scores: list[float]) -> list[tuple[list[int], float]]:
    """The rows of a step the search can still extend: a forced prefix scores the others -inf (they
    only fill the beam's width), and these come last in the search's order."""
    return [(prefix, score) for prefix, score in zip(prefixes, scores, strict=True) if score > -math.inf]


def listing() -> str:
    """What separates listed hypotheses or outputs in a sentence of the language in force ("; ")."""
    return pgettext("between the items of a list", "; ")


def chosen_after(recorder: StepRecorder, hypotheses: list, t: int, labels: Any) -> str:
    """What the search kept after step t: the next step's live hypotheses, or the finished ones."""
    if t + 1 < recorder.count:
        kept = [p for p, _score in live(recorder.steps[t + 1].prefixes, recorder.steps[t + 1].scores)]
        return _("kept for the next step: {hypotheses}").format(
            hypotheses=listing().join(" ".join(labels(p)) for p in kept)
        )
    return _("finished: {hypotheses}").format(
        hypotheses=listing().join(" ".join(labels(h.tokens)) + " <eos>" for h in hypotheses)
    )


def replacement_prefix(vocab: Any, record: StepRecord, row: int, token: str) -> list[int]:
    """The prefix that replaces the token chosen at this step by `token`: the row's tokens so far + it."""
    if token not in vocab:
        raise LabError(
            _("replace: {token} is not in the run's target vocabulary").format(token=repr(token[:40]))
        )
    token_id = vocab[token]
    if token_id in (vocab.eos_id, vocab.bos_id, vocab.pad_id):
        raise LabError(_("replace: {token} cannot be forced; choose a word").format(token=repr(token)))
    return [*record.prefixes[row], token_id]


def beam_tree(recorder: StepRecorder, hypotheses: list, labels: Any) -> dict[str, Any]:
    """Every live hypothesis of every step as a node joined to the one it extends, and the finished ones."""
    nodes: dict[tuple[int, ...], dict[str, Any]] = {}
    for t, (prefixes, scores) in enumerate(recorder.history):
        for prefix, score in live(prefixes, scores):
            key = tuple(prefix)
            if key not in nodes:
                nodes[key] = {
                    "step": t,
                    "token": labels(prefix[-1:])[0] if prefix else "<bos>",
                    "score": score,
                    "parent": list(key[:-1]) if key else None,
                    "prefix": list(key),
                }
    finished = [{"prefix": list(h.tokens), "score": h.score, "norm_score": h.norm_score} for h in hypotheses]
    # the tree shows raw sums of log-probabilities; the search ranks finished outputs by norm_score
    return {"nodes": list(nodes.values()), "finished": finished, "best": list(hypotheses[0].tokens)}


def normalised(hypothesis: Any, alpha: float) -> float:
    """A finished output's summed log-probability divided by GNMT's length penalty at `alpha`, its <eos>
    counted: the normalised score beam search ranks by, and `attn-mt score` and the "your own
    translation" panel give."""
    return hypothesis.score / gnmt_length_penalty(len(hypothesis.tokens) + 1, alpha)


def finished_note(hypotheses: list, outputs: list[str], alpha: float, beam: int) -> str:
    """The finished outputs with their summed log-probabilities (the tree's numbers) and their
    length-normalised scores, and which of the two the search ranked by."""
    scores = [normalised(h, alpha) if beam == 1 else h.norm_score for h in hypotheses]  # beam: its own
    listed = listing().join(
        ngettext(
            "{output}: sum {sum}, normalised {score} ({count} token)",
            "{output}: sum {sum}, normalised {score} ({count} tokens)",
            len(h.tokens) + 1,
        ).format(output=repr(o), sum=number(h.score, ".4f"), score=number(n, ".4f"), count=len(h.tokens) + 1)
        for o, h, n in zip(outputs, hypotheses, scores, strict=True)
    )
    if beam == 1:
        return _(
            "Greedy search as `attn-mt translate` runs it takes the most probable token at each step and "
            "ranks no outputs: its own score is the sum of the log-probabilities, as on the tree. Finished, "
            "with the sum and the normalised score (the sum divided by GNMT's length penalty "
            "((5 + n) / 6)^{alpha}, n tokens with the <eos>; what `attn-mt score` and the 'your own "
            "translation' panel give): {listed}."
        ).format(alpha=number(alpha, "g"), listed=listed)
    return _(
        "Beam search (beam {beam}) as `attn-mt translate` runs it ranks the finished outputs by their "
        "normalised score; the tree shows the sums. Finished, with the sum and the normalised score (the sum "
        "divided by GNMT's length penalty ((5 + n) / 6)^{alpha}, n tokens with the <eos>; what `attn-mt "
        "score` and the 'your own translation' panel give): {listed}."
    ).format(beam=beam, alpha=number(alpha, "g"), listed=listed)


def stepping_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """One output step of a run's greedy or beam search: its query, scores, mask, weights, context, and
    the live hypotheses with their top next tokens; and, given a reference, the teacher-forced view."""
    if not runs:
        raise LabError(_("no run: start the lab as `attn-mt lab RUN_DIR` to step through a trained model"))
    name = choice(state, "run", next(iter(runs)), tuple(runs))
    run = runs[name]
    if "model.scoring" in run.config.model.switches:
        raise LabError(
            _(
                "run: {name} scores with model.scoring: dot; stepping shows the book's additive scoring only"
            ).format(name=name)
        )
    engine = request_engine(run)
    sentence = text(state, "sentence", "", 300)
    beam = whole(state, "beam", 1, 1, MAX_BEAM)
    if len(run.tgt_vocab) < 2 * beam:  # the search's own check (DecodeSettings), said in the page's language
        raise LabError(
            _("beam: beam size {beam} needs at least {needed} target vocabulary entries, got {size}").format(
                beam=beam, needed=2 * beam, size=len(run.tgt_vocab)
            )
        )
    try:  # every beam is shown whole: its n-best is the beam
        settings = DecodeSettings.resolve(run.config.decode, beam, beam, vocab_size=len(run.tgt_vocab))
    except UserError as exc:
        raise LabError(f"beam: {exc}") from None
    transformer = run.config.model.type == "transformer"
    layers = run.config.model.depths.decoder
    layer = whole(state, "layer", layers, 1, layers) - 1 if transformer else 0  # counted from 1 on the page
    t = whole(state, "step", 0, 0, 10_000)
    recorder, hypotheses, source = run_search(engine, sentence, settings, layer, keep=t)
    if t >= recorder.count:
        raise LabError(
            ngettext(
                "step: the search took {count} step (0 to {last})",
                "step: the search took {count} steps (0 to {last})",
                recorder.count,
            ).format(count=recorder.count, last=recorder.count - 1)
        )
    row = whole(state, "row", 0, 0, 10_000)
    alive = len(live(recorder.steps[t].prefixes, recorder.steps[t].scores))
    if row >= alive:
        raise LabError(
            ngettext(
                "row: step {step} has {count} live hypothesis (0 to {last})",
                "row: step {step} has {count} live hypotheses (0 to {last})",
                alive,
            ).format(step=t, count=alive, last=alive - 1)
        )
    vocab = run.tgt_vocab
    replace = text(state, "replace", "", 100).strip()
    free = hypotheses
    if replace:  # the learner's token at step t, then the search decodes on from it
        prefix = replacement_prefix(vocab, recorder.steps[t], row, replace)
        recorder, hypotheses, source = run_search(engine, sentence, settings, layer, keep=t, prefix=prefix)
        row = 0
    record = recorder.steps[t]
    alive_rows = live(record.prefixes, record.scores)
    rows = len(alive_rows)
    prefix_labels = [" ".join(vocab.labels(p)) or "<bos>" for p, _score in alive_rows]
    top = record.log_probs[row].topk(min(TOP, record.log_probs.shape[-1]))
    c = record.captured
    mask = ~c["mask"][row]  # (S,) True where a key is masked
    tensors = [
        shown(
            _("live hypotheses: score so far"),
            torch.tensor([score for _prefix, score in alive_rows]).unsqueeze(1),  # (N, 1)
            ["N", "1"],
            rows=prefix_labels,
            scale="centred",
            tokens=True,
        ),
        shown(
            _("row {row}: top next tokens, log-probability").format(row=row),
            top.values.unsqueeze(0),  # (1, TOP)
            ["1", "V"],
            columns=vocab.labels(top.indices.tolist()),
            scale="centred",
            tokens=True,
        ),
    ]
    if transformer:
        names = (
            _("query (layer {layer})").format(layer=layer + 1),
            _("scores q·k/√d (layer {layer})").format(layer=layer + 1),
            _("attention weights (layer {layer})").format(layer=layer + 1),
            _("context (heads merged, before W_o)"),
        )
        query_axes, key_axes, weights = ["h", "d"], ["h", "S"], record.weights[row, layer]  # (h, S)
        lines = [
            line_of(
                DotProductAttention.attend,
                "torch.matmul(queries, keys.transpose",
                "DotProductAttention.attend",
            ),
        ]
    else:
        names = (
            _("query: the decoder's previous hidden state"),
            _("scores w_vᵀ tanh(W_q q + W_k k)"),
            _("attention weights"),
            _("context: weighted sum of the encoder outputs"),
        )
        query_axes, key_axes, weights = ["H"], ["S"], record.weights[row]  # (S,)
        lines = [
            line_of(AdditiveAttention.attend, "scores = self.w_v", "AdditiveAttention.attend"),
            line_of(BahdanauDecoder.step, "context = self.attention.attend", "BahdanauDecoder.step"),
        ]
    tensors += [  # the source tokens on the columns of every tensor over the keys
        shown(names[0], c["query"][row], query_axes, scale="centred"),
        shown(names[1], c["scores"][row], key_axes, mask=mask, columns=source, scale="centred", tokens=True),
        shown(
            _("mask (1: key may be attended)"),
            c["mask"][row].float(),
            ["S"],
            columns=source,
            scale="binary",
            tokens=True,
        ),
        shown(names[2], weights, key_axes, mask=mask, columns=source, scale="weights", tokens=True),
        shown(names[3], c["context"][row], ["H"], scale="centred"),
    ]
    lines += [
        code(greedy_search if beam == 1 else beam_search),
        code(StepRecorder.step, _("StepRecorder.step (the lab's)")),
    ]
    outputs = [vocab.detokenize(h.tokens) for h in hypotheses]
    if replace:
        lines.append(line_of(greedy_search, "forced = _forced_ids(prefix", _("greedy_search (its prefix)")))
    texts = {
        "translation": outputs[0],
        "steps": ngettext(
            "step {step} of {steps} (0-based); {count} live hypothesis; {chosen}",
            "step {step} of {steps} (0-based); {count} live hypotheses; {chosen}",
            rows,
        ).format(
            step=t,
            steps=recorder.count,
            count=rows,
            chosen=chosen_after(recorder, hypotheses, t, vocab.labels),
        ),
        "checkpoint": checkpoint_text(name, run),
    }
    notes = [*unknown_words(run, sentence), finished_note(hypotheses, outputs, settings.length_penalty, beam)]
    if replace:
        notes.insert(
            0,
            _(
                "Step {step}'s token replaced by {token}: the search ran again with the prefix {prefix} "
                "forced (search.py's own prefix, as `attn-mt translate --prefix`) and decoded on from there. "
                "Without it: {free}."
            ).format(
                step=t,
                token=repr(replace),
                prefix=repr(" ".join(vocab.labels(prefix))),
                free=repr(vocab.detokenize(free[0].tokens)),
            ),
        )
        texts["replaced"] = outputs[0]
    reference = text(state, "reference", "", 300).strip()
    if reference:
        forced = teacher_forced(engine, sentence, reference)
        tensors.append(
            shown(
                _("teacher forcing: log p(reference token) | log p(model's pick)"),
                torch.stack([forced["reference_log_probs"], forced["pick_log_probs"]], dim=1),  # (T, 2)
                ["T", "2"],
                rows=[f"{r} | {p}" for r, p in zip(forced["reference"], forced["picks"], strict=True)],
                scale="centred",
                tokens=True,
            )
        )
        if t < forced["cross"].shape[-2]:
            cross = forced["cross"][layer, :, t] if transformer else forced["cross"][t]
            tensors.append(
                shown(
                    _("teacher-forced attention weights at step {step}").format(step=t),
                    cross,
                    ["h", "S"] if transformer else ["S"],
                    columns=source,
                    scale="weights",
                    tokens=True,
                )
            )
        notes.append(
            _(
                "Teacher forcing (training) feeds the reference's previous token at every position, whatever "
                "the model would have picked; decoding (inference) feeds its own pick. Rows: reference | "
                "model's pick."
            )
        )
    return answer(
        tensors,
        lines,
        notes,
        text=texts,
        steps=recorder.count,
        rows=rows,
        tree=beam_tree(recorder, hypotheses, vocab.labels),
    )
