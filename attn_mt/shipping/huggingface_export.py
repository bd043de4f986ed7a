"""`attn-mt export RUN OUT --format huggingface`: a Transformer run as a Marian folder for `transformers`.

The folder loads with `MarianMTModel.from_pretrained(OUT)` and `MarianTokenizer.from_pretrained(OUT)`
(or the Auto classes) and nothing else. The book's Transformer (models/transformer.py) is Marian's
architecture (post-norm blocks, ReLU feed-forward, embeddings times sqrt(H), sinusoidal positions);
the exporter absorbs every difference exactly:
  * column order: the book's table puts sines in even columns and cosines in odd ones, Marian's puts
    the sines in the first half and the cosines in the second. Every vector of the residual stream
    is permuted the same way (embedding columns, LayerNorm weights, the input columns of the
    matrices that read the stream, the output rows and biases of those that write it); LayerNorm,
    attention and the feed-forward layers give the same numbers, permuted, so the logits do not change;
  * the position tables are stored (transformers loads them), holding the book's float32 values;
  * no attention biases in the book: Marian's q/k/v/out projections get zero biases;
  * the decoder's start: attn-mt feeds <bos>, Marian feeds the token at `pad_token_id`, whose
    embedding row is zero (CTranslate2's converter starts Marian decoders from a zero embedding
    whatever the row holds). One token, `<pad>`, is appended after attn-mt's vocabulary with a zero
    embedding and is the decoder's start, and row 0 of the decoder's position table holds
    sqrt(H) * E[<bos>] + P[0]: position 0 only ever holds the start token, so both see attn-mt's input;
  * attn-mt's own padding id (1, never fed to the decoder nor written in an output) is renamed
    `<attn_mt_pad>` so that `<pad>` names one id;
  * the output layer's bias becomes `final_logits_bias`; the appended token's is -1e9, so it is never
    chosen and takes no probability; the output matrix is tied to the target embedding when the run
    ties them, and the encoder shares that embedding under `tie_source_embedding`;
  * the source ends with <eos>, which MarianTokenizer appends as attn-mt's translate does.
The preparation attn-mt does before sentencepiece (data/subword.py's prepare_text: NFC, ' for ’ and ‘,
single spaces) travels in the exported sentencepiece models as normalisation rules, which
sentencepiece applies before cutting pieces (it collapses spaces itself): MarianTokenizer gives
attn-mt's pieces. The one gap: a combining mark NFC itself replaces (U+0340, U+0341, U+0343, U+0344,
some Tibetan vowel signs) after a letter NFC then joins it with, which rules applied in one pass
cannot; model_card.py lists the preparation and its effect.
The way out follows attn-mt's too: an output's text has single spaces and no outer ones
(data/subword.py's `single_spaced`, which a lone "▁" piece would otherwise break). The exported
models carry that as their denormaliser, which sentencepiece applies to decoded text, so
MarianTokenizer's decode gives attn-mt's text for the same ids.
"""

from __future__ import annotations

import functools
import io
import json
import math
import shutil
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from sentencepiece import sentencepiece_model_pb2

import attn_mt
from attn_mt.config import Config, ModelConfig, load_config
from attn_mt.data.subword import SubwordVocab
from attn_mt.data.vocab import BOS, EOS, UNK
from attn_mt.decoding.outputs import max_source_tokens
from attn_mt.errors import UserError
from attn_mt.models.positional import sinusoid_table
from attn_mt.models.transformer import AddNorm, PositionWiseFFN, Transformer
from attn_mt.run.opened import LoadedRun
from attn_mt.run.run_dir import RunPaths, check_run_dir, load_run
from attn_mt.shipping.ctranslate2_export import max_positions
from attn_mt.shipping.model_card import write_model_card
from attn_mt.shipping.switches import refuse_switches

