"""Connections of `attn-mt serve` that cannot pin the server: read timeouts, requests in flight, the fd
limit, a quiet log.

uvicorn closes a kept-alive connection after `timeout_keep_alive` seconds without a request, but
never one that opened and sent nothing, or a request head or body trickling in a byte at a time.
`TimedH11Protocol` (uvicorn's h11 protocol with one timer more) gives every request
`header_timeout_s` to arrive whole up to its blank line, counted from the connection's start or
the end of the previous answer, and then `body_timeout_s` for its body; a connection past either is
closed (with a 408 answer when a body was under way and nothing has been answered yet; the request's
log line and metrics say 408, serving/metrics.py). A client that stops reading its answer gets as
long (`body_timeout_s`) once the server's send buffer is full; then the connection is dropped and
the unsent answer freed.

`InFlightLimit` bounds the requests in flight (`--limit-concurrency`): one more is answered 503 at
once, before its body is read, as JSON with a Retry-After, inside the request log, so it is logged
and counted like every other refusal. (uvicorn's own `limit_concurrency`, which counted idle
connections too and answered a plain-text 503 nobody logged, is not used.)

At start the server raises its soft limit of open files to the hard limit, so the default 1,024
descriptors do not cap the connections the header timeout bounds. When descriptors still run
out, asyncio logs "Too many open files" for each refused accept; `OutOfFilesLog` turns that into one
line at the first, then at most one line a minute with the count so far, never a traceback (and
drops the traceback of asyncio's retry of such an accept when it comes after the socket was closed).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from attn_mt.serving.metrics import PROTOCOL_STATUS
from attn_mt.web.http import error_response

OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)
REPORT_EVERY_S = 60.0  # at most one "too many open files" line in this many seconds
TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a connection may take over its request, or stay idle, and how many may be open."""

    header_timeout_s: float = 10.0  # the request head, from the connection's start or the last answer
    body_timeout_s: float = 30.0  # the request body, once its head has arrived
    keep_alive_s: float = 5.0  # an idle kept-alive connection (uvicorn's timeout_keep_alive)
    limit_concurrency: int = 4096  # requests in flight (InFlightLimit); over it, 503
    shutdown_timeout_s: float = 10.0  # from the first SIGTERM or Ctrl-C to the exit

    def uvicorn_options(self) -> dict[str, Any]:
        """The uvicorn.Config arguments these limits map onto."""
        return {
            "http": timed_protocol(self.header_timeout_s, self.body_timeout_s, self.body_timeout_s),
            "timeout_keep_alive": self.keep_alive_s,
            "timeout_graceful_shutdown": self.shutdown_timeout_s + 1,  # uvicorn's backstop after ours
        }


def raise_fd_limit() -> int:
    """Raise the soft limit of open files to the hard one (as far as the system allows); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
        return hard
    return soft


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request's head, then its body."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0
    write_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        self._reading_body = False
        super().connection_made(transport)
        self._arm(self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY and not self._reading_body:
            self._reading_body = True
            self._arm(self.body_timeout_s)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:
            self._disarm()  # the request is in (or the connection ends)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._reading_body = False
            self._arm(self.header_timeout_s)  # the next request's head, however it trickles in

    def pause_writing(self) -> None:
        super().pause_writing()
        if getattr(self, "_write_timer", None) is None:
            self._write_timer = self.loop.call_later(self.write_timeout_s, self._not_read)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop_write_timer()

    def _stop_write_timer(self) -> None:
        if getattr(self, "_write_timer", None) is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _not_read(self) -> None:
        """Drop a connection whose client has read nothing of its answer for write_timeout_s: its
        unsent answer is freed instead of held until the client goes."""
        self._write_timer = None
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._stop_write_timer()
        super().connection_lost(exc)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if getattr(self, "_read_timer", None) is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        """Close a connection whose request did not arrive in time; a 408 if a body was under way."""
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self._reading_body and self.cycle is not None and not self.cycle.response_started:
            message = f"the request body did not arrive within {self.body_timeout_s:g} s"
            body = json.dumps({"error": message, "problems": [message]}).encode()
            self.transport.write(TIMED_OUT % (len(body), body))
            self.cycle.scope.setdefault("state", {})[PROTOCOL_STATUS] = 408  # for the request's log line
        self.transport.close()


def timed_protocol(
    header_timeout_s: float, body_timeout_s: float, write_timeout_s: float
) -> type[TimedH11Protocol]:
    """TimedH11Protocol with these timeouts (uvicorn builds one protocol object per connection)."""
    timeouts = {
        "header_timeout_s": header_timeout_s,
        "body_timeout_s": body_timeout_s,
        "write_timeout_s": write_timeout_s,
    }
    return type("TimedH11Protocol", (TimedH11Protocol,), timeouts)


class InFlightLimit:
    """ASGI middleware: at most `limit` HTTP requests in flight; one more is answered 503 at once (JSON,
    with `retry_after()` as its Retry-After), before its body is read."""

    def __init__(self, app: ASGIApp, limit: int, retry_after: Callable[[], int]):
        self.app, self.limit, self.retry_after = app, limit, retry_after
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            message = (
                f"the server is busy ({self.limit} requests in flight, --limit-concurrency); retry later"
            )
            response = error_response(503, message, [message])
            response.headers["Retry-After"] = str(self.retry_after())
            await response(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def out_of_files(record: logging.LogRecord) -> bool:
    """Whether a log record reports running out of file descriptors."""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, OSError) and error.errno in OUT_OF_FILES:
        return True
    return "Too many open files" in record.getMessage()


def retry_after_close(record: logging.LogRecord) -> bool:
    """Whether a record is asyncio's retry of an accept refused for lack of descriptors, run after the
    listening socket was closed at shutdown (it fails on descriptor -1: nothing is wrong but the order)."""
    error = record.exc_info[1] if record.exc_info else None
    return isinstance(error, ValueError) and "_start_serving" in record.getMessage()


class OutOfFilesLog(logging.Filter):
    """A log filter: "too many open files" once, then at most once a minute with the count, no traceback."""

    def __init__(self, fd_limit: int, every_s: float = REPORT_EVERY_S):
        super().__init__()
        self.fd_limit, self.every_s = fd_limit, every_s
        self.count = 0
        self._reported_at = -float("inf")

    def filter(self, record: logging.LogRecord) -> bool:
        if retry_after_close(record):
            return False
        if not out_of_files(record):
            return True
        self.count += 1
        now = time.monotonic()
        if now - self._reported_at < self.every_s:
            return False
        self._reported_at = now
        record.msg = (
            "too many open files (the limit is %d): new connections wait; %d refused accepts so far "
            "(this line repeats at most once a minute)"
        )
        record.args = (self.fd_limit, self.count)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def quiet_out_of_files(fd_limit: int) -> OutOfFilesLog:
    """Install OutOfFilesLog on the loggers that report refused accepts (asyncio's, uvicorn's)."""
    quiet = OutOfFilesLog(fd_limit)
    for name in ("asyncio", "uvicorn.error"):
        logging.getLogger(name).addFilter(quiet)
    return quiet
