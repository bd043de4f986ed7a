"""`attn-mt serve`: check the options, load a run once, and serve it over HTTP until stopped."""

from __future__ import annotations

from pathlib import Path

from attn_mt.decoding.ensembles import open_models
from attn_mt.errors import UserError
from attn_mt.serving.exposure import access_policy
from attn_mt.serving.server import run_server
from attn_mt.web.guard import cors_policy, split_names


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
    access = access_policy(host, api_keys, no_auth, req_limit, char_limit)
    run = open_models(models, checkpoint, device, quantize)
    run_server(run, models[0], host, port, max_batch, max_wait_ms, split_names(allowed_hosts), cors, access)
