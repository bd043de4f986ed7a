"""`attn-mt serve`: check the options, load a run once, and serve it over HTTP until stopped."""

from __future__ import annotations

from pathlib import Path

from attn_mt.decoding.ensembles import open_models
from attn_mt.errors import UserError
from attn_mt.serving.admission import LARGEST_WORK, Admission
from attn_mt.serving.connections import ConnectionLimits
from attn_mt.serving.exposure import access_policy
from attn_mt.serving.server import run_server
from attn_mt.web.guard import cors_policy, split_names

MAX_TIMEOUT_S = 3600  # the most any of serve's timeouts may be, in seconds


def run_serve(
    run_dir: Path | list[Path],
    host: str = "127.0.0.1",
    port: int = 8000,
    checkpoint: str = "best",
    max_batch: int = 64,
    max_wait_ms: float = 5.0,
    device: str = "auto",
    quantize: str | None = None,
    allowed_hosts: str | None = None,
    cors_origins: str | None = None,
    request_timeout: float = 60.0,
    max_request_timeout: float = 300.0,
    max_queued_work: float | None = None,
    max_queue_wait: float = 2.0,
    shutdown_timeout: float = 10.0,
    header_timeout: float = 10.0,
    body_timeout: float = 30.0,
    keep_alive_timeout: float = 5.0,
    limit_concurrency: int = 4096,
    api_keys: Path | None = None,
    no_auth: bool = False,
    req_limit: int | None = None,
    char_limit: int | None = None,
) -> None:
    """Serve translations of one run (or export file, or several as an ensemble) over HTTP until
    interrupted (Ctrl-C or SIGTERM)."""
    models = [Path(p) for p in run_dir] if isinstance(run_dir, list) else [Path(run_dir)]
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}")
    if max_batch < 1:
        raise UserError(f"--max-batch must be at least 1, got {max_batch}")
    if not 0 <= max_wait_ms <= 10_000:
        raise UserError(f"--max-wait-ms must be between 0 and 10000, got {max_wait_ms}")
    cors = cors_policy(cors_origins)
    admission = Admission(
        max_queued_work=4 * LARGEST_WORK if max_queued_work is None else max_queued_work,
        max_queue_wait_s=max_queue_wait,
        default_timeout_s=request_timeout,
        max_timeout_s=max_request_timeout,
    )
    admission.check()
    for name, seconds in (
        ("--shutdown-timeout", shutdown_timeout),
        ("--header-timeout", header_timeout),
        ("--body-timeout", body_timeout),
        ("--keep-alive-timeout", keep_alive_timeout),
    ):
        if not 0 < seconds <= MAX_TIMEOUT_S:
            raise UserError(f"{name} must be above 0 and at most {MAX_TIMEOUT_S} seconds, got {seconds:g}")
    if limit_concurrency < 1:
        raise UserError(f"--limit-concurrency must be at least 1, got {limit_concurrency}")
    connections = ConnectionLimits(
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        keep_alive_s=keep_alive_timeout,
        limit_concurrency=limit_concurrency,
        shutdown_timeout_s=shutdown_timeout,
    )
    access = access_policy(host, api_keys, no_auth, req_limit, char_limit)
    run = open_models(models, checkpoint, device, quantize)
    run_server(
        run,
        models[0],
        host,
        port,
        max_batch,
        max_wait_ms,
        split_names(allowed_hosts),
        cors,
        admission,
        connections,
        access,
    )
