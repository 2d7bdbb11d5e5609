"""Whole polls and history samples (sidecar/poll/collect.py, sidecar/poll/samples.py) held to what
they must be, poll after poll:

- FactCollector.facts over several jobs that share NVML snapshots or read their own, over seeded
  sequences (tests/helpers/collect_inputs.py's Jobs: new payloads and the same ones read again,
  processes that exec, move, stop, lose their read, NVML rows that change, an index listed twice,
  NVML down, targets that die): each poll's facts are the tree's processes in its order, each
  exactly what process_facts makes of its process, its read and its NVML rows (whatever the
  collector kept from earlier polls); the GPUs are the snapshot's; the processes outside the tree
  counted per GPU; the departed processes kept as the collector's docstring says; a stopped
  process with the time since it was first seen stopped.
- history_sample over those facts and over facts drawn by hypothesis: each row and sum is what
  its docstring and history's columns say of the facts.

Field by field, what process_facts and gpu_facts make of their inputs is
tests/unit/test_collect_facts.py's.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.poll import collect as c
from sidecar.poll import samples
from sidecar.poll.history import GPU_COLUMNS
from sidecar.sources.nvml import NvmlSnapshot
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.sysfs import SystemGpu
from sidecar.verdict import (
    ACCELERATOR_TYPES,
    Facts,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    Rules,
    device_type,
    primary_model_gpu_index,
)
from tests.helpers.collect_inputs import DEVICES, Draw, Jobs, proc_info
from tests.helpers.exact import canon
from tests.helpers.hypothesis_profiles import examples

SEEDS = range(120)
SYSTEM = [SystemGpu("NVIDIA", "0x10de", None, "NVIDIA GPU", "0000:10:00.0", "nvidia")]


def visible(pid: int) -> bool:
    """Which pids the collector's pid-namespace check finds in /proc (stands in for it)."""
    return pid % 3 == 0


def rows_of(nvml, pid: int) -> tuple[ProcGpu, ...]:
    """The NVML rows of ``pid``, device by device in the snapshot's order."""
    return tuple(
        ProcGpu(d.index, gp.used_mib, gp.sm_util, gp.mig_index)
        for d in (nvml.devices if nvml.ok else ())
        for gp in d.processes
        if gp.pid == pid
    )