INSTALL_HINT = "pip install 'attn-mt[huggingface]'"
START_TOKEN = "<pad>"  # Marian's decoder start and padding token, appended after attn-mt's vocabulary
RENAMED_PAD = "<attn_mt_pad>"  # attn-mt's own <pad> (id 1), renamed so that <pad> names one id
NEVER_LOGIT = -1e9  # the appended token's output bias: exp(-1e9 - max) is 0 in float32
WEIGHTS_FILE = "model.safetensors"
UNICODE_CODE_POINTS = 0x110000
SURROGATES = (0xD800, 0xDFFF)  # not characters: no normalisation rule
META_FILE = "attn_mt_export.json"
# the denormaliser's map: two spaces to one. sentencepiece applies a denormaliser only when its map is
# not empty; its remove_extra_whitespaces then does the work, as single_spaced does for attn-mt's outputs
OUTPUT_SPACING_RULES = {"  ": " "}


def import_huggingface() -> Any:
    """The transformers module (with safetensors), or a UserError naming the extra that installs them."""
    try:
        import safetensors  # noqa: F401
        import transformers
    except ImportError:
        raise UserError(f"transformers and safetensors are not installed: {INSTALL_HINT}") from None
    return transformers


def layer_counts(model_cfg: ModelConfig) -> tuple[int, int]:
    """(encoder layers, decoder layers): the config's own counts where it has them, else num_layers."""
    encoder = getattr(model_cfg, "encoder_layers", None) or model_cfg.num_layers
    decoder = getattr(model_cfg, "decoder_layers", None) or model_cfg.num_layers
    return int(encoder), int(decoder)


def check_exportable(cfg: Config) -> None:
    """A UserError saying why a run cannot become a Marian folder: GRU, switch, book mode, word vocabulary."""
    refuse_switches(cfg.model, "--format huggingface")
    if cfg.model.type != "transformer":
        raise UserError(
            f"--format huggingface exports Transformer runs only; this run is a {cfg.model.type} model "
            "(export it with --format pt or onnx)"
        )
    if cfg.data.mode == "book":
        raise UserError(
            "--format huggingface needs sentencepiece vocabularies; this run was trained in book mode, "
            "on the book's word vocabulary (train with data.mode: split, data.tokenizer: sentencepiece)"
        )
    if cfg.data.tokenizer != "sentencepiece":
        raise UserError(
            "--format huggingface needs sentencepiece vocabularies; this run has a word vocabulary "
            "(train with data.tokenizer: sentencepiece)"
        )


def residual_order(num_hiddens: int) -> torch.Tensor:
    """Marian's column i holds the book's column order[i]: the sine columns, then the cosine ones (H,)."""
    return torch.cat([torch.arange(0, num_hiddens, 2), torch.arange(1, num_hiddens, 2)])


