"""Lab panel of the book section "Attention Pooling: Nadaraya-Watson Kernel Regression", on the
functions of `attn-mt demo nadaraya-watson` (demos/nadaraya_watson.py).

Shapes: N training points (keys and values), Q test points (queries); while training the parametric
w, each training point queries the K = N - 1 others (leave-one-out). w multiplies the distance in the
kernel exp(-((x - x_i) w)^2 / 2), so the kernel's bandwidth is 1/w: a larger w is a narrower kernel.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from attn_mt.demos.nadaraya_watson import (
    KERNELS,
    LEARNING_RATE,
    average_pooling,
    gaussian_attention_weights,
    kernel_attention_weights,
    kernel_spread,
    leave_one_out,
    make_data,
    mean_squared_error,
    predict_parametric,
    train_parametric,
)
from attn_mt.i18n import N_, _, current_language, in_language
from attn_mt.lab.inputs import choice, real, whole
from attn_mt.lab.shown import answer, code, number, plot, shown

MAX_EPOCHS = 200
KERNEL_TEXT = {
    "gaussian": N_("Gaussian, k(u) = exp(-u² / 2)"),
    "boxcar": N_("boxcar, k(u) = 1 where |u| ≤ 1, else 0"),
    "epanechnikov": N_("Epanechnikov, k(u) = max(0, 1 - u²)"),
}
KERNEL_NAMES = {"gaussian": N_("Gaussian"), "boxcar": N_("boxcar"), "epanechnikov": N_("Epanechnikov")}
PREDICTIONS = {  # the three poolings' names in the plot and the errors
    "average": N_("average"),
    "nonparametric": N_("nonparametric"),
    "parametric": N_("parametric"),
}
# The panel's training: at the book's learning rate (0.5) the summed loss's first step takes w most of
# the way, and the curve is flat after it; at 0.01 the loss visibly falls over the first 20 epochs.
EPOCHS, LR = 50, 0.01
KERNEL_QUERY = 2.5  # the test input whose kernel the panel draws


def bandwidth(w: float) -> str:
    """The kernel's bandwidth 1/|w| as text (infinite at w = 0: every key weighs the same)."""
    return number(1 / abs(w), ".3g") if w else "∞"


