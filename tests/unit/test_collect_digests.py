"""History samples and whole polls (sidecar/poll/collect.py, sidecar/poll/samples.py, sidecar/poll/history.py) over fixed seeds, held to
the outcomes frozen in DIGESTS: several jobs sharing snapshots, reads kept or replaced, NVML rows
that change, processes that exec or move, targets that die; hostile payloads in each. The digests
were computed by the code once; a change meant to change them regenerates them deliberately and
says why in its commit:

      .venv/bin/python -m tests.unit.test_collect_digests --regenerate

What each fact must be, field by field, is tests/unit/test_collect_facts.py's.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from pathlib import Path

from sidecar.poll import collect as c
from sidecar.poll import samples
from sidecar.sources.nvml import GpuInfo, GpuProcess, NvmlSnapshot
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import ProbeRead
from sidecar.sources.sysfs import SystemGpu
from sidecar.verdict import Facts, GpuFacts, ModelFacts, ProcessFacts, ProcGpu, Rules
from tests.helpers.collect_inputs import DEVICES, Draw, proc_info
from tests.helpers.exact import canon, outcome


def sample_cases(seed: int) -> list[tuple[float, Facts, dict | None]]:
    """Facts and process infos for history_sample, drawn from ``seed``."""
    draw = Draw(seed)
    rng = draw.rng
    out = []
    for _ in range(20):
        procs = []
        for pid in rng.sample(range(1, 50), rng.randint(0, 6)):
            models = tuple(
                ModelFacts(
                    "m",
                    rng.choice([None, *DEVICES]),
                    tuple(rng.choice(DEVICES) for _ in range(rng.randint(0, 3))),
                    forward_calls=rng.randint(0, 2**40),
                    forward_rate_hz=rng.choice([None, draw.atom() if rng.random() < 0.2 else 2.5]),
                    train_steps=rng.choice([None, rng.randint(0, 2**40)]),
                    step_rate_hz=rng.choice([None, 1.0, math.nan]),
                )
                for _ in range(rng.randint(0, 3))
            )
            gpu = tuple(
                ProcGpu(rng.randint(0, 3), rng.choice([None, 100.0, -0.0, math.inf]), rng.choice([None, 0, 30, 2.5, True]), rng.choice([None, 1]))
                for _ in range(rng.randint(0, 3))
            )
            procs.append(ProcessFacts(pid=pid, models=models, gpu=gpu))
        gpus = tuple(
            GpuFacts(i, util=rng.choice([None, 50.0, math.nan]), mem_used_mib=rng.choice([None, 1000.0]), mig_mode=rng.choice([None, True, False]))
            for i in rng.sample(range(4), rng.randint(0, 4))
        )
        facts = Facts(target_pid=1, processes=tuple(procs), nvml_ok=rng.random() < 0.8, gpus=gpus)
        info = {p.pid: ProcInfo(p.pid, 1, 1, 1.0, "p", (), rng.choice([None, 5.0]), rng.choice([None, 100.0]), 1) for p in procs if rng.random() < 0.7}
        out.append((rng.choice([1000.0, 1.5e9, -0.0, math.nan]), facts, info if rng.random() < 0.8 else None))
    return out


class _Jobs:
    """Several jobs' inputs, poll after poll, changed at random as a machine changes them."""

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
                    tree[i] = proc_info(p.pid, rng.choice([("python", "-c", "from multiprocessing.spawn import x"), ("bash",)]), p.name, p.ppid, p.depth)
                elif r < 0.43:  # renamed or moved in the tree
                    tree[i] = proc_info(p.pid, p.cmdline, rng.choice(["python", "pt_main_thread", "é" * 300]), p.ppid, p.depth + 1)
                elif r < 0.46:
                    self.reads[j].pop(p.pid, None)
                if rng.random() < 0.3:
                    self.sm[p.pid] = rng.choice([None, 0, 30, 31, 99])
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


def poll_outcomes(seed: int) -> list:
    """Every poll of several jobs drawn from ``seed``: each job's facts, the collector's process
    infos, other processes and target, and the history sample, or what the poll raised."""
    draw = Draw(seed)
    rng = draw.rng
    jobs = rng.randint(1, 4)
    world = _Jobs(draw, jobs)
    system = [SystemGpu("NVIDIA", "0x10de", None, "NVIDIA GPU", "0000:10:00.0", "nvidia")]
    visible = lambda pid: pid % 3 == 0  # noqa: E731
    collectors = [c.FactCollector(world.trees[j][0].pid, Rules(), visible) for j in range(jobs)]
    out = []
    for n in range(rng.randint(1, 8)):
        now = 1000.0 + 1.5 * n
        nvml = world.snapshot()
        gpus = tuple(c.gpu_facts(d) for d in nvml.devices) if nvml.ok else ()
        for j, collector in enumerate(collectors):
            shared = gpus if j % 2 == 0 else None  # discovery's shared devices, or a job of its own
            try:
                facts = collector.facts(now, world.tree(j), dict(world.reads[j]), nvml, list(system), shared)
            except Exception as exc:  # noqa: BLE001 -- what a poll raises is part of the outcome
                out.append(("raises", type(exc).__name__))
                continue
            out.append(canon((facts, collector.proc_info, collector.other_processes, collector.target)))
            out.append(outcome(samples.history_sample, now, facts, collector.proc_info))
        world.step()
    return out


def digests() -> dict[str, str]:
    def digest(outcomes) -> str:
        return hashlib.sha256(repr(list(outcomes)).encode()).hexdigest()[:20]

    return {
        "history_samples": digest(
            outcome(samples.history_sample, *case) for seed in range(60) for case in sample_cases(seed)
        ),
        "whole_polls": digest(o for seed in range(120) for o in poll_outcomes(seed)),
        "process_facts": digest(
            outcome(c.process_facts, proc_info(5, ("python", "-c", "from multiprocessing.spawn import x")), ProbeRead(5, "ok", Draw(seed).payload(), None, False), (), 5)
            for seed in range(1500)
        ),
    }


# digests() as the code gave them. Regenerate deliberately: see the module's docstring.
DIGESTS = {"history_samples": "b1c074e0f154135d6830", "whole_polls": "a6cadb59d3af923213af", "process_facts": "087430be49fd2305d273"}


def test_the_seeded_polls_samples_and_facts_give_the_frozen_outcomes():
    got = digests()
    changed = sorted(name for name in got if got[name] != DIGESTS.get(name))
    assert not changed, f"{changed} changed (a change meant to change them regenerates DIGESTS: see the module's docstring)"


def test_the_seeded_polls_reach_what_the_digests_are_for():
    """The seeded polls are not all alike: exited targets, processes with models, and a sample for
    each poll's facts."""
    outcomes = [o for seed in range(120) for o in poll_outcomes(seed)]
    facts = [o[1] for o in outcomes if o[0] == "tuple" and o[1][0] == "Facts"]
    assert len(facts) > 300
    assert any(("target_alive", ("bool", False)) in f for f in facts)
    assert any("ModelFacts" in repr(f) for f in facts)
    samples = [o for o in outcomes if o[0] == "Sample"]
    assert len(samples) == len(facts)


if __name__ == "__main__" and "--regenerate" in sys.argv:
    source = Path(__file__).read_text()
    frozen = re.findall(r"^DIGESTS = \{.*\}$", source, re.M)
    assert len(frozen) == 1, frozen
    fresh = ", ".join(f'"{name}": "{value}"' for name, value in digests().items())
    Path(__file__).write_text(source.replace(frozen[0], "DIGESTS = {" + fresh + "}"))
    print(f"{__file__}: DIGESTS")
