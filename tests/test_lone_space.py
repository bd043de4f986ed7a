"""A lone "▁" piece (a space on its own) at the start, in the middle and at the end of an output: every
engine and surface prints the same text, single-spaced with no outer spaces (data/subword.py's
`single_spaced`), while labels and alignments still count every piece.

The model is constructed, not trained: a copy of the shared subword run whose decoder reads positions
only (its target embedding and every decoder matrix zero, so each layer's LayerNorm sees the position
table alone) and whose output layer is solved so that step t's logits put a margin of `MARGIN` on the
t-th token of `SCRIPT`, whatever the source, and `MARGIN` below 0 on <eos> before its step: every other
logit is about 0, and which of them ranks second is rounding's choice, so an <eos> among them would end
a beam-2 hypothesis early on some CPUs (an engine that stops at K finished ones, CTranslate2's, would
then print a shorter text; tests/test_search.py checks attn-mt's own search against that case). Any
trained model may emit a lone "▁"; this one always does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from support.helpers import call, server, translate
from transformers import MarianMTModel, MarianTokenizer

import attn_mt
from attn_mt.data.subword import WORD_START, single_spaced
from attn_mt.decoding.alignments import alignment_of
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Sampling
from attn_mt.run.checkpoint import load_checkpoint, save_checkpoint
from attn_mt.run.open import open_model
from attn_mt.run.run_dir import load_run
from attn_mt.shipping.ctranslate2_export import export_ctranslate2
from attn_mt.shipping.huggingface_export import export_huggingface

MARGIN = 30.0  # logit of the scripted token above every other one, at every step
SOURCE = "Alpha bravo."
UNTIED = {"tie_embeddings": False, "tie_source_embedding": False}


def script_of(vocab) -> tuple[list[int], str]:
    """Lone "▁", a word, lone "▁", a word, lone "▁" (then <eos>) as ids, and the text they must print."""
    words = [p for p in vocab.idx_to_token if p.startswith(WORD_START) and p[1:].isalpha() and len(p) > 2]
    assert WORD_START in vocab.token_to_idx and len(words) >= 2, "the subword run has no lone ▁ piece"
    space = vocab.token_to_idx[WORD_START]
    return [space, vocab.token_to_idx[words[0]], space, vocab.token_to_idx[words[1]], space], (
        f"{words[0][1:]} {words[1][1:]}"
    )


@torch.no_grad()
def scripted(model, script: list[int], eos_id: int, bos_id: int) -> dict[str, torch.Tensor]:
    """`model`'s weights with the decoder reading positions only and the output layer emitting `script`."""
    decoder = model.decoder
    for name, param in decoder.named_parameters():
        param.copy_(torch.ones_like(param) if ".ln." in name and name.endswith("weight") else 0.0)
    steps = [*script, eos_id]
    enc = model.encode(torch.tensor([[5, 6, eos_id]]), torch.tensor([3]))
    tgt_in = torch.tensor([[bos_id] * len(steps)])  # (1, T): any tokens, the embedding is zero
    features = model.decode_features(tgt_in, enc)[0].double()  # (T, H): one per position
    wanted = torch.zeros(decoder.dense.weight.shape[0], len(steps), dtype=torch.float64)  # (V, T)
    wanted[eos_id, :-1] = -MARGIN  # <eos> far below the near-tie of the other logits until its step
    wanted[steps, torch.arange(len(steps))] = MARGIN
    weight = wanted @ torch.linalg.pinv(features.T)  # (V, H): weight @ features.T == wanted
    assert torch.allclose(weight @ features.T, wanted, atol=1e-6), "positions not independent"
    decoder.dense.weight.copy_(weight.float())
    return model.state_dict()


