"""`attn-mt translate`: sentences in, one line out per input line, warnings on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

from attn_mt.commands.line_warnings import print_line_warnings
from attn_mt.commands.output_files import STDIN, refuse_directories, refuse_shared_paths
from attn_mt.decoding.alignments import WordAlignment, alignment_of, joined
from attn_mt.decoding.engine import collections_paused
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.ensembles import open_models
from attn_mt.decoding.lines import LineTranslation, translate_lines, without_carriage_returns
from attn_mt.decoding.outputs import Sampling, Translation
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError


def is_model_path(argument: str) -> bool:
    """Whether a command-line argument names a model: an existing folder, or an existing .pt file."""
    path = Path(argument)
    return path.is_dir() or (path.suffix == ".pt" and path.is_file())


def models_and_texts(first: Path, texts: list[str]) -> tuple[list[Path], list[str]]:
    """MODEL and the arguments after it that also name models (an ensemble), then the sentences."""
    models = [Path(first)]
    while texts and is_model_path(texts[0]):
        models.append(Path(texts[0]))
        texts = texts[1:]
    return models, texts


def read_input_lines(input_file: str | None, texts: list[str]) -> list[str]:
    """Sentences from the arguments, a file, or stdin ("-" or piped), one per line."""
    if texts and input_file:
        raise UserError("give sentences as arguments or --input, not both")
    if texts:
        return [t.replace("\n", " ") for t in texts]
    if input_file is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise UserError(
                "nothing to translate: give sentences as arguments, --input FILE, or pipe text in"
            )
        input_file = STDIN
    return read_text_lines(input_file, "--input")


def read_text_lines(input_file: str, option: str) -> list[str]:
    """The lines of a UTF-8 file, or of stdin for "-"; a missing or non-UTF-8 file names `option`."""
    if input_file == STDIN:
        data = sys.stdin.buffer.read()
        name = "standard input"
    else:
        path = Path(input_file)
        if path.is_dir():
            raise UserError(
                f"{option} {input_file}: is a folder; give a text file (one sentence or line per line)"
            )
        if not path.is_file():
            raise UserError(f"{option} {input_file}: no such file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UserError(f"{option} {input_file}: cannot read it: {exc.strerror}") from None
        name = input_file
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{name}: line {line} is not UTF-8 (byte 0x{data[exc.start]:02x})") from None
    return split_input_lines(text)


def split_input_lines(text: str) -> list[str]:
    """Lines as `wc -l` and editors count them: split on \\n only (a trailing \\r is dropped).

    `str.splitlines` would also split on form feeds, U+2028 and the like, so a file holding them
    would get more output lines than it has input lines.
    """
    lines = without_carriage_returns(text).split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def format_nbest(index: int, line: LineTranslation, nbest: int) -> list[str]:
    """Moses-style n-best lines `index ||| text ||| score`; a blank input line gives itself as the text."""
    pairs = [(text, score) for text, score, _ in line.nbest()]
    pairs += [("" if pairs else line.text, 0.0)] * (nbest - len(pairs))
    return [f"{index} ||| {text} ||| {score:.4f}" for text, score in pairs]


def attention_names(results: list[LineTranslation]) -> list[tuple[Translation, str]]:
    """Each translated sentence and the name of its attention dump: the line's number from 0000, with
    `-1`, `-2`, ... after it when the line held several sentences."""
    named = []
    for i, line in enumerate(results):
        several = len(line.sentences) > 1
        for k, sentence in enumerate(line.sentences, start=1):
            if sentence.hypotheses:
                named.append((sentence, f"{i:04d}-{k}" if several else f"{i:04d}"))
    return named


def sampling_options(
    sample: int | None,
    temperature: float | None,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
) -> Sampling | None:
    """--sample's settings, None without --sample; a sampling option without --sample is refused."""
    if sample is None:
        named = {"--temperature": temperature, "--top-k": top_k, "--top-p": top_p, "--seed": seed}
        given = [name for name, value in named.items() if value is not None]
        if given:
            raise UserError(f"{given[0]} applies to sampling; add --sample N (N samples per line)")
        return None
    defaults = Sampling()
    return Sampling(
        samples=sample,
        temperature=defaults.temperature if temperature is None else temperature,
        top_k=defaults.top_k if top_k is None else top_k,
        top_p=defaults.top_p if top_p is None else top_p,
        seed=defaults.seed if seed is None else seed,
    )


