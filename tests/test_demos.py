"""Chapter demos: the regression data, the pooling estimators, the scoring and encoding examples, files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from matplotlib import image as mpl_image

from attn_mt.demos import DEMOS, nadaraya_watson, positional_encoding, scoring
from attn_mt.demos.figures import prepare_out_dir
from attn_mt.errors import UserError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEED = 0


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Every demo run once through DEMOS into its own directory."""
    runs = {}
    for name, run in DEMOS.items():
        out_dir = tmp_path_factory.mktemp(name) / "figures"
        runs[name] = (out_dir, run(out_dir, SEED))
    return runs


# --- Nadaraya-Watson -----------------------------------------------------------------------------


def test_target_function_hand_values() -> None:
    x = torch.tensor([0.0, 1.0, math.pi / 2])
    expected = torch.tensor([0.0, 2 * math.sin(1.0) + 1.0, 2.0 + (math.pi / 2) ** 0.8])
    torch.testing.assert_close(nadaraya_watson.target_function(x), expected)


def test_make_data_follows_the_chapter_formula() -> None:
    data = nadaraya_watson.make_data(torch.Generator().manual_seed(1))
    assert data.x_train.shape == (50,) and data.y_train.shape == (50,)
    assert torch.all(data.x_train[1:] >= data.x_train[:-1]), "training inputs must be sorted"
    assert data.x_train.min() >= 0 and data.x_train.max() < 5
    torch.testing.assert_close(data.x_test, torch.arange(50) * 0.1)
    torch.testing.assert_close(data.y_truth, nadaraya_watson.target_function(data.x_test))


def test_noise_is_gaussian_with_standard_deviation_half() -> None:
    data = nadaraya_watson.make_data(torch.Generator().manual_seed(2), n_train=20000)
    residuals = data.y_train - nadaraya_watson.target_function(data.x_train)
    assert abs(residuals.mean().item()) < 0.02
    assert abs(residuals.std().item() - 0.5) < 0.02  # a variance of 0.5 would give 0.707
    assert abs(data.x_train.mean().item() - 2.5) < 0.05  # uniform on [0, 5)


def test_make_data_depends_only_on_the_generator_seed() -> None:
    first = nadaraya_watson.make_data(torch.Generator().manual_seed(3))
    again = nadaraya_watson.make_data(torch.Generator().manual_seed(3))
    other = nadaraya_watson.make_data(torch.Generator().manual_seed(4))
    assert torch.equal(first.y_train, again.y_train)
    assert not torch.equal(first.x_train, other.x_train)


def test_gaussian_weights_match_hand_computation() -> None:
    queries, keys = torch.tensor([0.0]), torch.tensor([0.0, 1.0, 2.0])
    unit = nadaraya_watson.gaussian_attention_weights(queries, keys)
    torch.testing.assert_close(unit, torch.softmax(torch.tensor([[0.0, -0.5, -2.0]]), dim=-1))
    wide = nadaraya_watson.gaussian_attention_weights(queries, keys, w=2.0)
    torch.testing.assert_close(wide, torch.softmax(torch.tensor([[0.0, -2.0, -8.0]]), dim=-1))


def test_a_larger_w_gives_a_narrower_kernel_of_bandwidth_one_over_w() -> None:
    queries, keys = torch.tensor([0.0]), torch.arange(-30.0, 30.0, 0.01)  # keys dense around the query
    spreads = [float(nadaraya_watson.kernel_spread(queries, keys, w)[0]) for w in (0.5, 1.0, 2.0, 4.0)]
    assert spreads == sorted(spreads, reverse=True)  # w up, spread down: w is not the width
    torch.testing.assert_close(torch.tensor(spreads), torch.tensor([2.0, 1.0, 0.5, 0.25]), rtol=1e-3, atol=0)
    narrow = nadaraya_watson.gaussian_attention_weights(queries, keys, 4.0)
    wide = nadaraya_watson.gaussian_attention_weights(queries, keys, 0.5)
    assert narrow.max() > wide.max()  # the narrow kernel piles its weight on the nearest keys


