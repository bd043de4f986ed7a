"""Hugging Face: the Marian folder of a tiny trained sentencepiece Transformer gives attn-mt's logits and
greedy outputs in `transformers`, loads offline, converts with `ct2-transformers-converter` to attn-mt's
own CTranslate2 outputs, and carries a Hub model card; runs it cannot hold are refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import replace
from pathlib import Path

import ctranslate2
import pytest
import sentencepiece as spm
import torch
import yaml
from support.near_ties import assert_decodings_agree
from support.synthetic import SUBWORD_RUN_SETTINGS, reverse_pairs, train_tiny
from support.tolerances import assert_float32_close, decoding_terms
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianMTModel, MarianTokenizer

from attn_mt.data.subword import prepare_text
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Hypothesis, output_length_limits
from attn_mt.errors import UserError
from attn_mt.models.positional import sinusoid_table
from attn_mt.run.run_dir import load_run
from attn_mt.shipping.huggingface_export import (
    NEVER_LOGIT,
    RENAMED_PAD,
    START_TOKEN,
    export_huggingface,
    import_huggingface,
    layer_counts,
    residual_order,
)
from attn_mt.shipping.model_card import preprocessing_effect

# one sentence a line: the reverse task's words in new orders, a word it never saw, accents and a byte piece
SENTENCES = [en for en, _ in reverse_pairs(60, seed=23)] + [
    "Alpha zulu bravo.",
    "Écho, delta à Zürich!",
    "Charlie 漢 delta.",
]
# attn-mt's preparation changes these pieces (' for ’, NFC: composed é, Ω for the ohm sign)
GREEDY_TERMS = decoding_terms(steps=12, widest=64, keys_or_vocab=320)  # the subword run's greedy outputs
TRICKY = ["l’été  à   Zürich ", "Cafe\u0301 delta", "Delta \u2126"]


@pytest.fixture(scope="module")
def exported(subword_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`attn-mt export RUN OUT --format huggingface` of the shared subword run (tests/conftest.py)."""
    return export_huggingface(subword_run, tmp_path_factory.mktemp("hf") / "marian")


@pytest.fixture(scope="module")
def two_vocabularies(tmp_path_factory: pytest.TempPathFactory, subword_run: Path) -> Path:
    """A run with one sentencepiece model per language and three embedding matrices, and its export."""
    settings = [s for s in SUBWORD_RUN_SETTINGS if ".tie_" not in s and "vocab_size" not in s]
    settings += ["data.shared_vocab=false", "data.vocab_size=290", "train.epochs=6"]
    root = tmp_path_factory.mktemp("two_vocabularies")
    run_dir = train_tiny(root / "run", subword_run.parent / "reverse.txt", settings)
    return export_huggingface(run_dir, root / "marian")


def loaded(folder: Path) -> tuple[MarianTokenizer, MarianMTModel]:
    """The folder's tokenizer and model, as transformers loads them."""
    model = MarianMTModel.from_pretrained(folder).eval()
    return MarianTokenizer.from_pretrained(folder), model


def greedy_both(run_dir: Path, folder: Path, sentences: list[str]) -> tuple[list, list[list[int]]]:
    """attn-mt's greedy translations and transformers' greedy token ids, batches padded, one cap a batch."""
    run = load_run(run_dir)
    cfg = replace(run.config, decode=replace(run.config.decode, beam_size=1))
    ours = translator_for(run, cfg).translate(sentences, beam_size=1)
    tokenizer, model = loaded(folder)
    lengths = [len(tokenizer(s)["input_ids"]) for s in sentences]
    limits = output_length_limits(lengths, cfg.decode.max_len_a, cfg.decode.max_len_b)
    theirs: list[list[int]] = [[] for _ in sentences]
    for limit in sorted(set(limits)):
        rows = [i for i, cap in enumerate(limits) if cap == limit]
        batch = tokenizer([sentences[i] for i in rows], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit)
        for i, ids in zip(rows, out.tolist(), strict=True):
            theirs[i] = ids
    return ours, theirs


def content(ids: list[int], eos_id: int, start_id: int) -> list[int]:
    """Generated ids without the start token, the <eos> and the padding after it."""
    ids = ids[1:]
    return ids[: ids.index(eos_id)] if eos_id in ids else [i for i in ids if i != start_id]


def assert_ids_then_texts(run_dir: Path, folder: Path, ours: list, theirs: list[list[int]]) -> int:
    """transformers' greedy ids `theirs` agree with attn-mt's translations `ours` up to a near-tie
    (tests/support/near_ties.py), and where the ids are equal MarianTokenizer decodes them to attn-mt's text.
    Returns how many outputs were equal."""
    run = load_run(run_dir)
    eos, start = run.tgt_vocab.eos_id, len(run.tgt_vocab)
    as_translations = [
        replace(result, hypotheses=[Hypothesis(content(ids, eos, start), 0.0, 0.0)])
        for result, ids in zip(ours, theirs, strict=True)
    ]
    reference = translator_for(run, replace(run.config, decode=replace(run.config.decode, beam_size=1)))
    assert_decodings_agree(reference, ours, as_translations, beam=1, terms=GREEDY_TERMS)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    same = 0
    for result, found, ids in zip(ours, as_translations, theirs, strict=True):
        if found.hypotheses[0].tokens == result.hypotheses[0].tokens:
            assert tokenizer.decode(ids, skip_special_tokens=True) == result.text, result.source
            same += 1
    return same