def line_prefixes(prefix: str | None, prefix_file: str | None, count: int) -> list[str] | None:
    """One prefix per input line: --prefix for every line, or --prefix-file's lines; None for neither."""
    if prefix is not None and prefix_file is not None:
        raise UserError("give --prefix (one for every line) or --prefix-file (one per line), not both")
    if prefix is not None:
        return [prefix.replace("\n", " ")] * count
    if prefix_file is None:
        return None
    prefixes = read_text_lines(prefix_file, "--prefix-file")
    if len(prefixes) != count:
        raise UserError(f"--prefix-file {prefix_file} has {len(prefixes)} lines for {count} input lines")
    return prefixes


def write_alignments(path: Path, lines: list[WordAlignment]) -> None:
    """Each line's word alignment as one line of Pharaoh pairs in `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line.pharaoh() + "\n" for line in lines), encoding="utf-8")


def run_translate(
    run_dir: Path,
    texts: list[str],
    input_file: str | None,
    output: Path | None,
    beam: int | None,
    nbest: int,
    checkpoint: str,
    attention_dir: Path | None,
    device: str,
    length_penalty: float | None = None,
    attention_words: bool = False,
    quantize: str | None = None,
    split: bool = True,
    prefix: str | None = None,
    prefix_file: str | None = None,
    sampling: Sampling | None = None,
    alignments: Path | None = None,
    verbose: bool = False,
) -> None:
    """Translate every input line and write one output line (or `nbest` lines, or one per sample) per
    input line.

    With `split`, each line is translated sentence by sentence (decoding/lines.py); a line with a
    prefix is translated whole. Texts that name models (`models_and_texts`) make an ensemble. Warnings
    go to stderr, unknown words digested after the first few lines unless `verbose` (line_warnings.py).
    """
    refuse_directories(output, alignments)
    refuse_shared_paths(
        {"--output": output, "--alignments": alignments},
        {"--input": input_file, "--prefix-file": prefix_file},
        {"--attention-dir": attention_dir},
    )
    models, texts = models_and_texts(run_dir, texts)
    if prefix_file == STDIN and not texts and input_file in (None, STDIN):
        raise UserError(
            "--input and --prefix-file cannot both read standard input: give the sentences or the "
            "prefixes as a file (or the sentences as arguments)"
        )
    lines = read_input_lines(input_file, texts)
    prefixes = line_prefixes(prefix, prefix_file, len(lines))
    run = open_models(models, checkpoint, device, quantize)
    settings = DecodeSettings.resolve(run.config.decode, beam, nbest, length_penalty, sampling)
    translator = translator_for(run)
    with collections_paused():  # the file's objects too, while they are written out (decoding/engine.py)
        results = translate_lines(translator, lines, split, settings, progress=True, prefix=prefixes)
        outputs = settings.outputs
        print_line_warnings([result.warnings for result in results], verbose)
        if outputs > 1:
            out_lines = [line for i, r in enumerate(results) for line in format_nbest(i, r, outputs)]
        else:
            out_lines = [r.text for r in results]
        if output is None:
            sys.stdout.write("".join(line + "\n" for line in out_lines))
            sys.stdout.flush()
        else:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text("".join(line + "\n" for line in out_lines), encoding="utf-8")
        if alignments is not None:
            found = [joined([alignment_of(translator, s) for s in r.sentences]) for r in results]
            write_alignments(alignments, found)
    if attention_dir is not None:  # with the collector back on: matplotlib's figures hold reference cycles
        from attn_mt.evaluation.attention_dumps import save_attention  # matplotlib, only when asked

        for sentence, name in attention_names(results):
            save_attention(translator.attention(sentence, attention_words), attention_dir, name)
