"""scripts/bench_recipe.py, shrunk to seconds on configs/tiny.yaml: every arm and seed trained and scored, the
arms compared with the seeds' spread, the best one run longer with tune's pair reported apart."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support.helpers import load_script
from support.synthetic import TINY, close_run_log, write_corpus

from attn_mt.config import load_config


def bench_recipe(monkeypatch):
    """scripts/bench_recipe.py as a module while the test runs."""
    return load_script("bench_recipe", monkeypatch)


def test_arms_are_kept_only_beyond_the_seeds_spread(monkeypatch):
    bench = bench_recipe(monkeypatch)
    runs = [
        {"arm": arm, "valid_bleu": valid, "test_bleu": valid - 1}
        for arm, values in {"baseline": (50.0, 50.4), "deep": (51.0, 51.2), "near": (50.3, 50.7)}.items()
        for valid in values
    ]
    summaries = {s["arm"]: s for s in bench.arm_summaries(runs)}
    assert summaries["baseline"]["valid_spread"] == 0.4 and not summaries["baseline"]["kept"]
    assert summaries["deep"]["valid_gain"] == 0.9 and summaries["deep"]["kept"]
    assert summaries["near"]["valid_gain"] == 0.3 and not summaries["near"]["kept"]  # within the spread
    assert bench.kept_arms(list(summaries.values())) == ["deep"]
    assert bench.kept_arms([summaries["baseline"], summaries["near"]]) == []


def test_the_cpu_plan_shrunk_runs_every_arm_and_the_final_run(tmp_path, monkeypatch):
    bench = bench_recipe(monkeypatch)
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    out = tmp_path / "out"
    sets = ["model.type=transformer", "data.valid_size=10", "data.test_size=10", "train.threads=1"]
    argv = ["cpu", "--out", str(out), "--config", str(TINY), "--data", str(corpus), "--device", "cpu"]
    argv += ["--minutes", "0.05", "--final-minutes", "0.06", "--arms", "3-1 layers", "--seeds", "0,1"]
    argv += ["--beams", "1,2", "--length-penalties", "1.0"]
    try:
        results = bench.main([*argv, *(item for s in sets for item in ("--set", s))])
    finally:
        close_run_log()
    assert json.loads((out / "results.json").read_text(encoding="utf-8")) == results
    assert [(r["arm"], r["seed"]) for r in results["runs"]] == [
        ("baseline", 0),
        ("baseline", 1),
        ("3-1 layers", 0),
        ("3-1 layers", 1),
    ]
    for run in results["runs"]:
        saved = yaml.safe_load((Path(run["run_dir"]) / "config.yaml").read_text(encoding="utf-8"))
        assert saved["train"]["seed"] == run["seed"] and saved["train"]["time_limit_minutes"] == 0.05
        depths = (3, 1) if run["arm"] == "3-1 layers" else (None, None)
        assert (saved["model"]["encoder_layers"], saved["model"]["decoder_layers"]) == depths
        assert 0 <= run["test_bleu"] <= 100 and run["steps"] > 0
    cfg = load_config(TINY, ["model.type=transformer", "model.encoder_layers=3", "model.decoder_layers=1"])
    deep = results["runs"][2]
    vocab = len(
        json.loads((Path(deep["run_dir"]) / "tgt_vocab.json").read_text(encoding="utf-8"))["idx_to_token"]
    )
    assert deep["mflops_per_token"] == round(bench.flops_per_token(cfg, vocab) / 1e6, 2)
    assert deep["mflops_per_token"] > results["runs"][0]["mflops_per_token"]  # tiny.yaml has one layer a side
    assert [a["arm"] for a in results["arms"]] == ["baseline", "3-1 layers"]
    [final] = results[
        "finals"
    ]  # the kept arm's (which beats the baseline's hour, or is the only one) or the baseline's
    assert final["arm"] == (bench.kept_arms(results["arms"]) or ["baseline"])[0]
    assert final["tuned"]["beam_size"] in (1, 2) and final["budget_minutes"] == 0.06
    table = (out / "table.md").read_text(encoding="utf-8")
    assert table.count("| 3-1 layers |") == 3 and f"`{final['arm']}` for {final['minutes']} minutes" in table

    beside = results["final_baseline"]  # the baseline for the final's minutes, unless the final is it
    assert (beside is None) == (final["arm"] == "baseline")
    also = [] if beside is None else [Path(beside["run_dir"])]

    # A later sitting with the same --out trains only what done.jsonl lacks: the last arm run and the final.
    done = out / "done.jsonl"
    lines = done.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 + len(also)  # four arm runs, the final run, the final with its tuned score
    assert all(json.loads(line)["cpu"] for line in lines) and (out / "valid_bleu.png").stat().st_size > 0
    # the config is named from the checkout, so another clone of it finds these runs
    assert results["config"] == "configs/tiny.yaml"
    assert {json.loads(line)["config"] for line in lines} == {"configs/tiny.yaml"}
    done.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    trained = []
    real_train = bench.train
    monkeypatch.setattr(
        bench, "train", lambda cfg, run_dir, **kw: trained.append(run_dir) or real_train(cfg, run_dir, **kw)
    )
    try:
        again = bench.main([*argv, *(item for s in sets for item in ("--set", s))])
    finally:
        close_run_log()
    assert trained == [Path(results["runs"][3]["run_dir"]), Path(final["run_dir"]), *also]
    assert again["runs"][:3] == results["runs"][:3]
    assert len(done.read_text(encoding="utf-8").splitlines()) == 6 + len(also)


def fake_training(tmp_path, trained: list, cpu: list[str], hour: dict[str, float] | None = None):
    """A stand-in for train_and_score: scores by arm and seed (the Xeon's 5 higher; `hour` for the 60-minute
    runs); each run is logged."""
    means = {"baseline": 50.0, "3-1 layers": 52.0, "dropout 0.05": 49.0, "peak lr 2e-3": 51.0}

    def fake_run(plan, name, overrides, seed, minutes, args):
        trained.append((cpu[0], name, seed, minutes))
        mean = (hour or {}).get(name, means[name]) if minutes == 60 else means[name]
        bleu = mean + 0.2 * seed + (5.0 if cpu[0] == "Xeon" else 0.0)  # the Xeon scores 5 higher
        curve = [[1.0, bleu - 3], [minutes, bleu]]
        return {
            **{"run_dir": str(tmp_path / name), "steps": 9, "epochs": 1, "minutes": minutes, "parameters": 1},
            **{"mflops_per_token": 7.2, "valid_bleu": bleu, "test_bleu": bleu - 1, "beam_size": 4},
            **{"length_penalty": 1.0, "best_step": 9, "bleu_signature": "sig", "valid_curve": curve},
        }

    return fake_run


def test_a_new_kind_of_cpu_trains_the_baseline_beside_the_arms_it_trains(tmp_path, monkeypatch):
    bench = bench_recipe(monkeypatch)
    cpu, trained = ["Zen 3"], []
    monkeypatch.setattr(bench, "train_and_score", fake_training(tmp_path, trained, cpu))
    monkeypatch.setattr(bench, "this_cpu", lambda: cpu[0])
    out = tmp_path / "out"
    argv = ["cpu", "--out", str(out), "--final-minutes", "0"]
    bench.main([*argv, "--arms", "3-1 layers"])
    assert trained == [("Zen 3", arm, seed, 15.0) for arm in ("baseline", "3-1 layers") for seed in (0, 1)]

    # The next sitting is on a Xeon: 3-1 layers is reused, the baseline trains again beside dropout 0.05.
    trained.clear()
    cpu[0] = "Xeon"
    results = bench.main([*argv, "--arms", "3-1 layers,dropout 0.05"])
    assert trained == [("Xeon", arm, seed, 15.0) for arm in ("baseline", "dropout 0.05") for seed in (0, 1)]
    arms = {(a["arm"], a["cpu"]): a for a in results["arms"]}
    assert set(arms) == {("baseline", "Xeon"), ("3-1 layers", "Zen 3"), ("dropout 0.05", "Xeon")} | {
        ("baseline", "Zen 3")
    }
    assert arms[("3-1 layers", "Zen 3")]["valid_gain"] == 2.0 and arms[("3-1 layers", "Zen 3")]["kept"]
    assert arms[("dropout 0.05", "Xeon")]["valid_gain"] == -1.0  # against the Xeon's 55.1, not the Zen's 50.1
    table = (out / "table.md").read_text(encoding="utf-8")
    assert "| dropout 0.05 | Xeon | 2 | 54.1 (0.2) |" in table and (out / "valid_bleu.png").is_file()

    trained.clear()  # a third sitting with nothing left to train trains nothing
    assert bench.main([*argv, "--arms", "3-1 layers,dropout 0.05"])["arms"] == results["arms"]
    assert trained == []


def test_the_kept_arms_get_an_hour_beside_the_baselines_until_one_beats_it(tmp_path, monkeypatch):
    bench = bench_recipe(monkeypatch)
    cpu, trained = ["Xeon"], []
    hour = {
        "3-1 layers": 49.0,
        "peak lr 2e-3": 51.5,
    }  # the best 15-minute arm loses the hour; the next wins it
    monkeypatch.setattr(bench, "train_and_score", fake_training(tmp_path, trained, cpu, hour))
    monkeypatch.setattr(bench, "this_cpu", lambda: cpu[0])
    tune = {"best": {"beam_size": 6, "length_penalty": 1.2, "bleu": 58.0}}
    monkeypatch.setattr(bench, "run_tune", lambda *a, **kw: tune)
    monkeypatch.setattr(bench, "run_eval", lambda *a, **kw: {"bleu": 57.5})
    out = tmp_path / "out"
    argv = ["cpu", "--out", str(out), "--arms", "3-1 layers,peak lr 2e-3", "--final-minutes", "60"]
    results = bench.main(argv)
    arms = ("baseline", "3-1 layers", "peak lr 2e-3")
    assert trained == [("Xeon", arm, seed, 15.0) for arm in arms for seed in (0, 1)] + [
        ("Xeon", "3-1 layers", 0, 60.0),  # the best kept arm (+2.0, beyond a spread of 0.2) for the hour
        ("Xeon", "baseline", 0, 60.0),  # the baseline for the same hour: 55.0 beats 3-1 layers' 54.0
        ("Xeon", "peak lr 2e-3", 0, 60.0),  # so the next kept arm (+1.0) gets its hour: 56.5 beats 55.0
    ]
    finals, beside = results["finals"], results["final_baseline"]
    assert results["complete"]
    assert [(f["arm"], f["minutes"], f["tuned"]["test_bleu"]) for f in finals] == [
        ("3-1 layers", 60.0, 57.5),
        ("peak lr 2e-3", 60.0, 57.5),
    ]
    assert (beside["arm"], beside["minutes"], beside["seed"], beside["cpu"]) == ("baseline", 60.0, 0, "Xeon")
    table = (out / "table.md").read_text(encoding="utf-8")
    assert "Baseline for the same 60.0 minutes and seed on Xeon" in table
    assert "`3-1 layers` against it: -1.0 valid, -1.0 test (one seed each): does not beat it." in table
    assert "`peak lr 2e-3` against it: +1.5 valid, +1.5 test (one seed each): beats it." in table

    # Without those hours, a sitting on another kind of CPU leaves the baseline's hour to the finals' CPU.
    done = out / "done.jsonl"
    done.write_text("\n".join(done.read_text(encoding="utf-8").splitlines()[:-3]) + "\n", encoding="utf-8")
    trained.clear()
    cpu[0] = "Zen 3"
    again = bench.main(argv)
    assert trained == [] and again["final_baseline"] is None and again["finals"] == finals[:1]
    assert not again["complete"]  # peak lr 2e-3's hour and the baseline's are still to run
    assert "Baseline for the same" not in (out / "table.md").read_text(encoding="utf-8")


def test_a_config_is_named_from_the_checkout_inside_it_and_absolutely_outside(tmp_path, monkeypatch):
    bench = bench_recipe(monkeypatch)
    assert bench.config_label(TINY) == "configs/tiny.yaml"
    monkeypatch.chdir(TINY.parent)
    assert bench.config_label(Path("tiny.yaml")) == "configs/tiny.yaml"  # a relative --config too
    own = tmp_path / "mine.yaml"
    assert bench.config_label(own) == str(own.resolve())
