"""Hostile HTTP against the real server (`dsh-sidecar` behind waitress, over loopback): malformed
request lines and headers sent on raw sockets, huge headers, unknown routes and methods, path
traversal on the static files, and fuzzed query strings. Every answer is a clean 4xx (or a 200 for
a file inside the package), never a 500, never a byte of a file outside sidecar/static."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakenvml import FakeNvml, gpu
from tests.helpers.harness import API, METRICS_AT_ONCE, REPO, FakeJob, Sidecar, cuda_runtime
from tests.helpers.hypothesis_profiles import examples

STATIC = REPO / "sidecar" / "static"
STATIC_FILES = {p.read_bytes() for p in STATIC.rglob("*") if p.is_file()}
# Markers of files a traversal could reach: the package's Python, /etc/passwd, a process environment.
OUTSIDE_MARKERS = (b"def create_app", b"import argparse", b"root:x:0:0", b"PATH=/", b"[core]")


@pytest.fixture(scope="module")
def server(fake_nvml_lib_dir, tmp_path_factory) -> Iterator[Sidecar]:
    tmp = tmp_path_factory.mktemp("http")
    nvml = FakeNvml(lib_dir=fake_nvml_lib_dir, scenario_path=tmp / "scenario.txt")
    spec = {
        "payload": {
            "runtime": cuda_runtime([gpu(0)["uuid"]]),
            "models": [
                {"name": "Net", "class": "Net", "params": 1, "device": "cuda:0", "devices": ["cuda:0"]}
            ],
        }
    }
    with FakeJob(tmp / "job", {"main": spec}) as job:
        nvml.write({"gpus": [gpu(0, processes=[{"pid": job.pid, "used_mib": 100}])]})
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2"], env=nvml.env()) as sc:
            sc.wait_status(lambda d: d["processes"] and d["processes"][0]["models"], what="first poll")
            yield sc
            assert sc.proc.poll() is None, "the server died"
            assert not [line for line in sc.err_lines if "Traceback" in line or "internal error" in line]


def port_of(sc: Sidecar) -> int:
    return int(sc.url.rsplit(":", 1)[1])


def raw(sc: Sidecar, data: bytes, timeout_s: float = 10.0) -> tuple[int | None, bytes]:
    """Send `data` on a fresh connection, half-close, read to EOF: (status or None, whole response).
    A request with a Host line carries the sidecar's token (a root sidecar always has one)."""
    if sc.token and b"\r\nHost: " in data and b"Authorization:" not in data:
        data = data.replace(b"\r\nHost: ", b"\r\nAuthorization: Bearer " + sc.token.encode() + b"\r\nHost: ", 1)
    with socket.create_connection(("127.0.0.1", port_of(sc)), timeout_s) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before taking all of a huge request
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
    if not buf.startswith(b"HTTP/"):
        return None, buf
    return int(buf.split(b" ", 2)[1]), buf


def body_of(response: bytes) -> bytes:
    return response.partition(b"\r\n\r\n")[2]


def assert_clean(status: int | None, response: bytes, allow_200: bool = False) -> None:
    assert status is not None, f"no HTTP response: {response[:200]!r}"
    assert status != 500 and not (500 <= status < 600 and status != 501), response[:300]
    if not allow_200:
        assert 400 <= status < 500 or status == 501, response[:300]
    for marker in OUTSIDE_MARKERS:
        assert marker not in response, f"{marker!r} leaked: {response[:300]!r}"


def req(line: bytes, *headers: bytes, host: bytes = b"localhost") -> bytes:
    return line + b"\r\nHost: " + host + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


