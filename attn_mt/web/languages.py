"""The catalogues a page speaks from: GET /i18n/catalogue.json (the language asked for with ?lang=, else
the server's default where it has one, else the browser's Accept-Language) and GET /i18n/i18n.js, the
lookup helper that reads it.

A page's app calls `add_catalogue_routes(app)` once; the page loads the script and calls
`attnMtI18n.load()`.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from attn_mt.i18n import LANGUAGES, catalogue_json, pick_language
from attn_mt.i18n.languages import language_of
from attn_mt.web.http import error_response

PREFIX = "/i18n"
HELPER = Path(__file__).resolve().parent.parent / "i18n" / "i18n.js"


def request_language(request: Request, default: str | None = None) -> str:
    """The request's ?lang= when it names a catalogue, else `default` (a server's --lang), else the
    language its Accept-Language prefers among the catalogues, else English."""
    asked = request.query_params.get("lang")
    found = language_of(asked) if asked else None
    return found or default or pick_language(request.headers.get("accept-language"))


def add_catalogue_routes(
    app: FastAPI, prefix: str = PREFIX, default: str | None = None, in_schema: bool = True
) -> None:
    """Serve the catalogues as JSON and the JavaScript helper under `prefix`; a request that names no
    language gets `default` when given, else its Accept-Language's. `in_schema`: listed in the app's
    OpenAPI document (an app whose page is not, such as the lab's, leaves its helpers out too)."""

    @app.get(f"{prefix}/catalogue.json", tags=["languages"], include_in_schema=in_schema)
    def catalogue(
        request: Request,
        lang: str | None = Query(None, description=f"one of {', '.join(LANGUAGES)}; else Accept-Language's"),
    ) -> Response:
        """One language's messages, plural rule and <html lang>, and the languages there are."""
        chosen = request_language(request, default) if lang is None else language_of(lang)
        if chosen is None:
            return error_response(404, f"no catalogue for {lang!r}: {', '.join(LANGUAGES)}")
        headers = {"Vary": "Accept-Language", "Content-Language": catalogue_json(chosen)["html_lang"]}
        return JSONResponse(catalogue_json(chosen), headers=headers)

    @app.get(f"{prefix}/i18n.js", tags=["languages"], include_in_schema=in_schema)
    def helper() -> Response:
        """The lookup helper the pages use (window.attnMtI18n)."""
        return Response(HELPER.read_bytes(), media_type="text/javascript; charset=utf-8")
