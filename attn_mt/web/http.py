"""HTTP plumbing shared by `attn-mt serve` and `attn-mt lab`: the one shape of an error answer and the
handlers that give every error that shape, reading a request's body ahead of the app and handing it
on unchanged, and the limit on a body's size."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ErrorBody(BaseModel):
    """Every error answer: what was wrong, in one line, and the problems one by one."""

    error: str
    problems: list[str] = Field(default_factory=list)


def error_response(status: int, message: str, problems: list[str] | None = None) -> JSONResponse:
    """The one shape of every error answer; `problems` is the message alone unless given."""
    return JSONResponse(
        ErrorBody(error=message, problems=problems or [message]).model_dump(), status_code=status
    )


async def read_body(receive: Receive, max_bytes: int) -> bytes | None:
    """The request's body, read until it ends or passes `max_bytes`; None if the client disconnected."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > max_bytes or not message.get("more_body", False):
            return bytes(body)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then whatever the client sends next."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class StatusOf:
    """An ASGI `send` that passes every message on and remembers the status of the answer it starts."""

    def __init__(self, send: Send):
        self.send = send
        self.status: int | None = None  # until an answer starts

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


def answer_errors_as_json(app: FastAPI, logger: logging.Logger, failed: str) -> None:
    """HTTP errors (404, 405 with its Allow, ...) and any unexpected exception as one-line JSON answers;
    the exception is logged with its traceback and the client is told only `internal error: {failed}`."""

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        response = error_response(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})  # e.g. a 405's Allow, which RFC 9110 requires
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("error while answering %s %s", request.method, request.url.path)
        return error_response(500, f"internal error: {failed}")


class BodyLimit:
    """ASGI middleware: reads a request's whole body first and refuses one over `max_bytes` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"").decode("latin-1").strip()
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self.refuse(scope, receive, send)
            return
        body = await read_body(receive, self.max_bytes)
        if body is None:  # the client went away before sending its request; nothing to answer
            return
        if len(body) > self.max_bytes:
            await self.refuse(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 413 without reading the rest of the body."""
        response = error_response(413, f"the request body is larger than {self.max_bytes} bytes")
        await response(scope, receive, send)
