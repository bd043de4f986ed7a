"""The FastAPI application: the JSON API, the explorer page, and errors as one-line JSON answers.

Routes: `GET /` the attention explorer, `GET /page/*` its script and style, `POST /translate`
(attn-mt's body, or LibreTranslate's as JSON or a form: serving/libretranslate.py), `POST /score`
(the model's log-probability of given translations), `GET /languages` and LibreTranslate's
other routes (serving/libretranslate_routes.py), `GET /health` (LibreTranslate's `{"status":
"ok"}`), `GET /metrics` (serving/metrics.py), `GET /info`, `GET /openapi.json`, and `GET /docs`, FastAPI's
Swagger UI page with its script and style served from `/docs/static/*` (the files the
fastapi-offline package ships), so every page works offline. Every error is a JSON object
`{"error": "...", "problems": [...]}` with a 4xx status (400 for a LibreTranslate request, as
LibreTranslate answers), or 503 when the queue is full or the request's deadline passed (both
with a `Retry-After`), too many requests are in flight (serving/connections.py, with one too) or the
server is stopping (serving/admission.py, serving/batcher.py); a request never sees a traceback.
A client that disconnects while its translation is still queued has its job given up, so the worker
never decodes it. Before any of this, web/guard.py checks the Host header, that a
body is JSON (or LibreTranslate's form), and which web pages' origins may use the server (CORS);
then serving/access.py checks API keys and per-client limits. serving/metrics.py logs a line and
counts metrics for every request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Discriminator, Tag
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from attn_mt.decoding.scoring import blank_pairs
from attn_mt.serving.access import Access, AccessPolicy, until_replayed
from attn_mt.serving.admission import Admission, request_work
from attn_mt.serving.batcher import (
    Batcher,
    ClientGoneError,
    DeadlinePassedError,
    QueueFullError,
    ShuttingDownError,
    settle,
)
from attn_mt.serving.connections import InFlightLimit
from attn_mt.serving.libretranslate import (
    INVALID_JSON,
    LibreTranslateCall,
    LibreTranslateError,
    answer,
    form_as_json,
    languages,
    model_languages,
    plan,
    read_translate,
)
from attn_mt.serving.libretranslate_routes import add_libretranslate_routes
from attn_mt.serving.metrics import CLIENT_GONE, Metrics, RequestLog, note_sentences
from attn_mt.serving.schemas import (
    MAX_BODY_BYTES,
    MAX_SPLIT_SENTENCES,
    Info,
    Language,
    LibreTranslateRequest,
    LibreTranslateResponse,
    ScoreRequest,
    ScoreResponse,
    TranslateRequest,
    TranslateResponse,
)
from attn_mt.serving.service import DecodeOptions, RequestError, ScoreOptions, TranslationService
from attn_mt.web.guard import CorsPolicy, Guard, HostPolicy
from attn_mt.web.http import BodyLimit, ErrorBody, answer_errors_as_json, error_response, read_body, replaying

PAGE_DIR = Path(__file__).parent / "page"
DOCS_STATIC = ("fastapi_offline", "static")  # (package, folder): Swagger UI's script, style and icon
FORM_TYPE = b"application/x-www-form-urlencoded"
MULTIPART_TYPE = b"multipart/form-data"
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": what}
    for code, what in (
        (400, "Malformed JSON"),
        (413, "Body too large"),
        (415, "Not sent as application/json"),
        (422, "Invalid request"),
    )
}
LIBRETRANSLATE = "libretranslate"  # the tag of a LibreTranslate body in validation errors
ATTN_MT = "attn-mt"
LIBRETRANSLATE_FORMS = frozenset({"/translate", "/detect", "/suggest"})  # POST routes that take its forms
LIBRETRANSLATE_PATHS = frozenset(  # routes any page --cors-origins allows may use (a / entry: a folder)
    {"/translate", "/languages", "/detect", "/translate_file", "/download_file/", "/suggest"}
    | {"/frontend/settings", "/spec", "/health"}
)
ROUTES = frozenset(  # the routes metrics count by name (serving/metrics.py)
    {"/", "/docs", "/openapi.json", "/info", "/score", "/metrics"} | LIBRETRANSLATE_PATHS
) - {"/download_file/"}
log = logging.getLogger("attn_mt.serving")


def body_kind(body: Any) -> str:
    """Which API a /translate body speaks: LibreTranslate's when it has `q` (or a `target` and no
    `sentences`), attn-mt's otherwise."""
    if isinstance(body, LibreTranslateRequest):
        return LIBRETRANSLATE
    if isinstance(body, dict) and (
        "q" in body or ("sentences" not in body and body.keys() & {"source", "target"})
    ):
        return LIBRETRANSLATE
    return ATTN_MT


