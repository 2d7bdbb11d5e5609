"""The HTTP server: waitress, hardened against clients that hold connections without finishing.

Waitress parses requests in its event loop (slow clients cost no worker thread) but stops accepting
at `connection_limit` open connections and only closes a connection after `channel_timeout` seconds
*without a byte*. 100 clients trickling one header line every 5 s therefore locked every other
client out for good. Here:

- a request must be complete within REQUEST_DEADLINE_S of its first byte, however it trickles;
- idle keep-alive connections go after IDLE_TIMEOUT_S, a reader that takes no byte of its answer
  for as long goes too;
- at CONNECTION_LIMIT open connections a new one is still accepted and the connection that has
  waited longest without progress is closed instead, so no number of slow connections keeps a
  fresh client (whose request arrives whole, at once) from being served.

Memory stays bounded: at most CONNECTION_LIMIT (+1 while one is evicted) connections, each a few
KiB plus the answer it has not read yet.
"""

from __future__ import annotations

import resource
import socket
import time
from typing import TYPE_CHECKING, Any, cast

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

if TYPE_CHECKING:  # typeshed's (wsgiref.types is 3.11's)
    from _typeshed.wsgi import WSGIApplication

CONNECTION_LIMIT = 256
REQUEST_DEADLINE_S = 10.0
IDLE_TIMEOUT_S = 30
CLEANUP_INTERVAL_S = 1
THREADS = 8
# Descriptors the process wants: the connections, /proc and segment reads, NVML, the log.
WANTED_NOFILE = 4 * CONNECTION_LIMIT


class _Channel(HTTPChannel):
    request_started: float | None = None  # when the first byte of the request being read came

    def received(self, data: bytes) -> bool:
        reading_before = self.request is not None
        result = super().received(data)
        if self.request is None:
            self.request_started = None
        elif not reading_before:
            self.request_started = time.time()
        return result

    def stalled_since(self) -> float:
        """Since when this connection has made no progress a client controls: the start of a
        request still being read, else its last byte in or out."""
        return self.request_started if self.request_started is not None else self.last_activity


class SidecarWSGIServer(TcpWSGIServer):
    channel_class = _Channel
    effective_port: int  # set by waitress's BaseWSGIServer.__init__ (getsockname); types-waitress lacks it

    def readable(self) -> bool:
        now = time.time()
        if now >= self.next_channel_cleanup:
            # types-waitress says int; waitress itself stores time.time() + the interval, as here.
            self.next_channel_cleanup = now + self.adj.cleanup_interval  # type: ignore[assignment]
            self.maintenance(now)
        return bool(self.accepting)  # never stop accepting: handle_accept evicts instead

    def handle_accept(self) -> None:
        super().handle_accept()
        open_channels = [c for c in _channels(self).values() if not c.will_close]
        if len(open_channels) > self.adj.connection_limit:
            victim = min(open_channels, key=_eviction_key)
            victim.will_close = True

    def maintenance(self, now: float) -> None:
        # Idle connections (no request) after channel_timeout. types-waitress says `now` is an int;
        # waitress passes time.time(), as readable() does here.
        super().maintenance(now)  # type: ignore[arg-type]
        for channel in list(_channels(self).values()):
            started = getattr(channel, "request_started", None)
            if started is not None and now - started > REQUEST_DEADLINE_S:
                channel.will_close = True  # a request trickling in for too long
            elif channel.total_outbufs_len and now - channel.last_activity > self.adj.channel_timeout:
                channel.will_close = True  # a reader that takes nothing of its answer


def _channels(server: TcpWSGIServer) -> dict[int, HTTPChannel]:
    """The server's connections by descriptor (types-waitress types that map as one channel)."""
    return cast("dict[int, HTTPChannel]", server.active_channels)


def _eviction_key(channel: HTTPChannel) -> tuple[int, float]:
    """Connections with no request being served go first, oldest stall first."""
    serving = bool(channel.requests) and not channel.total_outbufs_len
    stalled = channel.stalled_since() if isinstance(channel, _Channel) else channel.last_activity
    return (1 if serving else 0, stalled)


def raise_nofile_limit() -> None:
    """Up to WANTED_NOFILE descriptors (within the hard limit): at the usual soft limit of 1024 an
    accept() failing with EMFILE would spin the event loop."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = WANTED_NOFILE if hard == resource.RLIM_INFINITY else min(WANTED_NOFILE, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening, the address waitress would bind (the first that
    host:port resolves to). Made before anything else starts: `dsh-sidecar run` starts its job only
    once the port is the sidecar's. ValueError: a host waitress cannot use; OSError: cannot bind."""
    adj = Adjustments(host=host, port=port)
    # (family, type, protocol, address) of each address to listen on: types-waitress says a string.
    family, socktype, proto, sockaddr = cast("tuple[int, int, int, tuple[Any, ...]]", adj.listen[0])
    sock = socket.socket(family, socktype, proto)
    try:
        # As waitress does for the sockets it binds itself: a restarted sidecar rebinds its port
        # while the last one's connections linger in TIME_WAIT; a listening socket still refuses it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(adj.backlog)  # connections that come before the server runs wait in the backlog
    except BaseException:
        sock.close()
        raise
    return sock


def create_server(app: WSGIApplication, sock: socket.socket) -> SidecarWSGIServer:
    """Serve `app` on `sock` (bind_listener's), as waitress's own create_server serves `sockets=`."""
    raise_nofile_limit()
    return SidecarWSGIServer(
        app,
        None,  # a socket map of its own
        True,  # accepting
        sock,
        bind_socket=False,
        sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        sockets=[sock],
        threads=THREADS,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=IDLE_TIMEOUT_S,
        cleanup_interval=CLEANUP_INTERVAL_S,
        asyncore_use_poll=True,  # select() cannot watch descriptors above 1023
        ident="dsh-sidecar",
        clear_untrusted_proxy_headers=True,
    )
