"""A Prometheus taken over by someone hostile, on loopback: every query answered in one of the ways
an attacker would choose (issue 37's list), to test that the cluster view's reader stays bounded
in memory and time. `hits` counts the requests, `redirect_hits` those that followed a redirect."""

from __future__ import annotations

import json
import socket
import threading

MiB = 1048576


def _vector(result_json: bytes) -> bytes:
    return b'{"status":"success","data":{"resultType":"vector","result":' + result_json + b"}}"


def tiny_samples(total_bytes: int) -> bytes:
    """As many label-less samples as fit in `total_bytes`: the most objects per byte."""
    one = b'{"metric":{},"value":[0,"1"]}'
    return _vector(b"[" + b",".join([one] * (total_bytes // (len(one) + 1))) + b"]")


def many_labels(n_labels: int) -> bytes:
    labels = ",".join(f'"l{i}":"v"' for i in range(n_labels)).encode()
    return _vector(b'[{"metric":{' + labels + b'},"value":[0,"1"]}]')


def deep(depth: int) -> bytes:
    return _vector(b"[" * depth + b"]" * depth)


MODES = ("oversized", "tiny-samples", "many-labels", "deep", "trickle", "redirect", "slow")


class HostilePrometheus:
    """`mode`: oversized (15.9 MiB, chunked: no length to refuse it by), tiny-samples (just under the
    reader's byte cap, all tiny samples), many-labels (one sample of 70,000 labels), deep (200,000
    nested arrays), trickle (one byte every 2 s), redirect (302 to a second listener of ours), slow
    (4.5 s before each answer)."""

    def __init__(self, mode: str, max_reply_bytes: int = 4 * MiB):
        self.hits = 0
        self.redirect_hits = 0
        self._max_reply_bytes = max_reply_bytes
        self._stop = threading.Event()
        self.set_mode(mode)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._target = socket.create_server(("127.0.0.1", 0))  # where the redirect points
        for sock, handle in ((self._server, self._answer), (self._target, self._redirected)):
            threading.Thread(target=self._accept, args=(sock, handle), daemon=True).start()

    def set_mode(self, mode: str) -> None:
        assert mode in MODES, mode
        self._body = {
            "oversized": lambda: tiny_samples(int(15.9 * MiB)),
            "tiny-samples": lambda: tiny_samples(self._max_reply_bytes - 1024),
            "many-labels": lambda: many_labels(70_000),
            "deep": lambda: deep(200_000),
        }.get(mode, lambda: b"")()
        self.mode = mode

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def _accept(self, sock: socket.socket, handle) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket) -> None:
        data = b""
        conn.settimeout(5)
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk

    def _redirected(self, conn: socket.socket) -> None:
        with conn:
            self.redirect_hits += 1

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._read_request(conn)
                self.hits += 1
                self._send(conn)
            except OSError:
                pass  # the reader gave up on us: what it is meant to do

    def _send(self, conn: socket.socket) -> None:
        if self.mode == "redirect":
            where = f"http://127.0.0.1:{self._target.getsockname()[1]}/api/v1/query"
            conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {where}\r\nContent-Length: 0\r\n\r\n".encode())
        elif self.mode == "trickle":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}":
                if self._stop.wait(2.0):
                    return
                conn.sendall(bytes([byte]))
        elif self.mode == "slow":
            if self._stop.wait(4.5):
                return
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        else:  # chunked: the reader cannot refuse it by a declared length
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            for at in range(0, len(self._body), 1 << 16):
                part = self._body[at : at + (1 << 16)]
                conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self._stop.set()
        for sock in (self._server, self._target):
            sock.close()

    def __enter__(self) -> HostilePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
