"""Who may use `attn-mt serve`, and how much: API keys and per-client limits.

- `--api-keys FILE` lists the keys, one a line: the key (16 or more characters of letters, digits,
  `-`, `_`, `.`), then optionally its own limits, `requests=N` (a minute) and `chars=N` (characters
  of text a minute); `#` starts a comment. A request gives its key as LibreTranslate's clients do,
  in the `api_key` field of its JSON body, form or URL query, or as `Authorization: Bearer KEY`
  (serve's own bodies forbid unknown fields, so their clients use the header or the query).
  A wrong key gets 403 `Invalid API key` (LibreTranslate's words); no key at all gets 401 with
  LibreTranslate's `Please contact the server operator to get an API key`. Pages and documents
  (`GET /`, `/docs`, `/languages`, `/frontend/settings`, `/health`, ...) stay open; every POST, and
  `GET /info` and `GET /metrics`, need a key.
- `--req-limit N` and `--char-limit N`: requests and characters a minute for each client, a client
  being its key when it gives one (with the key's own limits, where the file sets them) and its
  address otherwise (behind a reverse proxy on this machine, the address the proxy forwards).
  A request over a limit gets 429 naming it (`Slowdown: 60 requests per minute per address`) and a
  `Retry-After`; the minute is a moving window, LibreTranslate's strategy.

Only POST requests count against the limits, and only those answered: a request the server refuses
(any 4xx answer, 503, or another 5xx) costs nothing. A request is charged when it arrives, so that
concurrent requests cannot pass a limit together, and given its cost back when its refusal is sent;
one whose client leaves before its answer stays charged, as its work may have been done.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attn_mt.errors import UserError
from attn_mt.serving.metrics import CLIENT_GONE
from attn_mt.web.http import StatusOf, error_response, read_body, replaying

WINDOW_S = 60.0  # the limits' window: a minute
KEY_PATTERN = re.compile(r"[A-Za-z0-9._-]{16,}")
OPEN_GETS = frozenset({"/info", "/metrics"})  # GET routes that need a key like every POST
INVALID_KEY = "Invalid API key"
NO_KEY = "Please contact the server operator to get an API key"
TEXT_FIELDS = ("q", "sentences", "prefix")  # JSON fields whose texts count as characters


@dataclass(frozen=True)
class Limits:
    """Requests and characters a client may send in a minute (None: no limit)."""

    requests: int | None = None
    chars: int | None = None


def digest(key: str) -> str:
    """How a key is kept and looked up: its SHA-256, so that a lookup's time says nothing of the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def read_api_keys(path: Path) -> dict[str, Limits]:
    """The keys of an --api-keys file (by their digest) with each key's own limits; UserError naming
    the line for anything else."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--api-keys {path}: cannot read it ({exc})") from None
    keys: dict[str, Limits] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"--api-keys {path}, line {number}"
        if not KEY_PATTERN.fullmatch(words[0]):
            raise UserError(f"{where}: a key is 16 or more letters, digits, '-', '_' or '.'")
        own: dict[str, int] = {}
        for word in words[1:]:
            name, _, value = word.partition("=")
            if name not in ("requests", "chars") or not value.isdigit() or name in own:
                raise UserError(f"{where}: {word!r} is not requests=N or chars=N")
            own[name] = int(value)
        if digest(words[0]) in keys:
            raise UserError(f"{where}: the key is listed twice")
        keys[digest(words[0])] = Limits(own.get("requests"), own.get("chars"))
    if not keys:
        raise UserError(f"--api-keys {path}: the file lists no key")
    return keys


@dataclass(frozen=True)
class AccessPolicy:
    """The keys (None: none needed) and the limits of a client without its own."""

    keys: dict[str, Limits] | None = None
    limits: Limits = field(default_factory=Limits)

    def limits_of(self, key_digest: str | None) -> Limits:
        """A client's limits: its key's own where the file sets them, the server's otherwise."""
        own = self.keys.get(key_digest) if self.keys and key_digest else None
        if own is None:
            return self.limits
        return Limits(
            self.limits.requests if own.requests is None else own.requests,
            self.limits.chars if own.chars is None else own.chars,
        )

    @property
    def open(self) -> bool:
        """Whether nothing needs checking: no keys and no limits."""
        return self.keys is None and self.limits == Limits()


def refunded(status: int) -> bool:
    """Whether a request answered `status` is a refusal, which costs its client nothing: a 4xx (the
    client's leaving, 499, excepted) or a 5xx."""
    return status >= 400 and status != CLIENT_GONE


@dataclass
class Charge:
    """What one request was charged in a moving window: the client, when, and how much."""

    window: MovingWindow
    client: str
    at: float
    cost: int
    given_back: bool = False

    def give_back(self) -> None:
        """Take the charge out of its window again, once (nothing when it has aged out already)."""
        entries = self.window.spent.get(self.client)
        if not self.given_back and entries and (self.at, self.cost) in entries:
            entries.remove((self.at, self.cost))
        self.given_back = True