class Expected:
    """What one job's collector must have kept from the polls before: the facts of its last poll,
    the processes that left since (with probes), when each stopped process was first seen stopped."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.last: tuple[ProcessFacts, ...] = ()
        self.departed: dict[int, ProcessFacts] = {}
        self.stopped_since: dict[tuple, float] = {}
        self.tree: tuple[ProcInfo, ...] | None = None  # the last poll's tree (the tuple)


def check_poll(now, tree, reads, nvml, facts: Facts, collector, kept: Expected) -> None:
    tree_pids = [p.pid for p in tree.processes]
    alive = [p for p in facts.processes if not p.exited]
    gone = [p for p in facts.processes if p.exited]
    assert (facts.target_pid, facts.target_alive, facts.nvml_ok) == (
        kept.target,
        tree.target_alive,
        bool(nvml.ok),
    )
    # The tree's processes, in its order, each what process_facts makes of it now.
    assert [p.pid for p in alive] == tree_pids
    for p, info in zip(alive, tree.processes, strict=True):
        want = c.process_facts(info, reads.get(info.pid), rows_of(nvml, info.pid), kept.target)
        assert canon(p) == canon(want)
        assert p.is_target == (p.pid == kept.target)
    # NVML's GPUs, and the processes outside the tree counted per GPU.
    devices = nvml.devices if nvml.ok else []
    assert canon(facts.gpus) == canon(tuple(c.gpu_facts(d) for d in devices))
    others: dict[int, int] = {}
    for d in devices:
        for gp in d.processes:
            if gp.pid not in tree_pids:
                others[d.index] = others.get(d.index, 0) + 1
    assert collector.other_processes == others
    assert [(s.vendor, s.pci, s.nvml_index) for s in facts.system_gpus] == [("NVIDIA", "0000:10:00.0", None)]
    # Departed processes: while the job runs, those that ran the probe, shown only once no process
    # of the tree has one; when it ends, every process of its last poll, the target first.
    here = set(tree_pids)
    for p in kept.last:
        if p.pid not in here and (not tree.target_alive or p.has_probe):
            kept.departed.setdefault(p.pid, p)
    if tree.target_alive:
        assert gone == [] or not any(p.has_probe for p in alive)
    else:
        assert (
            alive == []
            and gone
            and [p.is_target for p in gone] == sorted((p.is_target for p in gone), reverse=True)
        )
    for p in gone:
        assert p.gpu == () and p.pid not in here and p.pid in kept.departed, p.pid
    assert len(gone) <= len(kept.departed) and (not tree.target_alive or len(gone) <= c.MAX_EXITED_KEPT)
    kept.last = tuple(alive) if tree.target_alive else kept.last
    # Stopped processes: for how long they have been seen stopped.
    since = {}
    for p in tree.processes if tree.target_alive else ():
        if p.state in c.STOPPED_STATES:
            since[p.identity] = kept.stopped_since.get(p.identity, now)
    kept.stopped_since = since
    assert facts.stopped == tuple((ident[0], now - t) for ident, t in since.items())
    assert facts.pid_namespace_suspect == bool(
        nvml.ok
        and {gp.pid for d in devices for gp in d.processes}.isdisjoint(here)
        and any(gp for d in devices for gp in d.processes)
        and any((p.cuda_memory_mib or 0) > 0 for p in facts.processes)
        and not any(visible(gp.pid) for d in devices for gp in d.processes)
    )


def run_polls(seed: int, check) -> int:
    """Poll the jobs drawn from ``seed`` (1 to 8 polls of 1 to 4 jobs) and hand each poll to
    ``check``; returns the number of facts made."""
    draw = Draw(seed)
    rng = draw.rng
    jobs = rng.randint(1, 4)
    world = Jobs(draw, jobs)
    collectors = [c.FactCollector(world.trees[j][0].pid, Rules(), visible) for j in range(jobs)]
    kept = [Expected(world.trees[j][0].pid) for j in range(jobs)]
    made = 0
    for n in range(rng.randint(1, 8)):
        now = 1000.0 + 1.5 * n
        nvml = world.snapshot()
        gpus = tuple(c.gpu_facts(d) for d in nvml.devices) if nvml.ok else ()
        for j, collector in enumerate(collectors):
            shared = gpus if j % 2 == 0 else None  # discovery's shared devices, or a job of its own
            tree, reads = world.tree(j), dict(world.reads[j])
            facts = collector.facts(now, tree, reads, nvml, list(SYSTEM), shared)
            check(now, tree, reads, nvml, facts, collector, kept[j])
            made += 1
        world.step()
    return made


def test_each_poll_is_what_its_inputs_make_whatever_came_before():
    made = sum(run_polls(seed, check_poll) for seed in SEEDS)
    assert made > 300


def test_the_seeded_polls_reach_what_the_checks_are_for():
    """Exited targets, departed processes kept (while the job runs too), stopped ones, NVML down, models, processes whose
    facts the collector reused, and processes whose only change was their NVML rows."""
    seen: set[str] = set()

    def note(now, tree, reads, nvml, facts, collector, kept):
        seen.add("nvml down" if not nvml.ok else "nvml up")
        seen.update(
            name
            for name, hit in (
                ("target exited", not facts.target_alive),
                ("departed kept", any(p.exited for p in facts.processes)),
                ("departed, job running", facts.target_alive and any(p.exited for p in facts.processes)),
                ("stopped", bool(facts.stopped)),
                ("models", any(p.models for p in facts.processes)),
                ("reused", any(p is q for p in facts.processes for q in kept.last)),
                ("the same tree", tree.target_alive and tree.processes is kept.tree),
                ("the same tree, stopped", tree.target_alive and tree.processes is kept.tree and bool(facts.stopped)),
                ("rows changed", any(p.pid == q.pid and p.gpu != q.gpu and p.models == q.models
                                     for p in facts.processes for q in kept.last)),
            )
            if hit
        )  # fmt: skip
        kept.last, kept.tree = facts.processes, tree.processes

    for seed in SEEDS:
        run_polls(seed, note)
    assert seen == {
        "nvml down",
        "nvml up",
        "target exited",
        "departed kept",
        "departed, job running",
        "stopped",
        "models",
        "reused",
        "rows changed",
        "the same tree",
        "the same tree, stopped",
    }


# ---------------------------------------------------------------------------------------------
# History samples
# ---------------------------------------------------------------------------------------------
def _num(x):
    """A value as history packs it: a double, None for no value (None, NaN, infinite)."""
    return None if x is None or not math.isfinite(x) else float(x)


def _sum(values, start=0.0):
    """Their sum in their order from ``start``, None when there are none."""
    values = [v for v in values if v is not None]
    return None if not values else sum(values, start)


def check_sample(now: float, facts: Facts, proc_info) -> None:
    s = samples.history_sample(now, facts, proc_info)
    assert s.time == now == s.recent.time
    # One row per GPU: history's columns of it.
    want_gpus = [
        tuple(_num(getattr(g, a)) for a in ("index", "util", "mem_used_mib", *GPU_COLUMNS[3:]))
        for g in facts.gpus
    ]
    assert [tuple(map(_num, row)) for row in s.gpus] == want_gpus
    # One row per process with NVML rows: its memory and its SM utilisation summed over its GPUs.
    on_gpu = [p for p in facts.processes if p.gpu]
    want_rows = [(p.pid, p.gpu_mem_mib, _sum(g.sm_util for g in p.gpu)) for p in on_gpu]
    assert [tuple(map(_num, row)) for row in s.processes] == [tuple(map(_num, row)) for row in want_rows]
    # The job's sums the verdict reads back.
    sm = _sum(row[2] for row in want_rows)
    if sm is None and facts.nvml_ok and on_gpu and not any(g.mig_mode for g in facts.gpus):
        sm = 0.0  # processes listed without samples: NVML's NOT_FOUND means idle (not on MIG)
    assert canon(s.recent.tree_sm_util) == canon(sm)
    mem = _sum(p.gpu_mem_mib for p in on_gpu)
    assert canon(s.recent.tree_gpu_mem_mib) == canon(mem if facts.nvml_ok else None)
    models = [m for p in facts.processes for m in p.models]
    counted = [
        m
        for m in models
        if device_type(m.device) in ACCELERATOR_TYPES
        or any(device_type(d) in ACCELERATOR_TYPES for d in m.devices)
    ]
    assert s.recent.forward_calls == sum(m.forward_calls for m in counted)
    assert canon(s.recent.train_steps) == canon(_sum((m.train_steps for m in counted), 0))
    index = primary_model_gpu_index(facts)
    assert canon(s.recent.model_gpu_util) == canon(
        next((g.util for g in facts.gpus if g.index == index), None)
    )
    infos = [proc_info.get(p.pid) for p in facts.processes] if proc_info else []
    want_job = (
        _sum(i.cpu_percent for i in infos if i is not None),
        _sum(i.rss_mib for i in infos if i is not None),
        _sum(m.forward_rate_hz for m in models),
        _sum(m.step_rate_hz for m in models),
    )
    assert s.job == tuple(map(_num, want_job))


def test_each_polls_history_sample_is_its_facts_sums():
    def check(now, tree, reads, nvml, facts, collector, kept):
        check_sample(now, facts, collector.proc_info)

    for seed in SEEDS[:60]:
        run_polls(seed, check)


_floats = (
    st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 2.5, 1e308])
)
_ints = st.none() | st.integers(0, 2**40)
_models = st.builds(
    ModelFacts,
    st.just("m"),
    st.sampled_from([None, *DEVICES]),
    st.lists(st.sampled_from(DEVICES), max_size=3).map(tuple),
    forward_calls=st.integers(0, 2**40),
    forward_rate_hz=_floats,
    train_steps=_ints,
    step_rate_hz=_floats,
)
_rows = st.builds(
    ProcGpu,
    st.integers(0, 3),
    _floats,
    st.none() | st.integers(0, 100) | _floats,
    st.none() | st.integers(0, 1),
)
_gpus = st.builds(GpuFacts, st.integers(0, 3), util=_floats, mem_used_mib=_floats, mig_mode=st.none() | st.booleans(),
                  sm_activity_fraction=_floats, pcie_tx_bytes_per_s=_floats)  # fmt: skip


@st.composite
def sample_inputs(draw):
    pids = draw(st.lists(st.integers(1, 50), unique=True, max_size=6))
    processes = tuple(
        ProcessFacts(
            pid=pid,
            models=tuple(draw(st.lists(_models, max_size=3))),
            gpu=tuple(draw(st.lists(_rows, max_size=3))),
        )
        for pid in pids
    )
    facts = Facts(
        target_pid=1,
        processes=processes,
        nvml_ok=draw(st.booleans()),
        gpus=tuple(draw(st.lists(_gpus, max_size=4))),
    )
    infos = {
        pid: replace(proc_info(pid), cpu_percent=draw(_floats), rss_mib=draw(_floats))
        for pid in pids
        if draw(st.booleans())
    }
    now = draw(st.sampled_from([1000.0, 1.5e9, -0.0, math.inf]))
    return now, facts, draw(st.none() | st.just(infos))


@settings(max_examples=examples(600), deadline=None)
@given(sample_inputs())
def test_a_history_sample_is_its_facts_rows_and_sums(inputs):
    check_sample(*inputs)


def test_a_process_that_execs_has_the_flags_of_its_new_command_line():
    """A spawned child is forked (the parent's command line) and then execs `python -c "from
    multiprocessing.spawn import spawn_main ..."`: a poll in between must not leave it flagged as
    no multiprocessing child while its read, its place in the tree and its NVML rows stay."""
    collector = c.FactCollector(100, Rules(), visible)
    nvml = NvmlSnapshot(ok=True, devices=[])
    forked = proc_info(100, ("python", "train.py"))
    spawned = replace(
        forked, cmdline=("python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()")
    )
    for info in (forked, spawned):
        facts = collector.facts(1000.0, TreeSnapshot(100, True, (info,)), {}, nvml, [])
    assert facts.processes[0].mp_child is True
