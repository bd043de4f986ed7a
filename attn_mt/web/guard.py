"""What a web page the user visits may make `attn-mt serve` or `attn-mt lab` do.

Any page can send a request to 127.0.0.1; three checks keep it from using the servers against
their user:

1. The Host header must name the address the server listens on (`HostPolicy`): a page on an
   attacker's domain that re-resolves its name to 127.0.0.1 (DNS rebinding) sends its own name
   and is refused with 400. Listening on every address (`--host 0.0.0.0`) allows the machine's
   IP addresses too, which no rebinding page can send; `--allowed-hosts` adds names (a reverse
   proxy's), or `*` turns the check off.
2. A POST body must be declared `application/json` (or, on `serve`'s `POST /translate` alone,
   the form LibreTranslate's clients send): any other type is refused with 415. A page can
   post `text/plain` or a form to another site without asking, but JSON needs the browser's
   CORS preflight, which the third check answers.
3. CORS (`CorsPolicy`, `serve` only): LibreTranslate's routes (`POST /translate` with
   LibreTranslate's body, `GET /languages`, `POST /detect`, ...) answer every origin
   `--cors-origins` allows, `*` by default as LibreTranslate does; the rest of serve's API answers
   only origins named there explicitly. A preflight is answered only for a route and method a
   page of that origin may use, and only for the Content-Type header; /translate's, which cannot
   see whether the JSON that follows is LibreTranslate's or serve's own, only for origins named
   explicitly (other pages send LibreTranslate's form, which needs no preflight). A request from
   another origin that may not use the route (a page's form or JSON sent to serve's own API) is
   refused with 403 before it is read, so a page cannot make the server decode even an answer it
   would never see. The lab answers no other origin.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attn_mt.errors import UserError
from attn_mt.web.http import error_response, read_body, replaying

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
EVERY_ADDRESS = frozenset({"0.0.0.0", "::", ""})
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"
FORM_TYPES = (FORM_TYPE, "multipart/form-data")  # LibreTranslate's web page posts the second
CORS_HEADERS = "Content-Type"  # the one request header a page needs (for a JSON body)
CORS_MAX_AGE = str(24 * 60 * 60)  # seconds a browser may keep a preflight's answer


def split_names(value: str | None) -> list[str]:
    """A comma-separated option (`--allowed-hosts a,b`) as its names, blanks dropped."""
    return [name.strip() for name in (value or "").split(",") if name.strip()]


def is_ip(name: str) -> bool:
    """Whether `name` is an IPv4 or IPv6 address (written without brackets)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def shown_host(name: str, port: int | None) -> str:
    """`name:port` as a Host header writes it ([::1]:8000)."""
    written = f"[{name}]" if ":" in name else name
    return written if port is None else f"{written}:{port}"


@dataclass(frozen=True)
class HostPolicy:
    """The Host headers a server answers: its own names at its port, and names the user added."""

    names: frozenset[str]  # lower case, IPv6 without brackets; at `port`
    port: int | None  # the port those names must come with; None: any
    extra: frozenset[str] = frozenset()  # --allowed-hosts names, at any port
    any_ip: bool = False  # listening on every address: any IP address is one of the machine's
    any_host: bool = False  # --allowed-hosts '*': no check

    def allows(self, header: str | None) -> bool:
        """Whether a request's Host header names this server."""
        if self.any_host:
            return True
        if not header or any(c in header for c in "@/\\?# "):  # a host[:port], nothing else
            return False
        try:
            parts = urlsplit(f"//{header}")
            name, port = (parts.hostname or "").rstrip("."), parts.port
        except ValueError:  # a port that is not a number, an unclosed bracket
            return False
        if name in self.extra or (self.any_ip and is_ip(name)):
            return True
        return name in self.names and (self.port is None or (port or 80) == self.port)

    def expected(self) -> str:
        """The Host headers allowed, for the refusal's message."""
        shown = sorted(shown_host(name, self.port) for name in self.names) + sorted(self.extra)
        return ", ".join(shown) + (" or any IP address of this machine" if self.any_ip else "")


def host_policy(host: str, port: int, allowed_hosts: list[str]) -> HostPolicy:
    """The Host headers a server listening on host:port answers, with `--allowed-hosts` added."""
    extra = frozenset(name.lower().strip("[]") for name in allowed_hosts)
    if "*" in extra:
        return HostPolicy(frozenset(), None, any_host=True)
    name = host.lower().strip("[]")
    if name in EVERY_ADDRESS:
        return HostPolicy(LOOPBACK_NAMES, None, extra, any_ip=True)
    loopback = name in LOOPBACK_NAMES or (is_ip(name) and ipaddress.ip_address(name).is_loopback)
    return HostPolicy(LOOPBACK_NAMES | {name} if loopback else frozenset({name}), port, extra)


@dataclass(frozen=True)
class CorsPolicy:
    """Which web pages' origins may read serve's answers (see the module docstring)."""

    origins: frozenset[str] = field(default_factory=lambda: frozenset({"*"}))  # "*", or origins

    def allowed(self, origin: str, libretranslate: bool) -> str | None:
        """The Access-Control-Allow-Origin for a request from `origin`; None if it gets none."""
        if origin in self.origins:
            return origin
        if libretranslate and "*" in self.origins:
            return "*"
        return None


def cors_policy(cors_origins: str | None) -> CorsPolicy:
    """`--cors-origins`: `*` (the default), `none`, or comma-separated origins such as https://a.org;
    UserError for anything else, before the server loads its run."""
    names = split_names("*" if cors_origins is None else cors_origins)
    if names == ["none"]:
        return CorsPolicy(frozenset())
    origins = frozenset(name.rstrip("/") for name in names)
    for origin in sorted(origins - {"*"}):
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
            raise UserError(
                f"--cors-origins: {origin} is not an origin such as https://app.example.org "
                "(or '*', or 'none')"
            )
    return CorsPolicy(origins)


def media_type(scope: Scope) -> str:
    """The request's Content-Type without parameters, in lower case ('' if none)."""
    raw = dict(scope["headers"]).get(b"content-type", b"")
    return raw.decode("latin-1").split(";")[0].strip().lower()


def header(scope: Scope, name: bytes) -> str | None:
    """One request header as text, or None."""
    value = dict(scope["headers"]).get(name)
    return None if value is None else value.decode("latin-1")


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    """Answer with the servers' one error shape."""
    await error_response(status, message, [message])(scope, receive, send)


