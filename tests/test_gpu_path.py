"""The GPU path, shown on the CPU: random state, scaler resume, AMP choice, GRU precision, DDP options,
the host syncs a step avoids, TF32 and batch prefetching."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from support.synthetic import TINY, TINY_RUN_SETTINGS, write_corpus
from torch import nn
from torch._dynamo.eval_frame import OptimizedModule
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils.rnn import pack_padded_sequence

from attn_mt.config import load_config
from attn_mt.data.dataset import load_data
from attn_mt.data.prefetch import Prefetcher
from attn_mt.models import GRUBahdanau, Transformer, attention
from attn_mt.models import bahdanau as bahdanau_module
from attn_mt.models.attention import AttentionMask, DotProductAttention, MultiHeadAttention
from attn_mt.models.positional import sinusoid_table
from attn_mt.run import device as device_module
from attn_mt.run import open_export as open_export_module
from attn_mt.run import open_run_dir as open_run_dir_module
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.device import effective_amp, setup_device
from attn_mt.run.run_dir import RunPaths, read_metrics
from attn_mt.training import loss_totals as loss_totals_module
from attn_mt.training import trainer as trainer_module
from attn_mt.training.distributed import DistContext, ddp_options, only_fixed_tables
from attn_mt.training.launch import train
from attn_mt.training.loss_totals import DeviceLossTotals, HostLossTotals, TrainingDivergedError, loss_totals
from attn_mt.training.precision import restore_scaler
from attn_mt.training.random_state import restore_rng, rng_state, saved_cuda_state
from attn_mt.training.run_state import Progress
from attn_mt.training.speed import choose_speed
from attn_mt.training.trainer import Trainer

# tiny.yaml on the reverse task: its data settings, every validation checkpointed, one thread
SYNTH = [
    *TINY_RUN_SETTINGS[:3],
    "train.valid_max_sentences=10",
    "train.checkpoint_minutes=0",
    "train.threads=1",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 reverse-task pairs, shared by this module's runs."""
    return write_corpus(tmp_path_factory.mktemp("gpu-path") / "reverse.txt", n=300)


# ----- random state -----
def test_a_cpu_checkpoint_holds_no_cuda_state_and_restores_the_cpu_generator():
    torch.manual_seed(3)
    saved = rng_state(torch.device("cpu"))
    expected = torch.rand(4)
    assert saved["cuda"] is None
    restore_rng(saved, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected)


def test_the_cuda_state_is_one_device_and_the_old_per_gpu_list_still_reads():
    one, two = torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)
    assert saved_cuda_state(one) is one
    assert saved_cuda_state([one, two]) is one  # get_rng_state_all() of an older checkpoint: rank 0's device
    assert saved_cuda_state([]) is None and saved_cuda_state(None) is None


def test_restoring_on_cuda_sets_only_the_training_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.append((state, device)))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: pytest.fail("all devices restored"))
    one, two = torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)
    device = torch.device("cuda", 1)  # e.g. the only GPU left visible is not the one that saved
    cpu_state = torch.get_rng_state()
    for form in (one, [one, two], [one]):
        restore_rng({"torch": cpu_state, "cuda": form}, device)
    assert [(state is one, where) for state, where in calls] == [(True, device)] * 3
    restore_rng({"torch": cpu_state, "cuda": []}, device)  # a CPU run's old checkpoint, resumed on CUDA
    restore_rng({"torch": cpu_state, "cuda": [one, two]}, torch.device("cpu"))  # a GPU run's, on the CPU
    assert len(calls) == 3


def test_a_run_resumes_from_a_checkpoint_with_the_old_list_form(tmp_path, corpus):
    cfg = load_config(TINY, [*SYNTH, "train.epochs=1"])
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    state = load_checkpoint(last)
    assert state["rng"]["cuda"] is None
    state["rng"]["cuda"] = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]
    torch.save(state, last)
    more = load_config(TINY, [*SYNTH, "train.epochs=2"])
    result = train(more, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu", resume=True)
    assert result.epoch == 2


# ----- the gradient scaler across a change of train.amp -----
def scaler_for(amp: str) -> torch.amp.GradScaler:
    """The scaler a run of `amp` holds (on the CPU's GradScaler, the only one this machine has)."""
    return torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=amp == "fp16")


