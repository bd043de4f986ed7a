"""The `attn-mt` command line: options and help, over the command bodies in attn_mt/commands/."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import typer

from attn_mt.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train and use attention-based English-French translation models (d2l.ai attention chapter).",
)
STATE = {"debug": False}

SET_HELP = "Override one config key, e.g. --set train.lr=0.001 (repeatable)."
CHECKPOINT_HELP = "best, last, a name in checkpoints/ (average, step-3000, ...) or a checkpoint path."
VERBOSE_WARNINGS_HELP = (
    "Print every line's warnings (unknown words: only the first 5 lines, then a summary line)."
)
MODEL_HELP = "A trained run directory, an export file or an exported CTranslate2 folder."
MODELS_HELP = MODEL_HELP[:-1] + "; several (same vocabularies) decode as their ensemble."
QUANTIZE_HELP = "int8: dynamic int8 quantisation of the linear layers (CPU only)."
DEVICE_HELP = "auto, cpu, cuda, cuda:N (GPU number N) or mps."
LANG_HELP = "Language of the text and figures: en, zh or vi (default: $ATTN_MT_LANG, else the locale's)."
CHECK_LANG_HELP = "Language of the report: en, zh or vi (default: $ATTN_MT_LANG, else the locale's)."
LAB_LANG_HELP = (
    "The page's language until the reader switches: en, zh or vi (default: $ATTN_MT_LANG, else the "
    "browser's)."
)
ALLOWED_HOSTS_HELP = (
    "Host names (comma-separated) the server answers besides the address it listens on, e.g. a reverse "
    "proxy's; '*' answers any (no DNS-rebinding check)."
)
DATA_HELP = (
    "Path to fra-eng.zip, fra.txt or another Tatoeba-format file "
    "(else data.path, $ATTN_MT_DATA, the cache, or a download)."
)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors.")) -> None:
    """Train and use attention-based English-French translation models."""
    STATE["debug"] = debug


def _echo_err(message: str) -> None:
    """Print to stderr."""
    typer.echo(message, err=True)


@app.command()
def validate(
    config: Path | None = typer.Argument(None, help="YAML config to check."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    explain: str | None = typer.Option(
        None,
        "--explain",
        metavar="KEY",
        help="Instead, print what a key (train.lr) means: help, type, default, choices, bounds; "
        "or a section's (model) keys with their defaults.",
    ),
) -> None:
    """Check a config; print the resolved config or every problem (or, with --explain, what a key means)."""
    from attn_mt.config import explain as explain_key
    from attn_mt.config import load_config

    if explain is not None:
        typer.echo(explain_key(explain), nl=False)
        return
    if config is None:
        raise UserError("validate: give a CONFIG to check, or --explain KEY (e.g. --explain train.lr)")
    typer.echo(load_config(config, overrides).to_yaml(), nl=False)


@app.command("data-report")
def data_report(
    config: Path | None = typer.Argument(None, help="YAML config (default: the book's Bahdanau run)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    data: str | None = typer.Option(None, "--data", help=DATA_HELP),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the report as JSON here."),
) -> None:
    """Load the corpus as the config says and print pairs, lengths, vocabularies and split overlap."""
    from attn_mt.commands.data_report import run_data_report

    run_data_report(config, overrides, data, json_out)


@app.command()
def prepare(
    config: Path = typer.Argument(..., help="YAML config of a split-mode run (configs/transformer.yaml)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    data: str | None = typer.Option(None, "--data", help=DATA_HELP),
    workers: int = typer.Option(0, "--workers", min=0, help="Encoding processes (0 = one per core)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress; only the summary."),
) -> None:
    """Split, learn the vocabularies and encode the corpus once, into arrays every later run maps."""
    from attn_mt.commands.prepare import run_prepare

    run_prepare(config, overrides, data, workers, quiet)


@app.command()
def train(
    config: Path | None = typer.Argument(None, help="YAML config (default: the book's Bahdanau run)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="Run directory (default: runs/<config name>)."
    ),
    data: str | None = typer.Option(None, "--data", help=DATA_HELP),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu), cpu, cuda or mps."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue the run in --run-dir from checkpoints/last.pt; CONFIG and --set may change train.* "
        "and decode.* keys (config.yaml is updated and config_history.jsonl records the change).",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete an existing run directory and start again."
    ),
    auto_resume: bool = typer.Option(
        False,
        "--auto-resume",
        help="Continue --run-dir from checkpoints/last.pt when it has one, else start a new run there: "
        "one command line for a job that may be restarted (torchrun --max-restarts, a requeued batch job).",
    ),
    init_from: str | None = typer.Option(
        None,
        "--init-from",
        help="Fine-tune: start from the weights of a trained run, RUN_DIR[:CHECKPOINT] (default best), "
        "keeping its vocabularies; the model section must be the parent's; a new optimiser and schedule.",
    ),
    keep_optimizer: bool = typer.Option(
        False,
        "--keep-optimizer",
        help="With --init-from: keep the parent's optimiser state (Adam's moments).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars; warnings only."),
) -> None:
    """Train a model; writes config, vocabularies, checkpoints, metrics and curves into the run directory."""
    from attn_mt.config import load_config
    from attn_mt.training.launch import train as run_training
    from attn_mt.training.stopping import StopReason

    if sum((resume, overwrite, auto_resume)) > 1:
        raise UserError("--resume, --overwrite and --auto-resume contradict each other; pick one")
    if init_from is not None and resume:
        raise UserError(
            "--init-from starts a new run from another one; --resume continues this one: pick one"
        )
    if keep_optimizer and init_from is None:
        raise UserError("--keep-optimizer keeps the optimiser state of --init-from's run; give --init-from")
    cfg = None if (resume and config is None) else load_config(config, overrides)
    if run_dir is None:
        run_dir = Path("runs") / (config.stem if config is not None else "d2l_bahdanau")
    result = run_training(
        cfg,
        run_dir,
        overrides=overrides,
        data_path=data,
        device=device,
        resume=resume,
        overwrite=overwrite,
        auto_resume=auto_resume,
        init_from=init_from,
        keep_optimizer=keep_optimizer,
        quiet=quiet,
    )
    if result.stopped_because is StopReason.INTERRUPTED:
        _echo_err(
            f"interrupted at step {result.step}; resume with: attn-mt train --resume --run-dir {run_dir}"
        )
        raise typer.Exit(130)


@app.command()
def translate(
    run_dir: Path = typer.Argument(..., help=MODEL_HELP),
    text: list[str] = typer.Argument(
        None,
        help="Sentences to translate (else --input or stdin); leading ones that name existing models "
        "(folders, .pt files) are more models, decoded with MODEL as their ensemble.",
    ),
    input_file: str | None = typer.Option(
        None, "--input", "-i", help="File with one sentence per line, or -."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write translations here (default stdout)."
    ),
    beam: int | None = typer.Option(None, "--beam", help="Beam size (default: the run's decode.beam_size)."),
    length_penalty: float | None = typer.Option(
        None, "--length-penalty", help="GNMT length penalty alpha (default: the run's decode.length_penalty)."
    ),
    nbest: int = typer.Option(1, "--nbest", help="Print the N best translations with their scores."),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    attention_dir: Path | None = typer.Option(
        None, "--attention-dir", help="Dump attention maps and heatmaps here."
    ),
    attention_words: bool = typer.Option(
        False, "--attention-words", help="Merge subword pieces into words in the attention dumps."
    ),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    quantize: str | None = typer.Option(None, "--quantize", help=QUANTIZE_HELP),
    split: bool = typer.Option(
        True,
        "--split/--no-split",
        help="Translate each line sentence by sentence and join them (default); --no-split: each line whole.",
    ),
    prefix: str | None = typer.Option(
        None,
        "--prefix",
        help="Every translation starts with this target text; decoding continues after it (lines whole).",
    ),
    prefix_file: str | None = typer.Option(
        None, "--prefix-file", help="A file of prefixes, one per input line (a blank line: none), or -."
    ),
    sample: int | None = typer.Option(
        None, "--sample", help="Draw N translations per line from the model's distribution, not searching."
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", help="With --sample: divide the logits by T (default 1; below 1 sharper)."
    ),
    top_k: int | None = typer.Option(
        None, "--top-k", help="With --sample: draw from the K most probable tokens only (default 0: all)."
    ),
    top_p: float | None = typer.Option(
        None, "--top-p", help="With --sample: the fewest top tokens reaching probability P (default 1)."
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="With --sample: the random seed (default 0); one seed, the same samples."
    ),
    alignments: Path | None = typer.Option(
        None,
        "--alignments",
        help="Write Pharaoh word alignments (i-j) of each line's best output here, one line per input line.",
    ),
    verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_WARNINGS_HELP),
) -> None:
    """Translate text with a trained run, one output line per input line."""
    from attn_mt.commands.translate import run_translate, sampling_options

    run_translate(
        run_dir,
        texts=text or [],
        input_file=input_file,
        output=output,
        beam=beam,
        nbest=nbest,
        checkpoint=checkpoint,
        attention_dir=attention_dir,
        device=device,
        length_penalty=length_penalty,
        attention_words=attention_words,
        quantize=quantize,
        split=split,
        prefix=prefix,
        prefix_file=prefix_file,
        sampling=sampling_options(sample, temperature, top_k, top_p, seed),
        alignments=alignments,
        verbose=verbose,
    )


@app.command()
def score(
    run_dir: Path = typer.Argument(..., help=MODEL_HELP),
    source: str = typer.Option(..., "--source", "-s", help="Source sentences, one per line (or -)."),
    target: str = typer.Option(
        ..., "--target", "-t", help="Their translations to score, one per line, line for line (or -)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the scores here (default stdout)."
    ),
    output_format: str = typer.Option(
        "jsonl", "--format", help="jsonl: one JSON object per line; tsv: log_prob, score, token log-probs."
    ),
    length_penalty: float | None = typer.Option(
        None, "--length-penalty", help="GNMT length penalty alpha of `score` (default: the run's)."
    ),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    quantize: str | None = typer.Option(None, "--quantize", help=QUANTIZE_HELP),
    split: bool = typer.Option(
        True,
        "--split/--no-split",
        help="Score each line pair sentence by sentence, split as translate splits it, and add up "
        "(default); --no-split: each line whole.",
    ),
    alignments: Path | None = typer.Option(
        None,
        "--alignments",
        help="Write Pharaoh word alignments (i-j) of each target line here, one line per line pair.",
    ),
    verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_WARNINGS_HELP),
) -> None:
    """Score given translations: each target line's log-probability under the model, per token and in all."""
    from attn_mt.commands.score import run_score

    run_score(
        run_dir,
        source_file=source,
        target_file=target,
        output=output,
        output_format=output_format,
        checkpoint=checkpoint,
        device=device,
        length_penalty=length_penalty,
        quantize=quantize,
        split=split,
        alignments=alignments,
        verbose=verbose,
    )


