"""`train.compile` reaching training: the compile mode from the config, every batch shape compiled before the
first step (outside the clock, compile_s apart), the recompile limit and the on-disk graph cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch._inductor.config as inductor_config
from support.synthetic import TINY, TINY_RUN_SETTINGS, write_corpus

from attn_mt.config import ConfigError, load_config
from attn_mt.data.dataset import load_data
from attn_mt.run.run_dir import RunPaths
from attn_mt.training import compiling
from attn_mt.training.launch import write_run_summary
from attn_mt.training.trainer import Trainer

SETTINGS = [*TINY_RUN_SETTINGS[:3], "train.threads=1", "train.epochs=2", "train.valid_max_sentences=4"]


@pytest.fixture
def counted_compile(monkeypatch, tmp_path) -> dict:
    """torch.compile that records its options and counts the model's graphs (built eagerly: no inductor)."""
    seen: dict = {"options": [], "graphs": 0}
    real = torch.compile

    def counting_backend(graph: torch.fx.GraphModule, example_inputs: list) -> object:
        seen["graphs"] += 1
        return graph.forward

    def compile_(fn, **options):
        seen["options"].append(options)
        return real(fn, backend=counting_backend, dynamic=options.get("dynamic"))

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    yield seen
    torch._dynamo.reset()


def test_the_compile_mode_is_a_checked_config_key():
    assert load_config(TINY).train.compile_mode == "default"
    assert load_config(TINY, ["train.compile_mode=reduce-overhead"]).train.compile_mode == "reduce-overhead"
    with pytest.raises(ConfigError, match="train.compile_mode"):
        load_config(TINY, ["train.compile_mode=max-speed"])


def test_the_compile_options_take_the_mode_unless_the_path_set_one():
    assert compiling.compile_options({}, "default") == {"mode": None}
    assert compiling.compile_options({"dynamic": True}, "reduce-overhead") == {
        "mode": "reduce-overhead",
        "dynamic": True,
    }
    fixed = {"dynamic": False, "mode": "reduce-overhead"}
    assert compiling.compile_options(fixed, "default") == fixed


def test_compiled_graphs_persist_under_attn_mts_cache_unless_told_otherwise(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compiling.inductor_cache_dir() == tmp_path / "attn-mt" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compiling.inductor_cache_dir() == tmp_path / "mine"


def test_every_batch_shape_compiles_before_the_first_step_and_its_time_is_apart(tmp_path, counted_compile):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(
        TINY,
        [*SETTINGS, "data.batch_shapes=3", "train.compile=true", "train.compile_mode=reduce-overhead"],
    )
    data = load_data(cfg.data, str(corpus))
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    made = Trainer(cfg, paths, data, torch.device("cpu"), quiet=True)
    assert torch._dynamo.config.recompile_limit >= 64
    assert counted_compile["options"] == [
        {"mode": "reduce-overhead", "dynamic": False}
    ]  # static: one graph a shape
    shapes = set()
    for epoch in range(cfg.train.epochs):
        for indices in data.train.plan(epoch, cfg.train.seed):
            batch = made.collate(indices)
            shapes.add((*batch.src.shape, *batch.tgt.shape))
    at_first_step = []
    step = made.train_step

    def first_counted(*args):
        at_first_step.append(counted_compile["graphs"])
        return step(*args)

    made.train_step = first_counted
    result = made.fit()
    assert at_first_step[0] == len(shapes) > 1  # one graph a batch shape, all before the first step
    assert counted_compile["graphs"] == len(shapes)  # and none while training
    assert made.compile_s > 0 and result.wall_s > 0
    write_run_summary(paths.summary, made, result, 0.0)
    assert json.loads(paths.summary.read_text())["compile_s"] == round(made.compile_s, 2)
    assert inductor_config.fx_graph_cache  # a restart loads the compiled graphs from disk


def test_the_recompile_limit_is_raised_for_every_compiled_run_ddp_included(tmp_path, counted_compile):
    corpus = write_corpus(tmp_path / "reverse.txt", n=100)
    cfg = load_config(TINY, [*SETTINGS, "train.kernels=reference", "train.compile=true"])
    data = load_data(cfg.data, str(corpus))
    with torch._dynamo.config.patch(recompile_limit=8):  # torch's default
        Trainer(cfg, RunPaths(tmp_path / "run"), data, torch.device("cpu"), quiet=True)
        # the trainer compiles DDP's module, when there is one, after this same call
        assert torch._dynamo.config.recompile_limit == compiling.RECOMPILE_LIMIT


def test_compiled_graphs_go_to_attn_mts_cache_when_compiling_is_prepared_first(tmp_path):
    """torch.compile fixes inductor's cache folder when first called, so the cache is set before (a fresh
    process, as `attn-mt train` is); and equal sizes are not merged into one symbol."""
    code = (
        "import os\n"
        "from attn_mt.training.compiling import prepare_compile\n"
        "prepare_compile()\n"
        "print(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"
        "import torch.fx.experimental._config as fx\n"
        "print(fx.use_duck_shape)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    folder, duck_shapes = done.stdout.split()
    assert folder == str(tmp_path / "attn-mt" / "inductor")
    assert duck_shapes == "False"  # a batch with S == T makes no guard that the next batch fails