def nadaraya_watson_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Average, nonparametric (fixed w) and trained parametric pooling of the chapter's data, and the
    kernel of one query for w and 2w; an answer computed before (the defaults, at the lab's start) is
    given again."""
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    w = real(state, "w", 1.0, 0.05, 20.0)
    epochs = whole(state, "epochs", EPOCHS, 1, MAX_EPOCHS)
    lr = real(state, "lr", LR, 0.001, 5.0)
    point = whole(state, "point", 10, 0, 49)
    kernel = choice(state, "kernel", "gaussian", KERNELS)
    return pooled(seed, w, epochs, lr, point, kernel, current_language())


def warm_up(lang: str = "en") -> None:
    """Compute the panel's default answer before the lab serves: its first training imports what torch's
    optimiser loads on first use (torch._dynamo, over a second) and starts autograd, so the first request,
    default or not, needs neither; `lang` is the lab's language, whose default answer is then kept."""
    with in_language(lang):
        nadaraya_watson_panel({})


@lru_cache(maxsize=64)  # a slider moved back and forth asks again for answers it had
def pooled(seed: int, w: float, epochs: int, lr: float, point: int, kernel: str, lang: str) -> dict[str, Any]:
    """The panel's answer for these inputs in `lang` (nadaraya_watson_panel); one object, never changed."""
    generator = torch.Generator().manual_seed(seed)
    data = make_data(generator)
    n_test = data.x_test.shape[0]
    average = average_pooling(data.y_train, n_test)  # (Q,)
    weights = kernel_attention_weights(data.x_test, data.x_train, w, kernel)  # (Q, N)
    centre = torch.tensor([KERNEL_QUERY])  # (1,)
    kernels = {f"w = {v:g}": kernel_attention_weights(centre, data.x_train, v, kernel)[0] for v in (w, 2 * w)}
    spreads = [float(kernel_spread(centre, data.x_train, v, kernel)[0]) for v in (w, 2 * w)]
    empty = int((weights.sum(-1) == 0).sum())  # test inputs whose window holds no training input
    nonparametric = weights @ data.y_train  # (Q,)
    model, losses = train_parametric(data, generator, lr, epochs)
    parametric = predict_parametric(model, data.x_test, data)  # (Q,)
    learned = model.w.item()
    keys = leave_one_out(data.x_train)  # (N, N - 1)
    query = data.x_train[point : point + 1]  # (1,)
    with torch.no_grad():
        held_out = gaussian_attention_weights(query, keys[point], model.w)  # (1, N - 1)
    predictions = {"average": average, "nonparametric": nonparametric, "parametric": parametric}
    truth, samples = _("truth"), _("training samples")
    plots = [
        plot(
            _("predictions"),
            "x",
            "y",
            [
                (truth, data.x_test, data.y_truth),
                (samples, data.x_train, data.y_train),
                *((_(PREDICTIONS[label]), data.x_test, y_hat) for label, y_hat in predictions.items()),
            ],
            points=(samples,),
        ),
        plot(
            _("parametric training loss (summed)"),
            _("epoch"),
            _("loss"),
            [(_("loss"), range(1, epochs + 1), losses)],
        ),
        plot(
            _("kernel of the query x = {query}: its weight on each training input").format(
                query=number(KERNEL_QUERY)
            ),
            _("training input x_i"),
            _("attention weight"),
            [(label, data.x_train, kernel) for label, kernel in kernels.items()],
        ),
    ]
    tensors = [
        shown(
            _("nonparametric attention weights"),
            weights,
            ["Q", "N"],
            note=_("{kernel} kernel, w = {w} (bandwidth 1/w = {bandwidth})").format(
                kernel=_(KERNEL_NAMES[kernel]), w=number(w), bandwidth=bandwidth(w)
            ),
        ),
        shown(
            _("the same weights, zoomed: 0 to their largest"),
            weights,
            ["Q", "N"],
            scale="sequential",
            note=_("its own scale, so that a wide kernel's small weights show their shape"),
        ),
        shown(
            _("parametric attention weights"),
            model.attention_weights,
            ["Q", "N"],
            note=_("learned w = {w} (bandwidth 1/w = {bandwidth})").format(
                w=number(learned, ".4f"), bandwidth=bandwidth(learned)
            ),
        ),
        shown(_("leave_one_out(x_train)[i]: the keys training point i sees"), keys[point], ["K"]),
        shown(
            _("their weights for training point i"),
            held_out[0],
            ["K"],
            note=f"i = {point}, x_i = {number(query.item(), '.4f')}",
        ),
    ]
    errors = ", ".join(
        f"{_(PREDICTIONS[k])} {number(mean_squared_error(y, data.y_truth), '.4f')}"
        for k, y in predictions.items()
    )
    kernel_note = _(
        "Kernel: {kernel}, with u = (x - x_i) w; each weight is k(u) divided by the sum over "
        "the training inputs."
    ).format(kernel=_(KERNEL_TEXT[kernel]))
    if empty:
        kernel_note += " " + _(
            "{empty} of the {total} test inputs have no training input within 1/w of them: "
            "their weights are all 0, and so is their prediction."
        ).format(empty=empty, total=weights.shape[0])
    if kernel != "gaussian":
        kernel_note += " " + _("The parametric model keeps the Gaussian kernel.")
    notes = [
        _("Test mean squared error against the noiseless curve: {errors}.").format(errors=errors),
        kernel_note,
        _("The parametric w was trained for {epochs} epochs at learning rate {lr} and ended at {w}.").format(
            epochs=epochs, lr=number(lr), w=number(learned, ".4f")
        ),
        _(
            "w multiplies the distance, so it is not the kernel's width: the bandwidth is 1/w, and a "
            "larger w is a narrower kernel that averages fewer, closer points. For the query x = {query} the "
            "training inputs, weighted by the kernel, lie at a distance of {spread} for w = {w} and "
            "{spread2} for 2w = {w2} (the root mean square distance, a width in units of x)."
        ).format(
            query=number(KERNEL_QUERY),
            spread=number(spreads[0], ".3f"),
            w=number(w),
            spread2=number(spreads[1], ".3f"),
            w2=number(2 * w),
        ),
        _(
            "The largest nonparametric weight is {largest}: on the fixed 0–1 scale a wide "
            "kernel's weights, spread over many training points, all look pale."
        ).format(largest=number(float(weights.max()), ".3f")),
        _(
            "The book trains at learning rate {lr}: on the summed loss, its first step takes w "
            "most of the way and the loss curve is flat after it. This panel starts at a smaller rate so "
            "that the curve shows the learning."
        ).format(lr=number(LEARNING_RATE)),
        _(
            "While training, training point {point} queries the other {others} points only. With its own "
            "point among the keys, the loss would be smallest when w grows without bound (each point then "
            "predicts its own noisy y exactly), so the model would learn to copy the noise."
        ).format(point=point, others=keys.shape[1]),
        _("Heatmaps: rows are the 50 sorted test inputs, columns the 50 sorted training inputs."),
    ]
    lines = [
        code(make_data),
        code(kernel_attention_weights),
        code(gaussian_attention_weights),
        code(kernel_spread),
        code(average_pooling),
        code(train_parametric),
        code(leave_one_out),
        code(predict_parametric),
    ]
    return answer(
        tensors,
        lines,
        notes,
        plots,
        text={"learned_w": _("learned w = {w}").format(w=number(learned, ".6f"))},
        spreads=spreads,
    )