def test_average_and_nonparametric_pooling() -> None:
    x_train, y_train = torch.tensor([0.0, 1.0, 3.0]), torch.tensor([1.0, 2.0, 6.0])
    torch.testing.assert_close(nadaraya_watson.average_pooling(y_train, 2), torch.tensor([3.0, 3.0]))
    predictions, weights = nadaraya_watson.nonparametric_pooling(torch.tensor([0.5, 2.0]), x_train, y_train)
    assert weights.shape == (2, 3)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(2))
    torch.testing.assert_close(predictions, weights @ y_train)
    # query 0.5 is equidistant from keys 0 and 1, so they get equal weight
    torch.testing.assert_close(weights[0, 0], weights[0, 1])


def test_leave_one_out_drops_each_own_point() -> None:
    expected = torch.tensor([[2.0, 3.0], [1.0, 3.0], [1.0, 2.0]])
    torch.testing.assert_close(nadaraya_watson.leave_one_out(torch.tensor([1.0, 2.0, 3.0])), expected)


def test_parametric_model_with_w_one_equals_nonparametric_pooling() -> None:
    data = nadaraya_watson.make_data(torch.Generator().manual_seed(5))
    model = nadaraya_watson.NWKernelRegression()
    with torch.no_grad():
        model.w.fill_(1.0)
    predicted = nadaraya_watson.predict_parametric(model, data.x_test, data)
    expected, weights = nadaraya_watson.nonparametric_pooling(data.x_test, data.x_train, data.y_train)
    torch.testing.assert_close(predicted, expected)
    torch.testing.assert_close(model.attention_weights, weights)


def test_parametric_training_lowers_the_book_loss() -> None:
    torch.testing.assert_close(
        nadaraya_watson.squared_error(torch.tensor([3.0, 1.0]), torch.tensor([1.0, 1.0])),
        torch.tensor([4.0, 0.0]),
    )
    generator = torch.Generator().manual_seed(SEED)
    data = nadaraya_watson.make_data(generator)
    model, losses = nadaraya_watson.train_parametric(data, generator)
    assert len(losses) == nadaraya_watson.EPOCHS
    assert losses[-1] < losses[0]
    assert model.w.item() > 1.0, "leave-one-out training should sharpen the kernel"


def test_nadaraya_watson_attention_beats_average_pooling(demo_runs) -> None:
    out_dir, results = demo_runs["nadaraya-watson"]
    mse = results["test_mse"]
    assert mse["nonparametric"] < mse["average"]
    assert mse["parametric"] < mse["average"]
    assert results["train_loss"][-1] < results["train_loss"][0]


# --- scoring functions ---------------------------------------------------------------------------


def test_masked_softmax_examples_mask_and_normalise() -> None:
    torch.manual_seed(SEED)
    examples = scoring.masked_softmax_examples()
    for key in ("valid_lens_1d", "valid_lens_2d"):
        torch.testing.assert_close(examples[key].sum(dim=-1), torch.ones(2, 2))
    one_d = examples["valid_lens_1d"]
    assert torch.all(one_d[0, :, 2:] == 0) and torch.all(one_d[1, :, 3:] == 0)
    assert torch.all(one_d[0, :, :2] > 0) and torch.all(one_d[1, :, :3] > 0)
    two_d = examples["valid_lens_2d"]
    torch.testing.assert_close(two_d[0, 0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert torch.all(two_d[0, 1, 3:] == 0) and torch.all(two_d[1, 0, 2:] == 0)
    assert torch.all(two_d[1, 1] > 0)
    # within the valid prefix, masked softmax is the plain softmax of those scores
    torch.testing.assert_close(two_d[1, 0, :2], torch.softmax(examples["scores"][1, 0, :2], dim=-1))


@pytest.mark.parametrize("example", [scoring.additive_example, scoring.dot_product_example])
def test_equal_keys_give_uniform_weights_over_valid_keys(example) -> None:
    torch.manual_seed(SEED)
    result = example()
    expected_weights = torch.zeros(2, 1, 10)
    expected_weights[0, 0, :2] = 1 / 2
    expected_weights[1, 0, :6] = 1 / 6
    torch.testing.assert_close(result["weights"], expected_weights)
    # the mean of value rows 0-1 and 0-5 of arange(40).reshape(10, 4)
    expected_output = torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]])
    torch.testing.assert_close(result["output"], expected_output)


