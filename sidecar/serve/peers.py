"""Who is at the other end of a loopback connection, and whether they may read this sidecar.

Any local user can connect to a loopback port. A sidecar served without a token shows its user's
commands, working directories and model names, so it answers only connections whose client socket
belongs to its own uid or to root. The kernel's socket tables say whose a socket is; the server is
handed that lookup (`SocketOwner`: sidecar/sources/sockets.py client_socket_uid, given by the CLI)
and asks it once per request, with waitress's REMOTE_ADDR, REMOTE_PORT and SERVER_PORT.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typeshed's (wsgiref.types is 3.11's)
    from _typeshed.wsgi import WSGIEnvironment

ROOT_UID = 0
CALLER_UID_KEY = "dsh.caller_uid"  # the WSGI environ key where a request's peer uid is cached
# (client address, client port, our port) -> the uid owning that client socket, or None
SocketOwner = Callable[[str, int, int], "int | None"]


def caller_uid(environ: WSGIEnvironment, socket_owner: SocketOwner | None) -> int | None:
    """The uid of the request's client socket, looked up once per request; None when it cannot be
    told (no lookup given, a socket gone, an address not in the tables)."""
    if CALLER_UID_KEY in environ:
        cached: int | None = environ[CALLER_UID_KEY]  # this function's own entry
        return cached
    uid = None
    try:
        addr = environ.get("REMOTE_ADDR") or ""
        port, server_port = int(environ.get("REMOTE_PORT") or 0), int(environ.get("SERVER_PORT") or 0)
        if socket_owner is not None and addr and port and server_port:
            uid = socket_owner(addr, port, server_port)
    except (TypeError, ValueError):
        uid = None
    environ[CALLER_UID_KEY] = uid
    return uid


@dataclass(frozen=True)
class OwnerOnly:
    """A sidecar without a token: only its owner's and root's connections are served."""

    owner_uid: int
    socket_owner: SocketOwner

    def refusal(self, environ: WSGIEnvironment) -> str | None:
        """None when the caller may read this sidecar, else why not (the 403's body)."""
        uid = caller_uid(environ, self.socket_owner)
        if uid is not None and uid in (self.owner_uid, ROOT_UID):
            return None
        who = "cannot tell which user this connection comes from" if uid is None else (
            f"this connection comes from {_user(uid)}"
        )
        return (
            f"{who}: this sidecar has no token, so it serves only its own user ({_user(self.owner_uid)}) "
            "and root. Start your own `dsh-sidecar` to see your jobs, or ask its user to restart it "
            "with --token TOKEN and give you the token."
        )


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def own_uid() -> int:
    """The uid this sidecar's sockets and files carry (the effective one)."""
    return os.geteuid()
