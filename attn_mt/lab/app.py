"""The lab's FastAPI application: the page, its panels as POST JSON endpoints, and attn-mt's source.

Routes: `GET /` the page, `GET /page/*` its script and style (served here: the page works offline),
`GET /favicon.ico` an empty 204 (the lab has no icon),
`GET /api/panels` the panels and the runs the lab opened, `POST /api/PANEL` one panel computed by
attn-mt's own functions on a JSON object of inputs, and `GET /source/attn_mt/FILE.py` a file of the
package with numbered lines, which every panel links to. A bad input is answered with
`{"error": "...", "problems": [...]}` and a 4xx status: 400 for a body that is not JSON or a Host
header that does not name the lab, 413 for a body over `MAX_BODY_BYTES`, 415 for one not sent as
`application/json`, 422 for an input a panel refuses; never a traceback.

A panel's sentences and errors come in the request's language: `?lang=` (the page sends the one its
switch chose), else the lab's default (`attn-mt lab --lang`), else the request's Accept-Language; the
page's own text comes from `GET /i18n/catalogue.json` (web/languages.py) in the same order.
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from attn_mt.errors import UserError
from attn_mt.i18n import _, in_language
from attn_mt.lab.inputs import LabError, loads
from attn_mt.lab.shown import PACKAGE, ROOT
from attn_mt.web.guard import Guard, HostPolicy
from attn_mt.web.http import BodyLimit, ErrorBody, answer_errors_as_json, error_response
from attn_mt.web.languages import add_catalogue_routes, request_language

PAGE_DIR = Path(__file__).parent / "page"
MAX_BODY_BYTES = 256 * 1024  # a request body over this is refused with 413 before it is read
Panel = Callable[[dict[str, Any]], dict[str, Any]]
LAB_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": what}
    for code, what in (
        (400, "Not JSON, or a Host header not the lab's"),
        (404, "No such panel"),
        (413, "Body too large"),
        (415, "Not sent as application/json"),
        (422, "An input the panel refuses"),
    )
}
INPUTS_BODY = {  # the panel's inputs: which keys and values each takes is the panel's to check
    "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
}
log = logging.getLogger("attn_mt.lab")


def source_page(relative: str) -> str | None:
    """A .py file of the attn_mt package as an HTML page with numbered, linkable lines; None if not one."""
    path = (ROOT / relative).resolve()
    if path.suffix != ".py" or not path.is_relative_to(PACKAGE) or not path.is_file():
        return None
    rows = "".join(
        f'<tr id="L{n}"><td><a href="#L{n}">{n}</a></td><td><pre>{html.escape(line)}</pre></td></tr>'
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
    )
    name = html.escape(relative)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{name}</title>'
        f'<link rel="stylesheet" href="/page/style.css"></head><body class="source"><h1>{name}</h1>'
        f"<table>{rows}</table></body></html>"
    )


def in_the_language(lang: str, panel: Panel, state: dict[str, Any]) -> dict[str, Any]:
    """`panel` computed on `state` with `lang` in force (its sentences and errors in that language)."""
    with in_language(lang):
        return panel(state)


def create_lab_app(
    panels: dict[str, Panel], description: dict[str, Any], hosts: HostPolicy, lang: str | None = None
) -> FastAPI:
    """The lab over `panels` (name -> function of the inputs); `description` answers /api/panels. It
    answers the Host headers of `hosts`, JSON bodies only, and no other origin (web/guard.py); `lang`, when
    given, is the language of a request that names none (else its Accept-Language decides)."""
    app = FastAPI(title="attn-mt lab", version="0.1.0", docs_url=None, redoc_url=None)

    def openapi() -> dict[str, Any]:
        """FastAPI's OpenAPI document (what tests/test_http_contract.py fuzzes), panel names listed."""
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            for parameter in schema["paths"]["/api/{name}"]["post"]["parameters"]:
                parameter["schema"]["enum"] = list(panels)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.mount("/page", StaticFiles(directory=PAGE_DIR), name="page")
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(
        Guard, hosts=hosts, takes_body=lambda path: path.startswith("/api/") and path != "/api/panels"
    )

    answer_errors_as_json(app, log, "the lab could not compute this")
    add_catalogue_routes(app, default=lang, in_schema=False)  # as the page: not in the API's schema

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE_DIR / "index.html", media_type="text/html")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        """No icon: 204, so a browser's request for one is answered without an error."""
        return Response(status_code=204)

    @app.get("/source/{relative:path}", include_in_schema=False)
    async def source(relative: str) -> HTMLResponse:
        shown = source_page(relative)
        if shown is None:
            raise HTTPException(404, f"no attn-mt source file {relative!r}")
        return HTMLResponse(shown)

    @app.get("/api/panels")
    async def listing() -> dict[str, Any]:
        """The panels, and the runs the lab opened."""
        return description

    @app.post("/api/{name}", responses=LAB_ERRORS, openapi_extra=INPUTS_BODY)
    async def compute(name: str, request: Request) -> JSONResponse:
        """One panel computed on a JSON object of its inputs (docs/lab.md)."""
        if name == "panels":  # the listing's path, which only GET serves
            raise HTTPException(405, headers={"Allow": "GET"})
        chosen = request_language(request, lang)
        with in_language(chosen):
            panel = panels.get(name)
            if panel is None:
                message = _("no panel {name}; the lab has {panels}")
                return error_response(404, message.format(name=repr(name), panels=", ".join(panels)))
            try:
                state = loads(await request.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                return error_response(400, _("the body is not valid JSON: {reason}").format(reason=exc))
            except RecursionError:
                return error_response(400, _("the body's JSON is nested too deep"))
            if not isinstance(state, dict):
                message = _("expected a JSON object of inputs, such as {example}")
                return error_response(422, message.format(example='{"scores": "[[[1, 2]]]"}'))
        try:
            return JSONResponse(await run_in_threadpool(in_the_language, chosen, panel, state))
        except (LabError, UserError) as exc:
            return error_response(422, str(exc), [str(exc)])

    return app
