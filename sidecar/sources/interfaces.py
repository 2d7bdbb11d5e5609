"""This machine's name and the addresses of its network interfaces: what another machine may use to
open the page of a sidecar bound to every address (0.0.0.0 or ::), which is itself no address a
browser elsewhere can open."""

from __future__ import annotations

import ipaddress
import socket

MAX_ADDRESSES = 8  # a host with hundreds of interfaces (containers' veths) prints a few


def host_name() -> str:
    """The name `hostname` prints (the sidecar's Host check answers it for a wildcard bind)."""
    return socket.gethostname()


def interface_addresses(ipv6: bool) -> list[str]:
    """The IPv4 (ipv6: IPv6) addresses of this machine's interfaces that another machine may reach:
    loopback, link-local (they need an interface scope) and unspecified addresses left out; in the
    kernel's order, at most MAX_ADDRESSES. Empty when the interfaces cannot be read."""
    import psutil

    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    try:
        table = psutil.net_if_addrs()
    except (OSError, RuntimeError):
        return []
    found: list[str] = []
    for addresses in table.values():
        for entry in addresses:
            if entry.family != family:
                continue
            try:
                ip = ipaddress.ip_address(entry.address.split("%", 1)[0])
            except ValueError:
                continue
            if ip.is_loopback or ip.is_link_local or ip.is_unspecified or str(ip) in found:
                continue
            found.append(str(ip))
            if len(found) == MAX_ADDRESSES:
                return found
    return found
