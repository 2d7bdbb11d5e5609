"""What an HTTP GET of the sidecar's gives back (sidecar/sources/http_get.py asks): an answer, or
an HttpError saying which kind of failure. Shared vocabulary: the MCP server (sidecar/serve) words
these errors for an agent, and it never imports the sources that raise them."""

from __future__ import annotations

from dataclasses import dataclass


class HttpError(Exception):
    """No usable answer. `kind` says what went wrong for the caller's own wording: "peer" (the
    server is another user's: nothing was sent), "unreachable", "timeout", "too-large",
    "redirect", "malformed"; the message says it in a sentence."""

    def __init__(self, kind: str, message: str, *, peer_uid: int | None = None, location: str = ""):
        super().__init__(message)
        self.kind = kind
        self.peer_uid = peer_uid  # kind "peer": whose the listener is (None: cannot tell)
        self.location = location  # kind "redirect": where it pointed


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    content_type: str
    body: bytes
    server_uid: int | None = None  # whose process served it on this machine; None: another host
