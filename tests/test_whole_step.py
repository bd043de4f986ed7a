"""train.compile_scope: step: the whole training step compiled equals the eager step, compiles every batch
shape before the clock and nothing in a second epoch, leaves few ops outside its graphs, and says where it
cannot run."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import pytest
import torch
from support.synthetic import TINY, TINY_EVERY_STEP, write_corpus
from support.tolerances import assert_float32_close, float32_approx
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

from attn_mt.config import ConfigError, load_config
from attn_mt.data.dataset import load_data
from attn_mt.run.run_dir import RunPaths
from attn_mt.training.trainer import Trainer
from attn_mt.training.whole_step import TrainingState, whole_step_refusal

STEP = ["train.compile=true", "train.compile_scope=step"]
SHAPES = ["data.batch_shapes=2", "data.max_tokens=120"]  # two shapes: two graphs to trace, not more


class Graphs:
    """A torch.compile backend (AOT autograd, graphs run as traced) counting graphs and marking their runs."""

    MARK = "compiled graph"  # the profiler range each compiled forward or backward graph runs in

    def __init__(self):
        self.built = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> object:
        self.built += 1
        return aot_module_simplified(graph, example_inputs, fw_compiler=self.marked, bw_compiler=self.marked)

    def marked(self, graph: torch.fx.GraphModule, example_inputs: list) -> object:
        def run(*args):
            with torch.profiler.record_function(self.MARK):
                return graph(*args)

        return make_boxed_func(run)


NO_KERNEL = {
    "aten::detach",
    "aten::item",
    "aten::to",
    "aten::view",
    "aten::reshape",
    "aten::slice",
    "aten::expand",
}
"""Ops that only relabel a tensor (or read a CPU scalar): no kernel on a device, left out of the count."""


def ops_outside_graphs(step: Callable[[], object]) -> collections.Counter:
    """The aten ops `step` runs outside every compiled graph (outermost only: aten::linear, not its mm)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    outside: collections.Counter = collections.Counter()
    for event in prof.events():
        if not event.name.startswith("aten::") or event.name in NO_KERNEL:
            continue
        parent, inside = event.cpu_parent, False
        while parent is not None and not inside:
            inside = parent.name == Graphs.MARK or parent.name.startswith("aten::")
            parent = parent.cpu_parent
        if not inside:
            outside[event.name] += 1
    return outside


@pytest.fixture
def graphs(monkeypatch, tmp_path) -> Graphs:
    """torch.compile through `Graphs` (no inductor build: seconds, not minutes, on two cores)."""
    seen = Graphs()
    real = torch.compile

    def compile_(fn, **options):
        return real(fn, backend=seen, dynamic=options.get("dynamic"))

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    yield seen
    torch._dynamo.reset()


def trainer(tmp_path, name: str, settings: list[str], n: int = 120) -> Trainer:
    """configs/tiny.yaml's Transformer on a reverse-task corpus, with `settings`."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=n)
    cfg = load_config(TINY, [*TINY_EVERY_STEP, "train.grad_clip=0.5", *settings])
    paths = RunPaths(tmp_path / name)
    paths.root.mkdir()
    return Trainer(cfg, paths, load_data(cfg.data, str(corpus)), torch.device("cpu"), quiet=True)


def steps(made: Trainer, count: int) -> list[float]:
    """The losses of the first `count` steps of epoch 0, taken as fit takes them."""
    made.start()
    plan = made.data.train.plan(0, made.cfg.train.seed)
    return [float(made._step([made.collate(plan[i])], False, 0.0)[0]) for i in range(count)]


@pytest.mark.parametrize("amp", ["none", "bf16"])
def test_the_compiled_step_gives_the_eager_steps_losses_and_weights(tmp_path, graphs, amp):
    eager = trainer(tmp_path, "eager", [*SHAPES, f"train.amp={amp}"])
    whole = trainer(tmp_path, "whole", [*SHAPES, *STEP, f"train.amp={amp}"])
    whole.model.load_state_dict(eager.model.state_dict())
    eager_losses, whole_losses = steps(eager, 4), steps(whole, 4)
    assert whole.whole_step is not None and graphs.built > 0
    if amp == "none":
        assert whole_losses == float32_approx(eager_losses, terms=2000)
        for got, want in zip(whole.model.parameters(), eager.model.parameters(), strict=True):
            assert_float32_close(got, want, terms=2000)
    else:  # bf16 autocast: the same ops in the same order, so the same roundings
        assert whole_losses == pytest.approx(eager_losses, rel=1e-2)
        for got, want in zip(whole.model.parameters(), eager.model.parameters(), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-3)
    assert float(whole.grad_norm) == pytest.approx(float(eager.grad_norm), rel=1e-2)
    assert whole.schedule.lr == eager.schedule.lr and isinstance(whole.optimizer.param_groups[0]["lr"], float)


@pytest.mark.parametrize("shapes", ["dynamic", "static"])
def test_every_shape_compiles_before_the_clock_and_a_second_epoch_compiles_nothing(tmp_path, graphs, shapes):
    settings = [*SHAPES, *STEP, "train.epochs=3", "train.valid_every=0", f"train.compile_shapes={shapes}"]
    made = trainer(tmp_path, "run", settings)
    before = {name: p.detach().clone() for name, p in made.model.named_parameters()}
    built_at_step = []
    step = made.train_step

    def counted(*args):
        built_at_step.append(graphs.built)
        return step(*args)

    made.train_step = counted
    warm = made.start

    def start_then_check():
        warm()
        for name, param in made.model.named_parameters():  # the warm-up put the weights back
            assert torch.equal(param, before[name]), name

    made.start = start_then_check
    made.fit()
    per_epoch = len(made.data.train.plan(0, 0))
    assert len(built_at_step) == 3 * per_epoch and made.compile_s > 0
    assert built_at_step[0] > 0
    assert built_at_step[per_epoch] == built_at_step[0]  # the second epoch starts with nothing new
    assert graphs.built == built_at_step[0]  # and none of the three epochs compiled during training
    shaped = {
        tuple(made.collate(ix).src.shape) + made.collate(ix).tgt.shape[1:]
        for ix in made.data.train.plan(0, 0)
    }
    assert len(shaped) == 2
    print(f"graphs built for two batch shapes, {shapes}: {graphs.built}")


@pytest.mark.parametrize("shapes", ["dynamic", "static"])
def test_few_ops_run_outside_the_compiled_graphs_a_step(tmp_path, graphs, shapes):
    made = trainer(tmp_path, "whole", [*SHAPES, *STEP, f"train.compile_shapes={shapes}"])
    made.start()
    batch = made.collate(made.data.train.plan(0, 0)[0])
    made._step([batch], False, 0.0)
    outside = ops_outside_graphs(lambda: made._step([batch], False, 0.0))
    print(f"aten ops a step outside the compiled graphs: {sum(outside.values())}, {dict(outside)}")
    # the update (fused AdamW and its step count), the lr fill, the backward's seed, and the clipped
    # gradients written back: a copy_ a parameter (34) under aot_eager, inside inductor's kernel on a card;
    # the model compiled alone leaves 31 others outside (the loss, its backward, the clipping); symbolic
    # sizes (dynamic) add 4 small ones (the backward's seed built from a size)
    assert sum(outside.values()) <= (44 if shapes == "dynamic" else 40) and outside["aten::_fused_adam_"] == 1
    assert not {"aten::cross_entropy_loss", "aten::_foreach_norm", "aten::mm"} & set(outside)


def test_the_whole_step_says_what_it_cannot_run(tmp_path, graphs, caplog):
    tc = load_config(TINY, STEP).train
    cpu = torch.device("cpu")
    assert whole_step_refusal(tc, cpu, 1, "none", False) is None
    assert "DDP" in whole_step_refusal(tc, cpu, 2, "none", False)
    assert "scaler" in whole_step_refusal(tc, cpu, 1, "fp16", False)
    graphs_tc = load_config(TINY, [*STEP, *SHAPES, "train.compile_mode=cuda-graphs"]).train
    assert "device is cpu" in whole_step_refusal(graphs_tc, cpu, 1, "none", False)
    made = trainer(tmp_path, "accum", [*STEP, "train.accum_steps=2"])
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        losses = steps(made, 1)
    assert made.whole_step is None and losses[0] > 0
    assert (
        "train.compile_scope: step falls back to compiling the model alone: train.accum_steps = 2"
        in caplog.text
    )
    with pytest.raises(ConfigError, match="data.batch_shapes"):
        load_config(TINY, [*STEP, "train.compile_mode=reduce-overhead"])


def test_the_saved_training_state_comes_back_in_the_same_tensors():
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([param], lr=0.1)
    saved = TrainingState([param], optimizer)
    param.grad = torch.ones(3)
    optimizer.step()
    moments = optimizer.state[param]["exp_avg"]
    saved.restore()
    assert torch.equal(param, torch.ones(3)) and not param.grad.any()
    assert optimizer.state[param]["exp_avg"] is moments and not moments.any()  # as a first step finds it