@app.command()
def serve(
    run_dir: list[Path] = typer.Argument(..., help=MODELS_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: this machine)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port, printed at start)."),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    max_batch: int = typer.Option(64, "--max-batch", help="Most sentences decoded in one batch."),
    max_wait_ms: float = typer.Option(
        5.0, "--max-wait-ms", help="How long a batch waits for more requests after its first."
    ),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    quantize: str | None = typer.Option(None, "--quantize", help=QUANTIZE_HELP),
    allowed_hosts: str | None = typer.Option(None, "--allowed-hosts", help=ALLOWED_HOSTS_HELP),
    request_timeout: float = typer.Option(
        60.0, "--request-timeout", help="Seconds a request waits for its answer before 503, by default."
    ),
    max_request_timeout: float = typer.Option(
        300.0, "--max-request-timeout", help="The longest `timeout` a request may ask for, in seconds."
    ),
    max_queued_work: float | None = typer.Option(
        None,
        "--max-queued-work",
        help="Work (characters x beam) waiting for the decoder, beyond which requests get 503 and "
        "Retry-After (default: 4 of the largest requests; docs/serving.md).",
    ),
    max_queue_wait: float = typer.Option(
        2.0,
        "--max-queue-wait",
        help="Seconds of work (at the speed measured, from a warm-up batch at start on) that may wait "
        "ahead of a request; beyond, 503 with Retry-After.",
    ),
    shutdown_timeout: float = typer.Option(
        10.0, "--shutdown-timeout", help="Seconds from SIGTERM or Ctrl-C to the exit; what is left gets 503."
    ),
    header_timeout: float = typer.Option(
        10.0, "--header-timeout", help="Seconds a request's head may take to arrive (slow clients closed)."
    ),
    body_timeout: float = typer.Option(
        30.0, "--body-timeout", help="Seconds a request's body may take (and an answer left unread)."
    ),
    keep_alive_timeout: float = typer.Option(
        5.0, "--keep-alive-timeout", help="Seconds an idle kept-alive connection stays open."
    ),
    limit_concurrency: int = typer.Option(
        4096,
        "--limit-concurrency",
        help="Requests in flight beyond which a request gets 503 at once (JSON, with Retry-After).",
    ),
    cors_origins: str | None = typer.Option(
        None,
        "--cors-origins",
        help="Web pages (origins, comma-separated) that may call the server from a browser: '*' (the "
        "default) lets every page use the LibreTranslate routes; an origin named here may use the whole "
        "API; 'none' allows no page.",
    ),
    api_keys: Path | None = typer.Option(
        None,
        "--api-keys",
        help="File of API keys, one a line, each 16 or more letters, digits, '-', '_' or '.' (a shorter "
        "key stops the server at start), optionally followed by 'requests=N chars=N', its own limits a "
        "minute; every POST then needs one (required unless --host is loopback or --no-auth is given).",
    ),
    no_auth: bool = typer.Option(
        False,
        "--no-auth",
        help="Serve a non-loopback --host without API keys: anyone reaching it may translate.",
    ),
    req_limit: int | None = typer.Option(
        None, "--req-limit", help="Requests a minute per client (its key, or its address); 429 beyond."
    ),
    char_limit: int | None = typer.Option(
        None,
        "--char-limit",
        help="Characters of text a minute per client (its key, or its address); 429 beyond.",
    ),
) -> None:
    """Serve a run over HTTP: a JSON translation API and an attention explorer page at /."""
    from attn_mt.commands.serve import run_serve

    run_serve(
        run_dir if len(run_dir) > 1 else run_dir[0],
        host=host,
        port=port,
        checkpoint=checkpoint,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        device=device,
        quantize=quantize,
        allowed_hosts=allowed_hosts,
        cors_origins=cors_origins,
        request_timeout=request_timeout,
        max_request_timeout=max_request_timeout,
        max_queued_work=max_queued_work,
        max_queue_wait=max_queue_wait,
        shutdown_timeout=shutdown_timeout,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        keep_alive_timeout=keep_alive_timeout,
        limit_concurrency=limit_concurrency,
        api_keys=api_keys,
        no_auth=no_auth,
        req_limit=req_limit,
        char_limit=char_limit,
    )