def test_a_disabled_scalers_empty_state_is_what_gradscaler_refuses():
    with pytest.raises(RuntimeError, match="state dict is empty"):
        scaler_for("fp16").load_state_dict(scaler_for("bf16").state_dict())


@pytest.mark.parametrize("saved", ["none", "bf16", "fp16"])
@pytest.mark.parametrize("resumed", ["none", "bf16", "fp16"])
def test_every_amp_change_resumes_the_scaler(saved, resumed):
    old = scaler_for(saved)
    if saved == "fp16":
        old.scale(torch.tensor(1.0))
        old.update(512.0)  # the scale the run had reached
    state = old.state_dict()
    new = torch.amp.GradScaler("cpu", enabled=resumed == "fp16")  # default scale 65536
    restore_scaler(new, state)
    if resumed != "fp16":
        assert not new.is_enabled()
    elif saved == "fp16":
        assert new.get_scale() == 512.0
    else:
        assert new.get_scale() == 65536.0  # a fresh scaler, as a new fp16 run starts with


# ----- train.amp: auto on CUDA -----
@pytest.mark.parametrize(("native", "expected"), [(True, "bf16"), (False, "fp16")])
def test_auto_never_picks_emulated_bf16(monkeypatch, native, expected):
    asked = []

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        asked.append(including_emulation)
        return native or including_emulation  # a T4 / V100 emulates bf16

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert effective_amp(torch.device("cuda"), "auto") == expected
    assert asked == [False]


@pytest.mark.parametrize(("capability", "expected"), [((8, 0), "bf16"), ((7, 5), "fp16")])
def test_an_older_torch_without_the_argument_goes_by_compute_capability(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert device_module.cuda_has_native_bf16() is (expected == "bf16")
    assert effective_amp(torch.device("cuda"), "auto") == expected


# ----- the GRUs under autocast -----
def test_only_bf16_autocast_on_cuda_takes_the_grus_to_float32(monkeypatch):
    assert not bahdanau_module.gru_in_float32("cuda")  # no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not bahdanau_module.gru_in_float32("cpu")  # no cuDNN wrapper on the CPU: unchanged
    state = {"dtype": torch.bfloat16}
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda device_type: device_type == "cuda")
    monkeypatch.setattr(torch, "get_autocast_dtype", lambda device_type: state["dtype"])
    assert bahdanau_module.gru_in_float32("cuda") and not bahdanau_module.gru_in_float32("cpu")
    state["dtype"] = torch.float16  # fp16: cuDNN's fp16 GRU, with the gradient scaler
    assert not bahdanau_module.gru_in_float32("cuda")


def test_a_gru_taken_out_of_autocast_computes_exactly_the_float32_gru(monkeypatch):
    torch.manual_seed(0)
    rnn = nn.GRU(6, 8, 2, batch_first=True)
    x, h = torch.randn(3, 5, 6), torch.randn(2, 3, 8)
    plain_out, plain_h = rnn(x, h)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast_out, _ = bahdanau_module.run_gru(rnn, x, h)  # the CPU path: as autocast has it
        monkeypatch.setattr(bahdanau_module, "gru_in_float32", lambda device_type: True)
        out, hidden = bahdanau_module.run_gru(rnn, x.bfloat16(), h.bfloat16())
        packed = pack_padded_sequence(x, torch.tensor([5, 3, 2]), batch_first=True, enforce_sorted=False)
        packed_out, _ = bahdanau_module.run_gru(rnn, packed)
    assert out.dtype == hidden.dtype == packed_out.data.dtype == torch.float32
    assert not torch.equal(cast_out.float(), plain_out)  # autocast really lowers the GRU's products here
    torch.testing.assert_close(out, rnn(x.bfloat16().float(), h.bfloat16().float())[0], rtol=0, atol=0)
    expected_packed, _ = rnn(packed)
    torch.testing.assert_close(packed_out.data, expected_packed.data, rtol=0, atol=0)
    assert plain_h.shape == hidden.shape


# ----- no host sync in attention on a GPU -----
def test_a_mask_on_a_device_never_reads_its_lengths_back():
    assert attention.reads_back(torch.device("cpu")) and not attention.reads_back(torch.device("cuda"))
    lens = torch.tensor([3, 0, 5], device="meta")  # reading a meta tensor back raises
    with pytest.raises(RuntimeError, match="meta"):
        bool(lens.any())
    mask = AttentionMask.from_valid_lens(lens, 1, 5)
    assert mask.empty is not None and mask.keep.shape == (3, 1, 5)


@pytest.mark.parametrize("lengths", [[3, 5, 1], [3, 0, 5]], ids=["all-valid", "one-empty"])
def test_the_device_mask_gives_the_cpu_masks_numbers(monkeypatch, lengths):
    torch.manual_seed(0)
    lens = torch.tensor(lengths)
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, dropout=0.0).eval()
    dot = DotProductAttention(dropout=0.0).eval()

    def outputs() -> list[torch.Tensor]:
        mask = AttentionMask.from_valid_lens(lens, 4, 5).with_heads()
        head_k, head_v = mha.project_keys_values(k, v)
        fused, _ = mha.attend(q, head_k, head_v, mask, need_weights=False)
        explicit, weights = mha.attend(q, head_k, head_v, mask, need_weights=True)
        return [fused, explicit, weights, dot(q, k, v, lens), mha(q, k, v, lens)]

    on_host = outputs()
    monkeypatch.setattr(attention, "reads_back", lambda device: False)
    for a, b in zip(outputs(), on_host, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ----- DDP -----
@pytest.mark.parametrize(
    "model", [GRUBahdanau(20, 20, 8, 8, 2, 0.1, False), Transformer(20, 20, 8, 16, 2, 2, 0.1)]
)
def test_the_only_buffers_are_fixed_tables_so_ddp_broadcasts_none(model):
    assert only_fixed_tables(model)
    assert ddp_options(model, torch.device("cpu")) == {"device_ids": None, "forward_sync_buffers": False}
    assert ddp_options(model, torch.device("cuda", 1))["device_ids"] == [1]
    cpu_net = choose_speed("auto", torch.device("cpu"), False, 2).wrap(model)  # the CPU kernels' module
    assert only_fixed_tables(cpu_net)
    assert not only_fixed_tables(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))


def test_a_grown_positional_table_agrees_with_every_smaller_one():
    small, grown = sinusoid_table(50, 16), sinusoid_table(2000, 16)
    assert torch.equal(grown[:50], small)


def test_under_ddp_the_ddp_module_is_compiled_with_no_buffer_broadcasts(tmp_path, corpus):
    cfg = load_config(TINY, [*SYNTH, "train.compile=true"])
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        ctx = DistContext(rank=0, world_size=2, waiting_group=None)  # "several ranks" for the trainer
        trainer = Trainer(
            cfg, RunPaths(tmp_path / "run"), load_data(cfg.data, str(corpus)), torch.device("cpu"), True, ctx
        )
        assert isinstance(trainer.ddp, DistributedDataParallel) and not trainer.ddp.forward_sync_buffers
        assert isinstance(trainer.net, OptimizedModule) and trainer.net._orig_mod is trainer.ddp
        assert trainer.ddp.module is trainer.model  # compile forces the reference path: the book model itself
    finally:
        dist.destroy_process_group()


def test_one_process_does_not_wait():
    DistContext().wait_for_main()


