"""Config validation: every problem reported at once, naming its key; CLI errors are one line, exit 2."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from attn_mt.config import (
    SECTIONS,
    Config,
    ConfigError,
    bounded_decode,
    config_from_dict,
    declared,
    explain,
    key,
    load_config,
    parse_overrides,
)
from attn_mt.errors import UserError
from attn_mt.limits import DECODE_BOUNDS, MAX_BEAM, MAX_LENGTH_PENALTY
from attn_mt.models.build import MODEL_BUILDERS
from attn_mt.serving.schemas import ScoreRequest, TranslateRequest
from attn_mt.training.best_metric import HIGHER_IS_BETTER

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


def test_defaults_are_the_books_bahdanau_run():
    shipped = Path(__file__).parent.parent / "configs" / "d2l_bahdanau.yaml"
    assert load_config(None).to_dict() == load_config(shipped).to_dict()
    assert load_config(None, ["train.lr=0.1"]).to_dict() == load_config(shipped, ["train.lr=0.1"]).to_dict()


def test_shipped_configs_are_package_data():
    """An installed attn-mt finds the default config inside the package (attn_mt/configs -> configs/)."""
    root = Path(__file__).parent.parent
    for path in CONFIGS:
        assert (root / "attn_mt" / "configs" / path.name).samefile(path)
    assert 'attn_mt = ["configs/*.yaml"]' in (root / "pyproject.toml").read_text(encoding="utf-8")


def test_all_problems_reported_together_with_suggestions():
    raw = {
        "trian": {},
        "train": {"lrr": 0.1, "lr": "fast", "epochs": True, "amp": "bf61"},
        "model": {"num_hiddens": 3.5},
    }
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    problems = info.value.problems
    assert "trian: unknown section (did you mean train?)" in problems
    assert "train.lrr: unknown key (did you mean train.lr?)" in problems
    assert "train.lr: expected a number, got 'fast'" in problems
    assert "train.epochs: expected an integer, got True" in problems
    assert "train.amp: 'bf61' is not one of none, auto, bf16, fp16 (did you mean 'bf16'?)" in problems
    assert "model.num_hiddens: expected an integer, got 3.5" in problems
    assert len(problems) == 6


def test_impossible_combinations():
    with pytest.raises(ConfigError, match="model.num_hiddens: 30 is not divisible by model.num_heads = 4"):
        config_from_dict({"model": {"type": "transformer", "num_hiddens": 30, "num_heads": 4}})
    with pytest.raises(ConfigError, match="needs a valid split"):
        config_from_dict({"data": {"mode": "book"}, "train": {"best_metric": "valid_bleu"}})
    with pytest.raises(ConfigError, match="decode.nbest: 5 is larger than decode.beam_size = 2"):
        config_from_dict({"decode": {"beam_size": 2, "nbest": 5}})
    with pytest.raises(ConfigError, match=r"model.dropout: must be in \[0, 1\)"):
        config_from_dict({"model": {"dropout": 1.5}})
    with pytest.raises(ConfigError, match="model.tie_embeddings: only the transformer .* 'gru_bahdanau'"):
        config_from_dict({"model": {"type": "gru_bahdanau", "tie_embeddings": True}})
    with pytest.raises(ConfigError, match="tie_source_embedding: only the transformer .* 'gru_bahdanau'"):
        config_from_dict({"model": {"type": "gru_bahdanau", "tie_source_embedding": True}})
    with pytest.raises(ConfigError, match="model.embed_init: 'scaled' rescales .* 'gru_bahdanau'"):
        config_from_dict({"model": {"type": "gru_bahdanau", "embed_init": "scaled"}})
    separate = {"mode": "split", "tokenizer": "sentencepiece", "shared_vocab": False}
    for data in ({"tokenizer": "book"}, separate):
        with pytest.raises(ConfigError, match="tie_source_embedding: .* one vocabulary for both languages"):
            config_from_dict({"data": data, "model": {"type": "transformer", "tie_source_embedding": True}})
    config_from_dict(
        {
            "data": {"mode": "split", "tokenizer": "sentencepiece", "shared_vocab": True},
            "model": {"type": "transformer", "tie_source_embedding": True},
        }
    )


def test_encoder_and_decoder_depths_default_to_num_layers():
    assert config_from_dict({"model": {"num_layers": 3}}).model.depths == (3, 3)
    cfg = config_from_dict({"model": {"type": "transformer", "num_layers": 3, "decoder_layers": 1}})
    assert cfg.model.depths == (3, 1) and cfg.model.depths.encoder == 3 and cfg.model.depths.decoder == 1
    assert config_from_dict({"model": {"type": "gru_bahdanau", "encoder_layers": 2, "decoder_layers": 1}})
    # a config saved before the two keys existed (a run's config.yaml, a checkpoint's) means what it meant
    saved = Config().to_dict()
    del saved["model"]["encoder_layers"], saved["model"]["decoder_layers"]
    assert config_from_dict(saved).model.depths == (2, 2)
    assert config_from_dict(Config().to_dict()).model == Config().model
    with pytest.raises(ConfigError) as info:
        config_from_dict({"model": {"type": "transformer", "encoder_layers": 0, "decoder_layers": "one"}})
    assert sorted(info.value.problems) == [
        "model.decoder_layers: expected an integer, got 'one'",
        "model.encoder_layers: must be > 0, got 0",
    ]
    with pytest.raises(
        ConfigError,
        match=r"model.decoder_layers: the GRU decoder .* more layers \(3\) than the encoder \(2\)",
    ):
        config_from_dict({"model": {"type": "gru_bahdanau", "num_layers": 2, "decoder_layers": 3}})


def test_combinations_are_checked_alongside_other_problems():
    raw = {
        "train": {"lr": "fast"},
        "decode": {"beam_size": 2, "nbest": 3},
        "model": {"type": "transformer", "num_heads": 0},
    }
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    problems = info.value.problems
    assert "train.lr: expected a number, got 'fast'" in problems
    assert "decode.nbest: 3 is larger than decode.beam_size = 2" in problems
    assert "model.num_heads: must be > 0, got 0" in problems
    assert not any("divisible" in p for p in problems), "no combination on a key that is already wrong"


def test_non_finite_numbers_and_betas_out_of_range():
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {
                "train": {"lr": float("nan"), "adam_betas": [0.9, 1.0]},
                "decode": {"length_penalty": float("-inf")},
            }
        )
    assert sorted(info.value.problems) == [
        "decode.length_penalty: must be a finite number, got -inf",
        "train.adam_betas[1]: must be in [0, 1), got 1.0",
        "train.lr: must be a finite number, got nan",
    ]


def test_decode_settings_have_the_bounds_serve_has(run_cli, tmp_path):
    """A config whose decode settings serve would refuse is refused by validate and train; a saved run's
    are brought inside the bounds when it is opened (run/opened.py warns), so an old run still opens."""
    schema = TranslateRequest.model_json_schema()["properties"]
    assert schema["beam"]["anyOf"][0]["maximum"] == schema["nbest"]["maximum"] == MAX_BEAM == 16
    alpha = ScoreRequest.model_json_schema()["properties"]["length_penalty"]["anyOf"][0]
    assert alpha["maximum"] == MAX_LENGTH_PENALTY == 10.0
    over = {"beam_size": 17, "nbest": 17, "length_penalty": 5000.0, "max_len_a": 1e308, "max_len_b": -1}
    with pytest.raises(ConfigError) as info:
        config_from_dict({"decode": over})
    assert sorted(info.value.problems) == [
        "decode.beam_size: must be from 1 to 16, got 17",
        "decode.length_penalty: must be from 0 to 10, got 5000",
        "decode.max_len_a: must be from 0 to 10, got 1e+308",
        "decode.max_len_b: must be from 0 to 1000, got -1",
        "decode.nbest: must be from 1 to 16, got 17",
    ]
    edge = config_from_dict({"decode": {"beam_size": 16, "nbest": 16, "length_penalty": 10.0}})
    assert bounded_decode(edge) == (edge, [])
    tiny = str(CONFIGS[0].parent / "tiny.yaml")
    for command in (["validate", tiny], ["train", tiny, "--run-dir", str(tmp_path / "run")]):
        refused = run_cli(*command, "--set", "decode.beam_size=20")
        assert refused.returncode == 2 and "decode.beam_size: must be from 1 to 16, got 20" in refused.stderr
    assert not (tmp_path / "run").exists()

    saved = config_from_dict({"decode": {"beam_size": 20, "nbest": 18, "length_penalty": -1.0}}, saved=True)
    bounded, notes = bounded_decode(saved)
    assert (bounded.decode.beam_size, bounded.decode.nbest, bounded.decode.length_penalty) == (16, 16, 0.0)
    assert notes[0] == (
        "decode.beam_size is 20, outside 1..16 (the bounds of every command and of serve): using 16"
    )
    assert len(notes) == 3 and bounded.train == saved.train


def test_validation_metrics_need_a_valid_split():
    raw = {"data": {"mode": "split", "valid_size": 0}, "train": {"best_metric": "valid_bleu", "patience": 2}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert len(info.value.problems) == 2
    assert all("data.valid_size is 0" in p for p in info.value.problems)
    assert config_from_dict({"data": {"mode": "split", "valid_size": 0}}).data.valid_size == 0


def test_duplicate_keys_are_reported_with_their_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("train:\n  lr: 0.1\nmodel:\n  type: transformer\ntrain:\n  lr: 0.2\n  lr: 0.3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        "train: given twice (lines 1 and 5); keep one",
        "train.lr: given twice (lines 6 and 7); keep one",
    ]


def test_unparsable_override_is_one_line():
    with pytest.raises(UserError) as info:
        parse_overrides(["train.adam_betas=[0.9"])
    assert str(info.value).startswith("--set 'train.adam_betas=[0.9': cannot parse the value as YAML")
    assert "\n" not in str(info.value)


def test_int_is_accepted_where_a_float_is_expected():
    cfg = config_from_dict({"train": {"lr": 1}})
    assert isinstance(cfg.train.lr, float) and cfg.train.lr == 1.0


def test_overrides_are_parsed_as_yaml_and_validated(tmp_path):
    assert parse_overrides(["train.lr=0.001", "data.path=x.zip", "data.path=", "train.compile=true"]) == {
        "train": {"lr": 0.001, "compile": True},
        "data": {"path": None},
    }
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: 0.1\n")
    assert load_config(path, ["train.lr=0.002"]).train.lr == 0.002
    with pytest.raises(ConfigError, match="train.lrr: unknown key"):
        load_config(path, ["train.lrr=0.002"])


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_validate_and_document_every_key(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#") and any("attn-mt train" in line for line in lines[:4])
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not stripped.endswith(":"):
            assert "#" in line, f"{path.name}: key without a comment: {line}"


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["model.type=transformer", "train.lr=0.0001"])
    out = tmp_path / "resolved.yaml"
    out.write_text(cfg.to_yaml())
    assert load_config(out) == cfg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train:\n  lrr: 0.1\n", "train.lrr: unknown key (did you mean train.lr?)"),
        ("train:\n  lr: [1\n", "YAML syntax error"),
        ("", "config file is empty"),
        ("model:\n  type: rnn\n", "model.type: 'rnn' is not one of gru_bahdanau, transformer"),
    ],
)
def test_cli_validate_errors_are_one_clear_message(tmp_path, text, expected, run_cli):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_validate_reports_yaml_line(tmp_path, run_cli):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  lr: 0.1\n lr2: : 3\n")
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert "at line 3, column 2" in result.stderr


def test_cli_validate_prints_resolved_config(tmp_path, run_cli):
    result = run_cli("validate", str(CONFIGS[0]), "--set", "train.lr=0.001")
    assert result.returncode == 0, result.stderr
    assert "lr: 0.001" in result.stdout


def test_cli_missing_config_file(run_cli):
    result = run_cli("validate", "no/such/config.yaml")
    assert result.returncode == 2
    assert "config file not found: no/such/config.yaml" in result.stderr


DECLARED = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


def declaration(dotted: str):
    """The `key(...)` declaration of `section.key`."""
    section, name = dotted.split(".")
    return declared(next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == name))


@pytest.mark.parametrize("dotted", DECLARED)
def test_every_key_is_declared_and_explained(dotted):
    """One line of help per key, naming each choice; --explain prints it with the type and default."""
    rule = declaration(dotted)
    assert rule.help and "\n" not in rule.help
    for choice in rule.choices:
        assert choice in rule.help, f"{dotted}: the help does not name the choice {choice!r}"
    text = explain(dotted)
    section, name = dotted.split(".")
    default = yaml.safe_load(text.split("  default: ", 1)[1].splitlines()[0])
    assert text.startswith(f"{dotted}: {rule.help}\n") and default == Config().to_dict()[section][name]
    assert ("  choices: " in text) == bool(rule.choices)
    assert ("  bounds: " in text) == bool(rule.bounds())


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_key_is_declared(path):
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    for section, keys in raw.items():
        for name in keys:
            assert f"{section}.{name}" in DECLARED
            assert explain(f"{section}.{name}").startswith(f"{section}.{name}: ")


def test_explaining_a_section_lists_its_keys_as_yaml_with_the_defaults():
    for section in SECTIONS:
        text = explain(section)
        assert text.startswith(f"# {section}: {SECTIONS[section].__doc__}\n")
        assert yaml.safe_load(text) == {section: Config().to_dict()[section]}
    lines = explain("model").splitlines()
    heads = r"  num_heads: 4 +# transformer: attention heads \(they must divide num_hiddens\)"
    assert re.fullmatch(heads, lines[8])
    assert len({line.index("#") for line in lines[2:]}) == 1, "the comments line up in one column"


def test_explain_reads_bounds_choices_and_lengths_from_the_declarations():
    assert explain("train.lr") == (
        "train.lr: learning rate; the peak one when a schedule warms up\n"
        "  type: a number\n  default: 0.005\n  bounds: > 0\n"
    )
    assert "  choices: none, auto, bf16, fp16\n" in explain("train.amp")
    assert "  length: 2\n  bounds: in [0, 1) (each item)\n" in explain("train.adam_betas")
    assert "  bounds: in (0, 1)\n" in explain("train.plateau_factor")
    assert "  bounds: >= 0\n" in explain("data.subword_sample")
    assert "  type: a string, a list of strings or null\n  default: null\n" in explain("data.path")
    assert "  type: an integer or null\n" in explain("model.encoder_layers")
    beam = explain("decode.beam_size")
    assert f"  bounds: from 1 to {MAX_BEAM}\n" in beam and "brought inside" in beam


def test_explain_ignores_letter_case_and_suggestions_look_past_it():
    assert explain("TRAIN.LR") == explain("train.lr")
    assert explain("Decode.Beam_Size").startswith("decode.beam_size: ")
    assert explain("MODEL") == explain("model")
    with pytest.raises(UserError, match=r"^--explain train.LRR: unknown key \(did you mean train.lr\?\)$"):
        explain("TRAIN.LRR")
    with pytest.raises(UserError, match=r"^--explain TRIAN: unknown section \(did you mean train\?\)$"):
        explain("TRIAN.LR")
    with pytest.raises(ConfigError) as info:
        config_from_dict({"TRAIN": {"lr": 0.1}, "model": {"Num_Hiddens": 8}})
    assert info.value.problems == [
        "TRAIN: unknown section (did you mean train?)",
        "model.Num_Hiddens: unknown key (did you mean model.num_hiddens?)",
    ]


def test_declared_decode_bounds_are_the_limits_of_every_command():
    clamped = {
        name: (declaration(f"decode.{name}").minimum, declaration(f"decode.{name}").maximum)
        for name in DECODE_BOUNDS
        if declaration(f"decode.{name}").clamped_on_open
    }
    assert clamped == DECODE_BOUNDS


def test_choices_owned_by_other_layers_agree_with_them():
    """model.type names models/build.py's builders; train.best_metric names best_metric.py's metrics."""
    assert declaration("model.type").choices == tuple(MODEL_BUILDERS)
    assert declaration("train.best_metric").choices == tuple(HIGHER_IS_BETTER)


def test_a_removed_value_is_named_with_what_to_use_and_a_saved_run_opens_with_its_replacement():
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["train.kernels=gpu"])
    assert "train.kernels: 'gpu' was removed (issue 70)" in str(caught.value)
    assert "use auto or reference" in str(caught.value)
    saved = {"train": {"kernels": "gpu", "epochs": 3}}
    assert config_from_dict(saved, saved=True).train.kernels == "reference"  # a run the GPU path trained
    assert saved["train"]["kernels"] == "gpu"  # the caller's mapping is left as it was


def test_bounds_words_and_problems():
    """Each kind of bound says what it allows, and a value outside gets the same words."""
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {
                "data": {"subword_sample": -1},
                "train": {"plateau_factor": 1.0, "adam_betas": [0.9], "label_smoothing": 1.0},
                "decode": {"batch_size": 0},
            }
        )
    assert sorted(info.value.problems) == [
        "data.subword_sample: must be >= 0, got -1",
        "decode.batch_size: must be > 0, got 0",
        "train.adam_betas: expected two numbers, got [0.9]",
        "train.label_smoothing: must be in [0, 1), got 1.0",
        "train.plateau_factor: must be in (0, 1), got 1.0",
    ]
    with pytest.raises(TypeError, match="one lower bound"):
        key(1, help="a count", minimum=0, above=0)


@pytest.mark.parametrize(
    ("args", "expected", "code"),
    [
        (["--explain", "train.lr"], "train.lr: learning rate; the peak one when a schedule warms up\n", 0),
        (["--explain", "decode"], "decode:\n  beam_size: 4 ", 0),
        (["--explain", "train.lrr"], "--explain train.lrr: unknown key (did you mean train.lr?)", 2),
        (["--explain", "trian"], "--explain trian: unknown section (did you mean train?)", 2),
        (["--explain", "TRAIN.LR"], "train.lr: learning rate; the peak one when a schedule warms up\n", 0),
        ([], "validate: give a CONFIG to check, or --explain KEY", 2),
    ],
)
def test_cli_validate_explain(args, expected, code, run_cli):
    result = run_cli("validate", *args)
    assert result.returncode == code
    assert expected in (result.stdout if code == 0 else result.stderr)