class MovingWindow:
    """What each client has spent in the last minute: (time, cost) entries, the old ones dropped."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.spent: dict[str, deque[tuple[float, int]]] = {}

    def wait(self, client: str, cost: int, limit: int | None) -> float | None:
        """None, and `cost` counted, if the client may spend it within `limit` a minute; otherwise
        the seconds until it may (nothing counted)."""
        wait, _ = self.charge(client, cost, limit)
        return wait

    def charge(self, client: str, cost: int, limit: int | None) -> tuple[float | None, Charge | None]:
        """`wait`, with the charge made (None when nothing was counted) so that it can be given back."""
        if limit is None or cost == 0:
            return None, None
        now = self.clock()
        entries = self.spent.setdefault(client, deque())
        while entries and entries[0][0] <= now - WINDOW_S:
            entries.popleft()
        total = sum(c for _, c in entries)
        if total + cost <= limit:
            entries.append((now, cost))
            return None, Charge(self, client, now, cost)
        if cost > limit:
            return WINDOW_S, None
        for at, spent in entries:  # the moment enough of the window's cost has aged out
            total -= spent
            if total + cost <= limit:
                return max(at + WINDOW_S - now, 0.0), None
        return WINDOW_S, None

    def forget_idle(self) -> None:
        """Drop clients with nothing in the window, so the table does not grow with every address."""
        now = self.clock()
        for client in [c for c, e in self.spent.items() if not e or e[-1][0] <= now - WINDOW_S]:
            del self.spent[client]


def text_characters(found: Any) -> int:
    """The characters of text a JSON body asks to process: its q, sentences, prefixes and pairs."""
    if not isinstance(found, dict):
        return 0
    total = 0
    for name in TEXT_FIELDS:
        value = found.get(name)
        texts = value if isinstance(value, list) else [value]
        total += sum(len(text) for text in texts if isinstance(text, str))
    for pair in found.get("pairs") or []:
        if isinstance(pair, dict):
            total += sum(len(v) for v in (pair.get("source"), pair.get("target")) if isinstance(v, str))
    return total


def bearer(scope: Scope) -> str | None:
    """The key of an `Authorization: Bearer KEY` header, or None."""
    value = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1").strip()
    scheme, _, key = value.partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


async def key_and_characters(scope: Scope, body: bytes) -> tuple[str | None, int]:
    """The request's API key (header, JSON field, form or multipart field, URL query) and its
    characters of text (a body that is not JSON counts its bytes)."""
    key = bearer(scope)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    kind = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
    given: Any = None
    characters = len(body)
    if kind == b"application/json":
        try:
            found = json.loads(body)
        except (ValueError, RecursionError):
            found = None
        given = found.get("api_key") if isinstance(found, dict) else None
        characters = text_characters(found)
    elif kind == b"multipart/form-data":
        async with Request(scope, replaying(body, until_replayed)).form() as form:
            given = form.get("api_key")
    return key or (given if isinstance(given, str) else None) or (query.get("api_key") or [None])[
        0
    ], characters


async def until_replayed() -> Message:
    """A `receive` for a body already replayed: the client has nothing more to send."""
    return {"type": "http.disconnect"}


class Access:
    """ASGI middleware: API keys and per-client limits (the module docstring), before the routes."""

    def __init__(
        self, app: ASGIApp, policy: AccessPolicy, max_bytes: int, clock: Callable[[], float] = time.monotonic
    ):
        self.app, self.policy, self.max_bytes = app, policy, max_bytes
        self.requests, self.chars = MovingWindow(clock), MovingWindow(clock)
        self.seen = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        checked = scope["type"] == "http" and (scope["method"] == "POST" or scope["path"] in OPEN_GETS)
        if not checked or self.policy.open:
            await self.app(scope, receive, send)
            return
        body = b""
        if scope["method"] == "POST":
            read = await read_body(receive, self.max_bytes)
            if read is None:  # the client went away
                return
            body, receive = read, replaying(read, receive)
        key, characters = await key_and_characters(scope, body)
        key_digest = digest(key) if key else None
        if self.policy.keys is not None:
            if key_digest is not None and key_digest not in self.policy.keys:
                await error_response(403, INVALID_KEY, [INVALID_KEY])(scope, receive, send)
                return
            if key_digest is None:
                response = error_response(401, NO_KEY, [NO_KEY])
                response.headers["WWW-Authenticate"] = 'Bearer realm="attn-mt"'
                await response(scope, receive, send)
                return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        charges = await self.over_limit(scope, receive, send, key_digest, characters)
        if charges is None:
            return
        sending = StatusOf(send)
        try:
            await self.app(scope, receive, sending)
        finally:
            if sending.status is not None and refunded(sending.status):
                for charge in charges:
                    charge.give_back()

    async def over_limit(
        self, scope: Scope, receive: Receive, send: Send, key_digest: str | None, characters: int
    ) -> list[Charge] | None:
        """Charge the request to its client's limits (the charges made); None, having answered 429
        naming the limit it passes, when it is over one."""
        limits = self.policy.limits_of(key_digest)
        client = f"key {key_digest}" if key_digest else f"address {(scope.get('client') or ('?',))[0]}"
        who = "per key" if key_digest else "per address"
        self.seen += 1
        if self.seen % 1000 == 0:
            self.requests.forget_idle()
            self.chars.forget_idle()
        wait, by_chars = self.chars.charge(client, characters, limits.chars)
        named = f"{limits.chars} characters per minute {who}"
        by_requests = None
        if wait is None:
            wait, by_requests = self.requests.charge(client, 1, limits.requests)
            named = f"{limits.requests} requests per minute {who}"
            if wait is not None and by_chars is not None:  # give the characters back
                by_chars.give_back()
        if wait is None:
            return [charge for charge in (by_chars, by_requests) if charge is not None]
        message = f"Slowdown: {named}"
        response = error_response(429, message, [message])
        response.headers["Retry-After"] = str(max(1, round(wait + 0.5)))
        await response(scope, receive, send)
        return None
