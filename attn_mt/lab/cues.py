"""Lab panel of the book section "Queries, Keys, and Values" (attention cues): the chapter's desk of
objects, each a key of features and a value (the object itself), attended to without a query (the
non-volitional cue: what stands out on its own) and with one (the volitional cue: what the learner
wants), both as attn-mt's scaled dot-product attention computes weights.

Shapes: K objects (keys and values), k = 2 features per key (how much an object stands out, how much
it is something to read), Q = 1 query.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attn_mt.i18n import N_, _
from attn_mt.lab.inputs import real
from attn_mt.lab.shown import answer, code, number, shown
from attn_mt.models.attention import DotProductAttention, masked_softmax

# The chapter's desk: a red coffee cup among things to read. Features: (stands out, to read).
OBJECTS = (N_("newspaper"), N_("research paper"), N_("red coffee cup"), N_("notebook"), N_("book"))
FEATURES = (N_("stands out"), N_("to read"))
KEYS = ((0.2, 0.7), (0.1, 1.0), (1.0, -0.5), (0.1, 0.4), (0.2, 0.9))
SALIENCE = 4.0  # how strongly what stands out draws the eye without a query: weights softmax(4 x stands out)


def cues_panel(state: dict[str, Any]) -> dict[str, Any]:
    """The desk's objects as keys and values; the weights with no query (each key's own salience) and
    with the learner's query (q · k / √k), and the object each picks most."""
    wants = [real(state, key, default, -3.0, 3.0) for key, default in (("stand_out", 0.0), ("read", 2.0))]
    keys = torch.tensor([KEYS])  # (1, K, k)
    values = torch.eye(len(OBJECTS)).unsqueeze(0)  # (1, K, K): each value is one object
    salience = masked_softmax(SALIENCE * keys[..., :1].transpose(1, 2), None)  # (1, 1, K)
    query = torch.tensor([[wants]])  # (1, 1, k)
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        attention(query, keys, values)
    volitional = attention.attention_weights  # (1, 1, K)
    scores = torch.matmul(query, keys.transpose(1, 2)) / math.sqrt(keys.shape[-1])  # (1, 1, K)
    objects = [_(name) for name in OBJECTS]
    features = [_(name) for name in FEATURES]
    picked = [objects[int(w.argmax())] for w in (salience[0, 0], volitional[0, 0])]
    tensors = [
        shown(_("keys: the objects' features"), keys[0], ["K", "k"], rows=objects, columns=features),
        shown(_("query: what you want"), query[0, 0], ["k"], columns=features),
        shown(_("non-volitional weights: no query"), salience[0], ["Q", "K"], columns=objects),
        shown(_("scores q · k / √k"), scores[0], ["Q", "K"], columns=objects),
        shown(_("volitional weights: softmax of the scores"), volitional[0], ["Q", "K"], columns=objects),
    ]
    top = float(salience[0, 0].max())
    notes = [
        _(
            "Every object is a key (its features) and a value (the object). Without a query, what draws the "
            "eye is what stands out on its own, the non-volitional cue: here the weights are "
            "softmax({salience} × stands out), each key's 'stands out' feature times a salience of "
            "{salience} (how strongly what stands out draws the eye), the same whatever you want. The most "
            "weight, {top}, goes to the {picked}."
        ).format(salience=number(SALIENCE), top=number(top, ".3f"), picked=picked[0]),
        _(
            "With a query, the volitional cue, attention compares what you want with every key: the weights "
            "are softmax(q · k / √k), and now the most weight goes to the {picked}. Change the query: "
            "the keys and values stay as they are, only the query decides what is attended."
        ).format(picked=picked[1]),
        _(
            "Attention pooling returns the weighted sum of the values; with one-hot values it is the weights "
            "themselves, one share per object."
        ),
    ]
    lines = [code(DotProductAttention.attend), code(masked_softmax)]
    picks = _("no query: {first}; your query: {second}").format(first=picked[0], second=picked[1])
    return answer(tensors, lines, notes, text={"picked": picks})