MALFORMED = {
    "garbage request line": b"GARBAGE\r\n\r\n",
    "method only": b"GET\r\n\r\n",
    "binary junk": b"\x00\x01\xff" * 200 + b"\r\n\r\n",
    "lower-case method": req(b"get / HTTP/1.1"),
    "non-UTF-8 path": req(b"GET /\xff\xfe HTTP/1.1"),
    "header without colon": req(b"GET / HTTP/1.1", b"Host localhost"),
    "negative Content-Length": req(b"GET / HTTP/1.1", b"Content-Length: -1"),
    "non-numeric Content-Length": req(b"GET / HTTP/1.1", b"Content-Length: abc"),
    "two Content-Lengths": req(b"GET / HTTP/1.1", b"Content-Length: 1", b"Content-Length: 2") + b"ab",
    "bad chunk": req(b"GET / HTTP/1.1", b"Transfer-Encoding: chunked") + b"zz\r\n",
    # RFC 9112 6.1: an unknown transfer coding gets 501; waitress answers it itself.
    "unknown transfer coding": req(b"GET / HTTP/1.1", b"Transfer-Encoding: gzip"),
    "huge header": req(b"GET / HTTP/1.1", b"X-Big: " + b"a" * 300_000),
    "huge token header": req(b"GET / HTTP/1.1", b"Authorization: Bearer " + b"t" * 300_000),
    "100k headers": req(b"GET / HTTP/1.1", *(b"X-%d: y" % i for i in range(100_000))),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_requests_get_a_clean_4xx(server, name):
    status, response = raw(server, MALFORMED[name])
    assert_clean(status, response)


@pytest.mark.parametrize(
    "method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "FOO", "M-SEARCH"]
)
@pytest.mark.parametrize("path", [f"{API}/status", "/", "/nope", "*"])
def test_methods_other_than_get_and_head_are_405(server, method, path):
    target = b"example.com:443" if method == "CONNECT" and path == "*" else path.encode()
    status, response = raw(
        server, req(method.encode() + b" " + target + b" HTTP/1.1", b"Content-Length: 5") + b"hello"
    )
    assert_clean(status, response)
    assert status in (400, 404, 405), response[:200]
    if status == 405:
        assert b"read-only" in response or b"not allowed" in response.lower()
    assert b"hello" not in body_of(response)  # TRACE must not echo the request


def test_head_answers_without_a_body(server):
    status, response = raw(server, req(f"HEAD {API}/status HTTP/1.1".encode(), b"Connection: close"))
    assert status == 200 and body_of(response) == b""


@pytest.mark.parametrize(
    "path",
    [
        "/static/../server.py",
        "/static/..%2fserver.py",
        "/static/..%2f..%2fsidecar%2fcli.py",
        "/static/%2e%2e/%2e%2e/etc/passwd",
        "/static/%252e%252e/server.py",
        "/static/..%5cserver.py",
        "/static/..\\server.py",
        "/static/%c0%ae%c0%ae/server.py",
        "/static/.%2e/cli.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/" + "../" * 12 + "etc/passwd",
        "/static/" + "..%2f" * 12 + "proc%2fself%2fenviron",
        "/static/..;/cli.py",
        "/static/index.html%00.js",
        "/static/%00",
        "/static/~root",
        "/static/shared/i18n/../../../cli.py",
        "//etc/passwd",
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/.git/config",
        "/proc/self/environ",
        "http://evil.example/etc/passwd",
        "/static",
        "/static/",
        "/static/shared/i18n",
        "/api/",
        f"{API}/",
        f"{API}/nope",
        f"{API}/status/extra",
        "/admin",
        "/%zz",
        "/" + "a" * 60_000,
    ],
)
def test_traversal_and_unknown_routes_are_4xx_and_leak_nothing(server, path):
    status, response = raw(server, req(f"GET {path} HTTP/1.1".encode(), b"Connection: close"))
    assert_clean(status, response)


@pytest.mark.parametrize(
    "path", [
        "/static/page/index.html",
        "/static/page/./app.js",
        "/static/shared/i18n/../format.js",
        "/static/shared/i18n/en.json",
    ]
)
def test_files_inside_the_package_are_served_and_only_those(server, path):
    status, response = raw(server, req(f"GET {path} HTTP/1.1".encode(), b"Connection: close"))
    assert_clean(status, response, allow_200=True)
    if status == 200:
        assert body_of(response) in STATIC_FILES


@pytest.mark.parametrize(
    "query",
    [
        "since=%ff",
        "since=%zz",
        "since=%",
        "since=%00",
        "since=" + "9" * 10_000,
        "since=-inf",
        "since=NaN",
        "since=1e309",
        "since=0x10",
        "since=1&since=abc",
        "since[]=1",
        "=&=&&",
        "%%%%",
        "since=\x01",
        "since=" + "%41" * 20_000,
    ],
)
def test_malformed_query_strings(server, query):
    status, response = raw(
        server, req(f"GET {API}/history?{query} HTTP/1.1".encode("latin-1"), b"Connection: close")
    )
    assert_clean(status, response, allow_200=True)
    assert status in (200, 400), response[:200]


QUERY_CHARS = st.sampled_from(list("abcdefxyz0123456789.-+eEinfINFaN_%&=;[]$!*'(),/?:@~"))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.lists(QUERY_CHARS, max_size=80).map("".join), route=st.sampled_from(["history", "status"]))
def test_fuzzed_query_strings_never_500(server, query, route):
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=10)
    try:
        conn.request("GET", f"{API}/{route}?{query}", headers={"Authorization": f"Bearer {server.token}"})
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status in (200, 400), (r.status, body[:200])
    if r.status == 400:
        assert b"since" in body


def test_a_flood_of_bad_requests_leaves_the_server_serving(server):
    for data in list(MALFORMED.values())[:10] * 5:
        raw(server, data)
    code, doc = server.get(f"{API}/status")
    assert code == 200 and doc["schema"] == 2
    assert server.get("/healthz")[0] == 200


@pytest.mark.parametrize(
    "host", [b"evil.example", b"evil.example:8765", b"127.0.0.1.nip.io", b"", b"a@localhost"]
)
@pytest.mark.parametrize("path", ["/healthz", f"{API}/status", f"{API}/history", "/metrics", "/"])
def test_a_foreign_host_header_gets_421_with_a_reason_on_every_route(server, host, path):
    """DNS rebinding: a page that makes its own name resolve to 127.0.0.1 must read nothing."""
    status, response = raw(server, req(f"GET {path} HTTP/1.1".encode(), b"Connection: close", host=host))
    assert status == 421, response[:300]
    body = json.loads(body_of(response))
    assert body["status"] == 421 and "--allow-host" in body["error"]
    assert b'"processes"' not in response and b"dsh_status" not in response