TranslateBody = Annotated[
    Annotated[TranslateRequest, Tag(ATTN_MT)] | Annotated[LibreTranslateRequest, Tag(LIBRETRANSLATE)],
    Discriminator(body_kind),
]
# LibreTranslate's Python bindings post forms; FormBodies hands the route their fields as JSON.
FORM_BODY = {
    "requestBody": {
        "content": {
            FORM_TYPE.decode(): {"schema": {"$ref": "#/components/schemas/LibreTranslateRequest"}},
        }
    }
}


def describe(error: dict[str, Any]) -> str:
    """One validation problem as `where: what`, e.g. `sentences[2]: Input should be a valid string`."""
    where = ""
    for part in error.get("loc", ())[1:]:  # the first part says body/query/path
        if part in (ATTN_MT, LIBRETRANSLATE):  # which of the two /translate bodies it was
            continue
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    message = error.get("msg", "invalid value")
    if error.get("type") == "extra_forbidden":
        message = "unknown field (/docs lists the fields each route takes)"
    elif error.get("type") == "missing" and not where:
        message = "the request has no JSON body"
    elif error.get("type") in ("model_attributes_type", "model_type") and not where:
        message = 'expected a JSON object such as {"sentences": ["i lost ."]}, sent as application/json'
    return f"{where or 'body'}: {message}"


async def until_disconnect(receive: Receive) -> None:
    """Return when the server reports that the client has closed its connection."""
    while (await receive())["type"] != "http.disconnect":
        pass


class UnavailableError(Exception):
    """A request the server will not answer now: 503 with this message (and a Retry-After when known)."""

    def __init__(self, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


async def results_unless_gone(
    job: Future, receive: Receive, timeout: float | None = None, retry_after: Callable[[], int] | None = None
) -> Any:
    """The job's results; None if the client disconnects first. A client gone (the job failed with
    ClientGoneError), or `timeout` seconds passed (DeadlinePassedError, and UnavailableError with
    `retry_after()`'s Retry-After), gives the job up: a queued job is never decoded, and a batch whose
    jobs are all given up stops between two search steps."""
    results = asyncio.wrap_future(job)
    gone = asyncio.ensure_future(until_disconnect(receive))
    expired = False
    try:
        await asyncio.wait((results, gone), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        expired = not results.done() and not gone.done()
    finally:
        gone.cancel()
        if not results.done():  # the client left, the deadline passed, or this request's task was cancelled
            reason = DeadlinePassedError("given up by its request") if expired else None
            settle(job, error=reason or ClientGoneError("its client left"))
            results.cancel()
    if job.cancelled() or isinstance(job.exception(), ClientGoneError):
        return None
    try:
        return job.result()
    except DeadlinePassedError:
        within = f" ({timeout:.3g} s)" if timeout is not None else ""
        message = f"not answered within the request's deadline{within}"
        raise UnavailableError(message, retry_after() if retry_after is not None else None) from None
    except ShuttingDownError as exc:
        raise UnavailableError(f"the server is shutting down: {exc}") from None


async def multipart_as_form(scope: Scope, body: bytes) -> bytes:
    """A multipart/form-data body's text fields as the same form, urlencoded (files are left out)."""
    try:
        async with Request(scope, replaying(body, until_replayed)).form(max_files=0) as form:
            return urlencode(
                [(name, value) for name, value in form.multi_items() if isinstance(value, str)]
            ).encode()
    except HTTPException:  # a body multipart cannot read: the form has no fields
        return b""


class FormBodies:
    """A LibreTranslate form posted to one of `paths` reaches its route as the same JSON object.

    LibreTranslate's Python bindings post `application/x-www-form-urlencoded`, and LibreTranslate
    reads a form's fields from the URL query too (a POST without a body may carry them all there);
    both come to the route as one JSON object (serving/libretranslate.py `form_as_json`).
    """

    def __init__(self, app: ASGIApp, paths: frozenset[str]):
        self.app, self.paths = app, paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths):
            await self.app(scope, receive, send)
            return
        kind = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
        if kind not in (FORM_TYPE, MULTIPART_TYPE, b""):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, MAX_BODY_BYTES)
        if body is None:
            return
        query = scope.get("query_string", b"")
        if kind == MULTIPART_TYPE:  # LibreTranslate's web page posts FormData
            body = await multipart_as_form(scope, body)
        converted = form_as_json(body, query) if kind or not body else None
        if converted is not None:
            kept = [(k, v) for k, v in scope["headers"] if k not in (b"content-type", b"content-length")]
            sized = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(converted)).encode()),
            ]
            scope = {**scope, "headers": [*kept, *sized]}
        await self.app(scope, replaying(converted or body, receive), send)


