"""Attention pooling as Nadaraya-Watson kernel regression (book section "Attention Pooling").

Shapes: N training inputs (the keys and values), Q queries (test inputs, or training inputs with
their own point left out, in which case each query sees K = N - 1 keys).
Three estimators of y = 2 sin(x) + x^0.8 from noisy samples: average pooling, non-parametric
attention pooling with a Gaussian kernel, and the same kernel with a learnable w. The kernel is
exp(-((x - x_i) w)^2 / 2): w multiplies the distance, so it is the inverse of the kernel's width (its
bandwidth is 1/w) and a larger w makes the kernel narrower.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attn_mt.demos.figures import draw_heatmap, new_figure, prepare_out_dir, save_figure, to_lists, write_json
from attn_mt.i18n import N_, _

NAME = "nadaraya-watson"
N_TRAIN = 50
X_MAX = 5.0
NOISE_STD = 0.5
TEST_STEP = 0.1
LEARNING_RATE = 0.5
EPOCHS = 5
TITLES = {  # the estimators as the book's section headings name them
    "average": N_("average pooling"),
    "nonparametric": N_("nonparametric attention pooling"),
    "parametric": N_("parametric attention pooling"),
}


def target_function(x: torch.Tensor) -> torch.Tensor:
    """The chapter's regression target f(x) = 2 sin(x) + x^0.8."""
    return 2 * torch.sin(x) + x**0.8


@dataclass
class RegressionData:
    """Sorted noisy training samples and the noiseless truth on the test grid."""

    x_train: torch.Tensor  # (N,)
    y_train: torch.Tensor  # (N,)
    x_test: torch.Tensor  # (Q,)
    y_truth: torch.Tensor  # (Q,)


def make_data(generator: torch.Generator, n_train: int = N_TRAIN) -> RegressionData:
    """The chapter's data: x ~ U[0, 5) sorted, y = f(x) + noise, test grid 0, 0.1, ..., 4.9.

    The noise is the book's torch.normal(0.0, 0.5, ...): Gaussian with mean 0 and standard
    deviation 0.5 (variance 0.25).
    """
    x_train, _ = torch.sort(torch.rand(n_train, generator=generator) * X_MAX)  # (N,)
    noise = torch.normal(0.0, NOISE_STD, (n_train,), generator=generator)  # (N,)
    x_test = torch.arange(0.0, X_MAX, TEST_STEP)  # (Q,)
    return RegressionData(x_train, target_function(x_train) + noise, x_test, target_function(x_test))


def gaussian_attention_weights(
    queries: torch.Tensor, keys: torch.Tensor, w: torch.Tensor | float = 1.0
) -> torch.Tensor:
    """Weights softmax_k(-((q - k_k) w)^2 / 2) for queries (Q,) over keys (Q, K) or shared keys (K,).

    w scales the distance: the kernel's bandwidth is 1/w, so a larger w gives a narrower kernel.
    """
    distances = queries.unsqueeze(-1) - keys  # (Q, K)
    return torch.softmax(-((distances * w) ** 2) / 2, dim=-1)  # (Q, K)


KERNELS = ("gaussian", "boxcar", "epanechnikov")  # the current book's three


def kernel_attention_weights(
    queries: torch.Tensor, keys: torch.Tensor, w: float = 1.0, kernel: str = "gaussian"
) -> torch.Tensor:
    """Weights k(u_k) / sum_k k(u_k), u = (q - k) w, for queries (Q,) over keys (Q, K) or (K,), with the
    Gaussian k(u) = exp(-u^2 / 2), the boxcar k(u) = 1 where |u| <= 1, or Epanechnikov's
    k(u) = max(0, 1 - u^2). A query whose window (|u| <= 1) holds no key gets all-zero weights."""
    if kernel == "gaussian":
        return gaussian_attention_weights(queries, keys, w)
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    u = (queries.unsqueeze(-1) - keys) * w  # (Q, K)
    raw = (u.abs() <= 1).to(u.dtype) if kernel == "boxcar" else (1 - u**2).clamp(min=0)  # (Q, K)
    total = raw.sum(dim=-1, keepdim=True)  # (Q, 1)
    return torch.where(total > 0, raw / total.clamp(min=torch.finfo(u.dtype).tiny), torch.zeros_like(raw))


def kernel_spread(
    queries: torch.Tensor, keys: torch.Tensor, w: torch.Tensor | float, kernel: str = "gaussian"
) -> torch.Tensor:
    """How far from each query (Q,) its weights reach over keys (K,): sqrt(sum_k a_k (q - k_k)^2), (Q,).

    For keys spread densely around the query this is proportional to the bandwidth 1/w.
    """
    weights = kernel_attention_weights(queries, keys, w, kernel)  # (Q, K)
    distances = queries.unsqueeze(-1) - keys  # (Q, K)
    return (weights * distances**2).sum(dim=-1).sqrt()  # (Q,)


def average_pooling(y_train: torch.Tensor, n_queries: int) -> torch.Tensor:
    """Predict the mean training target for every one of `n_queries` queries."""
    return y_train.mean().expand(n_queries).clone()  # (Q,)


