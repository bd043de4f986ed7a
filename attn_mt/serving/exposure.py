"""Whether `attn-mt serve` may listen where it was asked to, and what it says at start when exposed.

A server on a loopback address answers this machine alone. On any other address (`--host
0.0.0.0`, a LAN address) anyone who reaches the port can make it decode, so it needs `--api-keys
FILE` (serving/access.py), or `--no-auth` said explicitly, which is then warned about loudly at
every start; either way a warning names the address and says to put a TLS reverse proxy in front
(serve speaks plain HTTP).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from attn_mt.errors import UserError
from attn_mt.serving.access import AccessPolicy, Limits, read_api_keys
from attn_mt.web.guard import LOOPBACK_NAMES


def is_loopback(host: str) -> bool:
    """Whether `--host` is this machine alone (localhost, 127.0.0.0/8, ::1)."""
    name = host.lower().strip("[]")
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def access_policy(
    host: str, api_keys: Path | None, no_auth: bool, req_limit: int | None, char_limit: int | None
) -> AccessPolicy:
    """The keys and limits of serve's options; UserError for a non-loopback host with neither
    --api-keys nor --no-auth, for both at once, and for a limit below 1."""
    if api_keys is not None and no_auth:
        raise UserError("--api-keys and --no-auth contradict each other: give one")
    for name, value in (("--req-limit", req_limit), ("--char-limit", char_limit)):
        if value is not None and value < 1:
            raise UserError(f"{name} must be at least 1 (a minute's worth), got {value}")
    if api_keys is None and not no_auth and not is_loopback(host):
        raise UserError(
            f"--host {host} lets other machines reach the server: give --api-keys FILE (one key a line), "
            "or --no-auth to serve anyone who reaches the port"
        )
    keys = read_api_keys(api_keys) if api_keys is not None else None
    return AccessPolicy(keys, Limits(req_limit, char_limit))


def exposure_warnings(host: str, access: AccessPolicy) -> list[str]:
    """What serve prints at start about who can reach it (nothing on a loopback address)."""
    if is_loopback(host):
        return []
    said = [
        f"WARNING: listening on {host}, reachable from other machines, over plain HTTP: put a reverse "
        "proxy with TLS in front (docs/serving.md, 'In production')"
    ]
    if access.keys is None:
        said.append(
            "WARNING: --no-auth: ANYONE WHO REACHES THIS PORT CAN MAKE THE SERVER TRANSLATE, with no key"
            + ("" if access.limits.requests else " and no --req-limit")
        )
    return said