def test_the_folder_holds_what_transformers_reads(subword_run, exported):
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "README.md"} <= names
    assert {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json"} <= names
    assert "target_vocab.json" not in names  # one sentencepiece model for both languages
    run = load_run(subword_run)
    config = json.loads((exported / "config.json").read_text())
    vocab = len(run.tgt_vocab)
    assert config["architectures"] == ["MarianMTModel"] and config["activation_function"] == "relu"
    assert config["vocab_size"] == config["decoder_vocab_size"] == vocab + 1
    assert config["decoder_start_token_id"] == config["pad_token_id"] == vocab
    assert config["share_encoder_decoder_embeddings"] and config["tie_word_embeddings"]
    assert (config["encoder_layers"], config["decoder_layers"]) == layer_counts(run.config.model) == (2, 2)
    assert not config["normalize_before"] and config["scale_embedding"]
    pieces = json.loads((exported / "vocab.json").read_text(encoding="utf-8"))
    expected = {token: i for i, token in enumerate(run.tgt_vocab.idx_to_token) if i != run.tgt_vocab.pad_id}
    assert pieces == {**expected, RENAMED_PAD: run.tgt_vocab.pad_id, START_TOKEN: vocab}
    source = MarianTokenizer.from_pretrained(exported).spm_source  # the run's pieces, its preparation added
    assert [source.id_to_piece(i) for i in range(source.get_piece_size())] == run.src_vocab.idx_to_token
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation["num_beams"] == run.config.decode.beam_size and generation["early_stopping"] == "never"
    assert generation["forced_eos_token_id"] == generation["eos_token_id"] == run.tgt_vocab.eos_id
    model, info = MarianMTModel.from_pretrained(exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.generation_config.num_beams == run.config.decode.beam_size
    assert model.model.shared.weight.data_ptr() == model.lm_head.weight.data_ptr()  # one tied matrix


def test_positions_are_marians_table_but_for_the_start_row(exported):
    model = MarianMTModel.from_pretrained(exported)
    hidden = model.config.d_model
    ours = sinusoid_table(model.config.max_position_embeddings, hidden)  # (P, H) sin/cos interleaved
    stored = model.model.encoder.embed_positions.weight.detach()
    assert torch.equal(stored, ours[:, residual_order(hidden)])  # the book's values, Marian's column order
    marian = model.model.encoder.embed_positions.create_weight()  # transformers' own table, in float64 first
    torch.testing.assert_close(stored, marian, rtol=0.0, atol=1e-4)
    decoder = model.model.decoder.embed_positions.weight.detach()
    assert torch.equal(decoder[1:], stored[1:]) and not torch.allclose(decoder[0], stored[0])


def test_the_tokenizer_gives_attn_mts_source_ids(subword_run, exported):
    run = load_run(subword_run)
    translator = translator_for(run)
    tokenizer = AutoTokenizer.from_pretrained(exported)
    assert isinstance(tokenizer, MarianTokenizer)
    for sentence in SENTENCES:
        ids, _ = translator.source_ids(run.src_vocab.tokenize(prepare_text(sentence, True)))
        assert tokenizer(sentence)["input_ids"] == ids, sentence
    plain = MarianTokenizer.from_pretrained(exported)
    plain.spm_source = plain.current_spm = spm.SentencePieceProcessor(model_proto=run.src_vocab.model_proto)
    for raw in TRICKY:  # the exported models prepare text as attn-mt does; the run's own would not
        ids, _ = translator.source_ids(run.src_vocab.tokenize(prepare_text(raw, True)))
        assert tokenizer(raw)["input_ids"] == ids and plain(raw)["input_ids"] != ids, raw


def test_the_exported_sentencepiece_model_prepares_text_as_attn_mt_does(subword_run, exported):
    """Every character to U+3000, alone and decomposed, after letters: the same pieces as prepare_text gives,
    but for combining marks NFC itself replaces (U+0340 ...) after a letter NFC then joins them with."""
    run = load_run(subword_run)
    exported_model = spm.SentencePieceProcessor(model_file=str(exported / "source.spm"))
    replaced_marks = {
        code
        for code in range(0x300, 0x3000)
        if unicodedata.category(chr(code)) == "Mn" and unicodedata.normalize("NFC", chr(code)) != chr(code)
    }
    misses = set()
    for code in range(0x20, 0x3000):
        char = chr(code)
        for before in "xaS":
            for text in (f"{before}{char}y", f"{before}{unicodedata.normalize('NFD', char)}y"):
                if exported_model.encode(text) != run.src_vocab.encode_text(prepare_text(text, True)):
                    misses.add(code)
    assert misses and misses <= replaced_marks, sorted(misses - replaced_marks)


def test_logits_equal_attn_mts_for_the_same_source_and_target_prefix(subword_run, exported):
    run = load_run(subword_run)
    tokenizer, model = loaded(exported)
    ours = translator_for(run).translate(SENTENCES, beam_size=1)
    vocab, start = len(run.tgt_vocab), model.config.decoder_start_token_id
    for result in ours:
        source = tokenizer(result.source)["input_ids"]
        prefix = result.hypotheses[0].tokens + [run.tgt_vocab.eos_id]
        with torch.no_grad():
            enc = run.model.encode(torch.tensor([source]), torch.tensor([len(source)]))
            features = run.model.decode_features(torch.tensor([[run.tgt_vocab.bos_id, *prefix[:-1]]]), enc)
            expected = run.model.output_layer(features)[0]  # (T, V)
            got = model(
                input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([[start, *prefix[:-1]]])
            )
        logits = got.logits[0]  # (T, V + 1)
        terms = decoding_terms(
            steps=len(prefix), widest=run.config.model.ffn_num_hiddens, keys_or_vocab=vocab
        )
        assert_float32_close(logits[:, :vocab], expected, terms=terms, msg=result.source)
        assert torch.all(logits[:, vocab] == NEVER_LOGIT)  # the start token is never a candidate


def test_greedy_generate_equals_attn_mt_translate_on_every_sentence(subword_run, exported, run_cli, tmp_path):
    ours, theirs = greedy_both(subword_run, exported, SENTENCES)
    assert_ids_then_texts(subword_run, exported, ours, theirs)
    source = tmp_path / "sentences.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    printed = run_cli("translate", str(subword_run), "--input", str(source), "--beam", "1", "--no-split")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == [r.text for r in ours]
    assert len({tuple(r.hypotheses[0].tokens) for r in ours}) > len(SENTENCES) // 2  # varied outputs


def test_two_vocabularies_and_untied_matrices(two_vocabularies):
    run_dir = two_vocabularies.parent / "run"
    config = json.loads((two_vocabularies / "config.json").read_text())
    assert not config["share_encoder_decoder_embeddings"] and not config["tie_word_embeddings"]
    assert (two_vocabularies / "target_vocab.json").is_file()
    assert (two_vocabularies / "source.spm").read_bytes() != (two_vocabularies / "target.spm").read_bytes()
    ours, theirs = greedy_both(run_dir, two_vocabularies, SENTENCES[:30])
    assert_ids_then_texts(run_dir, two_vocabularies, ours, theirs)


def test_beam_search_agrees_when_both_rank_by_raw_log_probability(subword_run, exported):
    """With alpha 0 and `early_stopping="never"` both searches keep the same hypotheses; they can differ only
    where one output reaches the cap, whose forced <eos> transformers scores as certain (log-probability 0)
    and attn-mt with the model's own log-probability."""
    run = load_run(subword_run)
    tokenizer, model = loaded(exported)
    for beam in (2, 4):
        cfg = replace(run.config, decode=replace(run.config.decode, beam_size=beam, length_penalty=0.0))
        ours = translator_for(run, cfg).translate(SENTENCES, beam_size=beam)
        same = 0
        for result in ours:
            batch = tokenizer(result.source, return_tensors="pt")
            limit = output_length_limits([batch["input_ids"].shape[1]], 0.0, cfg.decode.max_len_b)[0]
            with torch.no_grad():
                out = model.generate(
                    **batch, num_beams=beam, length_penalty=0.0, early_stopping="never", max_new_tokens=limit
                )[0]
            if content(out.tolist(), run.tgt_vocab.eos_id, len(run.tgt_vocab)) == result.hypotheses[0].tokens:
                assert tokenizer.decode(out, skip_special_tokens=True) == result.text, result.source
                same += 1
                continue
            capped = len(out) - 1 == limit or len(result.hypotheses[0].tokens) == limit - 1
            assert capped, (beam, result.source)
        # The tiny model runs away on some inputs: 59 and 56 of the 63 agree at beams 2 and 4 (seed 0).
        assert same >= 0.85 * len(SENTENCES), (beam, same)


def test_the_folder_loads_offline_with_no_attn_mt_code(subword_run, exported, tmp_path):
    code = (
        "import sys\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        "tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1])\n"
        "batch = tokenizer(sys.argv[2:], return_tensors='pt', padding=True)\n"
        "found = model.generate(**batch, num_beams=1)\n"
        "print('\\n'.join(tokenizer.batch_decode(found, skip_special_tokens=True)))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'attn_mt'), file=sys.stderr)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-cache")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", code, str(exported), *SENTENCES[:6]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert done.stderr.strip().splitlines()[-1] == "[]"
    ours = translator_for(load_run(subword_run), None).translate(SENTENCES[:6], beam_size=1)
    assert done.stdout.splitlines() == [r.text for r in ours]
    assert AutoModelForSeq2SeqLM.from_pretrained(exported).config.model_type == "marian"