class Guard:
    """ASGI middleware for the three checks of the module docstring, run before anything else.

    `takes_body`: whether a POST path reads a body (any other POST is the app's to refuse, 405);
    `form_paths`: the POST paths that also take a form body; `libretranslate_paths`: the paths
    whose answers carry CORS headers for every allowed origin; `shared_paths`: those of them that
    take serve's own body too (/translate): their preflight, which cannot see the body, is answered
    only for origins named explicitly, so that a page of any other origin can send them only what
    needs no preflight (LibreTranslate's form); `cors`: None for no CORS at all.
    """

    def __init__(
        self,
        app: ASGIApp,
        hosts: HostPolicy,
        takes_body: Callable[[str], bool],
        cors: CorsPolicy | None = None,
        form_paths: frozenset[str] = frozenset(),
        libretranslate_paths: frozenset[str] = frozenset(),
        shared_paths: frozenset[str] = frozenset(),
        max_peek_bytes: int = 0,
    ):
        self.app, self.hosts, self.cors, self.takes_body = app, hosts, cors, takes_body
        self.form_paths, self.libretranslate_paths = form_paths, libretranslate_paths
        self.shared_paths, self.max_peek_bytes = shared_paths, max_peek_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = header(scope, b"host")
        if not self.hosts.allows(host):
            await refuse(
                scope,
                receive,
                send,
                400,
                f"the Host header {host!r} does not name this server (it answers {self.hosts.expected()}); "
                "start it with --allowed-hosts NAME to add a name",
            )
            return
        method, path, origin = scope["method"], scope["path"], header(scope, b"origin")
        if method == "OPTIONS" and origin and header(scope, b"access-control-request-method"):
            await self.preflight(scope, receive, send, origin)
            return
        if method == "POST" and self.takes_body(path):
            kind = media_type(scope)
            form = kind in FORM_TYPES or (not kind and not has_body(scope))  # or fields in the URL query
            if kind != JSON_TYPE and not (form and path in self.form_paths):
                allowed = JSON_TYPE + (
                    f" (or a form, {' or '.join(FORM_TYPES)})" if path in self.form_paths else ""
                )
                await refuse(
                    scope,
                    receive,
                    send,
                    415,
                    f"the body must be sent as {allowed}, not {kind or 'without a Content-Type'}",
                )
                return
        if self.cors is None or not origin:
            await self.app(scope, receive, send)
            return
        receive, libretranslate = await self.speaks_libretranslate(scope, receive)
        allow = self.cors.allowed(origin.rstrip("/"), libretranslate)
        if (
            allow is None
            and method not in ("GET", "HEAD")
            and not same_origin(origin, header(scope, b"host"))
        ):
            await refuse(
                scope,
                receive,
                send,
                403,
                f"cross-origin requests from {origin} to {path} are not allowed "
                "(serve --cors-origins names the origins allowed)",
            )
            return
        await self.app(scope, receive, with_cors(send, allow))

    async def speaks_libretranslate(self, scope: Scope, receive: Receive) -> tuple[Receive, bool]:
        """Whether the request is LibreTranslate's: one to its paths, except a JSON object with
        `sentences` and no `q` posted to /translate, attn-mt's own body (the body read here, within
        `max_peek_bytes`, is handed on unchanged)."""
        if not self.is_libretranslate_path(scope["path"]):
            return receive, False
        if (
            scope["method"] != "POST"
            or scope["path"] not in self.shared_paths
            or media_type(scope) != JSON_TYPE
        ):
            return receive, True
        declared = header(scope, b"content-length") or ""
        if not declared.isdigit() or int(declared) > self.max_peek_bytes:
            return receive, False  # refused unread further in (413), or sent in chunks
        body = await read_body(receive, self.max_peek_bytes)
        if body is None:
            return receive, False
        try:
            found = json.loads(body)
        except (ValueError, RecursionError):
            return replaying(body, receive), True  # LibreTranslate's 400 comes back to the page
        own = isinstance(found, dict) and "sentences" in found and "q" not in found
        return replaying(body, receive), not own

    def is_libretranslate_path(self, path: str) -> bool:
        """Whether `path` is one of LibreTranslate's routes (an entry ending in / covers a folder)."""
        return path in self.libretranslate_paths or any(
            path.startswith(entry) for entry in self.libretranslate_paths if entry.endswith("/")
        )

    async def preflight(self, scope: Scope, receive: Receive, send: Send, origin: str) -> None:
        """A browser's CORS preflight: 204 with what the origin may send, or 403 for a route, method or
        header it may not use."""
        path = scope["path"]
        method = (header(scope, b"access-control-request-method") or "").strip().upper()
        asked = {
            h.strip().lower() for h in (header(scope, b"access-control-request-headers") or "").split(",")
        }
        methods = self.methods(path)
        every_origin = self.is_libretranslate_path(path) and path not in self.shared_paths
        allow = None if self.cors is None else self.cors.allowed(origin.rstrip("/"), every_origin)
        refusal = None
        if allow is None:
            refusal = f"cross-origin requests from {origin} to {path} are not allowed" + (
                "" if self.cors is None else " (serve --cors-origins names the origins allowed)"
            )
        elif method not in methods:
            refusal = (
                f"{path} takes no cross-origin {method or 'request'} (only {', '.join(methods) or 'none'})"
            )
        elif extra := sorted(asked - {"", CORS_HEADERS.lower()}):
            refusal = (
                f"a cross-origin request may send only the {CORS_HEADERS} header, not {', '.join(extra)}"
            )
        if refusal is not None:
            await refuse(scope, receive, send, 403, refusal)
            return
        headers = [
            (b"access-control-allow-origin", allow.encode("latin-1")),
            (b"access-control-allow-methods", ", ".join(methods).encode()),
            (b"access-control-allow-headers", CORS_HEADERS.encode()),
            (b"access-control-max-age", CORS_MAX_AGE.encode()),
            (b"vary", b"Origin"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    def methods(self, path: str) -> tuple[str, ...]:
        """The methods a page may use on `path`: POST where it takes a body, GET elsewhere."""
        return ("POST",) if self.takes_body(path) or path in self.form_paths else ("GET",)


def has_body(scope: Scope) -> bool:
    """Whether the request declares a body (a Content-Length above 0, or one sent in chunks)."""
    declared = (header(scope, b"content-length") or "0").strip()
    return header(scope, b"transfer-encoding") is not None or declared != "0"


def same_origin(origin: str, host: str | None) -> bool:
    """Whether a page's origin is the server itself (the host:port the request was sent to)."""
    try:
        return host is not None and urlsplit(origin).netloc.lower() == host.lower()
    except ValueError:
        return False


def with_cors(send: Send, allow: str | None) -> Send:
    """A `send` that adds Access-Control-Allow-Origin (when `allow`) and Vary: Origin to the answer."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            if allow is not None:
                headers["access-control-allow-origin"] = allow
            headers.add_vary_header("Origin")
        await send(message)

    return sending