class _MarianWeights:
    """The Marian state dict of one attn-mt Transformer, built tensor by tensor (module docstring)."""

    def __init__(self, model: Transformer):
        self.model = model
        self.order = residual_order(model.encoder.num_hiddens)  # (H,)
        self.tensors: dict[str, torch.Tensor] = {}

    def put(self, name: str, tensor: torch.Tensor) -> None:
        """Store one tensor as its own contiguous float32 copy (safetensors stores no shared memory)."""
        self.tensors[name] = tensor.detach().to(torch.float32).cpu().clone().contiguous()

    def linear(self, name: str, layer: torch.nn.Linear, reads: bool, writes: bool) -> None:
        """A Linear that reads and/or writes the residual stream, its bias zero where the book has none."""
        weight = layer.weight  # (out, in)
        if reads:
            weight = weight[:, self.order]
        bias = layer.bias if layer.bias is not None else weight.new_zeros(weight.shape[0])
        if writes:
            weight, bias = weight[self.order], bias[self.order]
        self.put(f"{name}.weight", weight)
        self.put(f"{name}.bias", bias)

    def norm(self, name: str, add_norm: AddNorm) -> None:
        """A post-norm sublayer's LayerNorm, in Marian's column order."""
        self.put(f"{name}.weight", add_norm.ln.weight[self.order])
        self.put(f"{name}.bias", add_norm.ln.bias[self.order])

    def attention(self, name: str, attention: torch.nn.Module) -> None:
        """W_q, W_k, W_v and W_o as q_proj, k_proj, v_proj and out_proj."""
        for ours, theirs in (("W_q", "q_proj"), ("W_k", "k_proj"), ("W_v", "v_proj")):
            self.linear(f"{name}.{theirs}", getattr(attention, ours), reads=True, writes=False)
        self.linear(f"{name}.out_proj", attention.W_o, reads=False, writes=True)

    def ffn(self, name: str, ffn: PositionWiseFFN, add_norm: AddNorm) -> None:
        """dense1 and dense2 as fc1 and fc2, and the sublayer's LayerNorm as final_layer_norm."""
        self.linear(f"{name}.fc1", ffn.dense1, reads=True, writes=False)
        self.linear(f"{name}.fc2", ffn.dense2, reads=False, writes=True)
        self.norm(f"{name}.final_layer_norm", add_norm)

    def embedding(self, matrix: torch.Tensor) -> torch.Tensor:
        """A (V, H) embedding in Marian's column order with the start token's zero row appended (V+1, H)."""
        return torch.cat([matrix[:, self.order], matrix.new_zeros(1, matrix.shape[1])])

    def build(
        self, positions: int, bos_id: int, tie_source: bool, tie_output: bool
    ) -> dict[str, torch.Tensor]:
        """Every tensor MarianMTModel loads (module docstring)."""
        model, order = self.model, self.order
        hidden = model.encoder.num_hiddens
        table = sinusoid_table(positions, hidden)[:, order]  # (positions, H), the book's float32 values
        source = self.embedding(model.encoder.embedding.weight)  # (V_src+1, H)
        target = self.embedding(model.decoder.embedding.weight)  # (V_tgt+1, H)
        if tie_source:
            self.put("model.shared.weight", target)
        else:
            self.put("model.encoder.embed_tokens.weight", source)
            self.put("model.decoder.embed_tokens.weight", target)
        start = target[bos_id] * math.sqrt(hidden) + table[0]  # (H,) attn-mt's first decoder input
        self.put("model.encoder.embed_positions.weight", table)
        self.put("model.decoder.embed_positions.weight", torch.cat([start.unsqueeze(0), table[1:]]))
        for i, block in enumerate(model.encoder.blks.values()):
            layer = f"model.encoder.layers.{i}"
            self.attention(f"{layer}.self_attn", block.attention)
            self.norm(f"{layer}.self_attn_layer_norm", block.addnorm1)
            self.ffn(layer, block.ffn, block.addnorm2)
        for i, block in enumerate(model.decoder.blks.values()):
            layer = f"model.decoder.layers.{i}"
            self.attention(f"{layer}.self_attn", block.attention1)
            self.norm(f"{layer}.self_attn_layer_norm", block.addnorm1)
            self.attention(f"{layer}.encoder_attn", block.attention2)
            self.norm(f"{layer}.encoder_attn_layer_norm", block.addnorm2)
            self.ffn(layer, block.ffn, block.addnorm3)
        dense = model.decoder.dense
        if not tie_output:
            self.put("lm_head.weight", self.embedding(dense.weight))
        bias = dense.bias if dense.bias is not None else dense.weight.new_zeros(dense.weight.shape[0])
        self.put("final_logits_bias", torch.cat([bias, bias.new_full((1,), NEVER_LOGIT)]).unsqueeze(0))
        return self.tensors


def marian_config(run: LoadedRun, model: Transformer, tie_source: bool, tie_output: bool) -> dict[str, Any]:
    """config.json: MarianConfig's fields for the run's sizes, special ids and position table."""
    cfg = run.config
    encoder_layers, decoder_layers = layer_counts(cfg.model)
    start_id = len(run.tgt_vocab)
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": len(run.src_vocab) + 1,
        "decoder_vocab_size": len(run.tgt_vocab) + 1,
        "share_encoder_decoder_embeddings": tie_source,
        "tie_word_embeddings": tie_output,
        "d_model": model.encoder.num_hiddens,
        "encoder_layers": encoder_layers,
        "decoder_layers": decoder_layers,
        "encoder_attention_heads": model.num_heads,
        "decoder_attention_heads": model.num_heads,
        "encoder_ffn_dim": cfg.model.ffn_num_hiddens,
        "decoder_ffn_dim": cfg.model.ffn_num_hiddens,
        "activation_function": "relu",
        "normalize_before": False,
        "scale_embedding": True,
        "max_position_embeddings": max_positions(cfg),
        "dropout": cfg.model.dropout,
        "attention_dropout": cfg.model.dropout,
        "activation_dropout": 0.0,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "pad_token_id": start_id,
        "decoder_start_token_id": start_id,
        "eos_token_id": run.tgt_vocab.eos_id,
        "forced_eos_token_id": run.tgt_vocab.eos_id,
        "bos_token_id": None,
        "is_encoder_decoder": True,
        "use_cache": True,
        "init_std": 0.02,
    }


