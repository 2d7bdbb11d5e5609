"""Another local user's HTTP listener on loopback (uid 65534, via setpriv), as an attacker runs it:
it answers every GET with a made-up "GPU" document and reports each request's headers, so a test
can tell whether a token (a header or a cookie) reached it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

NOBODY = 65534

# Runs as nobody with the system Python (stdlib only): prints its port, then one JSON line of
# headers per request.
_SCRIPT = r"""
import http.server, json, sys
DOC = json.dumps({"schema": 2, "mode": "discovery", "jobs": [], "status": "GPU",
                  "message": "Yes: the model is on cuda:0"}).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(json.dumps({"path": self.path, "headers": dict(self.headers.items())}), flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(DOC)))
        self.end_headers()
        self.wfile.write(DOC)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def can_switch_user() -> bool:
    return os.geteuid() == 0 and os.path.exists("/usr/bin/setpriv")


class StrangerListener:
    """`with StrangerListener() as s:` s.port, s.url, s.requests (a list of {path, headers})."""

    def __init__(self, port: int = 0, uid: int = NOBODY):
        self.uid = uid
        self.wanted_port = port
        self.requests: list[dict] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StrangerListener:
        self.proc = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                _SCRIPT,
                str(self.wanted_port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        first = self.proc.stdout.readline()
        if not first.strip().isdigit():
            self.proc.kill()
            raise RuntimeError(f"the stranger's listener did not start: {first!r}")
        self.port = int(first)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.requests.append(json.loads(line))
            except ValueError:
                continue

    def wait_for_request(self, timeout_s: float) -> bool:
        """True once a request arrived (a deadline loop, for tests that expect one)."""
        deadline = time.monotonic() + timeout_s
        while not self.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        return bool(self.requests)

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


# Runs as another user: binds the port for `up` seconds, answers every request that arrives meanwhile
# with a forged "on cuda:0" document, unbinds it for `down` seconds, and again. Prints "ready" once,
# then one JSON line per request ({"authorization": ...}).
_TOGGLER = r"""
import json, socket, sys, time
port, up, down = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
DOC = json.dumps({"schema": 2, "mode": "discovery", "jobs": [], "status": "GPU",
                  "message": "Yes: the model is on cuda:0"}).encode()
print("ready", flush=True)
def serve(c):
    c.settimeout(0.2)
    data = b""
    try:
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        if data:
            auth = [l.split(b":", 1)[1].strip().decode("latin-1") for l in data.split(b"\r\n")
                    if l.lower().startswith(b"authorization:")]
            print(json.dumps({"authorization": auth[0] if auth else None}), flush=True)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n%s" % (len(DOC), DOC))
    except OSError:
        pass
    finally:
        c.close()
while True:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(64)
    except OSError:
        s.close()
        time.sleep(down)
        continue
    s.settimeout(up)
    end = time.monotonic() + up
    conns = []
    while time.monotonic() < end:
        try:
            conns.append(s.accept()[0])
        except OSError:
            break
    s.close()
    for c in conns:
        serve(c)
    time.sleep(down)
"""


class PortToggler(StrangerListener):
    """Another user who binds `port` in bursts (`up_s` bound, `down_s` free), as an attacker racing
    a check of the port's listener: `requests` holds one {"authorization": ...} per request it got."""

    def __init__(self, port: int, uid: int = NOBODY, up_s: float = 0.002, down_s: float = 0.002):
        super().__init__(port, uid)
        self.port = port
        self.up_s, self.down_s = up_s, down_s

    def __enter__(self) -> PortToggler:
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "/usr/bin/python3",
             "-c", _TOGGLER, str(self.port), str(self.up_s), str(self.down_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("the toggling listener did not start")
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def tokens(self) -> list[str]:
        return [r["authorization"] for r in self.requests if r.get("authorization")]
