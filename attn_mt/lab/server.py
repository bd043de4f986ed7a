"""Serve the lab under uvicorn on one address until stopped."""

from __future__ import annotations

from functools import partial

from attn_mt.i18n import SOURCE
from attn_mt.lab.app import create_lab_app
from attn_mt.lab.kernel_regression import warm_up
from attn_mt.lab.live import LiveTrainer, live_panel
from attn_mt.lab.panels import description, lab_panels
from attn_mt.run.opened import LoadedRun
from attn_mt.web.guard import host_policy
from attn_mt.web.listen import bind


def run_lab_server(
    runs: dict[str, LoadedRun], host: str, port: int, allowed_hosts: list[str], lang: str | None = None
) -> None:
    """Bind host:port and serve the lab over `runs` (name -> opened run) until interrupted; `lang`, when
    given, is the page's language until the reader switches (else the browser's Accept-Language)."""
    import uvicorn

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    warm_up(lang or SOURCE)  # before the address is printed: the first Nadaraya-Watson request is then cheap
    listing = description(runs)  # the page's list of runs, which a live training's run joins
    live = LiveTrainer(runs, listing)
    panels = lab_panels(runs) | {"live": partial(live_panel, live)}
    listing["panels"].append("live")
    app = create_lab_app(panels, listing, host_policy(host, bound_port, allowed_hosts), lang)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    names = ", ".join(f"{name} ({run.config.model.type})" for name, run in runs.items()) or "no run"
    print(f"attn-mt: lab with {names} on http://{shown}:{bound_port}/; Ctrl-C stops", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        live.close()
        sock.close()
