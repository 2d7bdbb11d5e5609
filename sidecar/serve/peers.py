"""Who is at the other end of a loopback connection, and whether they may read this sidecar.

Any local user can connect to a loopback port. A sidecar served without a token shows its user's
commands, working directories and model names, so it answers only connections whose client socket
belongs to its own uid or to root. The kernel lists every TCP socket of this network namespace with
its owner's uid in /proc/net/tcp and /proc/net/tcp6 (readable by every user): the client's socket
is the row whose local address is the request's REMOTE_ADDR:REMOTE_PORT and whose remote port is
ours. A live socket keeps the uid of the process that made it, so a client that still waits for its
answer cannot hide behind another uid; a TIME_WAIT row (uid 0, whoever made it) is never trusted.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass

from probe_wire.procfs import proc_path

# A lookup reads at most this many rows per table: a machine with more open sockets than that is
# refused (safe) rather than costing each request an unbounded read.
MAX_TABLE_ROWS = 1 << 20
TCP_TIME_WAIT = "06"
ROOT_UID = 0
CALLER_UID_KEY = "dsh.caller_uid"  # the WSGI environ key where a request's peer uid is cached


def _kernel_hex(address: str) -> tuple[str, str] | None:
    """(table, address as /proc/net/tcp{,6} prints it): each 32-bit word in the host's byte order,
    %08X. An IPv4 client of an IPv6 socket shows in tcp6 as ::ffff:a.b.c.d; the caller tries both."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    packed = ip.packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return (proc_path("net", "tcp" if ip.version == 4 else "tcp6"), "".join(f"{w:08X}" for w in words))


def socket_owner_uid(client_ip: str, client_port: int, server_port: int) -> int | None:
    """The uid owning the client socket (client_ip, client_port) connected to our server_port;
    None when no live row says so (gone, unknown address, a table too large)."""
    wanted = []
    first = _kernel_hex(client_ip)
    if first is None:
        return None
    wanted.append(first)
    ip = ipaddress.ip_address(client_ip.split("%", 1)[0])
    if ip.version == 4:
        wanted.append(_kernel_hex(f"::ffff:{ip}"))  # type: ignore[arg-type]
    local = f":{client_port:04X}"
    remote_port = f":{server_port:04X}"
    for table, hex_ip in wanted:  # type: ignore[misc]
        uid = _find_row(table, hex_ip + local, remote_port)
        if uid is not None:
            return uid
    return None


def _find_row(table: str, local: str, remote_port: str) -> int | None:
    try:
        with open(table, encoding="ascii", errors="replace") as f:
            next(f, None)  # the header line
            for n, line in enumerate(f):
                if n >= MAX_TABLE_ROWS:
                    return None
                fields = line.split()
                # sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
                if len(fields) < 8 or fields[1] != local or not fields[2].endswith(remote_port):
                    continue
                if fields[3] == TCP_TIME_WAIT:
                    return None
                return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def caller_uid(environ: dict) -> int | None:
    """The uid of the request's client socket (waitress gives REMOTE_ADDR, REMOTE_PORT and
    SERVER_PORT), looked up once per request; None when it cannot be told."""
    if CALLER_UID_KEY in environ:
        return environ[CALLER_UID_KEY]
    uid = None
    try:
        addr = environ.get("REMOTE_ADDR") or ""
        port, server_port = int(environ.get("REMOTE_PORT") or 0), int(environ.get("SERVER_PORT") or 0)
        if addr and port and server_port:
            uid = socket_owner_uid(addr, port, server_port)
    except (TypeError, ValueError):
        uid = None
    environ[CALLER_UID_KEY] = uid
    return uid


@dataclass(frozen=True)
class OwnerOnly:
    """A sidecar without a token: only its owner's and root's connections are served."""

    owner_uid: int

    def refusal(self, environ: dict) -> str | None:
        """None when the caller may read this sidecar, else why not (the 403's body)."""
        uid = caller_uid(environ)
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
