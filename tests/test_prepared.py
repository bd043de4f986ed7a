"""The prepared-corpus store: same data and losses cold and mapped, any workers, damaged folders, prepare."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.synthetic import reverse_pairs, write_corpus

import attn_mt.data.parallel as parallel_module
import attn_mt.data.prepare as prepare_module
from attn_mt.config import load_config
from attn_mt.data.dataset import load_data
from attn_mt.data.parallel import encode_parallel
from attn_mt.data.prepare import load_prepared
from attn_mt.data.store import HEADER, VERSION
from attn_mt.data.subword import learn_subwords, prepare_text, sample_sentences
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.training.launch import train

TINY = Path(__file__).resolve().parent.parent / "configs" / "tiny.yaml"
SUBWORDS = ["data.tokenizer=sentencepiece", "data.vocab_size=330", "data.subword_type=bpe"]
# configs/tiny.yaml on write_corpus(n=300), measured before the store existed (data read into lists,
# batches from a Python loop): epoch 0's batch sizes and the first four losses (train.log_every=1).
BEFORE_BATCH_SIZES = {"book": [51, 34, 36, 51, 42, 36, 42], "sentencepiece": [23, 18, 32, 23, 25]}
BEFORE_LOSSES = [2.89748, 2.6832, 2.43028, 2.11504]  # book tokenizer


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "attn-mt" / "prepared"


def _folder(cache: Path) -> Path:
    """The one prepared folder in the cache."""
    folders = [p for p in cache.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def _snapshot(data) -> dict:
    """Everything about the data that training or evaluation reads."""
    train_set = data.train
    return {
        "valid": [(ex.src, ex.refs) for ex in data.valid],
        "test": [(ex.src, ex.refs) for ex in data.test],
        "vocab": (data.src_vocab.idx_to_token, data.tgt_vocab.idx_to_token),
        "ids": [(train_set.src[i], train_set.tgt[i]) for i in range(train_set.num_examples)],
        "plans": [[b.tolist() for b in train_set.plan(epoch, 0)] for epoch in range(3)],
        "batch": {k: v.tolist() for k, v in vars(train_set.collate(train_set.plan(0, 0)[0])).items()},
        "train_report": data.report["splits"]["train"],
    }


def _losses(run_dir: Path) -> list[float]:
    """The logged training losses of a run."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m["loss"] for m in lines if "loss" in m]


@pytest.mark.parametrize("tokenizer", ["book", "sentencepiece"])
def test_cold_and_mapped_loads_give_the_same_split_ids_and_batches_as_before(tmp_path, cache, tokenizer):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(TINY, SUBWORDS if tokenizer == "sentencepiece" else [])
    cold = load_data(cfg.data, str(corpus))
    mapped = load_data(cfg.data, str(corpus))
    assert (cold.report["prepared"]["origin"], mapped.report["prepared"]["origin"]) == ("built", "mapped")
    assert _snapshot(cold) == _snapshot(mapped)
    assert [len(b) for b in mapped.train.plan(0, cfg.train.seed)] == BEFORE_BATCH_SIZES[tokenizer]


def test_tiny_trains_the_same_cold_and_mapped_as_before_the_store(tmp_path, cache):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(TINY, ["train.max_steps=4", "train.log_every=1"])
    runs = {name: tmp_path / name for name in ("cold", "mapped")}
    for run_dir in runs.values():
        train(cfg, run_dir, data_path=str(corpus), quiet=True, device="cpu")
    origins = [json.loads((d / "data_report.json").read_text())["prepared"]["origin"] for d in runs.values()]
    assert origins == ["built", "mapped"]
    assert _losses(runs["cold"]) == _losses(runs["mapped"])
    assert _losses(runs["mapped"]) == pytest.approx(BEFORE_LOSSES, rel=1e-4)


def test_parallel_encoding_is_the_same_for_any_number_of_workers(monkeypatch):
    monkeypatch.setattr(parallel_module, "CHUNK", 7)  # 100 sentences: 15 chunks
    texts = [prepare_text(s) for pair in reverse_pairs(50) for s in pair]
    words = Vocab.build([t.split() for t in texts[:60]], min_freq=1)
    pieces = learn_subwords(texts, "bpe", 300, "test")
    for vocab in (words, pieces):
        runs = [encode_parallel(vocab, texts, workers) for workers in (1, 2, 3)]
        expected = vocab.encode_texts(texts)
        for seqs in runs:
            assert [seqs[i] for i in range(len(texts))] == expected
            assert seqs.ids.tolist() == runs[0].ids.tolist()
            assert seqs.starts.tolist() == runs[0].starts.tolist()
        assert runs[0].ids.dtype == np.uint16
    assert len(encode_parallel(words, [], 2)) == 0


