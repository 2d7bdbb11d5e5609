"""The collector's inputs as the collect tests make them: device names, a process of a tree, payloads
drawn from a seeded random.Random (Draw), each as the segment source hands it up (its record: the
schema's types, with what the schema lets through from a process: long and odd strings, negative
and huge numbers, a device named twice), and several jobs' trees, probe reads and NVML snapshots
changing poll after poll as a machine changes them (Jobs).
"""

from __future__ import annotations

import random
from dataclasses import replace
from operator import is_
from typing import Any

from probe_wire.records import ProbePayload
from probe_wire.schema import (
    DEVICE_MIXED,
    DEVICE_NO_PARAMETERS,
    MODEL_COLLECTED,
    PUBLISH_FAILED,
    ROLES,
    empty_runtime,
)
from sidecar.sources.nvml import GpuInfo, GpuProcess, NvmlSnapshot
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import ProbeRead
from tests.helpers.records import payload, record

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
# Payloads and whole machines, from a seed
# ---------------------------------------------------------------------------------------------
class Draw:
    """Payloads from a seeded random.Random, each valid under the schema, as
    tests/unit/test_collect_facts.py's strategies draw them: the same inputs on every run, so a poll
    sequence that fails can be replayed."""

    TEXTS = [*DEVICES, "train", "nccl", "rank", "ResNet", "lightning", "é" * 70, "é" * 300]
    RUNTIMES = [
        empty_runtime(),
        {**empty_runtime(), "torch": "2.5", "devices": [{"index": 0, "name": "H100", "uuid": "GPU-0"}]},
    ]

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def maybe(self, value: Any) -> Any:
        """``value``, or None a quarter of the time (the schema's optional fields)."""
        return None if self.rng.random() < 0.25 else value

    def int_(self) -> int:
        rng = self.rng
        return rng.choice([0, 1, -1, 3, 48, 255, 256, 2**63, -(2**63), rng.randint(-1000, 1000)])

    def float_(self) -> float:
        rng = self.rng
        return rng.choice([0.0, -0.0, 1e308, -1e308, 0.5, 2.5, 20.0, 0.05, 7.0, -2.0, rng.uniform(-10, 10)])

    def text(self) -> str:
        return self.rng.choice(self.TEXTS)

    def model(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "name": self.text(),
            "class": self.text(),
            "params": self.int_(),
            "device": rng.choice(DEVICES),
            "devices": [rng.choice(DEVICES) for _ in range(rng.randint(0, 10))],
            "input_device": self.maybe(rng.choice(DEVICES)),
            "forward_calls": self.int_(),
            "forward_rate_hz": self.float_(),
            "data_wait_fraction": self.maybe(self.float_()),
            "train_steps": self.maybe(self.int_()),
            "step_rate_hz": self.maybe(self.float_()),
            "step_source": self.maybe(self.text()),
            "shared_memory": self.maybe(rng.random() < 0.5),
            "param_dtypes": self.maybe([rng.choice(["float32", "bfloat16", self.text()]) for _ in range(rng.randint(0, 3))]),
            "autocast": self.maybe(self.text()),
            "input_shape": self.maybe([self.int_() for _ in range(rng.randint(0, 4))]),
            "loader_settings": self.maybe(
                {
                    "num_workers": self.maybe(self.int_()),
                    "pin_memory": self.maybe(rng.random() < 0.5),
                    "persistent_workers": None,
                    "batch_size": self.maybe(self.int_()),
                    "prefetch_factor": self.maybe(self.int_()),
                }
            ),
            "compiled_uncounted": self.maybe(rng.random() < 0.5),
            "data_wait_batches": self.maybe(self.int_()),
        }

    def payload(self) -> ProbePayload:
        """A payload's record, as the segment source hands it up."""
        rng = self.rng
        fields: dict[str, Any] = {
            "role": rng.choice(ROLES),
            "rank": self.maybe(self.int_()),
            "local_rank": self.maybe(self.int_()),
            "world_size": self.maybe(self.int_()),
            "dist_backend": self.maybe(rng.choice(["nccl", "r" * 70])),
            "runtime": rng.choice(self.RUNTIMES),
            "memory": [
                {"device": "cuda:0", "allocated_bytes": 0, "reserved_bytes": self.int_(), "peak_allocated_bytes": 0,
                 "peak_reserved_bytes": 0}
                for _ in range(rng.randint(0, 2))
            ],  # fmt: skip
            "models": [self.model() for _ in range(rng.randint(0, 4))],
            "errors": rng.choice(
                [
                    [],
                    [{"time": 1.0, "where": PUBLISH_FAILED, "message": rng.choice(["", self.text()])}],
                    [{"time": 1.0, "where": MODEL_COLLECTED, "message": "Old"}],
                ]
            ),
            "steps": self.maybe(
                {"window_s": self.float_(), "steps": self.int_(), "data_wait_fraction": self.maybe(self.float_())}
            ),
            "syncs_per_step": self.maybe(self.float_()),
            "hostname": self.maybe(self.text()),
        }
        return record(payload(**fields))


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
        self.last_trees: dict[int, tuple[ProcInfo, ...]] = {}
        self.sm = {p.pid: rng.choice([None, 0, 30]) for tree in self.trees for p in tree}
        self.next_pid = pid

    def _read(self, pid: int) -> ProbeRead:
        return ProbeRead(pid, self.rng.choice(["ok", "ok", "busy"]), self.draw.payload(), None, False)

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
        """Job ``j``'s tree now: the last poll's very tuple when each process is the same object, as
        the process tree source gives it (the collector takes such a tree as unchanged)."""
        procs = tuple(self.trees[j]) if self.alive[j] else ()
        last = self.last_trees.get(j)
        if last is not None and len(last) == len(procs) and all(map(is_, last, procs)):
            procs = last
        self.last_trees[j] = procs
        return TreeSnapshot(self.trees[j][0].pid, self.alive[j], procs)
