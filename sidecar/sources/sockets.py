"""Whose a TCP socket of this machine is: the kernel's socket tables, /proc/net/tcp and tcp6.

Every user can read both tables; each row is one socket of this network namespace with its local and
remote address and the uid of the process that made it (column 7). That uid is fixed when the socket
is made: an accepted connection carries its listener's, from the SYN on, whether or not the server
has called accept() yet. So the server's end of a connection we just made names the user who serves
it, and no later bind of the port by anyone else can change that row.

Two questions are asked here:
- `connection_server_uid(sock)`: who serves the connection `sock` (ours, already connected), before
  a token goes over it. None when no row of this machine is its server end: the peer is another host
  (or the tables cannot be read).
- `client_socket_uid(...)`: who made the client socket of a request a server of ours received.

A TIME_WAIT row is uid 0 whoever made the socket, so it is never taken as root's. A table is read
at most MAX_TABLE_BYTES: a machine with more sockets than that gets "cannot tell" (refused, safe)
rather than an unbounded read per request. The tables are those of ``host``'s /proc (hostfs.paths:
--path.procfs), the host's own by default.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterator

from hostfs.paths import HOST, HostPaths

MAX_TABLE_BYTES = 64 << 20  # ~450,000 rows of 150 bytes
TCP_TIME_WAIT = "06"
_TABLES = {4: "tcp", 6: "tcp6"}


def kernel_hex(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """An address as the tables print it: each 32-bit word in the host's byte order, %08X."""
    packed = ip.packed
    return "".join(f"{w:08X}" for w in struct.unpack(f"={len(packed) // 4}I", packed))


def _forms(address: str, port: int) -> list[tuple[int, str]]:
    """(table family, ADDR:PORT as the table prints it) for each form `address` may take there: an
    IPv4 peer of a dual-stack IPv6 socket is listed in tcp6 as ::ffff:a.b.c.d, and Python and Node
    show such a peer as ::ffff:a.b.c.d too."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return []
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    hex_port = f":{port:04X}"
    forms: list[tuple[int, str]] = [(ip.version, kernel_hex(ip) + hex_port)]
    if ip.version == 4:
        forms.append((6, kernel_hex(ipaddress.IPv6Address(f"::ffff:{ip}")) + hex_port))
    return forms


def _rows(family: int, host: HostPaths) -> Iterator[list[str]]:
    """The split rows of one table (none when it cannot be read or is over MAX_TABLE_BYTES)."""
    try:
        with open(host.proc_path("net", _TABLES[family]), "rb") as f:
            raw = f.read(MAX_TABLE_BYTES + 1)
    except OSError:
        return
    if len(raw) > MAX_TABLE_BYTES:
        return
    for line in raw.decode("latin-1").splitlines()[1:]:
        fields = line.split()
        # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        if len(fields) >= 8:
            yield fields


def _uid_of(fields: list[str]) -> int | None:
    if fields[3] == TCP_TIME_WAIT:
        return None
    try:
        return int(fields[7])
    except ValueError:
        return None


def _match(
    local_forms: list[tuple[int, str]], remote_forms: list[tuple[int, str]] | None, remote_port: str, host: HostPaths
) -> int | None:
    """The uid of the first row, in the tables the local forms name, whose local end is one of
    `local_forms` and whose remote end is one of `remote_forms` (None: any address at `remote_port`)."""
    for family in sorted({fam for fam, _ in local_forms}):
        wanted_local = {text for fam, text in local_forms if fam == family}
        wanted_remote = None if remote_forms is None else {text for fam, text in remote_forms if fam == family}
        for fields in _rows(family, host):
            if fields[1] not in wanted_local:
                continue
            if wanted_remote is not None and fields[2] not in wanted_remote:
                continue
            if wanted_remote is None and not fields[2].endswith(remote_port):
                continue
            return _uid_of(fields)
    return None


def connection_server_uid(sock: socket.socket, *, host: HostPaths = HOST) -> int | None:
    """The uid serving the connected socket `sock` (a client socket of ours): the row whose local
    end is our peer's address and whose remote end is our own. None where no such row is in this
    machine's tables (the server is on another host) or a table cannot be read."""
    try:
        ours = sock.getsockname()
        theirs = sock.getpeername()
    except OSError:
        return None
    server = _forms(theirs[0], theirs[1])
    client = _forms(ours[0], ours[1])
    return _match(server, client, "", host) if server and client else None


def client_socket_uid(client_ip: str, client_port: int, server_port: int, *, host: HostPaths = HOST) -> int | None:
    """The uid owning the client socket (client_ip, client_port) connected to our `server_port`;
    None when no live row says so (gone, unknown address, a table too large)."""
    forms = _forms(client_ip, client_port)
    return _match(forms, None, f":{server_port:04X}", host) if forms else None