# ----- the loss sums on the device -----
def on_gpu_as_on_cuda(device: torch.device, ddp: bool, kept: Path, start: Progress) -> DeviceLossTotals:
    """The sums one CUDA process keeps, made on whatever device the test trains on."""
    return DeviceLossTotals(device, kept, start)


def test_the_sums_stay_on_one_gpu_and_are_checked_floats_elsewhere(monkeypatch, tmp_path):
    kept = tmp_path / "last.pt"
    assert isinstance(loss_totals(torch.device("cpu"), False, kept, Progress()), HostLossTotals)
    assert isinstance(loss_totals(torch.device("mps"), False, kept, Progress()), HostLossTotals)  # no float64
    monkeypatch.setattr(loss_totals_module, "DeviceLossTotals", lambda *args: ("device", *args))
    cuda = torch.device("cuda", 0)
    assert loss_totals(cuda, False, kept, Progress())[:2] == ("device", cuda)
    assert isinstance(loss_totals(cuda, True, kept, Progress()), HostLossTotals)  # DDP reads each step anyway
    monkeypatch.undo()
    host = HostLossTotals(kept, Progress(window_loss=1.0, epoch_loss=2.0))
    host.add(0.5, step=1)
    assert host.read() == (1.5, 2.5)
    with pytest.raises(TrainingDivergedError, match=f"the loss became inf at step 2; .* kept at {kept}"):
        host.add(float("inf"), step=2)
    on_device = DeviceLossTotals(torch.device("meta"), kept, Progress())  # no number can be read back from it
    on_device.add(on_device.zero() + on_device.scalar(torch.tensor(3.0, device="meta")) / 7, step=1)
    on_device.clear_window()  # a step's work never reads back...
    with pytest.raises(RuntimeError, match="meta"):
        on_device.read()  # ...only reading the sums does


def test_loss_totals_add_up_bit_for_bit_as_host_floats(tmp_path):
    torch.manual_seed(0)
    losses = (torch.rand(500) * 40).tolist()
    widths = torch.randint(1, 30, (500,)).tolist()
    start = Progress(step=10, window_loss=0.25, epoch_loss=3.5)
    window, epoch = start.window_loss, start.epoch_loss
    host, device = HostLossTotals(tmp_path, start), DeviceLossTotals(torch.device("cpu"), tmp_path, start)
    for i, (value, width) in enumerate(zip(losses, widths, strict=True)):
        as_float32 = torch.tensor(value, dtype=torch.float32)
        window, epoch = window + float(as_float32) / width, epoch + float(as_float32) / width
        for totals in (host, device):
            totals.add(totals.zero() + totals.scalar(as_float32) / width, step=11 + i)
        if i % 37 == 36:
            assert host.read() == device.read() == (window, epoch)
            host.clear_window(), device.clear_window()
            window = 0.0
    assert host.read() == device.read() == (window, epoch)


def test_deferring_the_loss_read_changes_no_number(tmp_path, corpus, monkeypatch):
    cfg = load_config(TINY, [*SYNTH, "train.epochs=2", "model.dropout=0.2", "train.log_every=3"])
    train(cfg, tmp_path / "each", data_path=str(corpus), quiet=True, device="cpu")
    monkeypatch.setattr(trainer_module, "loss_totals", on_gpu_as_on_cuda)
    train(cfg, tmp_path / "deferred", data_path=str(corpus), quiet=True, device="cpu")

    def numbers(name: str) -> list[dict]:
        drop = ("elapsed_s", "tokens_per_s")
        return [
            {k: v for k, v in r.items() if k not in drop}
            for r in read_metrics(tmp_path / name / "metrics.jsonl")
        ]

    assert numbers("deferred") == numbers("each") and len(numbers("each")) > 5


