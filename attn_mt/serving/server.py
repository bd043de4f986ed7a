"""The HTTP server: bind the address, and run the app over one loaded run under uvicorn until stopped."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from attn_mt.run.opened import LoadedRun
from attn_mt.serving.access import AccessPolicy
from attn_mt.serving.batcher import Batcher
from attn_mt.serving.exposure import exposure_warnings
from attn_mt.serving.service import TranslationService
from attn_mt.web.guard import CorsPolicy, host_policy
from attn_mt.web.listen import bind


def log_requests() -> None:
    """Send serve's log (a line per request: serving/metrics.py; warnings) to stderr, once."""
    logger = logging.getLogger("attn_mt.serving")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def run_server(
    run: LoadedRun,
    run_dir: Path,
    host: str,
    port: int,
    max_batch: int,
    max_wait_ms: float,
    allowed_hosts: list[str],
    cors: CorsPolicy,
    access: AccessPolicy | None = None,
) -> None:
    """Bind host:port and serve translations of the loaded `run` until interrupted (Ctrl-C or SIGTERM)."""
    import uvicorn

    from attn_mt.serving.app import create_app

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    service = TranslationService(run, run_dir, max_batch, max_wait_ms / 1000)
    batcher = Batcher(service.decode, max_batch, max_wait_ms / 1000)
    app = create_app(service, batcher, host_policy(host, bound_port, allowed_hosts), cors, access)
    log_requests()
    for line in exposure_warnings(host, access or AccessPolicy()):
        print(line, file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
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
