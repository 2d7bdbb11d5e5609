"""The DNS-rebinding guard: which Host headers the sidecar answers, alone and in the Flask app."""

from __future__ import annotations

import socket

import pytest

from sidecar.serve.hosts import HostPolicy, host_policy, valid_host_name
from sidecar.serve.server import API, ServerConfig, create_app
from tests.helpers.static_source import StaticSource

LOOPBACK_OK = [
    "127.0.0.1",
    "127.0.0.1:8765",
    "127.1.2.3:1",
    "localhost",
    "LOCALHOST:8765",
    "localhost.:8765",
    "[::1]",
    "[::1]:8765",
    "[0:0:0:0:0:0:0:1]:80",
    "[::ffff:127.0.0.1]:8765",
]
REBOUND = [
    "evil.example",
    "evil.example:8765",
    "127.0.0.1.nip.io:8765",
    "localhost.evil.example",
    "localhost:8765.evil.example",
    "user@localhost:8765",
    "localhost:8765/x",
    "localhost:99999",
    "10.0.0.1:8765",
    "[::2]:8765",
    "::1",  # an IPv6 literal without brackets is not a Host header
    "localhost\n",
    "localhost evil",
    "",
    None,
]


@pytest.mark.parametrize("header", LOOPBACK_OK)
def test_a_loopback_bind_answers_loopback_names_and_literals_with_or_without_port(header):
    for bind in ("127.0.0.1", "localhost", "::1"):
        assert host_policy(bind).allows(header), (bind, header)


@pytest.mark.parametrize("header", REBOUND)
def test_a_loopback_bind_refuses_every_other_name(header):
    assert not host_policy("127.0.0.1").allows(header)
    assert not HostPolicy().allows(header)  # the default of ServerConfig is the loopback policy


def test_allow_host_adds_names_for_any_bind():
    assert host_policy("127.0.0.1", ("tunnel.example",)).allows("tunnel.example:9000")
    p = host_policy("10.0.0.5", ("gpu-node-07.example.org",))
    assert p.allows("10.0.0.5:8765") and p.allows("GPU-NODE-07.example.org.:8765")
    assert not p.allows("localhost:8765") and not p.allows("127.0.0.1:8765")  # not bound there
    assert not p.allows("evil.example:8765") and not p.allows("10.0.0.6:8765")


def test_a_wildcard_bind_answers_literals_its_own_name_and_loopback_but_no_other_name():
    for bind in ("0.0.0.0", "::"):
        p = host_policy(bind, ("node.example",))
        for header in ("10.1.2.3:8765", "[fe80::1]:8765", "localhost:8765", "node.example", "127.0.0.1"):
            assert p.allows(header), (bind, header)
        assert p.allows(f"{socket.gethostname()}:8765")  # a scrape config names the node so
        for header in ("evil.example:8765", "127.0.0.1.nip.io", "0.0.0.0.evil.example"):
            assert not p.allows(header), (bind, header)


@pytest.mark.parametrize("text", ["node.example", "10.0.0.5", "::1", "LOCALHOST"])
def test_allow_host_takes_names_and_literals(text):
    assert valid_host_name(text)


@pytest.mark.parametrize("text", ["", ".", "node:8765", "http://node", "*.example", "a b", "node/x"])
def test_allow_host_refuses_anything_else(text):
    assert not valid_host_name(text)


@pytest.mark.parametrize("path", ["/healthz", f"{API}/status", f"{API}/history", "/metrics", "/", "/nope"])
def test_the_app_answers_421_with_a_reason_to_a_foreign_host_on_every_route(path):
    for config in (ServerConfig(), ServerConfig(token="0123456789abcdef")):
        c = create_app(
            config, StaticSource({"schema": 2}, 1.0), metrics=lambda: (b"", "text/plain")
        ).test_client()
        r = c.get(path, headers={"Host": "evil.example:8765"})
        assert r.status_code == 421 and r.is_json, (path, r.status_code)
        assert "evil.example:8765" in r.json["error"] and "--allow-host" in r.json["error"]
        assert "Set-Cookie" not in r.headers
        assert c.get(path, headers={"Host": "127.0.0.1:8765"}).status_code != 421


def test_the_app_keeps_answering_loopback_hosts():
    c = create_app(ServerConfig(), StaticSource({"schema": 2, "status": "GPU"}, 1.0)).test_client()
    for header in LOOPBACK_OK:
        assert c.get(f"{API}/status", headers={"Host": header}).json["status"] == "GPU", header
