"""Binding the address `attn-mt serve` and `attn-mt lab` listen on."""

from __future__ import annotations

import socket

from attn_mt.errors import UserError


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free port the system picks)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(1024)  # a burst of clients waits for accept() instead of being reset
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock
