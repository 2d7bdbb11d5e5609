"""GET over HTTP from this process (Prometheus, a sidecar that `dsh-sidecar mcp --url` reads): the
one door for every HTTP answer the sidecar asks for.

Each exchange has:
- one deadline for all of it: connecting, sending and every read. A reply trickled a byte at a time
  ends at the deadline, not after one socket timeout per byte;
- its peer proved before a byte is sent: when the server's end of the connection is on this machine
  (its row in /proc/net/tcp{,6}, sources/sockets.py), its owner must be this process's user or root;
  a loopback address whose server end cannot be found is refused too. A header (the token) therefore
  never reaches a listener another local user bound, however briefly it holds the port: the check is
  on the connection that carries the request, after connecting, not on the port before;
- no redirect followed: a 3xx is an error that names where it pointed;
- a bounded head (MAX_HEAD_BYTES, MAX_HEADERS) and a body read as it streams, up to the caller's
  `max_body_bytes` (a declared length over it is refused before the body is read).
Bodies may be length-delimited, chunked or end with the connection. JSON is parsed by `parse_json`,
whose nesting is bounded by the interpreter's recursion limit and said so, never a RecursionError.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import ssl
import time
import urllib.parse
from typing import Any

from hostfs.paths import HOST, HostPaths
from sidecar.common.http_answer import HttpAnswer, HttpError
from sidecar.sources.sockets import connection_server_uid

MAX_HEAD_BYTES = 64 * 1024  # status line and headers
MAX_HEADERS = 100
RECV_BYTES = 64 * 1024
ROOT_UID = 0
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def get(
    url: str,
    *,
    timeout_s: float,
    max_body_bytes: int,
    headers: dict[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    trusted_uids: frozenset[int] = frozenset(),
    host: HostPaths = HOST,
) -> HttpAnswer:
    """GET `url` (http or https) within `timeout_s` in all; HttpError when there is no answer to use.
    Any status that is not a redirect is an answer: the caller reads 4xx and 5xx bodies itself.
    `trusted_uids`: users besides ours and root whose local server may be asked (a Prometheus run
    by its own system user). Over https with a checked certificate the certificate names the
    server, so any local user's server that presents a valid one for the host is asked too. `host`:
    whose /proc holds the socket tables that say who serves a local address (hostfs.paths)."""
    deadline = time.monotonic() + timeout_s
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError("malformed", f"not an http(s) URL: {url[:200]!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise HttpError("malformed", f"not a port in {url[:200]!r}") from None
    name = parts.hostname
    sock = _connect(name, port, deadline)
    try:
        # a certificate names the server only where it is checked (not with CERT_NONE)
        verified = parts.scheme == "https" and (ssl_context is None or ssl_context.verify_mode != ssl.CERT_NONE)
        server_uid = _prove_peer(sock, name, port, trusted_uids, tls=verified, paths=host)
        if parts.scheme == "https":
            sock = _wrap_tls(sock, name, deadline, ssl_context)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        _send(sock, _request(name, port, path, headers or {}), deadline)
        reader = _Reader(sock, deadline)
        status, head = _read_head(reader)
        if 300 <= status < 400:
            where = head.get("location", "")[:200]
            raise HttpError("redirect", f"{url[:200]} redirects (HTTP {status}) to {where!r}", location=where)
        body = b"" if status in (204, 304) else _read_body(reader, head, max_body_bytes)
        return HttpAnswer(status, head.get("content-type", ""), body, server_uid)
    finally:
        sock.close()


def parse_json(body: bytes) -> Any:
    """The JSON value of `body`; ValueError (saying why) for what is not JSON or nests deeper than
    the interpreter's recursion limit (a Prometheus or sidecar answer nests 6 levels)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("the answer nests deeper than this reader follows") from None
    except UnicodeDecodeError:
        raise ValueError("the answer is not UTF-8 text") from None


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HttpError("timeout", "no complete answer within the time allowed")
    return left


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    try:
        return socket.create_connection((host, port), timeout=_remaining(deadline))
    except HttpError:
        raise
    except TimeoutError:
        raise HttpError("timeout", f"{host}:{port} did not accept a connection in time") from None
    except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA cannot encode, no strerror
        why = (exc.strerror if isinstance(exc, OSError) else None) or exc
        raise HttpError("unreachable", f"cannot connect to {host}:{port} ({why})") from None


def _is_loopback(host: str, sock: socket.socket) -> bool:
    if host.lower().rstrip(".") in _LOOPBACK_NAMES:
        return True
    try:
        peer = ipaddress.ip_address(sock.getpeername()[0].split("%", 1)[0])
    except (OSError, ValueError):
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped
    return peer.is_loopback


def _prove_peer(
    sock: socket.socket, host: str, port: int, trusted: frozenset[int], tls: bool, paths: HostPaths
) -> int | None:
    """Nothing is sent unless the server's end of this very connection is ours, root's or a trusted
    user's (or on another host, or proved by TLS): its uid, None for another host. The row of an
    accepted connection carries its listener's uid from the SYN on."""
    uid = connection_server_uid(sock, host=paths)
    if uid is None and not _is_loopback(host, sock):
        return None  # the server is on another host: no table of ours lists its socket
    if uid is not None and (uid in (os.geteuid(), ROOT_UID) or uid in trusted or tls):
        return uid
    who = "cannot tell which user serves it" if uid is None else f"it is served by another user (uid {uid})"
    raise HttpError(
        "peer",
        f"refused to send a request to {host}:{port}: {who}, not by you or root, so nothing was sent there",
        peer_uid=uid,
    )


def _wrap_tls(sock: socket.socket, host: str, deadline: float, context: ssl.SSLContext | None) -> socket.socket:
    sock.settimeout(_remaining(deadline))
    try:
        return (context or ssl.create_default_context()).wrap_socket(sock, server_hostname=host)
    except TimeoutError:
        raise HttpError("timeout", f"{host}: the TLS handshake did not complete in time") from None
    except (OSError, ssl.SSLError) as exc:
        raise HttpError("unreachable", f"{host}: TLS failed ({exc})") from None


def _request(host: str, port: int, path: str, headers: dict[str, str]) -> bytes:
    name = f"[{host}]" if ":" in host else host
    lines = [f"GET {path} HTTP/1.1", f"Host: {name}:{port}", "Connection: close", "Accept-Encoding: identity"]
    for key, value in headers.items():
        if any(c in f"{key}{value}" for c in "\r\n\0"):
            raise HttpError("malformed", f"header {key[:40]!r} holds a line break")
        lines.append(f"{key}: {value}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise HttpError("malformed", "a request header is not Latin-1 text") from None


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    try:
        sock.settimeout(_remaining(deadline))
        sock.sendall(data)
    except TimeoutError:
        raise HttpError("timeout", "the request could not be sent in time") from None
    except OSError as exc:
        raise HttpError("unreachable", f"the connection closed while sending ({exc.strerror or exc})") from None


class _Reader:
    """Reads from one socket within one deadline, through a buffer."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline, self.buf, self.eof = sock, deadline, bytearray(), False

    def fill(self) -> bool:
        """One more read into the buffer; False at the end of the stream."""
        if self.eof:
            return False
        try:
            self.sock.settimeout(_remaining(self.deadline))
            chunk = self.sock.recv(RECV_BYTES)
        except TimeoutError:
            raise HttpError("timeout", "no complete answer within the time allowed") from None
        except OSError as exc:
            raise HttpError("unreachable", f"the connection broke ({exc.strerror or exc})") from None
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def until(self, marker: bytes, limit: int) -> bytes:
        """The bytes up to and without `marker` (consumed), at most `limit` of them."""
        while True:
            at = self.buf.find(marker)
            if at >= 0:
                out = bytes(self.buf[:at])
                del self.buf[: at + len(marker)]
                return out
            if len(self.buf) > limit:
                raise HttpError("malformed", f"a line of the answer is over {limit} bytes")
            if not self.fill():
                raise HttpError("malformed", "the answer ended in the middle")

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self.fill():
                raise HttpError("malformed", "the answer ended before its declared length")
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def rest(self, limit: int) -> bytes:
        while len(self.buf) <= limit and self.fill():
            pass
        if len(self.buf) > limit:
            raise _too_large(limit)
        return bytes(self.buf)


def _too_large(limit: int) -> HttpError:
    return HttpError("too-large", f"the answer is over {limit} bytes")


def _read_head(reader: _Reader) -> tuple[int, dict[str, str]]:
    head = reader.until(b"\r\n\r\n", MAX_HEAD_BYTES).decode("latin-1").split("\r\n")
    words = head[0].split(" ", 2)
    if len(words) < 2 or not words[0].startswith("HTTP/1.") or not words[1].isdigit() or len(words[1]) != 3:
        raise HttpError("malformed", "the answer is not HTTP")
    if len(head) - 1 > MAX_HEADERS:
        raise HttpError("malformed", f"the answer has over {MAX_HEADERS} headers")
    fields: dict[str, str] = {}
    for line in head[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return int(words[1]), fields


def _read_body(reader: _Reader, head: dict[str, str], limit: int) -> bytes:
    if "chunked" in head.get("transfer-encoding", "").lower():
        return _read_chunked(reader, limit)
    declared = head.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError("malformed", "the answer's Content-Length is not a number")
        if int(declared) > limit:
            raise _too_large(limit)
        return reader.exactly(int(declared))
    return reader.rest(limit)


def _read_chunked(reader: _Reader, limit: int) -> bytes:
    body = bytearray()
    while True:
        size_text = reader.until(b"\r\n", 1024).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HttpError("malformed", "a chunk of the answer has no size") from None
        if size == 0:
            return bytes(body)
        if len(body) + size > limit:
            raise _too_large(limit)
        body += reader.exactly(size)
        reader.exactly(2)  # the chunk's CRLF