def generation_config(cfg: Config, eos_id: int, start_id: int) -> dict[str, Any]:
    """generation_config.json: the run's decode settings where transformers has an equivalent.

    The beam, <eos> forced at the last allowed step, and the output cap of the longest source
    attn-mt translates (transformers has one cap, attn-mt one per source length). transformers
    divides a beam's score by length ** alpha where attn-mt divides by GNMT's ((5 + length) / 6) **
    alpha; the run's alpha is carried over, and docs/shipping.md says when the two rankings agree.
    """
    dc = cfg.decode
    longest = math.floor(dc.max_len_a * max_source_tokens(cfg) + dc.max_len_b)
    return {
        "decoder_start_token_id": start_id,
        "pad_token_id": start_id,
        "eos_token_id": eos_id,
        "forced_eos_token_id": eos_id,
        "bos_token_id": None,
        "num_beams": dc.beam_size,
        "length_penalty": dc.length_penalty,
        "early_stopping": True if dc.beam_stop == "k_finished" else "never",
        "max_new_tokens": longest,
        "do_sample": False,
    }


def vocab_json(vocab: SubwordVocab) -> dict[str, int]:
    """Piece -> id as attn-mt numbers them, <pad> moved to the appended start id (module docstring)."""
    tokens = list(vocab.idx_to_token)
    tokens[vocab.pad_id] = RENAMED_PAD
    return {**{token: i for i, token in enumerate(tokens)}, START_TOKEN: len(tokens)}


@functools.lru_cache(maxsize=2)
def preparation_rules(apostrophes: bool) -> dict[str, str]:
    """prepare_text as rules: NFC of every character and of its canonical decomposition, ’ and ‘ to '."""
    rules = {}
    for code in range(UNICODE_CODE_POINTS):
        if SURROGATES[0] <= code <= SURROGATES[1]:
            continue
        char = chr(code)
        composed = unicodedata.normalize("NFC", char)
        if composed != char:
            rules[char] = composed
        decomposed = unicodedata.normalize("NFD", char)
        if len(decomposed) > 1 and unicodedata.normalize("NFC", decomposed) != decomposed:
            rules[decomposed] = unicodedata.normalize("NFC", decomposed)
    if apostrophes:
        rules["\u2019"] = rules["\u2018"] = "'"
    return rules


def with_preparation(model_proto: bytes, apostrophes: bool) -> bytes:
    """The sentencepiece model with attn-mt's preparation compiled into its normaliser and attn-mt's output
    spacing into its denormaliser (module docstring); the pieces and their scores stay the run's."""
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    preparation = compiled_rules(preparation_rules(apostrophes))
    model.normalizer_spec.name = preparation.name
    model.normalizer_spec.precompiled_charsmap = preparation.precompiled_charsmap
    spacing = model.denormalizer_spec
    spacing.name = "attn_mt_output_spacing"
    spacing.precompiled_charsmap = compiled_rules(OUTPUT_SPACING_RULES).precompiled_charsmap
    spacing.add_dummy_prefix = False
    spacing.escape_whitespaces = False
    spacing.remove_extra_whitespaces = True
    return model.SerializeToString()


def compiled_rules(rules: dict[str, str]) -> sentencepiece_model_pb2.NormalizerSpec:
    """`rules` (text -> replacement) as a sentencepiece normaliser with them compiled into its map.

    sentencepiece compiles rules only while training, so a throwaway character model is trained on a
    few letters with the rules and its normaliser is returned.
    """
    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / "rules.tsv"
        rows = (f"{_code_points(a)}\t{_code_points(b)}\n" for a, b in rules.items())
        written.write_text("".join(rows), encoding="utf-8")
        compiled = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(["a b c d e f g h"] * 50),
            model_writer=compiled,
            model_type="char",
            vocab_size=12,
            normalization_rule_tsv=str(written),
            minloglevel=2,
        )
    throwaway = sentencepiece_model_pb2.ModelProto()
    throwaway.ParseFromString(compiled.getvalue())
    return throwaway.normalizer_spec


