"""The HTTP/1.1 wire format the health and metrics server speaks: listening sockets, request heads and
complete answers. Kept apart from ``health.py`` (the server loop) so each stays small."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from http import HTTPStatus

PLAIN = "text/plain; charset=utf-8"


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def listen(address: str) -> socket.socket:
    """A non-blocking listening socket; an IPv6 literal (``[::1]:10258``) gets an IPv6 socket."""
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:  # name the address: "Address already in use" alone says too little
        raise OSError(exc.errno, f"cannot listen on {address}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock


def response(status: int, content_type: str, body: bytes, *, head: bool = False, allow: str = "") -> bytes:
    """A complete HTTP/1.1 answer that closes the connection; ``head`` keeps the length, drops the body."""
    phrase = HTTPStatus(status).phrase
    lines = [
        f"HTTP/1.1 {int(status)} {phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    if allow:
        lines.append(f"Allow: {allow}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (b"" if head else body)


BUSY = response(HTTPStatus.SERVICE_UNAVAILABLE, PLAIN, b"too many connections\n")


@dataclass(frozen=True)
class Request:
    method: str
    path: str

    @property
    def head(self) -> bool:
        return self.method == "HEAD"


def parse_head(head: bytes) -> Request | bytes:
    """The request of a complete head, or the error answer to send instead."""
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        line = first.decode("ascii")
    except UnicodeDecodeError:
        return response(HTTPStatus.BAD_REQUEST, PLAIN, b"request line is not ASCII\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return response(HTTPStatus.BAD_REQUEST, PLAIN, b"malformed request line\n")
    method, target = parts[0], parts[1]
    if method not in ("GET", "HEAD"):
        return response(HTTPStatus.METHOD_NOT_ALLOWED, PLAIN, b"only GET and HEAD\n", allow="GET, HEAD")
    return Request(method, target.split("?", 1)[0])