@pytest.fixture(scope="module")
def lone_space_run(
    subword_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[int], str]:
    """A copy of the subword run rebuilt untied and scripted (module docstring), its ids and their text."""
    run_dir = Path(shutil.copytree(subword_run, tmp_path_factory.mktemp("lone_space") / "run"))
    config_file = run_dir / "config.yaml"
    config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    config["model"].update(UNTIED)
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    checkpoints = sorted((run_dir / "checkpoints").glob("*.pt"))
    for path in checkpoints:
        state = load_checkpoint(path)
        state["config"]["model"].update(UNTIED)
        save_checkpoint(state, path)
    run = load_run(run_dir)
    script, text = script_of(run.tgt_vocab)
    weights = scripted(run.model, script, run.tgt_vocab.eos_id, run.tgt_vocab.bos_id)
    for path in checkpoints:
        save_checkpoint({**load_checkpoint(path), "model": weights}, path)
    return run_dir, script, text


def test_the_script_spells_stray_spaces_that_no_output_prints(lone_space_run):
    run_dir, script, text = lone_space_run
    vocab = load_run(run_dir).tgt_vocab
    raw = vocab.processor.decode(script)
    assert raw != text and single_spaced(raw) == text  # sentencepiece alone keeps the stray spaces
    assert vocab.detokenize(script) == text


def test_torch_outputs_nbest_samples_labels_and_alignments(lone_space_run):
    run_dir, script, text = lone_space_run
    engine = translator_for(load_run(run_dir), load_run(run_dir).config)
    for beam in (1, 3):
        (found,) = engine.translate([SOURCE], beam_size=beam, nbest=beam)
        assert found.hypotheses[0].tokens == script and found.text == text, beam
        assert all(output == single_spaced(output) for output in found.outputs)
    (sampled,) = engine.translate([SOURCE], sampling=Sampling(samples=3, seed=1))
    assert sampled.outputs == [text] * 3  # the script's margin leaves nothing else to draw
    (greedy,) = engine.translate([SOURCE], beam_size=1, need_attention=True)
    pieces = engine.attention(greedy).output_tokens
    assert pieces == ["\u2423", text.split()[0], "\u2423", text.split()[1], "\u2423", "<eos>"]
    words = alignment_of(engine, greedy)
    assert words.target_words == text.split()  # the lone ▁s shift no word index
    assert [j for _, j in words.pairs] == [0, 1]


def test_ctranslate2_huggingface_and_the_api_print_the_same_text(lone_space_run, tmp_path):
    run_dir, script, text = lone_space_run
    folder = export_ctranslate2(run_dir, tmp_path / "ct2")
    engine = translator_for(open_model(folder, device="cpu"), load_run(run_dir).config)
    (found,) = engine.translate([SOURCE], beam_size=1)
    assert found.hypotheses[0].tokens == script and found.text == text
    assert attn_mt.load(run_dir).translate([SOURCE]) == [text]
    assert attn_mt.load(folder).translate([SOURCE, f"{SOURCE} {SOURCE}"]) == [text, f"{text} {text}"]

    marian = export_huggingface(run_dir, tmp_path / "marian")
    tokenizer, model = MarianTokenizer.from_pretrained(marian), MarianMTModel.from_pretrained(marian).eval()
    with torch.no_grad():
        ids = model.generate(**tokenizer([SOURCE], return_tensors="pt"), num_beams=1, do_sample=False)[0]
    assert ids.tolist()[1:] == [*script, load_run(run_dir).tgt_vocab.eos_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_serve_and_the_libretranslate_route_print_the_same_text(lone_space_run, run_cli):
    run_dir, _, text = lone_space_run
    printed = run_cli("translate", str(run_dir), SOURCE, "--beam", "2", "--nbest", "2")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines()[0].split(" ||| ")[1] == text
    with server(run_dir) as address:
        answer = translate(address, [SOURCE], beam=2, nbest=2)
        assert answer["results"][0]["translation"] == text
        assert all(c["text"] == single_spaced(c["text"]) for c in answer["results"][0]["nbest"])
        status, libre = call(address, "/translate", {"q": SOURCE, "source": "en", "target": "fr"})
        assert status == 200 and libre["translatedText"] == text