def test_scoring_demo_rows_sum_to_one(demo_runs) -> None:
    _, results = demo_runs["scoring"]
    rows = [
        row
        for matrix in (
            results["masked_softmax"]["valid_lens_1d"],
            results["masked_softmax"]["valid_lens_2d"],
            results["additive"]["weights"],
            results["dot_product"]["weights"],
        )
        for batch in matrix
        for row in batch
    ]
    assert len(rows) == 2 * 2 + 2 * 2 + 2 + 2
    for row in rows:
        assert sum(row) == pytest.approx(1.0, abs=1e-5)


def test_nadaraya_watson_attention_rows_sum_to_one() -> None:
    generator = torch.Generator().manual_seed(SEED)
    data = nadaraya_watson.make_data(generator)
    _, weights = nadaraya_watson.nonparametric_pooling(data.x_test, data.x_train, data.y_train)
    model, _ = nadaraya_watson.train_parametric(data, generator)
    nadaraya_watson.predict_parametric(model, data.x_test, data)
    for matrix in (weights, model.attention_weights):
        assert matrix.shape == (50, 50)
        torch.testing.assert_close(matrix.sum(dim=1), torch.ones(50))


# --- positional encoding -------------------------------------------------------------------------


def test_encoding_matrix_matches_the_sinusoid_formula() -> None:
    matrix = positional_encoding.encoding_matrix(60, 32)
    assert matrix.shape == (60, 32)
    torch.testing.assert_close(matrix[0], torch.tensor([0.0, 1.0] * 16))
    for position, pair in [(1, 0), (7, 3), (59, 15)]:
        angle = position / 10000 ** (2 * pair / 32)
        assert matrix[position, 2 * pair].item() == pytest.approx(math.sin(angle), abs=1e-5)
        assert matrix[position, 2 * pair + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_binary_codes_of_zero_to_seven() -> None:
    codes = positional_encoding.binary_codes(3)
    assert codes.shape == (8, 3)
    assert codes[5].tolist() == [1, 0, 1]
    assert codes[6].tolist() == [1, 1, 0]
    assert codes[7].tolist() == [1, 1, 1]
    # the lowest bit changes at every step, the highest once
    assert (codes[1:, 2] != codes[:-1, 2]).sum() == 7 and (codes[1:, 0] != codes[:-1, 0]).sum() == 1


def test_positional_encoding_demo_numbers(demo_runs) -> None:
    _, results = demo_runs["positional-encoding"]
    assert results["binary"] == ["000", "001", "010", "011", "100", "101", "110", "111"]
    assert len(results["encoding"]) == 60 and {len(row) for row in results["encoding"]} == {32}
    assert results["plotted_columns"] == [6, 7, 8, 9]


def test_binary_figure_sets_the_bits_beside_the_encoding(demo_runs) -> None:
    out_dir, _ = demo_runs["positional-encoding"]
    height, width = mpl_image.imread(out_dir / "positional_encoding_binary.png").shape[:2]
    assert width > 1.5 * height, "the binary table and the encoding heatmap should sit side by side"


# --- files ---------------------------------------------------------------------------------------


def test_demo_names_are_the_cli_names() -> None:
    assert set(DEMOS) == {"nadaraya-watson", "scoring", "positional-encoding"}


@pytest.mark.parametrize(
    ("name", "json_name", "figure_count"),
    [
        ("nadaraya-watson", "nadaraya_watson.json", 3),
        ("scoring", "scoring.json", 3),
        ("positional-encoding", "positional_encoding.json", 3),
    ],
)
def test_demo_writes_valid_pngs_and_its_json(demo_runs, name: str, json_name: str, figure_count: int) -> None:
    out_dir, results = demo_runs[name]
    assert json.loads((out_dir / json_name).read_text(encoding="utf-8")) == results
    assert results["demo"] == name and results["seed"] == SEED
    assert len(results["figures"]) == figure_count
    assert sorted(path.name for path in out_dir.glob("*.png")) == sorted(results["figures"])
    for figure in results["figures"]:
        path = out_dir / figure
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        pixels = mpl_image.imread(path)
        assert pixels.ndim == 3 and pixels.shape[0] >= 150 and pixels.shape[1] >= 200
        assert pixels.std() > 0.01, f"{figure} is blank"


def test_out_dir_that_is_a_file_is_a_user_error(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a directory", encoding="utf-8")
    with pytest.raises(UserError, match="not a directory"):
        prepare_out_dir(taken)
