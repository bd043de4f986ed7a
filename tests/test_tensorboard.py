"""TensorBoard events: read back with tensorboard's own reader, they equal metrics.jsonl, across resumes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attn_mt.config import Config, ConfigError, config_from_dict
from attn_mt.data.splits import EvalExample
from attn_mt.data.vocab import Vocab
from attn_mt.decoding.attention import SentenceAttention
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.models.build import build_model
from attn_mt.run.run_dir import RunPaths, read_metrics, truncate_metrics
from attn_mt.training.tensorboard import (
    ATTENTION_TAG,
    FOLDER,
    SAMPLES_TAG,
    Sample,
    TensorBoardLog,
    require_tensorboard,
    sample_translations,
    tag_of,
)

ATTENTION = SentenceAttention(
    maps={"cross": np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]], dtype=np.float32)},  # (T, S)
    source_tokens=["go", ".", "<eos>"],
    output_tokens=["va", "<eos>"],
    decoder_input_tokens=["<bos>", "va"],
)


def read_events(folder) -> EventAccumulator:
    """Every event in `folder`, as TensorBoard loads it (later sessions' purges applied)."""
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    return events


def train_session(
    paths: RunPaths, log: TensorBoardLog, first: int, last: int, seed: int, final: bool = False
) -> None:
    """Steps first..last as the trainer records them: a window every 2 steps, a validation every 5.

    Every record goes to metrics.jsonl and to the writer, as the trainer's `_record` does, and each
    validation writes its samples; with `final`, the session ends with a final validation at `last`.
    """
    rng = np.random.default_rng(seed)
    with paths.metrics.open("a", encoding="utf-8") as handle:
        for step in range(first, last + 1):
            records = []
            if step % 2 == 0:
                records.append(
                    {
                        "loss": round(float(rng.uniform(1, 5)), 5),
                        "tokens_per_s": float(rng.integers(900, 1100)),
                        "grad_norm": round(float(rng.uniform(0, 2)), 4),
                    }
                )
            if step % 5 == 0 or (final and step == last):
                records.append(
                    {
                        "train_loss": round(float(rng.uniform(1, 5)), 4),
                        "valid_loss": round(float(rng.uniform(2, 6)), 4),
                        "valid_bleu": round(float(rng.uniform(0, 40)), 4),
                        **({"final": True} if step % 5 else {}),
                    }
                )
                log.validation(step, [Sample(f"sentence {step}", f"session {seed}", "")], ATTENTION)
            for values in records:
                record = {
                    "step": step,
                    "epoch": step // 7,
                    **values,
                    "lr": 0.001 * step,
                    "elapsed_s": step * 0.5,
                }
                handle.write(json.dumps(record) + "\n")
                log.scalars(step, record)
    log.close()


def resume(paths: RunPaths, step: int) -> TensorBoardLog:
    """What a resume from a checkpoint at `step` does: open the writer, then truncate metrics.jsonl."""
    log = TensorBoardLog.for_run(paths, resume_step=step)
    truncate_metrics(paths.metrics, step)
    return log


def test_events_equal_metrics_jsonl_after_a_crash_and_an_interrupted_session(tmp_path):
    paths = RunPaths(tmp_path)
    # session 1 writes up to step 13 but its last checkpoint is at step 10 (a crash)
    train_session(paths, TensorBoardLog.for_run(paths), 1, 13, seed=1)
    # session 2 is interrupted at step 17: a final validation there, last.pt at 17
    train_session(paths, resume(paths, 10), 11, 17, seed=2, final=True)
    train_session(paths, resume(paths, 17), 18, 22, seed=3)
    records = read_metrics(paths.metrics)
    events = read_events(tmp_path / FOLDER)
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for key, value in record.items():
            if key not in ("step", "epoch", "elapsed_s", "final"):
                expected.setdefault(tag_of(key), []).append((record["step"], value))
    assert (
        set(events.Tags()["scalars"])
        == set(expected)
        == {
            "train/loss",
            "train/target_tokens_per_s",
            "train/grad_norm",
            "train/lr",
            "train/loss_at_validation",
            "valid/loss",
            "valid/bleu",
        }
    )
    for tag, pairs in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in pairs], tag  # each step once, in order
        assert [v for _, v in got] == pytest.approx([v for _, v in pairs], rel=1e-6), tag
    assert [s for s, _ in expected["valid/loss"]] == [5, 10, 15, 20]  # no final validation at 17
    assert [s for s, _ in expected["train/loss"]] == list(range(2, 23, 2))
    # the image of the validation at step 10 (session 1's checkpoint) stays; the final one at 17 goes
    assert [image.step for image in events.Images(ATTENTION_TAG)] == [5, 10, 15, 20]