def nonparametric_pooling(
    queries: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya-Watson estimate with the Gaussian kernel: (predictions (Q,), weights (Q, N))."""
    weights = gaussian_attention_weights(queries, x_train)  # (Q, N)
    return weights @ y_train, weights


class NWKernelRegression(nn.Module):
    """Parametric attention pooling: the Gaussian kernel with a learnable w (bandwidth 1/w).

    Book section "Attention Pooling: Nadaraya-Watson Kernel Regression", eq. for parametric
    attention pooling: f(x) = sum_i softmax(-((x - x_i) w)^2 / 2) y_i.
    """

    def __init__(self, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(1, generator=generator))
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Queries (Q,), keys and values (Q, K) -> predictions (Q,); keeps the (Q, K) weights."""
        if keys.shape != values.shape or keys.shape[0] != queries.shape[0]:
            raise ValueError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must both be "
                f"(Q, K) with Q = {queries.shape[0]} queries"
            )
        self.attention_weights = gaussian_attention_weights(queries, keys, self.w)  # (Q, K)
        return (self.attention_weights * values).sum(dim=-1)  # (Q,)


def leave_one_out(x: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N, N - 1): row i holds every element of `x` except x[i], in order."""
    n = x.shape[0]
    keep = ~torch.eye(n, dtype=torch.bool)  # (N, N)
    return x.expand(n, n)[keep].reshape(n, n - 1)  # (N, N - 1)


def squared_error(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-example loss (prediction - target)^2, the book's PyTorch `nn.MSELoss(reduction="none")`."""
    return (predictions - targets) ** 2


def train_parametric(
    data: RegressionData, generator: torch.Generator, lr: float = LEARNING_RATE, epochs: int = EPOCHS
) -> tuple[NWKernelRegression, list[float]]:
    """Fit w by full-batch SGD on the summed loss, each training point querying the others."""
    model = NWKernelRegression(generator)
    keys = leave_one_out(data.x_train)  # (N, N - 1)
    values = leave_one_out(data.y_train)  # (N, N - 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _epoch in range(epochs):
        optimizer.zero_grad()
        loss = squared_error(model(data.x_train, keys, values), data.y_train).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


def predict_parametric(
    model: NWKernelRegression, queries: torch.Tensor, data: RegressionData
) -> torch.Tensor:
    """Predictions (Q,) of a trained model, every query attending to all N training points."""
    n_queries, n_train = queries.shape[0], data.x_train.shape[0]
    with torch.no_grad():
        keys = data.x_train.expand(n_queries, n_train)  # (Q, N)
        values = data.y_train.expand(n_queries, n_train)  # (Q, N)
        return model(queries, keys, values)  # (Q,)


def mean_squared_error(predictions: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean of (prediction - target)^2."""
    return float(((predictions - targets) ** 2).mean())


def _plot_predictions(data: RegressionData, predictions: dict[str, torch.Tensor], path: Path) -> str:
    fig, axes = new_figure(ncols=len(predictions))
    for ax, (label, y_hat) in zip(axes, predictions.items(), strict=True):
        ax.plot(data.x_test, data.y_truth, label=_("truth"))
        ax.plot(data.x_test, y_hat, linestyle="--", label=_("prediction"))
        ax.plot(data.x_train, data.y_train, "o", alpha=0.5, markersize=3)
        ax.set(xlim=(0, X_MAX), ylim=(-1, 5), xlabel="x", ylabel="y", title=_(TITLES[label]))
        ax.legend(fontsize="small")
    return save_figure(fig, path)


def _plot_losses(losses: list[float], path: Path) -> str:
    fig, (ax,) = new_figure()
    ax.plot(range(1, len(losses) + 1), losses, marker="o")
    ax.set(xlabel=_("epoch"), ylabel=_("summed training loss"), title=_(TITLES["parametric"]))
    return save_figure(fig, path)


def _plot_weights(weights: dict[str, torch.Tensor], path: Path) -> str:
    fig, axes = new_figure(ncols=len(weights))
    for ax, (label, matrix) in zip(axes, weights.items(), strict=True):
        draw_heatmap(
            fig,
            ax,
            matrix,
            xlabel=_("sorted training inputs"),
            ylabel=_("sorted testing inputs"),
            title=_(TITLES[label]),
        )
    return save_figure(fig, path)


def run(out_dir: Path, seed: int) -> dict[str, Any]:
    """Run the three estimators, write predictions/loss/weights PNGs and nadaraya_watson.json."""
    out_dir = prepare_out_dir(out_dir)
    generator = torch.Generator().manual_seed(seed)
    data = make_data(generator)
    n_test = data.x_test.shape[0]
    average = average_pooling(data.y_train, n_test)
    nonparametric, nonparametric_weights = nonparametric_pooling(data.x_test, data.x_train, data.y_train)
    model, losses = train_parametric(data, generator)
    parametric = predict_parametric(model, data.x_test, data)
    predictions = {"average": average, "nonparametric": nonparametric, "parametric": parametric}
    weights = {"nonparametric": nonparametric_weights, "parametric": model.attention_weights}
    figures = [
        _plot_predictions(data, predictions, out_dir / "nadaraya_watson_predictions.png"),
        _plot_losses(losses, out_dir / "nadaraya_watson_loss.png"),
        _plot_weights(weights, out_dir / "nadaraya_watson_attention.png"),
    ]
    results = {
        "demo": NAME,
        "seed": seed,
        "test_mse": {label: mean_squared_error(y_hat, data.y_truth) for label, y_hat in predictions.items()},
        "learned_w": model.w.item(),
        "train_loss": losses,
        "predictions": {label: to_lists(y_hat) for label, y_hat in predictions.items()},
        "figures": figures,
    }
    write_json(out_dir / "nadaraya_watson.json", results)
    return results