@app.command()
def lab(
    run_dirs: list[Path] = typer.Argument(None, help="Trained runs to step through (optional)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: this machine)."),
    port: int = typer.Option(8001, "--port", help="TCP port (0: any free port, printed at start)."),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    allowed_hosts: str | None = typer.Option(None, "--allowed-hosts", help=ALLOWED_HOSTS_HELP),
    lang: str | None = typer.Option(None, "--lang", help=LAB_LANG_HELP),
) -> None:
    """Serve the lab: a local page that runs the attention chapter's examples and steps through runs."""
    from attn_mt.commands.lab import run_lab

    run_lab(
        run_dirs or [],
        host=host,
        port=port,
        checkpoint=checkpoint,
        device=device,
        allowed_hosts=allowed_hosts,
        lang=lang,
    )


@app.command("eval")
def evaluate(
    run_dir: list[Path] = typer.Argument(..., help=MODELS_HELP),
    split: str = typer.Option(
        "test", "--split", help="test, valid (split-mode runs) or book (the 4 sentences)."
    ),
    beam: int | None = typer.Option(None, "--beam", help="Beam size (default: the run's decode.beam_size)."),
    length_penalty: float | None = typer.Option(
        None, "--length-penalty", help="GNMT length penalty alpha (default: the run's decode.length_penalty)."
    ),
    attention: int = typer.Option(0, "--attention", help="Dump attention for the first N sentences."),
    attention_words: bool = typer.Option(
        False, "--attention-words", help="Merge subword pieces into words in the attention dumps."
    ),
    compare: Path | None = typer.Option(None, "--compare", help="Paired bootstrap test against another run."),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    data: str | None = typer.Option(None, "--data", help=DATA_HELP),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    quantize: str | None = typer.Option(None, "--quantize", help=QUANTIZE_HELP),
) -> None:
    """Score a run on a split with sacreBLEU (BLEU, chrF, TER) and write hypotheses and attention dumps."""
    from attn_mt.commands.evaluate import run_eval

    run_eval(
        run_dir if len(run_dir) > 1 else run_dir[0],
        split=split,
        beam=beam,
        attention=attention,
        compare=compare,
        checkpoint=checkpoint,
        data_path=data,
        device=device,
        length_penalty=length_penalty,
        attention_words=attention_words,
        quantize=quantize,
    )


