"""`attn-mt serve`: load a run once, bind the address, and run the app under uvicorn until stopped."""

from __future__ import annotations

import socket
from pathlib import Path

from attn_mt.errors import UserError
from attn_mt.run.device import pick_device
from attn_mt.serving.batcher import Batcher
from attn_mt.serving.service import TranslationService
from attn_mt.shipping.load import load_model


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
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def serve(
    run_dir: Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    checkpoint: str = "best",
    max_batch: int = 64,
    max_wait_ms: float = 5.0,
    device: str = "auto",
    quantize: str | None = None,
) -> None:
    """Serve translations of one run (or export file) over HTTP until interrupted (Ctrl-C or SIGTERM)."""
    import uvicorn

    from attn_mt.serving.app import create_app

    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}")
    if max_batch < 1:
        raise UserError(f"--max-batch must be at least 1, got {max_batch}")
    if not 0 <= max_wait_ms <= 10_000:
        raise UserError(f"--max-wait-ms must be between 0 and 10000, got {max_wait_ms}")
    dev = pick_device(device)
    run = load_model(run_dir, checkpoint, dev, quantize)
    sock = bind(host, port)
    service = TranslationService(run, run_dir, dev, max_batch, max_wait_ms / 1000)
    batcher = Batcher(service.decode, max_batch, max_wait_ms / 1000)
    server = uvicorn.Server(uvicorn.Config(create_app(service, batcher), log_level="warning"))
    bound_host, bound_port = sock.getsockname()[:2]
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