def _code_points(text: str) -> str:
    """A rule's side as sentencepiece's TSV writes it: hexadecimal code points, space-separated."""
    return " ".join(f"{ord(char):X}" for char in text)


def write_tokenizer(run: LoadedRun, out: Path) -> None:
    """source.spm, target.spm, vocab.json (+ target_vocab.json for two vocabularies) and the config."""
    src, tgt = run.src_vocab, run.tgt_vocab
    if not isinstance(src, SubwordVocab) or not isinstance(tgt, SubwordVocab):
        raise UserError("--format huggingface needs sentencepiece vocabularies")
    separate = src.model_proto != tgt.model_proto
    apostrophes = run.config.data.normalize_apostrophes
    (out / "source.spm").write_bytes(with_preparation(src.model_proto, apostrophes))
    (out / "target.spm").write_bytes(with_preparation(tgt.model_proto, apostrophes))
    _write_json(out / "vocab.json", vocab_json(src))
    if separate:
        _write_json(out / "target_vocab.json", vocab_json(tgt))
    source_lang, target_lang = run.config.data.direction.split("-")
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": source_lang,
            "target_lang": target_lang,
            "unk_token": UNK,
            "eos_token": EOS,
            "pad_token": START_TOKEN,
            "additional_special_tokens": [BOS, RENAMED_PAD],
            "separate_vocabs": separate,
            "model_max_length": max_source_tokens(run.config),
            "clean_up_tokenization_spaces": False,
        },
    )


def _write_json(path: Path, value: Any) -> None:
    """UTF-8 JSON, pieces written as themselves."""
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def export_huggingface(run_dir: Path, out: Path, checkpoint: str = "best") -> Path:
    """Write the run's Transformer as a Marian folder `out` that transformers loads alone."""
    out = Path(out)
    check_exportable(load_config_of(run_dir))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            f"{out} exists and is not an empty folder; give a new folder for the Hugging Face model"
        )
    import_huggingface()
    run = load_run(run_dir, checkpoint, "cpu")
    try:
        return write_huggingface(run, out, RunPaths(Path(run_dir)))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def load_config_of(run_dir: Path) -> Config:
    """The run's config, read before its checkpoint so a run that cannot be exported is refused at once."""
    return load_config(check_run_dir(run_dir).config)


def write_huggingface(run: LoadedRun, out: Path, paths: RunPaths | None = None) -> Path:
    """The folder of `export_huggingface` for a loaded run; `paths` (its run directory) feed the card."""
    from safetensors.torch import save_file

    check_exportable(run.config)
    model = run.model
    if not isinstance(model, Transformer):
        raise UserError("--format huggingface exports Transformer runs only")
    tie_source = model.encoder.embedding.weight is model.decoder.embedding.weight
    tie_output = model.decoder.dense.weight is model.decoder.embedding.weight
    if len(run.tgt_vocab) > len(run.src_vocab):  # Marian's encoder embedding holds the start id as padding
        raise ValueError(
            f"a target vocabulary of {len(run.tgt_vocab)} pieces is larger than the source's "
            f"{len(run.src_vocab)}; attn-mt learns both at data.vocab_size"
        )
    tensors = _MarianWeights(model).build(
        max_positions(run.config), run.tgt_vocab.bos_id, tie_source, tie_output
    )
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    _write_json(out / "config.json", marian_config(run, model, tie_source, tie_output))
    _write_json(
        out / "generation_config.json",
        generation_config(run.config, run.tgt_vocab.eos_id, len(run.tgt_vocab)),
    )
    write_tokenizer(run, out)
    _write_json(
        out / META_FILE,
        {
            "attn_mt_version": attn_mt.__version__,
            "checkpoint": run.checkpoint.name,
            "step": run.step,
            "bos_id": run.tgt_vocab.bos_id,
            "start_id": len(run.tgt_vocab),
            "config": run.config.to_dict(),
        },
    )
    write_model_card(out / "README.md", run, paths)
    return out