def test_validation_writes_sample_translations_and_the_attention_image(tmp_path):
    log = TensorBoardLog(tmp_path)
    samples = [Sample("go .", "va !", "va !"), Sample("a | b", "", "c")]
    log.validation(5, samples, ATTENTION)
    log.validation(10, samples[:1], None)
    log.close()
    events = read_events(tmp_path)
    images = events.Images(ATTENTION_TAG)
    assert [image.step for image in images] == [5]
    assert images[0].width > 100 and images[0].height > 100
    texts = events.Tensors(f"{SAMPLES_TAG}/text_summary")
    assert [t.step for t in texts] == [5, 10]
    table = texts[0].tensor_proto.string_val[0].decode("utf-8")
    assert table.splitlines() == [
        "| source | output | reference |",
        "|---|---|---|",
        "| go . | va ! | va ! |",
        "| a \\| b |   | c |",
    ]


def test_sample_translations_are_the_first_examples_with_the_first_ones_attention():
    torch.manual_seed(0)
    vocab = Vocab(["<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "c"])
    cfg = Config()
    cfg.data.mode = "split"
    model = build_model(
        config_from_dict(
            {
                "model": {
                    "type": "transformer",
                    "num_hiddens": 8,
                    "num_heads": 2,
                    "ffn_num_hiddens": 16,
                    "num_layers": 1,
                }
            }
        ).model,
        len(vocab),
        len(vocab),
    )
    translator = Translator(model, vocab, vocab, cfg)
    examples = [
        EvalExample("a b", ["b a"]),
        EvalExample("c", ["c c", "c"]),
        EvalExample("b", ["a"]),
        EvalExample("a", ["a"]),
    ]
    samples, attention = sample_translations(translator, examples, count=3)
    assert [(s.source, s.reference) for s in samples] == [("a b", "b a"), ("c", "c c"), ("b", "a")]
    again = translator.translate(["a b", "c", "b"], beam_size=1)
    assert [s.output for s in samples] == [t.text for t in again]
    assert attention is not None and attention.source_tokens == ["a", "b", "<eos>"]
    assert attention.maps["cross"].shape[-2:] == (len(attention.output_tokens), 3)  # (L, h, T, S)
    assert sample_translations(translator, [], count=3) == ([], None)


def test_without_the_tensorboard_package_asking_for_it_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` now raises ImportError
    with pytest.raises(
        UserError,
        match=r"train.tensorboard: true needs the tensorboard package: "
        r"pip install 'attn-mt\[tensorboard\]'",
    ):
        require_tensorboard()
    with pytest.raises(UserError, match="pip install"):
        TensorBoardLog(tmp_path)
    assert not any(tmp_path.iterdir())


def test_train_tensorboard_is_off_by_default_and_must_be_a_bool():
    assert Config().train.tensorboard is False
    assert config_from_dict({"train": {"tensorboard": True}}).train.tensorboard is True
    with pytest.raises(ConfigError, match="train.tensorboard: expected true or false, got 'yes please'"):
        config_from_dict({"train": {"tensorboard": "yes please"}})
