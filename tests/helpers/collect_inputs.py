"""The collector's inputs as the collect tests make them: values of int, str and dict subclasses (a
probe never sends them, msgpack cannot: the collector must still type them right), device names,
a process of a tree, hostile payloads drawn from a seeded random.Random (Draw), and several jobs'
trees, probe reads and NVML snapshots changing poll after poll as a machine changes them (Jobs).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS, MODEL_COLLECTED, PUBLISH_FAILED
from sidecar.sources.nvml import GpuInfo, GpuProcess, NvmlSnapshot
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import ProbeRead


class Int(int):
    pass


class Str(str):
    pass


class Dict(dict):
    """A dict subclass (never from msgpack): read through .get as before."""


DEVICES = [
    "cuda:0",
    "cuda:1",
    "cuda:7",
    "cpu",
    "mps",
    "xpu:0",
    DEVICE_MIXED,
    DEVICE_NO_PARAMETERS,
    "",
    "cuda:²",
]


def proc_info(
    pid: int, cmdline=("python", "train.py"), name: Any = "python", ppid: int | None = 1, depth: int = 1
) -> ProcInfo:
    return ProcInfo(pid, ppid, 1000 + pid, 1.0, name, cmdline, 1.0, 10.0, depth)


# ---------------------------------------------------------------------------------------------
# Hostile payloads and whole machines, from a seed
# ---------------------------------------------------------------------------------------------
class Draw:
    """Hostile values from a seeded random.Random, as tests/unit/test_collect_facts.py's strategies
    draw them: the same inputs on every run, so a poll sequence that fails can be replayed."""

    TEXTS = [*DEVICES, "train", "nccl", "rank", "ResNet", "lightning", "é" * 70, "é" * 300]

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def atom(self) -> Any:
        r, rng = self.rng.random(), self.rng
        if r < 0.1:
            return None
        if r < 0.2:
            return rng.random() < 0.5
        if r < 0.4:
            return rng.choice([0, 1, -1, 255, 256, 2**63, -(2**70), rng.randint(-1000, 1000), Int(3)])
        if r < 0.6:
            return rng.choice(
                [0.0, -0.0, 1e308, -1e308, 0.5, math.nan, math.inf, -math.inf, rng.uniform(-10, 10)]
            )
        if r < 0.9:
            text = rng.choice(self.TEXTS)
            return Str(text) if rng.random() < 0.1 else text
        return b"bytes"

    def junk(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth < 2 and r < 0.1:
            return [self.junk(depth + 1) for _ in range(self.rng.randint(0, 3))]
        if depth < 2 and r < 0.2:
            return {str(self.rng.randint(0, 9)): self.junk(depth + 1) for _ in range(self.rng.randint(0, 3))}
        return self.atom()

    def maybe(self, good) -> Any:
        return good() if self.rng.random() < 0.75 else self.junk()

    def number(self) -> Any:
        return self.maybe(lambda: self.rng.choice([None, 0, 3, 48, 2.5, 20.0, 0.05, self.atom()]))

    def model(self) -> Any:
        rng = self.rng
        m = {
            "name": self.maybe(lambda: rng.choice(self.TEXTS)),
            "class": self.maybe(lambda: rng.choice(self.TEXTS)),
            "device": self.maybe(lambda: rng.choice(DEVICES)),
            "devices": self.maybe(
                lambda: [rng.choice([*DEVICES, self.atom()]) for _ in range(rng.randint(0, 10))]
            ),
            "loader_settings": self.maybe(lambda: {"num_workers": self.number(), "pin_memory": self.atom()}),
            "input_shape": self.maybe(lambda: [self.number() for _ in range(rng.randint(0, 4))]),
            "param_dtypes": self.maybe(lambda: [rng.choice(["float32", "bfloat16", self.atom()])]),
        }
        for key in ("params", "forward_calls", "forward_rate_hz", "data_wait_fraction", "train_steps",
                    "step_rate_hz", "data_wait_batches", "shared_memory", "autocast", "step_source", "input_device"):  # fmt: skip
            m[key] = self.number() if rng.random() < 0.7 else self.atom()
        keep = [k for k in m if rng.random() < 0.8]
        out = {k: m[k] for k in keep}
        return Dict(out) if rng.random() < 0.1 else out

    def payload(self) -> dict:
        rng = self.rng
        p = {
            "schema": 1,
            "role": self.maybe(lambda: rng.choice(["main", "dataloader-worker", "rank", "child"])),
            "rank": self.number(),
            "local_rank": self.number(),
            "world_size": self.number(),
            "dist_backend": self.maybe(lambda: rng.choice([None, "nccl", "r" * 70])),
            "runtime": rng.choice([{"torch": "2.5"}, {}, None, "x"]),
            "memory": [
                {"device": "cuda:0", "reserved_bytes": self.number()} for _ in range(rng.randint(0, 2))
            ],
            "models": [self.model() if rng.random() < 0.9 else self.atom() for _ in range(rng.randint(0, 4))],
            "errors": rng.choice(
                [
                    [],
                    [{"where": PUBLISH_FAILED, "message": self.atom()}],
                    [{"where": MODEL_COLLECTED, "message": "Old"}],
                ]
            ),
            "steps": self.maybe(
                lambda: {
                    "window_s": self.number(),
                    "steps": self.number(),
                    "data_wait_fraction": self.number(),
                }
            ),
            "syncs_per_step": self.number(),
        }
        keep = {k: v for k, v in p.items() if rng.random() < 0.85}
        return Dict(keep) if rng.random() < 0.05 else keep


class Jobs:
    """Several jobs' inputs, poll after poll, changed at random as a machine changes them: new
    payloads or the same one read again, a process that execs, is renamed or moves in the tree,
    stops (SIGSTOP) and resumes, loses its probe read, exits; a child that starts; NVML rows that come and go on 1 to 4 GPUs
    (a process on two GPUs, other users' processes, now and then an index listed twice, NVML
    down); a target that dies."""

    def __init__(self, draw: Draw, jobs: int) -> None:
        self.draw, rng = draw, draw.rng
        self.rng = rng
        self.trees: list[list[ProcInfo]] = []
        self.reads: list[dict[int, ProbeRead]] = []
        pid = 100
        for _ in range(jobs):
            procs = []
            for i in range(rng.randint(1, 6)):
                procs.append(proc_info(pid, rng.choice([("python", "t.py"), ("sleep", "1")]), ppid=procs[0].pid if i else 1, depth=min(i, 1)))
                pid += 1
            self.trees.append(procs)
            self.reads.append({p.pid: self._read(p.pid) for p in procs if rng.random() < 0.8})
        self.alive = [True] * jobs
        self.sm = {p.pid: rng.choice([None, 0, 30]) for tree in self.trees for p in tree}
        self.next_pid = pid

    def _read(self, pid: int) -> ProbeRead:
        payload = self.draw.payload()
        # Lists where the schema has lists: a payload the probe's schema let through.
        payload.update({k: [] for k in ("models", "memory", "errors") if not isinstance(payload.get(k), list | None)})
        return ProbeRead(pid, self.rng.choice(["ok", "ok", "busy"]), payload, None, False)

    def step(self) -> None:
        rng = self.rng
        for j, tree in enumerate(self.trees):
            for i, p in enumerate(tree):
                r = rng.random()
                if r < 0.3:  # a new payload
                    self.reads[j][p.pid] = self._read(p.pid)
                elif r < 0.35:  # the same payload, read again (a new read object)
                    last = self.reads[j].get(p.pid)
                    if last is not None:
                        self.reads[j][p.pid] = ProbeRead(p.pid, last.state, last.payload, None, False)
                elif r < 0.4:  # exec: another command line, the same process and read
                    tree[i] = replace(p, cmdline=rng.choice([("python", "-c", "from multiprocessing.spawn import x"), ("bash",)]))
                elif r < 0.43:  # renamed or moved in the tree
                    tree[i] = replace(p, name=rng.choice(["python", "pt_main_thread", "é" * 300]), depth=p.depth + 1)
                elif r < 0.46:
                    self.reads[j].pop(p.pid, None)
                elif r < 0.5:  # stopped (SIGSTOP, Ctrl-Z), or resumed
                    tree[i] = replace(p, state=None if p.state == "T" else "T")
                if rng.random() < 0.3:
                    self.sm[p.pid] = rng.choice([None, 0, 30, 31, 99])
            if len(tree) > 1 and rng.random() < 0.15:  # a child exits (its read stays unread)
                del tree[rng.randrange(1, len(tree))]
            if rng.random() < 0.15:  # a child starts, with its probe or without
                child = proc_info(self.next_pid, ("python", "t.py"), ppid=tree[0].pid, depth=1)
                self.next_pid += 1
                tree.append(child)
                self.sm[child.pid] = rng.choice([None, 0, 30])
                if rng.random() < 0.6:
                    self.reads[j][child.pid] = self._read(child.pid)
            if rng.random() < 0.05:
                self.alive[j] = False

    def snapshot(self) -> NvmlSnapshot:
        rng = self.rng
        gpus = rng.randint(1, 4)
        devices = [GpuInfo(i, uuid=f"GPU-{i}", util_gpu=rng.randint(0, 100), mig_mode=i == 3) for i in range(gpus)]
        for tree in self.trees:
            for p in tree:
                for _ in range(rng.choice([0, 1, 1, 1, 2])):
                    d = rng.randrange(gpus)
                    devices[d].processes.append(
                        GpuProcess(p.pid, 1000.0 + p.pid, self.sm[p.pid], None, ("compute",), mig_index=1 if d == 3 else None)
                    )
        for d in devices:  # other users' processes
            d.processes += [GpuProcess(90_000 + k, 5.0, 1, None, ("compute",)) for k in range(rng.randint(0, 3))]
            rng.shuffle(d.processes)
        if rng.random() < 0.05:
            devices.append(GpuInfo(0, processes=[GpuProcess(100, 1.0, 1, None, ("compute",))]))  # an index twice
        return NvmlSnapshot(ok=rng.random() > 0.05, devices=devices, driver="550")

    def tree(self, j: int) -> TreeSnapshot:
        return TreeSnapshot(self.trees[j][0].pid, self.alive[j], tuple(self.trees[j]) if self.alive[j] else ())