@app.command()
def tune(
    run_dir: Path = typer.Argument(..., help=MODEL_HELP + " --write needs a run directory."),
    beams: str = typer.Option("1,4,6", "--beams", help="Beam sizes to try, separated by commas."),
    length_penalties: str = typer.Option(
        "0.6,1.0,1.4,2.0",
        "--length-penalties",
        help="GNMT length penalties (alpha) to try with each beam > 1.",
    ),
    write: bool = typer.Option(
        False,
        "--write",
        help="Store the best pair as the run's decode settings (config.yaml, run_summary.json).",
    ),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    data: str | None = typer.Option(None, "--data", help=DATA_HELP),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
) -> None:
    """Choose the beam size and length penalty on the valid split (never the test split)."""
    from attn_mt.commands.tune import run_tune

    run_tune(run_dir, beams, length_penalties, write, checkpoint, data, device)


@app.command()
def average(
    run_dir: Path = typer.Argument(..., help="A run trained with train.keep_checkpoints."),
    last: int | None = typer.Option(None, "--last", help="Average the newest N kept checkpoints."),
    best: int | None = typer.Option(None, "--best", help="Average the N best kept checkpoints."),
    out: str = typer.Option("average", "--out", help="Name of the result: checkpoints/NAME.pt."),
) -> None:
    """Average kept checkpoints (step-*.pt) into one; use it with --checkpoint NAME."""
    from attn_mt.commands.average import run_average

    run_average(run_dir, last, best, out)


