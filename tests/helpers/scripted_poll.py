"""A job's poll inputs scripted poll by poll, for comparing two pollers fed the very same inputs
(tests/unit/test_poll_memo.py: the memoised poller against one that derives everything afresh).

The inputs are the sources' own types (proctree.TreeSnapshot and ProcInfo, segments.ProbeRead with
the records of payloads as a job's ranks and workers publish them, nvml GpuInfo in an NvmlSnapshot); what changes
from one poll to the next is drawn from a seeded random.Random, and objects that did not change
are handed over again as the sources hand them (the same ProbeRead, the same ProcInfo), which is
what the pollers' caches key on.
"""

from __future__ import annotations

import random
from dataclasses import replace

from probe_wire.schema import MAX_EVENTS
from sidecar.sources.nvml.snapshot import GpuInfo, GpuProcess, NvmlSnapshot
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import ProbeRead
from tests.helpers.records import record
from tests.helpers.stress_jobs import _payload

ROOT = 4000
GPUS = 4


class ScriptedJob:
    """A root, 3 ranks and 4 loader workers over GPUS GPUs. ``step()`` moves the script one poll on;
    the source methods (``tree``, ``reads``, ``nvml``) give that poll's inputs."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.t = 1_700_000_000.0
        self.calls = 0
        self.infos: dict[int, ProcInfo] = {}
        self._reads: dict[int, ProbeRead] = {}
        self._events: dict[int, list[dict]] = {}  # pid -> the events its payload carries
        self.epochs = 0
        self.util = [50] * GPUS
        self.power = [300.0] * GPUS
        self.sm = {}
        self.extra_worker = False
        self.nvml_ok = True
        for pid, role, ppid, depth in self._members():
            self._spawn(pid, role, ppid, depth)

    def _members(self):
        out = [(ROOT, "main", 1, 0)]
        out += [(ROOT + 1 + i, "rank", ROOT, 1) for i in range(3)]
        out += [(ROOT + 10 + i, "dataloader-worker", ROOT + 1, 2) for i in range(4 if not self.extra_worker else 5)]
        return out

    def _spawn(self, pid: int, role: str, ppid: int, depth: int) -> None:
        self.infos[pid] = ProcInfo(pid, ppid, 100 + pid, self.t - 50, "python", ("python", "train.py"), None, 500.0, depth, "S")
        self._publish(pid, role, ppid)

    def _publish(self, pid: int, role: str, ppid: int) -> None:
        index = pid - ROOT - (1 if role == "rank" else 10 if role == "dataloader-worker" else 0)
        payload = _payload(pid, 100 + pid, ppid, role, index, GPUS, self.calls)
        payload["events"] = self._events.get(pid, [])
        self._reads[pid] = ProbeRead(pid, "ok", record(payload), None, False)

    def step(self) -> None:
        """One poll later: most polls change a few things, some none."""
        rng = self.rng
        self.t += 0.25
        roll = rng.random()
        if roll < 0.3:
            return  # nothing changed but the time
        if roll < 0.5:  # the ranks republish (their counters)
            self.calls += 8
            for pid, role, ppid, _ in self._members():
                if role == "rank":
                    self._publish(pid, role, ppid)
        elif roll < 0.6:  # a GPU reads otherwise
            g = rng.randrange(GPUS)
            self.util[g] = rng.choice([0, 3, 50, 99])
            self.power[g] = rng.choice([80.0, 300.0])
        elif roll < 0.7:  # a process's CPU and RSS
            pid = rng.choice(list(self.infos))
            self.infos[pid] = replace(self.infos[pid], cpu_percent=rng.choice([0.0, 12.5, 99.0]), rss_mib=rng.choice([500.0, 900.0]))
        elif roll < 0.78:  # a worker comes or goes
            self.extra_worker = not self.extra_worker
            pid = ROOT + 14
            if self.extra_worker:
                self._spawn(pid, "dataloader-worker", ROOT + 1, 2)
            else:
                del self.infos[pid], self._reads[pid]
        elif roll < 0.84:  # a per-process SM sample
            self.sm[rng.choice(list(self.infos))] = rng.choice([0, 40, 90])
        elif roll < 0.88:
            self.nvml_ok = not self.nvml_ok
        elif roll < 0.94:  # a rank's segment caught mid-publish, then back
            pid = ROOT + 1 + rng.randrange(3)
            r = self._reads[pid]
            self._reads[pid] = ProbeRead(pid, "busy", r.payload, "busy", False) if r.state == "ok" else ProbeRead(pid, "ok", r.payload, None, False)
        else:  # an event: the rank publishes again
            pid = ROOT + 1
            events = self._events.setdefault(pid, [])
            events.append({"time": self.t, "name": f"epoch {self.epochs}"})
            self.epochs += 1
            del events[:-MAX_EVENTS]  # what a probe keeps
            self._publish(pid, "rank", ROOT)

    def now(self) -> float:
        return self.t

    def tree(self) -> TreeSnapshot:
        order = [pid for pid, *_ in self._members()]
        return TreeSnapshot(ROOT, True, tuple(self.infos[pid] for pid in order))

    def reads(self, tree: TreeSnapshot) -> dict[int, ProbeRead]:
        return {p.pid: self._reads[p.pid] for p in tree.processes if p.pid in self._reads}

    def nvml(self) -> NvmlSnapshot:
        if not self.nvml_ok:
            return NvmlSnapshot(ok=False, error="NVML library not found", time=self.t)
        devices = []
        for g in range(GPUS):
            procs = [
                GpuProcess(pid, 2000.0 + pid % 7, self.sm.get(pid, 30), 10, ("compute",))
                for pid, role, *_ in self._members()
                if role != "dataloader-worker" and (pid - ROOT) % GPUS == g
            ]
            devices.append(
                GpuInfo(
                    g,
                    uuid=f"GPU-{g}",
                    name="NVIDIA H100 80GB HBM3",
                    pci_bus_id=f"00000000:{g + 16:02X}:00.0",
                    mem_total_mib=81559.0,
                    mem_used_mib=sum(p.used_mib for p in procs) + 500.0,
                    util_gpu=self.util[g],
                    util_mem=20,
                    processes=procs,
                    power_w=self.power[g],
                    power_limit_w=700.0,
                    temperature_c=60.0,
                    sm_clock_mhz=1980,
                    sm_clock_max_mhz=1980,
                    compute_capability="9.0",
                )
            )
        return NvmlSnapshot(ok=True, driver="550.54", cuda_driver="12.4", devices=devices, time=self.t)


class ScriptedSources:
    """The three sources of a Poller, each answering from ``job``'s current poll."""

    def __init__(self, job: ScriptedJob):
        self.job = job
        self.tree_source = _Source(job.tree)
        self.segment_source = _Source(job.reads)
        self.nvml_source = _Source(job.nvml)


class _Source:
    def __init__(self, fn):
        self.poll = fn

    def close(self) -> None:
        pass
