"""HTTP plumbing shared by `attn-mt serve` and `attn-mt lab`: the one shape of an error answer, and
reading a request's body ahead of the app and handing it on unchanged."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import Message, Receive

from attn_mt.serving.schemas import ErrorBody


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
