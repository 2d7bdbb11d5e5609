"""What the tests of a job on an AMD GPU share (issue 41): a DRM client whose engine time grows as a
busy client's does, the card's busy figure rewritten, and a watch of a served sidecar that keeps
every status document it reads (the first poll's included), with the lookups those tests make."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.drm_tree import RADEON_PCI, MirroredProc, amdgpu_fdinfo
from tests.helpers.harness import API, Sidecar, wait_for


class Engine:
    """Keeps a DRM client's GFX engine time growing at ``busy`` of the wall clock, as a client that
    submits work does, by rewriting its fdinfo (fd ``fd`` of the tree's process) every few ms;
    ``busy=0``: the counter stops."""

    def __init__(self, proc: MirroredProc, busy: float, *, fd: int, client: int, vram_kib: int) -> None:
        self._proc, self.busy = proc, busy
        self._fd, self._client, self._vram_kib = fd, client, vram_kib
        self._busy_ns, self._at_ns = 1, time.monotonic_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            now_ns = time.monotonic_ns()
            self._busy_ns += round(self.busy * (now_ns - self._at_ns))
            self._at_ns = now_ns
            self._proc.rewrite(self._fd, amdgpu_fdinfo(self._client, self._vram_kib, self._busy_ns))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()  # (again: at once)


def set_busy(sysfs: Path, pct: int, pci: str = RADEON_PCI) -> None:
    """The amdgpu card at ``pci`` now reads ``pct`` in gpu_busy_percent (replaced whole)."""
    path = sysfs / "devices" / "pci0000:00" / pci / "gpu_busy_percent"
    tmp = path.with_name(".busy.tmp")
    tmp.write_text(f"{pct}\n")
    os.replace(tmp, path)


class Watch:
    """Every status document of a served sidecar, read every 50 ms while waiting for one."""

    def __init__(self, sc: Sidecar) -> None:
        self.sc = sc
        self.docs: dict[float, dict[str, Any]] = {}  # poll time -> its document

    def until(self, pred: Any, timeout_s: float = 30.0, what: str = "status") -> dict[str, Any]:
        def read() -> dict[str, Any] | None:
            code, doc = self.sc.get(f"{API}/status")
            if code != 200:
                return None
            self.docs.setdefault(doc["time_unix_s"], doc)
            return doc if pred(doc) else None

        return wait_for(read, timeout_s, 0.05, what)

    def first_poll(self) -> dict[str, Any]:
        """The document of the sidecar's first poll (read as it was served)."""
        first_t = self.sc.history()["samples"][0]["time_unix_s"]
        assert first_t in self.docs, "the first poll's document was not read"
        return self.docs[first_t]


def row(doc: dict[str, Any], pid: int) -> dict[str, Any]:
    (p,) = [p for p in doc["processes"] if p["pid"] == pid]
    return p


def gpu(doc: dict[str, Any], pci: str) -> dict[str, Any]:
    (g,) = [g for g in doc["gpus"] if g["pci_bus_id"] == pci]
    return g


def warning(doc: dict[str, Any], code: str) -> dict[str, Any]:
    (w,) = [w for w in doc["warnings"] if w["code"] == code]
    return w


def steps(doc: dict[str, Any], pid: int) -> int:
    """The forward calls of ``pid``'s models in ``doc``."""
    return sum(m["forward_calls"] for p in doc["processes"] if p["pid"] == pid for m in p["models"])


def metric_samples(sc: Sidecar) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The sidecar's /metrics, parsed: each sample name's (labels, value) pairs."""
    code, body = sc.get("/metrics")
    assert code == 200, body
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out
