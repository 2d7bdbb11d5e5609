"""Size bounds against hostile processes (sidecar/documents/bounds.py): full 16 MiB segments with 1,000
models named with 4,000 emoji, 64 events and 16 errors as long as the probe's reader allows, and
command lines of 60 arguments of 4,000 emoji each. The status document stays under 1 MiB, every
string within its bound (with an ellipsis), every list cut with a count; /metrics labels too; the
real sidecar stays under 100 MiB RSS with 8 parallel clients."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import msgpack
import pytest

from hostfs.procid import process_start_ticks
from probe_wire import MAX_SEGMENT_BYTES, SegmentWriter
from sidecar.documents import bounds
from sidecar.poll.poller import Poller
from sidecar.serve.metrics import make_metrics
from tests.helpers.harness import API, METRICS_AT_ONCE, Sidecar
from tests.helpers.loadgen import get, proc_cpu_rss
from tests.helpers.payloads import full_payload

EMOJI = "\U0001f600"
LONG = EMOJI * 4000  # the reader's longest string (MAX_STR_CHARS = 4096)
HOSTILE_ARGS = "[chr(0x1F600) * 4000] * 60"  # ~1 MB of command line (one argument may be 128 KiB)


def hostile_payload(pid: int, ticks: int) -> dict:
    p = full_payload(pid, ticks)
    model = dict(p["models"][0], name=LONG, devices=[f"cuda:{i}" for i in range(8)])
    p["models"] = [dict(model) for _ in range(1000)]
    p["events"] = [{"time": 1000.0 + i, "name": LONG[:1000] + str(i)} for i in range(40)]
    p["errors"] = [{"time": 1.0, "where": "w" * 4000, "message": LONG[:500]} for _ in range(16)]
    p["dist_backend"] = "b" * 4000
    p["runtime"]["cuda_visible_devices"] = "0," * 2000
    p["runtime"]["rocr_visible_devices"] = "0," * 2000
    # More devices than the document shows, each string past its bound (what room the models leave).
    device = {"index": 0, "name": "n" * 300, "uuid": None, "pci_bus_id": "p" * 100, "gcn_arch": "g" * 100}
    p["runtime"]["devices"] = [dict(device, index=i) for i in range(40)]
    p["runtime"]["xpu_devices"] = [dict(device, index=i) for i in range(30)]
    return p


class HostileTree:
    """A parent (the target) with `children` sleeping children whose command lines are huge; the
    test writes each child's segment (a full 16 MiB one) as the child's own probe would."""

    def __init__(self, children: int):
        code = (
            "import subprocess, sys, time\n"
            f"kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', *{HOSTILE_ARGS}])"
            f" for _ in range({children})]\n"
            "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
            "time.sleep(600)\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        self.pid = self.proc.pid
        self.children = [int(x) for x in self.proc.stdout.readline().split()]
        self.writers = []
        body = None
        for kid in self.children:
            ticks = process_start_ticks(kid)
            w = SegmentWriter(pid=kid, start_ticks=ticks, size_bytes=MAX_SEGMENT_BYTES)
            body = msgpack.packb(hostile_payload(kid, ticks))
            w.publish_bytes(body)
            self.writers.append(w)
        self.segment_bytes = len(body or b"")

    def stop(self) -> None:
        for w in self.writers:
            w.close()
        for kid in self.children:
            subprocess.run(["kill", "-9", str(kid)], check=False)
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def tree(request) -> Iterator[HostileTree]:
    t = HostileTree(children=getattr(request, "param", 3))
    try:
        yield t
    finally:
        t.stop()


def strings(obj, path="doc"):
    if isinstance(obj, str):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from strings(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from strings(v, f"{path}[{i}]")


def assert_bounded(doc: dict) -> None:
    size = len(json.dumps(doc, ensure_ascii=False).encode())
    assert size < bounds.MAX_STATUS_BYTES, size
    for path, text in strings(doc):
        limit = (
            bounds.MAX_MESSAGE_CHARS if ".warning" in path or ".message" in path else bounds.MAX_TEXT_CHARS
        )
        assert len(text) <= limit, (path, len(text))


@pytest.mark.slow
def test_hostile_segments_and_command_lines_yield_a_bounded_document(tree, fake_nvml):
    assert tree.segment_bytes > 15 * 1024 * 1024  # the worst the reader accepts
    fake_nvml.write({"gpus": []})
    poller = Poller(tree.pid, interval_s=1.0)
    try:
        doc = poller.poll_once()
    finally:
        poller.stop()
    assert_bounded(doc)
    kids = [p for p in doc["processes"] if p["pid"] in tree.children]
    assert len(kids) == 3, [p["pid"] for p in doc["processes"]]
    for p in kids:
        assert p["probe_state"] == "ok"
        assert (
            len(p["models"]) == bounds.MAX_MODELS_SHOWN
            and p["models_omitted"] == 1000 - bounds.MAX_MODELS_SHOWN
        )
        name = p["models"][0]["name"]
        assert (
            len(name) == bounds.MAX_TEXT_CHARS and name.endswith(bounds.ELLIPSIS) and name.startswith(EMOJI)
        )
        assert len(p["dist_backend"]) == bounds.MAX_ID_CHARS
        assert len(p["cmdline"]) <= bounds.MAX_CMDLINE_ARGS + 1 and p["cmdline"][-1].endswith("more")
        assert sum(len(a) for a in p["cmdline"][:-1]) <= bounds.MAX_CMDLINE_CHARS
    assert len(doc["events"]) <= bounds.MAX_EVENTS_SHOWN and doc["events_omitted"] == 120 - len(doc["events"])
    assert doc["processes_omitted"] == 0
    rt = doc["runtime"]
    assert len(rt["devices"]) == bounds.MAX_RUNTIME_DEVICES_SHOWN and rt["devices_omitted"] == 70 - len(
        rt["devices"]
    )
    assert (
        len(rt["devices"][0]["name"]) == bounds.MAX_TEXT_CHARS
        and len(rt["rocr_visible_devices"]) == bounds.MAX_ID_CHARS
    )
    assert len(rt["devices"][0]["gcn_arch"]) == bounds.MAX_ID_CHARS

    text = make_metrics(poller)()[0].decode()
    labels = [v for line in text.splitlines() if not line.startswith("#") for v in line.split('"')[1::2]]
    assert labels and max(len(v) for v in labels) <= bounds.MAX_LABEL_CHARS
    assert len(text.encode()) < bounds.MAX_STATUS_BYTES


@pytest.mark.slow
@pytest.mark.parametrize("tree", [1], indirect=True)  # the reader's own cost grows with each segment
def test_the_sidecar_stays_small_with_8_clients_against_a_hostile_segment(tree, fake_nvml):
    fake_nvml.write({"gpus": []})
    with Sidecar(
        ["--pid", str(tree.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.5"], env=fake_nvml.env()
    ) as sc:
        want = len(tree.children)
        doc = sc.wait_status(
            lambda d: sum(p["probe_state"] == "ok" for p in d["processes"]) == want, what="probes"
        )
        assert_bounded(doc)
        port = int(sc.url.rsplit(":", 1)[1])
        sizes: list[int] = []
        errors: list[str] = []

        def client() -> None:
            deadline = time.monotonic() + 6.0
            while time.monotonic() < deadline:
                for path in (f"{API}/status", "/metrics", f"{API}/history"):
                    status, body = get("127.0.0.1", port, path, sc.token)
                    if status != 200:
                        errors.append(f"{path}: {status}")
                    if path.endswith("status"):
                        sizes.append(len(body))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        _, rss, hwm = proc_cpu_rss(sc.proc.pid)
        print(
            f"\n{len(sizes)} status answers, largest {max(sizes)} bytes; sidecar RSS {rss:.1f} MiB (peak {hwm:.1f})"
        )
        assert errors == [], errors[:5]
        assert sizes and max(sizes) < bounds.MAX_STATUS_BYTES
        assert hwm < 100, hwm
