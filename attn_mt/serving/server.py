"""The HTTP server: bind the address, and run the app over one loaded run under uvicorn until stopped.

Stopping is bounded: the first SIGTERM or Ctrl-C closes the listening socket, lets the requests
already queued finish for up to `--shutdown-timeout` seconds (less a margin to write the answers),
answers the rest 503, and logs how many that was; a second signal exits at once.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

import uvicorn

from attn_mt.errors import UserError
from attn_mt.run.opened import LoadedRun
from attn_mt.serving.admission import Admission
from attn_mt.serving.batcher import Batcher
from attn_mt.serving.connections import ConnectionLimits, OutOfFilesLog, quiet_out_of_files, raise_fd_limit
from attn_mt.serving.guard import CorsPolicy, host_policy
from attn_mt.serving.service import TranslationService

ANSWER_MARGIN_S = 1.0  # of the shutdown timeout, kept for writing the last answers (at most a quarter)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free port the system picks)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


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
    )
    app = create_app(service, batcher, host_policy(host, bound_port, allowed_hosts), cors, admission)
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