def create_app(
    service: TranslationService,
    batcher: Batcher,
    hosts: HostPolicy,
    cors: CorsPolicy,
    admission: Admission | None = None,
    access: AccessPolicy | None = None,
    max_in_flight: int | None = None,
) -> FastAPI:
    """The application over one loaded run and its decoding worker, answering the Host headers of
    `hosts`, the web pages `cors` allows (web/guard.py) and the clients `access` lets in
    (serving/access.py: API keys and per-client limits; none by default), within `admission`'s
    limits (serving/admission.py: deadlines and the queue's bound) and at most `max_in_flight`
    requests at once (serving/connections.py; None: no bound)."""
    admission = admission or Admission()
    app = FastAPI(
        title="attn-mt",
        summary=f"English-French translation with a {service.run.config.model.type} model and its attention.",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
    )
    source, target = model_languages(service.run.config)

    def openapi() -> dict[str, Any]:
        """FastAPI's OpenAPI document, LibreTranslate's `source` and `target` narrowed to this model's."""
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            fields = schema["components"]["schemas"]["LibreTranslateRequest"]["properties"]
            fields["source"]["enum"], fields["target"]["enum"] = [source, "auto"], [target]
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.mount("/page", StaticFiles(directory=PAGE_DIR), name="page")
    app.mount("/docs/static", StaticFiles(packages=[DOCS_STATIC]), name="docs-static")
    metrics = Metrics(queue_depth=lambda: batcher.queued_jobs, worker=batcher)
    app.add_middleware(Access, policy=access or AccessPolicy(), max_bytes=MAX_BODY_BYTES)
    app.add_middleware(FormBodies, paths=LIBRETRANSLATE_FORMS)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(
        Guard,
        hosts=hosts,
        takes_body=frozenset({"/translate", "/score", "/detect", "/suggest"}).__contains__,
        cors=cors,
        form_paths=LIBRETRANSLATE_FORMS | {"/translate_file"},
        libretranslate_paths=LIBRETRANSLATE_PATHS,
        shared_paths=frozenset({"/translate"}),  # LibreTranslate's body and serve's own
        max_peek_bytes=MAX_BODY_BYTES,
    )
    if max_in_flight is not None:  # inside the request log, so that its 503s are logged and counted
        app.add_middleware(InFlightLimit, limit=max_in_flight, retry_after=batcher.retry_after_s)
    app.add_middleware(  # added last, so it runs first: it sees every request, refusals too
        RequestLog, metrics=metrics, routes=ROUTES, prefixes=("/download_file/", "/page/", "/docs/static/")
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        broken = [e for e in errors if e.get("type") == "json_invalid"]
        if broken:
            detail = broken[0].get("ctx", {}).get("error", "cannot parse it")
            at = broken[0].get("loc", ())[1:]
            where = f" (at character {at[0]})" if at and isinstance(at[0], int) else ""
            message = f"the body is not valid JSON: {detail}{where}"
            return error_response(400, message, [message])
        problems = [describe(e) for e in errors]
        if request.url.path == "/translate" and exc.body is not None and not isinstance(exc.body, dict):
            return error_response(400, INVALID_JSON, problems)  # LibreTranslate's answer to a list body
        return error_response(
            422,
            problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + "; ".join(problems),
            problems,
        )

    answer_errors_as_json(app, log, "the server could not answer this request")

    @app.exception_handler(UnavailableError)
    async def unavailable(request: Request, exc: UnavailableError) -> JSONResponse:
        response = error_response(503, str(exc), [str(exc)])
        if exc.retry_after_s is not None:
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.get("/", include_in_schema=False)
    async def explorer() -> FileResponse:
        return FileResponse(PAGE_DIR / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    async def api_docs() -> HTMLResponse:
        """Swagger UI over /openapi.json, its script and style served by this server."""
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon.png",
        )

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Liveness, as LibreTranslate answers it: `{"status": "ok"}` (the counts are at /metrics)."""
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        """Prometheus' text format: requests, latency, rejections, sentences, queue depth."""
        return metrics.response()

    @app.get("/info", response_model=Info)
    async def info() -> Info:
        """The model, its config, vocabularies, checkpoint, latest eval scores, limits and batching."""
        described = service.info()
        described.limits.update(
            max_split_sentences=MAX_SPLIT_SENTENCES,
            request_timeout_s=admission.default_timeout_s,
            max_request_timeout_s=admission.max_timeout_s,
            max_queued_work=admission.max_queued_work,
        )
        return described

    async def decoded(
        sentences: list[Any], options: DecodeOptions | ScoreOptions, connection: Request, deadline: float
    ) -> Any:
        """The sentences' (or pairs') results from the decoding worker, or None if the client left first;
        the request log and metrics count the sentences of results that came back; UnavailableError when
        the queue is full, the server stopping, or the deadline passed first."""
        if isinstance(options, DecodeOptions):
            width = options.beam if options.settings.sampling is None else options.outputs
            work = request_work(sentences, width, options.attention)
        else:
            work = request_work(sentences, 1, options.alignments)
        try:
            job = batcher.submit(sentences, options, work, deadline)
        except QueueFullError as exc:
            raise UnavailableError(str(exc), exc.retry_after_s) from None
        except ShuttingDownError as exc:
            raise UnavailableError(str(exc)) from None
        results = await results_unless_gone(
            job, connection.receive, deadline - time.monotonic(), batcher.retry_after_s
        )
        if results is not None:
            note_sentences(connection.state, len(sentences))
        return results

    def rendered(make: Callable[[], BaseModel], **dump: Any) -> Awaitable[Response]:
        """The answer built and written as JSON on a thread of its own, so a large one does not hold
        the event loop (and every other connection) while it is serialised."""

        def render() -> Response:
            return Response(make().model_dump_json(**dump), media_type="application/json")

        return asyncio.to_thread(render)

    @app.post(
        "/translate",
        response_model=TranslateResponse | LibreTranslateResponse,
        responses=ERROR_RESPONSES,
        openapi_extra=FORM_BODY,
    )
    async def translate(request: Annotated[TranslateBody, Body()], connection: Request) -> Any:
        """Translate one or many sentences; requests arriving together are decoded in one batch.

        A body with `q` is LibreTranslate's (serving/libretranslate.py), as JSON or a form.
        """
        if isinstance(request, LibreTranslateRequest):
            try:
                call = read_translate(request.model_dump())
            except LibreTranslateError as exc:
                return error_response(400, str(exc), [str(exc)])
            answered = await translate_libretranslate(call, connection)
            if isinstance(answered, LibreTranslateResponse):
                return await rendered(lambda: answered, exclude_none=True)
            return answered
        try:
            deadline = admission.deadline(request.timeout)
            options = service.options(request)
            plans = service.plan(request)
            pieces = service.items(request, plans)
        except (RequestError, ValueError) as exc:
            return error_response(422, str(exc), [str(exc)])
        results = await decoded(pieces, options, connection, deadline) if pieces else []
        if results is None:
            return error_response(CLIENT_GONE, "the client closed its connection before the answer")
        return await rendered(
            lambda: TranslateResponse(
                results=service.combine(request.sentences, plans, results),
                beam=options.beam,
                nbest=options.outputs,
                length_penalty=options.length_penalty,
            )
        )

    async def translate_libretranslate(
        call: LibreTranslateCall, connection: Request
    ) -> LibreTranslateResponse | JSONResponse:
        """LibreTranslate's translate: texts split into sentences, decoded, joined back (or an error)."""
        config = service.run.config
        try:
            work = plan(call, config, service.split)
            nbest = call.alternatives + 1
            beam = max(config.decode.beam_size, nbest)
            options = service.options(TranslateRequest(sentences=["-"], beam=beam, nbest=nbest))
        except (LibreTranslateError, RequestError) as exc:
            return error_response(400, str(exc), [str(exc)])
        deadline = admission.deadline(None)
        results = await decoded(work.sentences, options, connection, deadline) if work.sentences else []
        if results is None:
            return error_response(CLIENT_GONE, "the client closed its connection before the answer")
        return await asyncio.to_thread(answer, call, work, results, config)  # off the event loop, as rendered

    @app.post(
        "/score", response_model=ScoreResponse, response_model_exclude_none=True, responses=ERROR_RESPONSES
    )
    async def score(request: ScoreRequest, connection: Request) -> Any:
        """Score given translations: each target's log-probability under the model, per token and in all.

        What `attn-mt score` computes (decoding/scoring.py); requests arriving together share a batch.
        """
        options = service.score_options(request)
        pairs = [(pair.source, pair.target) for pair in request.pairs]
        blank = blank_pairs([s for s, _ in pairs], [t for _, t in pairs])
        if blank:  # white space by Python's rules (\x1c too), which JSON Schema's \S does not cover
            problems = [f"pairs[{i}].{side}: nothing to score (only white space)" for i, side in blank]
            return error_response(422, problems[0], problems)
        try:
            deadline = admission.deadline(request.timeout)
        except ValueError as exc:
            return error_response(422, str(exc), [str(exc)])
        results = await decoded(pairs, options, connection, deadline)
        if results is None:
            return error_response(CLIENT_GONE, "the client closed its connection before the answer")
        return await rendered(
            lambda: ScoreResponse(results=results, length_penalty=options.length_penalty), exclude_none=True
        )

    @app.get("/languages", response_model=list[Language])
    async def language_list() -> list[Language]:
        """LibreTranslate's language list: the model's source language with its target, and the target."""
        return languages(service.run.config)

    add_libretranslate_routes(
        app, service.run, translate_libretranslate, keys_needed=bool(access and access.keys)
    )

    return app
