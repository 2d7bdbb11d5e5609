"""Which `Host:` headers the sidecar answers: the guard against DNS rebinding.

A web page the user visits can make its own name (evil.example) resolve to 127.0.0.1 and then read
the sidecar as if it were same-origin; the only sign is the `Host:` header, which carries the
page's name. No Flask here: the CLI checks --host and --allow-host before anything starts.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

LOOPBACK_NAMES = frozenset({"localhost"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
# host, or [v6], then an optional :port; what any browser sends (no user@, no path).
_HOST_HEADER = re.compile(
    r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}))?$"
)


def _normal_host(host: str) -> str:
    """Lower case, no brackets, no trailing dot; an IP literal in its canonical form."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host[:-1] if host.endswith(".") else host
    ip = _ip(host)
    return host if ip is None else str(ip)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def valid_host_name(text: str) -> bool:
    """A name or IP literal that --allow-host may add (no port, scheme, path or wildcard)."""
    text = text.strip()
    if _ip(text.strip("[]")) is not None:
        return True
    m = _HOST_HEADER.fullmatch(text)
    return m is not None and m.group("port") is None and text.strip(".") != ""


def is_loopback_host(host: str) -> bool:
    host = _normal_host(host)
    ip = _ip(host)
    return host in LOOPBACK_NAMES if ip is None else ip.is_loopback


def is_wildcard_bind(host: str) -> bool:
    """0.0.0.0, :: (in any spelling) or "": every address of this machine, itself no address to open."""
    return _normal_host(host) in WILDCARD_BINDS


@dataclass(frozen=True)
class HostPolicy:
    """Which `Host:` headers the sidecar answers (the DNS-rebinding guard).

    A rebinding page reaches us under *its own* name (evil.example → 127.0.0.1), so what counts is
    the name: loopback names and literals for a loopback bind; for any other bind the bound host,
    this machine's name and the --allow-host names. An IP literal cannot be rebound, so a wildcard
    bind also answers every literal. The port is not compared: an ssh tunnel or a container's port
    mapping legitimately shows another one."""

    names: frozenset[str] = LOOPBACK_NAMES
    loopback_literals: bool = True
    any_literal: bool = False

    def allows(self, header: str | None) -> bool:
        m = _HOST_HEADER.fullmatch(header or "")
        if m is None or (m.group("port") is not None and int(m.group("port")) > 65535):
            return False
        host = _normal_host(m.group("v6") or m.group("name"))
        ip = _ip(host)
        if ip is None:
            return m.group("v6") is None and host in self.names
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return self.any_literal or (self.loopback_literals and ip.is_loopback) or str(ip) in self.names

    def describe(self) -> str:
        shown = sorted(self.names)
        if self.any_literal:
            shown.append("an IP address")
        elif self.loopback_literals:
            shown.append("a loopback address")
        return ", ".join(shown)


def host_policy(bind_host: str, allow_hosts: tuple[str, ...] = ()) -> HostPolicy:
    """The policy for a sidecar bound to `bind_host`, plus the names given with --allow-host."""
    bind = _normal_host(bind_host)
    extra = {_normal_host(h) for h in allow_hosts}
    if bind not in WILDCARD_BINDS and is_loopback_host(bind):
        return HostPolicy(names=LOOPBACK_NAMES | {bind} | extra)
    names = {bind} | extra
    if bind in WILDCARD_BINDS:
        names |= LOOPBACK_NAMES  # a wildcard bind answers on loopback too
        names.add(_normal_host(socket.gethostname()))  # what a scrape config names the node by
    elif _ip(bind) is None:  # a name: its addresses are what a client may use instead
        try:
            names |= {_normal_host(str(a[4][0])) for a in socket.getaddrinfo(bind, None)}
        except (OSError, UnicodeError):
            pass
    names -= WILDCARD_BINDS
    return HostPolicy(
        names=frozenset(names), loopback_literals=bind in WILDCARD_BINDS, any_literal=bind in WILDCARD_BINDS
    )