def test_whole_preparation_is_the_same_for_any_number_of_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel_module, "CHUNK", 50)
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(TINY, SUBWORDS).data
    folders = []
    for workers in (1, 3):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"cache{workers}"))
        prepared, built = load_prepared(cfg, str(corpus), workers=workers)
        assert built and prepared.facts["prepared"]["workers"] == workers
        folders.append(Path(prepared.facts["prepared"]["folder"]))
    assert folders[0].name == folders[1].name  # the same inputs
    for path in folders[0].iterdir():
        if path.name != HEADER:  # the header records the timings
            assert path.read_bytes() == (folders[1] / path.name).read_bytes(), path.name


def _rebuilt(cfg, corpus: str, caplog) -> bool:
    """Load again; True when the folder was found wrong (a warning) and prepared again."""
    caplog.clear()
    data = load_data(cfg, corpus)
    rebuilt = data.report["prepared"]["origin"] == "built"
    assert rebuilt == any("rebuilding the prepared corpus" in r.getMessage() for r in caplog.records)
    return rebuilt


def test_damaged_or_foreign_folders_are_rebuilt_never_trusted(tmp_path, cache, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("attn_mt"), "propagate", True)  # training may have turned it off
    corpus = str(write_corpus(tmp_path / "reverse.txt", n=300))
    cfg = load_config(TINY, SUBWORDS).data
    first = load_data(cfg, corpus)
    expected = _snapshot(first)
    folder = _folder(cache)
    ids = folder / "src_ids.npy"
    header_path = folder / HEADER

    def edit_header(**changes) -> None:
        header = json.loads(header_path.read_text())
        header.update(changes)
        header_path.write_text(json.dumps(header))

    assert not _rebuilt(cfg, corpus, caplog)
    ids.write_bytes(ids.read_bytes()[:-10])  # truncated: killed mid-write or a short copy
    assert _rebuilt(cfg, corpus, caplog)
    data = ids.read_bytes()
    ids.write_bytes(data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])  # one id edited, same size
    assert _rebuilt(cfg, corpus, caplog)
    edit_header(version=VERSION + 1)  # another format version
    assert _rebuilt(cfg, corpus, caplog)
    header = json.loads(header_path.read_text())
    edit_header(inputs={**header["inputs"], "split_seed": 1})  # a header for other inputs
    assert _rebuilt(cfg, corpus, caplog)
    header_path.write_text("{not json")
    assert _rebuilt(cfg, corpus, caplog)
    (folder / "heldout.json").unlink()
    assert _rebuilt(cfg, corpus, caplog)
    assert _snapshot(load_data(cfg, corpus)) == expected
    stale = cache / f".{folder.name}.12345.tmp"  # a build killed before its rename
    stale.mkdir()
    (stale / "src_ids.npy").write_bytes(b"partial")
    header_path.unlink()
    assert _rebuilt(cfg, corpus, caplog) and not stale.exists()
    assert _snapshot(load_data(cfg, corpus)) == expected


def test_an_edited_corpus_is_prepared_again(tmp_path, cache):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(TINY).data
    first = load_data(cfg, str(corpus))
    with corpus.open("a", encoding="utf-8") as out:
        out.write("Alpha bravo golf.\tGolf deux un.\n")
    again = load_data(cfg, str(corpus))
    assert again.report["prepared"]["origin"] == "built"
    assert again.report["corpus_pairs"] == first.report["corpus_pairs"] + 1


def _prepare_in_process(corpus: str, local_rank: int, cache: str, results) -> None:
    """One torchrun-like rank preparing the corpus (run in a child process)."""
    import os

    os.environ.update(LOCAL_RANK=str(local_rank), XDG_CACHE_HOME=cache)
    _, built = load_prepared(load_config(TINY, SUBWORDS).data, corpus, workers=1)
    results.put((local_rank, built))


