"""Subword vocabularies end to end: raw text in, cased natural text out, standard scores, both directions."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.synthetic import reverse_pairs, write_corpus

import attn_mt.data.prepare as prepare_module
from attn_mt.commands.evaluate import run_eval
from attn_mt.config import load_config
from attn_mt.data.corpus import read_aligned, read_pairs
from attn_mt.data.dataset import load_data
from attn_mt.data.subword import SubwordVocab, learn_subwords, prepare_text
from attn_mt.data.trainset import TokenSequences
from attn_mt.decoding.attention import SentenceAttention, merge_words, word_groups
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.run.run_dir import load_run
from attn_mt.training.launch import train

ROOT = Path(__file__).resolve().parent.parent
SUBWORD_SETTINGS = [
    "data.mode=split",
    "data.tokenizer=sentencepiece",
    "data.vocab_size=320",
    "data.valid_size=10",
    "data.test_size=10",
    "data.max_len=40",
    "data.max_tokens=400",
    "model.type=transformer",
    "model.num_hiddens=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.ffn_num_hiddens=64",
    "model.dropout=0.0",
    "train.epochs=10",
    "train.lr=0.01",
    "train.loss_average=token",
    "train.log_every=10",
    "train.valid_max_sentences=10",
    "train.best_metric=valid_loss",
    "decode.beam_size=2",
    "decode.max_len_b=5",
    "decode.batch_size=64",
]


def test_subword_model_keeps_special_ids_case_and_round_trips():
    texts = [prepare_text(s) for pair in reverse_pairs(200) for s in pair]
    vocab = learn_subwords(texts, "bpe", 320, "test")
    assert [vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id] == [0, 1, 2, 3]
    for text in ["Alpha bravo.", "Ça alors\u202f! Tom a acheté 3 pommes à Kyoto 😀 東京…"]:
        ids = vocab.encode_text(text)
        assert vocab.unk_id not in ids  # byte fallback: unseen characters become bytes, never <unk>
        assert vocab.detokenize(ids) == text
    specials = [vocab.bos_id, *vocab.encode_text("Deux."), vocab.unk_id, vocab.eos_id]
    assert vocab.detokenize(specials) == "Deux."


def test_byte_pieces_that_spell_control_characters_never_break_an_output_line():
    """A sampled output can pick the byte pieces of a line break or a control character; the output
    text shows U+FFFD there, so one output is still one line."""
    texts = [prepare_text(s) for pair in reverse_pairs(200) for s in pair]
    vocab = learn_subwords(texts, "bpe", 320, "test")
    words = vocab.encode_text("Deux")
    for byte in (0x0A, 0x0D, 0x00, 0x1C, 0x7F):
        piece = vocab.processor.piece_to_id(f"<0x{byte:02X}>")
        assert vocab.detokenize([*words, piece, *words]) == "Deux\ufffd Deux"  # the second word starts anew
    line_separator = [vocab.processor.piece_to_id(f"<0x{b:02X}>") for b in "\u2028".encode()]
    assert vocab.detokenize(line_separator) == "\ufffd"
    assert vocab.detokenize(vocab.encode_text("Ça\u202f! 東京")) == "Ça\u202f! 東京"  # text stays text


def test_labels_show_word_starts_and_continuations():
    texts = [prepare_text(s) for pair in reverse_pairs(200) for s in pair]
    vocab = learn_subwords(texts, "unigram", 320, "t")
    ids = vocab.encode_text("Alphabravo golf")
    labels = vocab.labels(ids)
    assert "".join(label.lstrip("\u00b7\u2423") for label in labels) == "Alphabravogolf"
    assert all("\u2581" not in label for label in labels)
    assert sum(not label.startswith("\u00b7") and label != "\u2423" for label in labels) == 2  # 2 words
    starts = vocab.word_starts(ids)
    assert starts[0] and sum(starts) == 2


def test_a_lone_space_piece_adds_no_space_and_makes_no_word():
    """A lone "▁" at the start, after a word (before a word-start piece and before a continuation) and
    at the end: single spaces, no outer ones, two words, and every piece still labelled."""
    texts = [prepare_text(s) for pair in reverse_pairs(200) for s in pair]
    vocab = learn_subwords(texts, "unigram", 320, "t")
    space = vocab.token_to_idx["\u2581"]
    alpha, golf = vocab.encode_text("Alpha"), vocab.encode_text("golf")
    continued = [vocab.token_to_idx[p] for p in vocab.tokenize("golf")]
    continued[0] = vocab.token_to_idx.get(vocab.idx_to_token[continued[0]][1:], continued[0])
    for ids in ([space, *alpha, space, *golf, space], [space, space, *alpha, space, *golf]):
        assert vocab.processor.decode(ids) != "Alpha golf" and vocab.detokenize(ids) == "Alpha golf"
        groups = word_groups(vocab.word_starts(ids))
        assert [vocab.detokenize([ids[p] for p in group]) for group in groups] == ["Alpha", "golf"]
        assert len(vocab.labels(ids)) == len(ids) and vocab.labels(ids).count("\u2423") == ids.count(space)
    ids = [*alpha, space, *continued, vocab.eos_id]
    groups = word_groups(vocab.word_starts(ids))
    assert len(groups) == 3 and groups[-1] == [len(ids) - 1]  # Alpha, the piece after the space, <eos>


def test_vocabulary_size_beyond_the_text_is_a_user_error():
    texts = [prepare_text(s) for pair in reverse_pairs(50) for s in pair]
    with pytest.raises(
        UserError,
        match=r"data.vocab_size = 50000 is larger than the source training text "
        r"allows \(at most \d+\)",
    ):
        learn_subwords(texts, "unigram", 50000, "source")
    with pytest.raises(UserError, match="data.vocab_size = 100 is smaller than"):
        learn_subwords(texts, "bpe", 100, "source")


def test_sentencepiece_learns_from_the_training_split_only(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    seen: list[list[str]] = []
    real = prepare_module.learn_subwords

    def spy(texts, *args):
        seen.append(list(texts))
        return real(texts, *args)

    monkeypatch.setattr(prepare_module, "learn_subwords", spy)
    cfg = load_config(None, [*SUBWORD_SETTINGS, "data.shared_vocab=false", "data.vocab_size=290"]).data
    data = load_data(cfg, str(corpus))
    assert len(seen) == 2  # separate source and target models
    held_out = {ex.src for ex in data.valid + data.test}
    assert len(held_out) == 20 and not held_out & set(seen[0])
    train_pairs = [data.train.src[i] for i in range(data.train.num_examples)]
    assert [data.src_vocab.encode_text(t) for t in seen[0]] == train_pairs
    assert data.src_vocab.fingerprint() != data.tgt_vocab.fingerprint()


def test_reused_vocabularies_are_not_learned_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    corpus = write_corpus(tmp_path / "reverse.txt", n=100)
    cfg = load_config(None, [*SUBWORD_SETTINGS, "data.max_len=10"]).data
    first = load_data(cfg, str(corpus))
    assert first.report["tokenizer"]["origin"] == "learned"
    prepared = [p for p in (tmp_path / "cache" / "attn-mt" / "prepared").iterdir() if p.is_dir()]
    assert len(prepared) == 1 and (prepared[0] / "src.model").read_bytes() == first.src_vocab.model_proto

    def refuse(*args):
        raise AssertionError("learned or encoded again")

    monkeypatch.setattr(prepare_module, "learn_subwords", refuse)
    monkeypatch.setattr(prepare_module, "encode_parallel", refuse)
    cached = load_data(cfg, str(corpus))
    assert cached.report["tokenizer"]["origin"] == "cache" and cached.src_vocab == first.src_vocab
    again = load_data(cfg, str(corpus), (first.src_vocab, first.tgt_vocab))
    assert again.report["train_sha1"] == first.report["train_sha1"]
    assert again.report["tokenizer"]["origin"] == "run"
    assert 0 < first.report["splits"]["train"]["dropped_for_length"] < 80  # max_len 10 drops some
    for data in (cached, again):
        assert data.train.num_examples == first.train.num_examples
        assert [data.train.src[i] for i in range(data.train.num_examples)] == [
            first.train.src[i] for i in range(first.train.num_examples)
        ]
        assert data.train.tgt.ids.tolist() == first.train.tgt.ids.tolist()


def test_token_sequences_select_keeps_the_chosen_rows():
    store = TokenSequences.from_lists([[5, 6], [], [7, 8, 9], [10]])
    chosen = store.select(np.array([3, 0, 2]))
    assert [chosen[i] for i in range(len(chosen))] == [[10], [5, 6], [7, 8, 9]]
    assert chosen.starts.tolist() == [5, 0, 2] and chosen.lengths.tolist() == [1, 2, 3]
    assert chosen.ids is store.ids  # a selection shares the flat ids


@pytest.mark.corpus
def test_every_test_reference_detokenises_back_to_itself(corpus_path):
    cfg = load_config(ROOT / "configs" / "transformer.yaml").data
    data = load_data(cfg, str(corpus_path))
    refs = [ref for ex in data.test for ref in ex.refs]
    assert len(refs) > 2000
    vocab = data.tgt_vocab
    assert [vocab.detokenize(vocab.encode_text(r)) for r in refs] == refs
    sources = [ex.src for ex in data.test]
    assert [data.src_vocab.detokenize(data.src_vocab.encode_text(s)) for s in sources] == sources
    assert any(r != r.lower() for r in refs)  # the references keep their case
    assert sum(vocab.unk_id in vocab.encode_text(r) for r in refs) == 0


def test_run_directory_alone_translates_cased_text(subword_run):
    for name in ("src_vocab.model", "tgt_vocab.model", "src_vocab.json", "tgt_vocab.json"):
        assert (subword_run / name).is_file(), name
    run = load_run(subword_run)
    assert isinstance(run.src_vocab, SubwordVocab)
    translator = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)
    outputs = [t.text for t in translator.translate(["Hotel golf.", "Alpha bravo charlie."], beam_size=2)]
    assert all(o[:1].isupper() for o in outputs), outputs  # the corpus's capitals come back


def test_random_inputs_never_give_unk_or_piece_markers(subword_run):
    rng = random.Random(0)
    alphabet = [
        *"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        *"éèêàçùôœÉÀÇ",
        *"😀🎉👍🏽",
        *"東京語日本中文한국",
        *"!?.,;:…«»\"'()-–—/",
    ]
    words = ["Alpha", "bravo", "golf", "hotel"]
    inputs = []
    for _ in range(1000):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.4:
                parts.append(rng.choice(words))
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))))
        inputs.append(" ".join(parts) + rng.choice(["", "!!!", "?!", "...", " 😀"]))
    run = load_run(subword_run)
    translator = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)
    results = translator.translate(inputs, beam_size=1)
    assert sum(run.src_vocab.unk_id in run.src_vocab.encode(r.source_tokens) for r in results) == 0
    outputs = [r.text for r in results]
    assert sum("<unk>" in o for o in outputs) == 0
    assert sum("\u2581" in o for o in outputs) == 0
    assert sum(bool(o) for o in outputs) == 1000


def test_too_long_input_is_cut_with_a_warning_on_stderr(subword_run, run_cli):
    long_line = " ".join(["Alpha bravo charlie delta."] * 60)
    code, out, err = run_cli("translate", str(subword_run), "Hotel golf.", long_line, "--no-split")
    assert code == 0, err
    assert len(out.splitlines()) == 2 and out.splitlines()[1]
    assert "line 2: source cut to 160 tokens incl. <eos>" in err and "not translated" in err
    assert "line 1" not in err
    code, out, err = run_cli("translate", str(subword_run), "Hotel golf.", long_line)  # its 60 sentences
    assert code == 0 and err == "" and len(out.splitlines()) == 2
    assert out.splitlines()[1].count(out.splitlines()[1].split(".")[0] + ".") == 60


def test_eval_scores_raw_text_and_compare_refuses_mixed_scoring(subword_run, tmp_path, run_cli):
    subword_run = Path(shutil.copytree(subword_run, tmp_path / "run"))  # eval writes into the run
    code, out, err = run_cli("eval", str(subword_run), "--split", "test")
    assert code == 0, err
    assert "scored on raw cased, detokenised text" in out
    scores = json.loads((subword_run / "eval" / "test" / "scores.json").read_text())
    assert scores["scored_text"] == "raw cased, detokenised" and scores["direction"] == "en-fr"
    hyps = (subword_run / "eval" / "test" / "hyp.txt").read_text(encoding="utf-8").splitlines()
    refs_file = subword_run / "eval" / "test" / "refs.jsonl"
    refs = [json.loads(line) for line in refs_file.read_text(encoding="utf-8").splitlines()]
    assert any(h[:1].isupper() for h in hyps) and all(r[0][:1].isupper() for r in refs)
    book_run = tmp_path / "book"
    corpus = write_corpus(tmp_path / "reverse.txt", n=120)
    train(
        load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.epochs=1"]),
        book_run,
        data_path=str(corpus),
        quiet=True,
        device="cpu",
    )
    run_eval(book_run, "book", None, 0, None, "best", None, "cpu")
    assert json.loads((book_run / "eval" / "book" / "scores.json").read_text())["scored_text"] == (
        "lowercased, book-tokenised"
    )
    before = sorted(p.name for p in (subword_run / "eval").iterdir())
    code, _, err = run_cli("eval", str(subword_run), "--split", "book", "--compare", str(book_run))
    assert code == 2
    assert "was scored on lowercased, book-tokenised text but" in err and "cannot be compared" in err
    assert sorted(p.name for p in (subword_run / "eval").iterdir()) == before  # nothing written


def test_attention_dumps_label_pieces_and_merge_words(subword_run, tmp_path):
    run = load_run(subword_run)
    translator = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)
    (result,) = translator.translate(["Alphabravo golf."], beam_size=1)
    pieces = translator.attention(result)
    words = translator.attention(result, words=True)
    assert all("\u2581" not in label for label in pieces.source_tokens)
    assert words.source_tokens == ["Alphabravo", "golf.", "<eos>"]
    assert words.output_tokens[-1] == "<eos>" and words.decoder_input_tokens[0] == "<bos>"
    for name, weights in words.maps.items():
        assert np.allclose(weights.sum(axis=-1), 1.0, atol=1e-5), name


def test_merge_words_sums_keys_and_averages_queries():
    cross = np.array(
        [[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]
    )  # 3 target positions (2 pieces + <eos>) x 3 source pieces
    sentence = SentenceAttention(
        {"cross": cross}, ["a", "\u00b7b", "<eos>"], ["x", "\u00b7y", "<eos>"], ["<bos>", "x", "\u00b7y"]
    )
    merged = merge_words(
        sentence,
        word_groups([True, False, True]),
        word_groups([True, False, True]),
        ["ab", "<eos>"],
        ["xy", "<eos>"],
    )
    # source pieces a, b summed (columns); target pieces x, y averaged (rows)
    assert np.allclose(merged.maps["cross"], [[(0.3 + 0.6) / 2, (0.7 + 0.4) / 2], [0.75, 0.25]])
    assert merged.decoder_input_tokens == ["<bos>", "xy"]


def test_fr_en_direction_trains_and_scores_through_the_cli(tmp_path, run_cli):
    corpus = write_corpus(tmp_path / "reverse.txt", n=150)
    run_dir = tmp_path / "fren"
    settings = [a for s in SUBWORD_SETTINGS if not s.startswith("train.epochs") for a in ("--set", s)]
    code, _, err = run_cli(
        "train",
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
        "-q",
        *settings,
        "--set",
        "train.epochs=2",
        "--set",
        "data.direction=fr-en",
    )
    assert code == 0, err
    report = json.loads((run_dir / "data_report.json").read_text())
    assert report["direction"] == "fr-en"
    code, out, err = run_cli("eval", str(run_dir), "--split", "test")
    assert code == 0, err
    assert "split test (fr-en)" in out
    sources = (run_dir / "eval" / "test" / "src.txt").read_text(encoding="utf-8").splitlines()
    french = {fr for _, fr in reverse_pairs(150)}
    assert len(sources) == 10 and set(sources) <= french


def test_two_line_aligned_files_train_through_the_cli(tmp_path, run_cli):
    pairs = reverse_pairs(150)
    (tmp_path / "train.en").write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
    (tmp_path / "train.fr").write_text("".join(fr + "\n" for _, fr in pairs), encoding="utf-8")
    assert read_aligned(tmp_path / "train.en", tmp_path / "train.fr") == pairs
    run_dir = tmp_path / "files"
    settings = [a for s in SUBWORD_SETTINGS if not s.startswith("train.epochs") for a in ("--set", s)]
    path = f"data.path=[{tmp_path / 'train.en'}, {tmp_path / 'train.fr'}]"
    code, _, err = run_cli(
        "train", "--run-dir", str(run_dir), "-q", *settings, "--set", "train.epochs=2", "--set", path
    )
    assert code == 0, err
    report = json.loads((run_dir / "data_report.json").read_text())
    assert report["corpus_pairs"] == 150 and report["corpus"] == [
        str(tmp_path / "train.en"),
        str(tmp_path / "train.fr"),
    ]
    code, out, err = run_cli("translate", str(run_dir), "Alpha golf.")
    assert code == 0, err
    assert out.strip()


def test_corpus_format_errors_name_counts(tmp_path):
    (tmp_path / "a.en").write_text("One.\nTwo.\nThree.\n", encoding="utf-8")
    (tmp_path / "b.fr").write_text("Un.\nDeux.\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"a\.en has 3 lines but .*b\.fr has 2"):
        read_aligned(tmp_path / "a.en", tmp_path / "b.fr")
    (tmp_path / "b.fr").write_bytes(b"Un.\nDeux.\nTrois \xe9.\n")
    with pytest.raises(UserError, match=r"b\.fr: line 3 is not valid UTF-8"):
        read_aligned(tmp_path / "a.en", tmp_path / "b.fr")
    bad = tmp_path / "deu.txt"
    bad.write_text("Go.\tGeh!\tCC-BY\nno tab\nHi.\tHallo!\nalso none\nRun!\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"line 2 has 1 tab-separated field\(s\).*3 line\(s\) in all"):
        read_pairs(bad, ("English", "German"))


def test_tatoeba_zip_with_about_member_is_read(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "deu-eng.zip", "w") as archive:
        archive.writestr("_about.txt", "About this file\n")
        archive.writestr("deu.txt", "Go.\tGeh!\tCC-BY 2.0\nHi.\tHallo!\tCC-BY 2.0\n")
    assert read_pairs(tmp_path / "deu-eng.zip") == [("Go.", "Geh!"), ("Hi.", "Hallo!")]


def test_language_settings_are_validated():
    with pytest.raises(UserError, match="data.direction: 'de-en' does not match data.languages 'en-fr'"):
        load_config(None, ["data.direction=de-en"])
    assert load_config(None, ["data.languages=en-de", "data.direction=de-en"]).data.direction == "de-en"
    with pytest.raises(UserError, match="data.tokenizer: 'sentencepiece' needs data.mode: split"):
        load_config(None, ["data.tokenizer=sentencepiece"])
    with pytest.raises(UserError, match="data.path: a list must name two line-aligned files"):
        load_config(None, ["data.path=[a, b, c]"])


def test_resume_reads_the_run_models_and_learns_nothing(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "reverse.txt", n=120)
    run_dir = tmp_path / "run"
    settings = [s for s in SUBWORD_SETTINGS if not s.startswith("train.epochs")] + ["data.vocab_size=300"]
    first = train(
        load_config(None, [*settings, "train.epochs=1"]),
        run_dir,
        data_path=str(corpus),
        quiet=True,
        device="cpu",
    )
    saved = (run_dir / "tgt_vocab.model").read_bytes()

    def refuse(*args):
        raise AssertionError("the models were learned again")

    monkeypatch.setattr(prepare_module, "learn_subwords", refuse)
    resumed = train(
        None,
        run_dir,
        overrides=["train.epochs=2"],
        data_path=str(corpus),
        resume=True,
        quiet=True,
        device="cpu",
    )
    assert resumed.step == 2 * first.step
    assert (run_dir / "tgt_vocab.model").read_bytes() == saved
