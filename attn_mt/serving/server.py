"""The HTTP server: bind the address, and run the app over one loaded run under uvicorn until stopped.

Stopping is bounded: the first SIGTERM or Ctrl-C closes the listening socket, lets the requests
already queued finish for up to `--shutdown-timeout` seconds (less a margin to write the answers),
answers the rest 503, and logs how many that was; a second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

import uvicorn

from attn_mt.run.opened import LoadedRun
from attn_mt.serving.access import AccessPolicy
from attn_mt.serving.admission import WARM_UP_SENTENCES, Admission, request_work
from attn_mt.serving.batcher import Batcher, WarmUp
from attn_mt.serving.connections import ConnectionLimits, OutOfFilesLog, quiet_out_of_files, raise_fd_limit
from attn_mt.serving.exposure import exposure_warnings
from attn_mt.serving.schemas import TranslateRequest
from attn_mt.serving.service import RequestError, TranslationService
from attn_mt.web.guard import CorsPolicy, host_policy
from attn_mt.web.listen import bind

ANSWER_MARGIN_S = 1.0  # of the shutdown timeout, kept for writing the last answers (at most a quarter)


def log_requests() -> None:
    """Send serve's log (a line per request: serving/metrics.py; warnings) to stderr, once."""
    logger = logging.getLogger("attn_mt.serving")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def say(message: str) -> None:
    """One line on stderr, as the server's own log (uvicorn's logs only warnings)."""
    print(f"attn-mt: {message}", file=sys.stderr, flush=True)


class StoppingServer(uvicorn.Server):
    """uvicorn's server whose first signal gives the queue `shutdown_timeout_s` and whose second exits."""

    def __init__(
        self, config: uvicorn.Config, batcher: Batcher, shutdown_timeout_s: float, files: OutOfFilesLog
    ):
        super().__init__(config)
        self.batcher, self.shutdown_timeout_s, self.files = batcher, shutdown_timeout_s, files
        self.signalled_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.signalled_at is not None:  # a second signal: no more waiting
            say(f"second signal ({signal.Signals(sig).name}): exiting now; answers still owed are lost")
            os._exit(128 + sig)
        self.signalled_at = time.monotonic()
        margin = min(ANSWER_MARGIN_S, self.shutdown_timeout_s / 4)
        self.batcher.shut_down(self.signalled_at + self.shutdown_timeout_s - margin)
        say(
            f"{signal.Signals(sig).name}: stopping; queued requests get up to {self.shutdown_timeout_s:g} s "
            "(--shutdown-timeout), then 503"
        )
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        took = time.monotonic() - (self.signalled_at or time.monotonic())
        say(
            f"stopped {took:.1f} s after the signal; {self.batcher.unfinished_at_shutdown} requests not "
            "finished within the shutdown timeout were answered 503"
        )
        if self.files.count:
            files = self.files
            say(f"too many open files: {files.count} refused accepts in all (the limit is {files.fd_limit})")


def warm_up_batch(service: TranslationService) -> WarmUp:
    """The batch the decoding worker times at start: WARM_UP_SENTENCES at the run's default search
    (greedy when the run's own cannot run, as then no request can use it either)."""
    sentences = list(WARM_UP_SENTENCES)
    try:
        options = service.options(TranslateRequest(sentences=sentences))
    except RequestError:
        options = service.options(TranslateRequest(sentences=sentences, beam=1))
    width = options.beam if options.settings.sampling is None else options.outputs
    return WarmUp(sentences, options, request_work(sentences, width))


def warmed_up(batcher: Batcher) -> None:
    """Wait for the decoding worker's warm-up batch and say what it measured (or that it failed)."""
    batcher.warmed.wait()
    if batcher.warm_up_error is not None:
        say(
            f"the warm-up batch failed ({batcher.warm_up_error}); admission control has no decoding "
            "speed until the first batch is decoded"
        )
        return
    count = len(batcher.warm_up.sentences) if batcher.warm_up else 0
    say(
        f"warm-up: {count} sentences decoded in {batcher.warm_up_s * 1000:.0f} ms, "
        f"{batcher.work_per_s:,.0f} work units a second; admission control starts from that speed"
    )


def run_server(
    run: LoadedRun,
    run_dir: Path,
    host: str,
    port: int,
    max_batch: int,
    max_wait_ms: float,
    allowed_hosts: list[str],
    cors: CorsPolicy,
    admission: Admission | None = None,
    connections: ConnectionLimits | None = None,
    access: AccessPolicy | None = None,
) -> None:
    """Bind host:port and serve translations of the loaded `run` until interrupted (Ctrl-C or SIGTERM)."""
    from attn_mt.serving.app import create_app

    admission, connections = admission or Admission(), connections or ConnectionLimits()
    fd_limit = raise_fd_limit()
    files = quiet_out_of_files(fd_limit)
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    service = TranslationService(run, run_dir, max_batch, max_wait_ms / 1000)
    batcher = Batcher(
        service.decode,
        max_batch,
        max_wait_ms / 1000,
        max_queued_work=admission.max_queued_work,
        max_queue_wait_s=admission.max_queue_wait_s,
        batch_work=admission.batch_work,
        short_work=admission.short_work,
        warm_up=warm_up_batch(service),
    )
    app = create_app(
        service,
        batcher,
        host_policy(host, bound_port, allowed_hosts),
        cors,
        admission,
        access,
        max_in_flight=connections.limit_concurrency,
    )
    log_requests()
    for line in exposure_warnings(host, access or AccessPolicy()):
        print(line, file=sys.stderr, flush=True)
    warmed_up(batcher)
    config = uvicorn.Config(app, log_level="warning", **connections.uvicorn_options())
    server = StoppingServer(config, batcher, connections.shutdown_timeout_s, files)
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(
        f"attn-mt: serving {run_dir} ({run.config.model.type}, {run.checkpoint.name}, step {run.step}) "
        f"on http://{shown}:{bound_port}/ (API docs at /docs); Ctrl-C stops",
        flush=True,
    )
    try:
        server.run(sockets=[sock])
    finally:
        batcher.close()
        sock.close()