def test_a_deferred_nan_stops_at_the_next_read_before_any_checkpoint(tmp_path, corpus, monkeypatch):
    objective = Trainer._objective
    calls = {"n": 0}

    def poisoned(self, *args):
        result, loss = objective(self, *args)
        calls["n"] += 1
        return (result * float("nan"), loss * float("nan")) if calls["n"] >= 7 else (result, loss)

    monkeypatch.setattr(trainer_module, "loss_totals", on_gpu_as_on_cuda)
    monkeypatch.setattr(Trainer, "_objective", poisoned)
    cfg = load_config(TINY, [*SYNTH, "train.epochs=5", "train.log_every=4", "train.valid_every=4"])
    with pytest.raises(TrainingDivergedError, match="the loss became nan in steps 5-8"):
        train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert state["step"] == 4
    assert all(torch.isfinite(t).all() for t in state["model"].values())


# ----- TF32 -----
def test_tf32_is_set_for_cuda_only_and_never_reaches_the_cpu():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    cpu_precision = torch.backends.mkldnn.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        setup_device(torch.device("cpu"), 0, tf32=True)
        assert not torch.backends.cuda.matmul.allow_tf32
        setup_device(torch.device("cuda"), 0, tf32=True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "high"  # still readable: torch.compile reads it
        assert torch.backends.mkldnn.matmul.fp32_precision == cpu_precision
        setup_device(torch.device("cuda"), 0, tf32=False)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_cuda_keeps_attention_off_cudnn_in_training_and_in_the_torch_openers(monkeypatch, tmp_path):
    # cuDNN attention plans every new batch shape: most of a step on an H200 (docs/benchmarks.md)
    saved = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        setup_device(torch.device("cpu"), 0)
        assert torch.backends.cuda.cudnn_sdp_enabled()  # the CPU leaves CUDA's switches alone
        setup_device(torch.device("cuda"), 0)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        for module, opener, loader in (
            (open_run_dir_module, open_run_dir_module.open_run_dir, "load_run"),
            (open_export_module, open_export_module.open_export_file, "load_export"),
        ):
            torch.backends.cuda.enable_cudnn_sdp(True)
            monkeypatch.setattr(module, "pick_device", lambda name: torch.device("cuda"))
            monkeypatch.setattr(module, loader, lambda *args: SimpleNamespace())
            opener(tmp_path, "best", "cuda", None)
            assert not torch.backends.cuda.cudnn_sdp_enabled(), opener.__name__
    finally:
        torch.backends.cuda.enable_cudnn_sdp(saved)


# ----- batches prepared ahead -----
def test_the_prefetcher_gives_the_batches_in_order(corpus):
    cfg = load_config(TINY, SYNTH)
    data = load_data(cfg.data, str(corpus))
    plan = data.train.plan(0, 0)
    steps = [[plan[i], plan[i + 1]] for i in range(0, len(plan) - 1, 2)]
    with Prefetcher(iter(steps), data.train.collate, ahead=2, pin=False) as feed:
        got = list(feed)
    assert len(got) == len(steps)
    for batches, indices in zip(got, steps, strict=True):
        for batch, ix in zip(batches, indices, strict=True):
            expected = data.train.collate(ix)
            assert torch.equal(batch.src, expected.src) and torch.equal(batch.tgt_lens, expected.tgt_lens)


def test_the_prefetcher_stops_early_and_passes_errors_on():
    made = []

    def collate(ix):
        made.append(ix)
        if ix == [3]:
            raise ValueError("bad batch 3")
        return ix

    before = threading.active_count()
    with Prefetcher(iter([[[i]] for i in range(1000)]), collate, ahead=2, pin=False) as feed:
        assert next(feed) == [[0]]
    assert len(made) < 10 and threading.active_count() == before  # stopped, not run to the end
    with Prefetcher(iter([[[i]] for i in range(5)]), collate, ahead=1, pin=False) as feed:
        assert [next(feed), next(feed), next(feed)] == [[[0]], [[1]], [[2]]]
        with pytest.raises(ValueError, match="bad batch 3"):
            next(feed)
    with pytest.raises(ValueError, match="ahead must be at least 1"):
        Prefetcher(iter([]), collate, ahead=0, pin=False)