@app.command()
def export(
    run_dir: Path = typer.Argument(..., help="A trained run directory."),
    out: Path = typer.Argument(
        ..., help="The file to write (MODEL.pt), or a folder (onnx, ctranslate2, huggingface)."
    ),
    checkpoint: str = typer.Option("best", "--checkpoint", help=CHECKPOINT_HELP),
    fmt: str = typer.Option(
        "pt",
        "--format",
        help="pt: one file for translate/eval/serve; onnx: ONNX graphs; ctranslate2: a "
        "CTranslate2 folder for translate/eval/serve (Transformer runs; pip install 'attn-mt[ctranslate2]'); "
        "huggingface: a Marian folder for transformers (sentencepiece Transformer runs; "
        "pip install 'attn-mt[huggingface]').",
    ),
    quantize: str | None = typer.Option(
        None,
        "--quantize",
        help="ctranslate2 weights: int8 (7 bits on CPUs without VNNI), int8_float32, "
        "int16, float16 (CUDA) or float32 (the default).",
    ),
) -> None:
    """Export a run as one file (pt), ONNX graphs, a CTranslate2 folder or a Hugging Face (Marian) folder."""
    from attn_mt.commands.export import run_export

    run_export(run_dir, out, checkpoint, fmt, quantize)


@app.command()
def demo(
    name: str = typer.Argument(..., help="nadaraya-watson, scoring or positional-encoding."),
    out: Path = typer.Option(Path("demos"), "--out", help="Folder for the figures and the JSON of numbers."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    lang: str | None = typer.Option(None, "--lang", help=LANG_HELP),
) -> None:
    """Run one of the attention chapter's demonstrations and write its figures."""
    from attn_mt.commands.demo import run_demo

    run_demo(name, out, seed, lang)


def main() -> None:
    """Entry point: user mistakes and unusable paths become one message on stderr and exit code 2."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        _main()
        return
    from attn_mt.training.distributed import end_worker_process, lost_peer_message

    try:
        _main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # a lost peer in one line, anything else as the interpreter prints it
        line = None if STATE["debug"] else lost_peer_message(exc)
        if line is None:
            traceback.print_exc()
        else:
            _echo_err(f"attn-mt: error: {line}")
        code = 1
    end_worker_process(code)


def _main() -> None:
    """Run the command line, turning UserError and OSError into one line on stderr and exit code 2."""
    try:
        app()
    except UserError as exc:
        if STATE["debug"]:
            traceback.print_exc()
        _echo_err(f"attn-mt: error: {exc}")
        sys.exit(2)
    except OSError as exc:  # a path that cannot be read or written (a directory, permissions, a full disk)
        if STATE["debug"]:
            traceback.print_exc()
        where = f": {exc.filename}" if exc.filename else ""
        _echo_err(f"attn-mt: error: {exc.strerror or exc}{where}")
        sys.exit(2)


@app.command()
def check(
    file: Path = typer.Argument(
        ..., help="A Python file with your blocks, under the book's names and signatures."
    ),
    blocks: list[str] = typer.Option(
        [], "--block", help="Check only this block (repeatable), e.g. masked_softmax."
    ),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds the file may run before it is stopped."),
    lang: str | None = typer.Option(None, "--lang", help=CHECK_LANG_HELP),
) -> None:
    """Run your masked softmax, attentions, positional encoding, Transformer blocks and Bahdanau decoder
    against attn-mt's, on edge cases; name the common mistakes. Exit code 1 if any case fails."""
    from attn_mt.commands.check import run_check

    run_check(file, blocks, timeout, lang)


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(
        ..., help="One or more run directories (the first is the baseline)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="HTML file (default: RUN_DIR/report.html; ./report.html for several runs)."
    ),
    lang: str | None = typer.Option(None, "--lang", help=LANG_HELP),
) -> None:
    """Write one self-contained HTML report: config, data, curves, scores, comparisons, attention gallery."""
    from attn_mt.commands.report import run_report

    run_report(run_dirs, out, lang)


@app.command()
def runs(
    folders: list[Path] = typer.Argument(None, help="Run directories or folders of runs (default: runs/)."),
    sort: str | None = typer.Option(None, "--sort", help="Column to sort by, e.g. test_bleu or minutes."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
) -> None:
    """A table of runs: model, size, data, steps, minutes, stop reason, best valid BLEU, test scores."""
    from attn_mt.commands.runs import run_runs

    run_runs(folders or [], sort, as_json)
