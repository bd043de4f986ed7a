"""Lab panel "your own translation": the model's probability of a learner's French for an English
sentence, token by token, by forced decoding (decoding/scoring.py, as `attn-mt score`), beside the
model's own translation scored the same way.

Shapes: T target tokens (with the closing <eos>).
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.data.encode import encode_sources
from attn_mt.decoding.scoring import Scored, score_with
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.i18n import _, ngettext
from attn_mt.lab.engines import checkpoint_text, request_engine, unknown_words
from attn_mt.lab.inputs import LabError, choice, text
from attn_mt.lab.shown import answer, code, number, shown
from attn_mt.limits import MAX_LENGTH_PENALTY, length_penalty_problem
from attn_mt.run.opened import LoadedRun


def token_rows(scored: Scored, yours: bool) -> list[dict[str, Any]]:
    """Per-token log-probabilities and probabilities of one scored pair (the learner's target or the
    model's own output), tokens on the columns."""
    log_probs = torch.tensor(scored.token_log_probs, dtype=torch.float64)  # (T,)
    tokens = [*scored.target_tokens, "<eos>"]
    if yours:
        names = _("yours: log p(token)"), _("yours: p(token)")
    else:
        names = _("the model's: log p(token)"), _("the model's: p(token)")
    return [
        shown(names[0], log_probs, ["T"], columns=tokens, tokens=True),
        shown(names[1], log_probs.exp(), ["T"], columns=tokens, scale="probability", tokens=True),
    ]


def input_notes(engine: Translator, yours: Scored) -> list[str]:
    """What score_with warns about the learner's pair, said in the language in force: a source cut to the
    model's length, an empty target (unknown words: engines.unknown_words)."""
    info = encode_sources([yours.source_tokens], engine.src_vocab, max_len=engine.max_src).info[0]
    notes = []
    if info.truncated:
        notes.append(
            ngettext(
                "The source is cut to {limit} tokens, <eos> included ({count} token dropped): the end of "
                "the sentence is not read; split it into shorter sentences.",
                "The source is cut to {limit} tokens, <eos> included ({count} tokens dropped): the end of "
                "the sentence is not read; split it into shorter sentences.",
                info.truncated,
            ).format(limit=info.max_len, count=info.truncated)
        )
    if not yours.target_tokens:
        notes.append(_("Your target is empty: it is scored as the model ending at once (<eos> alone)."))
    return notes


def length_penalty(name: str, run: LoadedRun) -> float:
    """The run's length penalty alpha, which the normalised scores divide by; a run whose config holds one
    outside 0..MAX_LENGTH_PENALTY is refused in the learner's language (scoring's own refusal is English)."""
    alpha = run.config.decode.length_penalty
    if length_penalty_problem(alpha):
        raise LabError(
            _(
                "run {name}: its length penalty (decode.length_penalty in its config.yaml) must be "
                "from {low} to {high}, got {alpha}"
            ).format(name=name, low=number(0), high=number(MAX_LENGTH_PENALTY), alpha=number(alpha))
        )
    return alpha


def own_translation_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """Forced decoding of the learner's target and of the model's own output for one source sentence."""
    if not runs:
        raise LabError(_("no run: start the lab as `attn-mt lab RUN_DIR` to score translations"))
    name = choice(state, "run", next(iter(runs)), tuple(runs))
    run = runs[name]
    sentence = text(state, "sentence", "", 300).strip()
    target = text(state, "target", "", 300).strip()
    if not sentence or not target:
        raise LabError(_("type an English sentence and your French translation of it"))
    alpha = length_penalty(name, run)
    engine = request_engine(run)
    own = engine.translate([sentence])[0]
    targets = [target, own.text] if own.text else [target]  # an empty output has nothing to score
    try:
        scored = score_with(engine, [sentence] * len(targets), targets)
    except UserError as exc:
        raise LabError(str(exc)) from None
    yours = scored[0]
    tensors = token_rows(yours, yours=True)
    texts = {
        "yours": _("yours: {target} — log p = {log_p}, normalised {score}").format(
            target=target, log_p=number(yours.log_prob, ".4f"), score=number(yours.score, ".4f")
        )
    }
    notes = [
        _(
            "Each token's probability is the model's, given the English sentence and the French tokens "
            "before it (forced decoding); the total log p is their sum, and the normalised score divides it "
            "by GNMT's length penalty ((5 + T) / 6)^{alpha}, the number beam search ranks outputs by."
        ).format(alpha=number(alpha, "g")),
        *input_notes(engine, yours),
        *unknown_words(run, sentence),
        *unknown_words(run, target, target=True),
    ]
    if len(scored) == 2:
        model = scored[1]
        tensors += token_rows(model, yours=False)
        texts["model"] = _("the model's: {output} — log p = {log_p}, normalised {score}").format(
            output=own.text, log_p=number(model.log_prob, ".4f"), score=number(model.score, ".4f")
        )
        notes.append(
            _(
                "The model's own output (beam {beam}) scored {search} in its search; forced decoding gives "
                "{forced}."
            ).format(
                beam=run.config.decode.beam_size,
                search=number(own.hypotheses[0].score, ".4f"),
                forced=number(model.log_prob, ".4f"),
            )
        )
    texts["checkpoint"] = checkpoint_text(name, run)
    return answer(tensors, [code(score_with), code(Translator.force)], notes, text=texts)