@pytest.mark.parametrize("host", [b"localhost", b"127.0.0.1", b"[::1]", b"LOCALHOST.", b"127.0.0.1:1"])
def test_loopback_host_headers_are_answered(server, host):
    status, response = raw(
        server, req(f"GET {API}/status HTTP/1.1".encode(), b"Connection: close", host=host)
    )
    assert status == 200 and json.loads(body_of(response))["schema"] == 2


# -------------------------------------------------------------------------------------------------
# The same with a token: nothing about the job before authentication, whatever the request.


@pytest.fixture(scope="module")
def token_server(fake_nvml_lib_dir, tmp_path_factory) -> Iterator[Sidecar]:
    tmp = tmp_path_factory.mktemp("http-token")
    nvml = FakeNvml(lib_dir=fake_nvml_lib_dir, scenario_path=tmp / "scenario.txt")
    nvml.write({"gpus": [gpu(0)]})
    sleeper = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        with Sidecar(
            ["--pid", str(sleeper.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", "--token", "s3cr3t-t0ken"],
            env=nvml.env(),
        ) as sc:
            sc.target_pid = sleeper.pid
            yield sc
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    "auth",
    [
        None,
        b"Authorization: Bearer wrong",
        b"Authorization: Bearer s3cr3t-t0ke",
        b"Authorization: Bearer s3cr3t-t0ken-and-more",
        b"Authorization: bearer s3cr3t-t0ken",
        b"Authorization: Basic czNjcjN0LXQwa2Vu",
        b"Authorization: Bearer \xff\xfe",
        b"Authorization: Bearer ",
        b"Cookie: dsh_sidecar_token=wrong",
        b"Authorization: Bearer " + b"s" * 10_000,
    ],
)
@pytest.mark.parametrize(
    "path", [f"{API}/status", f"{API}/history", f"{API}/jobs", f"{API}/schema", "/metrics", "/version"]
)
def test_every_data_route_needs_the_token(token_server, auth, path):
    headers = [b"Connection: close"] + ([auth] if auth else [])
    status, response = raw(token_server, req(f"GET {path} HTTP/1.1".encode(), *headers))
    assert_clean(status, response)
    assert status in (400, 401), response[:200]
    body = body_of(response)
    assert str(token_server.target_pid).encode() not in body and b"sleep" not in body


def test_the_right_token_works_and_healthz_reveals_only_liveness(token_server):
    status, response = raw(
        token_server,
        req(
            f"GET {API}/status HTTP/1.1".encode(), b"Authorization: Bearer s3cr3t-t0ken", b"Connection: close"
        ),
    )
    assert status in (200, 503)
    status, response = raw(token_server, req(b"GET /healthz HTTP/1.1", b"Connection: close"))
    health = json.loads(body_of(response))
    assert status == 200 and set(health) == {"ok", "last_poll"}
    assert isinstance(health["ok"], bool) and isinstance(health["last_poll"], float | None)
    headers = response.partition(b"\r\n\r\n")[0].lower()
    assert b"set-cookie" not in headers and b"x-powered-by" not in headers


def test_no_cookie_carries_the_token_the_page_files_hold_no_data(token_server):
    """A browser sends a cookie to every port of the host (another user's listener too): `?token=`
    sets none, a token cookie is refused (and expired), and the page's files need no token."""
    status, response = raw(token_server, req(b"GET /?token=s3cr3t-t0ken HTTP/1.1", b"Connection: close"))
    head = response.partition(b"\r\n\r\n")[0].lower()
    assert status == 200 and b"text/html" in head and b"set-cookie" not in head, head
    status, response = raw(token_server, req(b"GET /static/page/app.js HTTP/1.1", b"Connection: close"))
    assert status == 200 and str(token_server.target_pid).encode() not in body_of(response)
    cookie = f"Cookie: dsh_sidecar_token_{port_of(token_server)}=s3cr3t-t0ken".encode()
    status, response = raw(token_server, req(f"GET {API}/status HTTP/1.1".encode(), cookie, b"Connection: close"))
    assert status == 401, response[:300]
    expired = [
        line for line in response.partition(b"\r\n\r\n")[0].split(b"\r\n") if line.lower().startswith(b"set-cookie")
    ]
    assert len(expired) == 1 and b"Max-Age=0" in expired[0] and b"s3cr3t" not in expired[0], expired


def test_unknown_route_with_token_is_404_not_500(token_server):
    status, response = raw(
        token_server,
        req(b"GET /../../etc/passwd HTTP/1.1", b"Authorization: Bearer s3cr3t-t0ken", b"Connection: close"),
    )
    assert_clean(status, response)