def test_ranks_on_one_machine_prepare_once_and_share_the_folder(tmp_path):
    corpus = str(write_corpus(tmp_path / "reverse.txt", n=300))
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    cache = str(tmp_path / "cache")
    ranks = [
        context.Process(target=_prepare_in_process, args=(corpus, rank, cache, results)) for rank in range(3)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=120)
    assert [p.exitcode for p in ranks] == [0, 0, 0]
    built = dict(results.get(timeout=5) for _ in ranks)
    assert sum(built.values()) == 1  # exactly one process prepared; the others mapped its folder


def test_subword_sample_is_seeded_in_order_and_validated(tmp_path, cache, monkeypatch):
    texts = [f"s{i}" for i in range(100)]
    sample = sample_sentences(texts, 30, seed=4)
    assert len(sample) == 30 == len(set(sample)) and sample == sorted(sample, key=texts.index)
    assert sample == sample_sentences(texts, 30, seed=4) and sample != sample_sentences(texts, 30, seed=5)
    assert sample_sentences(texts, 0, seed=4) == texts == sample_sentences(texts, 100, seed=4)
    seen = []
    real = prepare_module.learn_subwords

    def spy(sentences, *args):
        seen.append(list(sentences))
        return real(sentences, *args)

    monkeypatch.setattr(prepare_module, "learn_subwords", spy)
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    data = load_data(load_config(TINY, [*SUBWORDS, "data.subword_sample=400"]).data, str(corpus))
    train_text = {data.src_vocab.detokenize(data.train.src[i]) for i in range(data.train.num_examples)}
    assert len(seen) == 1 and len(seen[0]) == 400  # one shared model, learned on 400 of the 584 sentences
    assert train_text & set(seen[0])
    assert load_config(TINY, [*SUBWORDS, "data.subword_sample=0"]).data.subword_sample == 0
    with pytest.raises(UserError, match="data.subword_sample: must be >= 0"):
        load_config(TINY, ["data.subword_sample=-1"])
    with pytest.raises(
        UserError,
        match="data.subword_sample: 100 sentences are too few to learn data.vocab_size = 330 pieces",
    ):
        load_config(TINY, [*SUBWORDS, "data.subword_sample=100"])
    with pytest.raises(UserError, match="data.subword_sample: expected an integer"):
        load_config(TINY, ["data.subword_sample=lots"])


def test_prepare_command_prepares_once_then_training_maps_it(tmp_path, cache, monkeypatch, run_cli):
    corpus = str(write_corpus(tmp_path / "reverse.txt", n=300))
    settings = [arg for s in SUBWORDS for arg in ("--set", s)]
    code, out, _ = run_cli("prepare", str(TINY), "--data", corpus, "--workers", "2", "-q", *settings)
    assert code == 0 and out.startswith("prepared ") and "(2 worker process(es))" in out
    folder = _folder(cache)
    assert str(folder) in out and {"src_ids.npy", "tgt_offsets.npy", "src.model", HEADER} <= {
        p.name for p in folder.iterdir()
    }
    code, out, _ = run_cli("prepare", str(TINY), "--data", corpus, *settings)
    assert code == 0 and out.startswith("already prepared: ")

    def refuse(*args):
        raise AssertionError("prepared again")

    monkeypatch.setattr(prepare_module, "learn_subwords", refuse)
    monkeypatch.setattr(prepare_module, "encode_parallel", refuse)
    code, out, _ = run_cli("data-report", str(TINY), "--data", corpus, *settings)
    assert code == 0 and "from the cache" in out
    book = str(TINY.parent / "d2l_bahdanau.yaml")
    code, _, err = run_cli("prepare", book, "--data", corpus)
    assert code != 0 and "data.mode is 'book': only split mode is prepared ahead" in err


@pytest.mark.parametrize("tokenizer", ["book", "sentencepiece"])
def test_prepare_into_a_file_writes_progress_lines_not_redraws(tmp_path, tokenizer):
    """`attn-mt prepare CONFIG 2> log`: progress reaches the file as whole lines, without a terminal's \\r."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    settings = [arg for s in (SUBWORDS if tokenizer == "sentencepiece" else []) for arg in ("--set", s)]
    log = tmp_path / "log"
    with log.open("wb") as err:
        done = subprocess.run(
            [sys.executable, "-m", "attn_mt", "prepare", str(TINY), "--data", str(corpus), *settings],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
            check=False,
        )
    written = log.read_bytes()
    assert done.returncode == 0, written.decode()[-2000:]
    assert b"\r" not in written and b"encoding" in written, written.decode()[-2000:]
