"""Lab panel "your own translation": the model's probability of a learner's French for an English
sentence, token by token, by forced decoding (decoding/scoring.py, as `attn-mt score`), beside the
model's own translation scored the same way.

Shapes: T target tokens (with the closing <eos>).
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.decoding.scoring import Scored, score_with
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.lab.engines import checkpoint_text, request_engine, unknown_words
from attn_mt.lab.inputs import LabError, choice, text
from attn_mt.lab.shown import answer, code, shown
from attn_mt.run.opened import LoadedRun


def token_rows(label: str, scored: Scored) -> list[dict[str, Any]]:
    """Per-token log-probabilities and probabilities of one scored pair, tokens on the columns."""
    log_probs = torch.tensor(scored.token_log_probs, dtype=torch.float64)  # (T,)
    tokens = [*scored.target_tokens, "<eos>"]
    return [
        shown(f"{label}: log p(token)", log_probs, ["T"], columns=tokens),
        shown(f"{label}: p(token)", log_probs.exp(), ["T"], columns=tokens),
    ]


def own_translation_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """Forced decoding of the learner's target and of the model's own output for one source sentence."""
    if not runs:
        raise LabError("no run: start the lab as `attn-mt lab RUN_DIR` to score translations")
    name = choice(state, "run", next(iter(runs)), tuple(runs))
    run = runs[name]
    sentence = text(state, "sentence", "", 300).strip()
    target = text(state, "target", "", 300).strip()
    if not sentence or not target:
        raise LabError("type an English sentence and your French translation of it")
    engine = request_engine(run)
    own = engine.translate([sentence])[0]
    targets = [target, own.text] if own.text else [target]  # an empty output has nothing to score
    try:
        scored = score_with(engine, [sentence] * len(targets), targets)
    except UserError as exc:
        raise LabError(str(exc)) from None
    yours = scored[0]
    tensors = token_rows("yours", yours)
    texts = {"yours": f"yours: {target} — log p = {yours.log_prob:.4f}, normalised {yours.score:.4f}"}
    alpha = run.config.decode.length_penalty
    notes = [
        "Each token's probability is the model's, given the English sentence and the French tokens before "
        "it (forced decoding); the total log p is their sum, and the normalised score divides it by GNMT's "
        f"length penalty ((5 + T) / 6)^{alpha:g}, the number beam search ranks outputs by.",
        *yours.warnings,
        *unknown_words(run, sentence),
        *unknown_words(run, target, target=True),
    ]
    if len(scored) == 2:
        model = scored[1]
        tensors += token_rows("the model's", model)
        texts["model"] = (
            f"the model's: {own.text} — log p = {model.log_prob:.4f}, normalised {model.score:.4f}"
        )
        notes.append(
            f"The model's own output (beam {run.config.decode.beam_size}) scored "
            f"{own.hypotheses[0].score:.4f} in its search; forced decoding gives {model.log_prob:.4f}."
        )
    texts["checkpoint"] = checkpoint_text(name, run)
    return answer(tensors, [code(score_with), code(Translator.force)], notes, text=texts)