def test_ct2_transformers_converter_gives_attn_mts_ctranslate2_outputs(
    subword_run, exported, subword_folder, tmp_path
):
    converter = Path(sys.executable).parent / "ct2-transformers-converter"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "converted"
    subprocess.run(
        [str(converter), "--model", str(exported), "--output_dir", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    run = load_run(subword_run)
    sources = [run.src_vocab.tokenize(prepare_text(s, True)) + ["<eos>"] for s in SENTENCES]
    options = {"beam_size": 1, "max_decoding_length": run.config.decode.max_len_b - 1}
    converted = ctranslate2.Translator(str(out)).translate_batch(sources, **options)
    own = ctranslate2.Translator(str(subword_folder)).translate_batch(sources, **options)
    assert [r.hypotheses[0] for r in converted] == [r.hypotheses[0] for r in own]
    ours = translator_for(run).translate(SENTENCES, beam_size=1)
    eos, start = run.tgt_vocab.eos_id, len(run.tgt_vocab)
    theirs = [[start, *run.tgt_vocab.encode(r.hypotheses[0]), eos] for r in converted]
    assert_ids_then_texts(subword_run, exported, ours, theirs)


def test_the_model_card_carries_the_hubs_metadata_and_the_test_scores(subword_run, run_cli, tmp_path):
    run_dir = Path(shutil.copytree(subword_run, tmp_path / "run"))  # eval writes into the run
    unscored = export_huggingface(run_dir, tmp_path / "unscored")
    card = (unscored / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(card.split("---")[1])
    assert "model-index" not in meta and "datasets" not in meta and meta["license"] == "other"
    assert "Measured on the 300 distinct source sentences of the training corpus: 0 change" in card
    tatoeba = Path(shutil.copyfile(subword_run.parent / "reverse.txt", tmp_path / "fra.txt"))
    report = json.loads((run_dir / "data_report.json").read_text())
    (run_dir / "data_report.json").write_text(json.dumps({**report, "corpus": str(tatoeba)}))
    assert run_cli("eval", str(run_dir), "--data", str(tatoeba)).returncode == 0
    folder = export_huggingface(run_dir, tmp_path / "scored")
    card = (folder / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["language"] == ["en", "fr"] and meta["license"] == "cc-by-2.0"
    assert meta["pipeline_tag"] == "translation" and "tatoeba" in meta["datasets"]
    scores = json.loads((run_dir / "eval" / "test" / "scores.json").read_text())
    metrics = {m["type"]: m for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics["bleu"]["value"] == round(scores["bleu"], 2)
    assert metrics["bleu"]["args"] == scores["bleu_signature"]
    assert scores["bleu_signature"] in card and "CC-BY 2.0 FR" in card and "attn-mt train CONFIG" in card


def test_the_preprocessing_marian_does_not_repeat_is_measured_on_the_corpus(subword_run, tmp_path):
    corpus = tmp_path / "corpus.txt"
    lines = [
        "Alpha bravo.\tOk.",
        "Alpha bravo.\tOk bis.",
        "Delta’s echo.\tOk.",
        "Golf  hotel.\tOk.",
        " Golf.\tOk.",
    ]
    corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert preprocessing_effect(load_run(subword_run), str(corpus)) == (4, 3, 1)


def test_runs_it_cannot_hold_are_refused(tiny_runs, subword_run, run_cli, tmp_path):
    for run_dir, message in (
        (tiny_runs.gru_bahdanau, "exports Transformer runs only; this run is a gru_bahdanau model"),
        (tiny_runs.transformer, "this run has a word vocabulary"),
    ):
        refused = run_cli("export", str(run_dir), str(tmp_path / "out"), "--format", "huggingface")
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr
        assert not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine\n")
    refused = run_cli("export", str(subword_run), str(tmp_path / "taken"), "--format", "huggingface")
    assert refused.returncode == 2 and "is not an empty folder" in refused.stderr
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine\n"


def test_without_the_extra_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match=r"pip install 'attn-mt\[huggingface\]'"):
        import_huggingface()


def test_attn_mt_never_imports_transformers_unless_exporting_to_it():
    code = (
        "import sys\n"
        "import attn_mt\n"
        "import attn_mt.commands.export\n"
        "from attn_mt.cli import main\n"
        "sys.argv = ['attn-mt', 'export', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'safetensors')), "
        "file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "huggingface" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]"
