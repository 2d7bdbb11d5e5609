"""sidecar/sources/sockets.py: whose a TCP socket is, from the kernel's tables (real ones, and fake
tables under a fake /proc for the rows a test cannot make)."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

from hostfs.paths import HostPaths
from sidecar.sources import sockets

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _row(n: int, local: tuple[str, int], remote: tuple[str, int], state: str, uid: int) -> str:
    def hexed(addr: tuple[str, int]) -> str:
        return f"{sockets.kernel_hex(ipaddress.ip_address(addr[0]))}:{addr[1]:04X}"

    return f"{n:4}: {hexed(local)} {hexed(remote)} {state} 00000000:00000000 00:00000000 00000000 {uid:5} 0 {n} 1\n"


class _Tables:
    """The socket tables of a fake /proc at ``root``: ``host`` names it to the readers."""

    def __init__(self, root) -> None:
        (root / "net").mkdir()
        self.root = root
        self.host = HostPaths(procfs=str(root))

    def __call__(self, v4: str = "", v6: str = "") -> None:
        (self.root / "net" / "tcp").write_text(HEADER + v4)
        (self.root / "net" / "tcp6").write_text(HEADER + v6)


@pytest.fixture
def fake_tables(tmp_path) -> _Tables:
    return _Tables(tmp_path)


@pytest.fixture
def connected():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    yield client
    for s in (client, accepted, server):
        s.close()


def test_the_server_end_of_a_real_connection_names_its_user(connected):
    assert sockets.connection_server_uid(connected) == os.geteuid()
    ours = connected.getsockname()
    assert sockets.client_socket_uid(ours[0], ours[1], connected.getpeername()[1]) == os.geteuid()


def test_the_server_end_is_the_row_of_this_connection_only(connected, fake_tables):
    ours, theirs = connected.getsockname(), connected.getpeername()
    other_client = (ours[0], ours[1] + 1 if ours[1] < 65535 else ours[1] - 1)
    fake_tables(
        _row(0, theirs, ("0.0.0.0", 0), "0A", 0)  # the port's listener: not this connection's end
        + _row(1, theirs, other_client, "01", 0)  # another client's connection to the same port
        + _row(2, ours, theirs, "01", 0)  # our own end
        + _row(3, theirs, ours, "01", 65534)  # the server's end of this connection
    )
    assert sockets.connection_server_uid(connected, host=fake_tables.host) == 65534


def test_a_dual_stack_server_is_found_in_tcp6_and_time_wait_is_no_one(connected, fake_tables):
    ours, theirs = connected.getsockname(), connected.getpeername()
    mapped = lambda a: (f"::ffff:{a[0]}", a[1])  # noqa: E731
    fake_tables(v6=_row(0, mapped(theirs), mapped(ours), "01", 1234))
    assert sockets.connection_server_uid(connected, host=fake_tables.host) == 1234
    fake_tables(v6=_row(0, mapped(theirs), mapped(ours), sockets.TCP_TIME_WAIT, 0))
    assert sockets.connection_server_uid(connected, host=fake_tables.host) is None


def test_no_row_no_table_or_an_oversized_table_cannot_tell(connected, fake_tables, monkeypatch):
    fake_tables()
    assert sockets.connection_server_uid(connected, host=fake_tables.host) is None
    ours, theirs = connected.getsockname(), connected.getpeername()
    fake_tables(_row(0, theirs, ours, "01", 7) + "   1: garbage\n")
    assert sockets.connection_server_uid(connected, host=fake_tables.host) == 7
    monkeypatch.setattr(sockets, "MAX_TABLE_BYTES", 100)
    assert sockets.connection_server_uid(connected, host=fake_tables.host) is None
    assert sockets.client_socket_uid("not an address", 1, 2, host=fake_tables.host) is None


def test_a_client_socket_is_matched_by_its_address_and_our_port(fake_tables):
    fake_tables(
        _row(0, ("127.0.0.1", 40000), ("127.0.0.1", 8765), "01", 1000)
        + _row(1, ("127.0.0.1", 40001), ("127.0.0.1", 8765), sockets.TCP_TIME_WAIT, 0)
    )
    assert sockets.client_socket_uid("127.0.0.1", 40000, 8765, host=fake_tables.host) == 1000
    assert sockets.client_socket_uid("::ffff:127.0.0.1", 40000, 8765, host=fake_tables.host) == 1000
    assert sockets.client_socket_uid("127.0.0.1", 40000, 9000, host=fake_tables.host) is None
    assert sockets.client_socket_uid("127.0.0.1", 40001, 8765, host=fake_tables.host) is None
