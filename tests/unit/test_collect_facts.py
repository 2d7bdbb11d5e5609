"""Sources -> facts and history samples (sidecar/poll/collect.py, sidecar/poll/history.py) over drawn
payloads, NVML snapshots and whole polls of several jobs, held to their specification:

- a process's facts are its payload record's values (probe_wire.records, as the segment source hands
  them up: of the schema's types, with what the schema lets through from a process: long strings,
  negative and huge numbers, a device named twice), each string clipped and each share clamped as
  collect's docstrings say (the model and process builders write that out for speed: each field must
  still be the specification's value, of the same type);
- an NVML device's facts are its fields, a snapshot split by the job's tree gives each tree pid its
  rows and counts the others', a history row packs NaN for "no value";
- payloads drawn from fixed seeds (collect_inputs.Draw) as well as by hypothesis;
- whole polls and history samples are tests/unit/test_collect_polls.py's.
"""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probe_wire.records import ModelRecord, ProbePayload
from probe_wire.schema import MODEL_COLLECTED, PUBLISH_FAILED, ROLES, empty_runtime
from sidecar.documents import bounds
from sidecar.documents.bounds import ELLIPSIS, MAX_ID_CHARS, clip, clip_opt
from sidecar.poll import collect as c
from sidecar.poll import history, samples
from sidecar.sources.lineage import is_mp_child, is_mp_helper
from sidecar.sources.nvml import GpuInfo, GpuProcess, MigDevice, NvmlSnapshot
from sidecar.sources.proctree import ProcInfo
from sidecar.sources.segments import ProbeRead
from sidecar.verdict import (
    Facts,
    GpuFacts,
    LoaderSettings,
    MathSettings,
    MigFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    StepBreakdown,
)
from tests.helpers.collect_inputs import DEVICES, Draw
from tests.helpers.collect_inputs import proc_info as _proc
from tests.helpers.exact import canon, outcome
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.records import FULL_RUNTIME, payload, record, record_of


def test_canon_tells_apart_what_equality_does_not():
    for a, b in [(1, True), (1, 1.0), (0.0, -0.0), ((1,), [1]), ({1: 0, 2: 0}, {2: 0, 1: 0}), ("a", None)]:
        assert a != b or canon(a) != canon(b)
        assert canon(a) != canon(b)
    assert canon(float("nan")) == canon(-float("nan"))
    assert canon(ModelFacts("m", "cuda:0")) == canon(ModelFacts("m", "cuda:0"))


# Any value at all, for what is not a payload (NVML's devices, history rows).
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e308, -1e308, 0.5])
_ints = st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, -1, 255, 256, 2**63])
_texts = (
    st.text(max_size=8)
    | st.sampled_from(DEVICES + ["train", "nccl", "rank", "ResNet", "lightning"])
    | st.integers(60, 300).map(lambda n: "é" * n)  # longer than the 64 and 256 character bounds
)

# What a payload's schema lets through: msgpack's ints, finite floats, strings of any characters.
_wire_ints = st.integers(-(2**63), 2**64 - 1) | st.sampled_from([0, 1, -1, -3, 255, 256, 2**63])
_wire_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 1e308, -1e308, 0.5, 1.5, -0.5])
_bools = st.booleans()


def opt(strategy):
    return st.none() | strategy


_loader = st.fixed_dictionaries(
    {k: opt(_wire_ints) for k in ("num_workers", "batch_size", "prefetch_factor")}
    | {k: opt(_bools) for k in ("pin_memory", "persistent_workers")}
)
_model = st.fixed_dictionaries(
    {
        "name": _texts,
        "class": _texts,
        "params": _wire_ints,
        "device": st.sampled_from(DEVICES) | _texts,
        "devices": st.lists(st.sampled_from(DEVICES) | _texts, max_size=12),
        "input_device": opt(st.sampled_from(DEVICES) | _texts),
        "forward_calls": _wire_ints,
        "forward_rate_hz": _wire_floats,
        "last_forward_time": opt(_wire_floats),
        "data_wait_fraction": opt(_wire_floats),
        "data_wait_s": opt(_wire_floats),
        "step_s": opt(_wire_floats),
    },
    optional={  # added within schema 1: absent from an older probe's models
        "train_steps": opt(_wire_ints),
        "step_rate_hz": opt(_wire_floats),
        "step_source": opt(_texts),
        "shared_memory": opt(_bools),
        "param_dtypes": opt(st.lists(_texts, max_size=4)),
        "autocast": opt(_texts),
        "input_shape": opt(st.lists(_wire_ints, max_size=4)),
        "loader_settings": opt(_loader),
        "compiled_uncounted": opt(_bools),
        "data_wait_batches": opt(_wire_ints),
    },
)
_errors = st.lists(
    st.fixed_dictionaries(
        {"time": _wire_floats, "where": st.sampled_from([PUBLISH_FAILED, MODEL_COLLECTED, "hook"]), "message": _texts}
    ),
    max_size=4,
)
_steps = st.fixed_dictionaries(
    {"window_s": _wire_floats, "steps": _wire_ints}
    | {k: opt(_wire_floats) for k in ("step_s", "data_wait_fraction", "forward_fraction", "optimizer_fraction", "other_fraction")},
    optional={"backward_fraction": opt(_wire_floats)},
)
_math = st.fixed_dictionaries(
    {k: opt(_bools) for k in ("allow_tf32_matmul", "cudnn_allow_tf32", "cudnn_benchmark")}
    | {"float32_matmul_precision": opt(_texts)}
)
_memory = st.lists(
    st.fixed_dictionaries(
        {"device": _texts}
        | {k: _wire_ints for k in ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes")}
    ),
    max_size=3,
)
_payload_fields = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(ROLES),
        "worker_id": opt(_wire_ints),
        "rank": opt(_wire_ints),
        "local_rank": opt(_wire_ints),
        "world_size": opt(_wire_ints),
        "dist_backend": opt(_texts),
        "loader": opt(_texts),
        "runtime": st.sampled_from([empty_runtime(), FULL_RUNTIME]),
        "memory": _memory,
        "models": st.lists(_model, max_size=4),
        "errors": _errors,
        "steps": opt(_steps),
        "math": opt(_math),
        "syncs_per_step": opt(_wire_floats),
        "hostname": opt(_texts),
    },
)
payloads = _payload_fields.map(lambda fields: record(payload(**fields)))
cmdlines = st.sampled_from(
    [
        ("python", "train.py"),
        ("python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"),
        ("python", "-c", "from multiprocessing.resource_tracker import main;main(5)"),
        (),
        ("x" * 5000, "-c", "from multiprocessing.spawn import spawn_main"),
    ]
) | st.just(["python", "-c", "from multiprocessing.spawn import spawn_main"])


# ---------------------------------------------------------------------------------------------
# The helpers: a value from a process, clipped (sidecar/documents/bounds.py) or clamped
# ---------------------------------------------------------------------------------------------
def test_each_helper_clamps_and_clips_as_its_docstring_says():
    long_id = "d" * (MAX_ID_CHARS + 1)
    assert c._fraction(1.5) == 1.0 and c._fraction(-0.5) == 0.0 and c._fraction(0.25) == 0.25 and c._fraction(None) is None
    assert c._nonnegative(-2.0) == 0.0 and c._nonnegative(2.0) == 2.0 and c._nonnegative(None) is None
    assert c._devices(("cuda:0", "cuda:0", "cpu", long_id)) == ("cuda:0", "cpu", "d" * (MAX_ID_CHARS - 1) + ELLIPSIS)
    many = tuple(f"cuda:{i}" for i in range(bounds.MAX_DEVICES_SHOWN + 3))
    assert c._devices(many) == many[: bounds.MAX_DEVICES_SHOWN] and c._devices(()) == ()
    assert c._devices((long_id,)) == ("d" * (MAX_ID_CHARS - 1) + ELLIPSIS,)


def expected_model(m: ModelRecord) -> ModelFacts:
    """A model's facts as its record's values, field by field (ModelFacts's own names)."""
    ls = m.loader_settings
    return ModelFacts(
        name=clip(m.name) or clip(m.class_name) or "model",
        device=clip(m.device, MAX_ID_CHARS),
        devices=tuple(clip(d, MAX_ID_CHARS) for d in list(dict.fromkeys(m.devices))[: bounds.MAX_DEVICES_SHOWN]),
        params=m.params,
        input_device=clip_opt(m.input_device, MAX_ID_CHARS),
        forward_calls=m.forward_calls,
        forward_rate_hz=m.forward_rate_hz,
        data_wait_fraction=m.data_wait_fraction,
        train_steps=m.train_steps,
        step_rate_hz=m.step_rate_hz,
        step_source=clip_opt(m.step_source),
        shared_memory=m.shared_memory,
        param_dtypes=tuple(clip(d, MAX_ID_CHARS) for d in m.param_dtypes or ()),
        autocast=clip_opt(m.autocast, MAX_ID_CHARS),
        input_shape=m.input_shape,
        loader_settings=None
        if ls is None
        else LoaderSettings(ls.num_workers, ls.pin_memory, ls.persistent_workers, ls.batch_size, ls.prefetch_factor),
        compiled_uncounted=m.compiled_uncounted is True,
        data_wait_batches=None if m.data_wait_batches is None else max(0, m.data_wait_batches),
    )


def _share(x: float | None) -> float | None:
    return None if x is None else min(1.0, max(0.0, x))


def expected_payload_facts(p: ProbePayload) -> dict:
    """The facts that come from a payload, by ProcessFacts's names."""
    s, m, errors = p.steps, p.math, p.errors
    collected = {clip(e.message) for e in errors if e.where == MODEL_COLLECTED} - {""}
    return {
        "role": p.role,
        "worker_id": p.worker_id,
        "rank": p.rank,
        "local_rank": p.local_rank,
        "world_size": p.world_size,
        "dist_backend": clip_opt(p.dist_backend, MAX_ID_CHARS),
        "loader": clip_opt(p.loader, MAX_ID_CHARS),
        # The probe's fallback payload: its last error says why it could not publish.
        "publish_failure": clip(errors[-1].message) or "unknown error" if errors and errors[-1].where == PUBLISH_FAILED else None,
        "collected_models": tuple(sorted(collected))[: bounds.MAX_MODELS_SHOWN],
        "runtime": p.runtime,
        # bytes / MiB, exact for each device
        "cuda_memory_mib": sum(d.reserved_bytes / 1048576.0 for d in p.memory) if p.memory else None,
        "models": tuple(expected_model(x) for x in p.models),
        "steps": None
        if s is None
        else StepBreakdown(
            max(0.0, s.window_s),
            max(0, s.steps),
            None if s.step_s is None else max(0.0, s.step_s),
            *map(_share, (s.data_wait_fraction, s.forward_fraction, s.optimizer_fraction, s.other_fraction, s.backward_fraction)),
        ),
        "math": None
        if m is None
        else MathSettings(
            m.allow_tf32_matmul, m.cudnn_allow_tf32, clip_opt(m.float32_matmul_precision, MAX_ID_CHARS), m.cudnn_benchmark
        ),
        "syncs_per_step": None if p.syncs_per_step is None else max(0.0, p.syncs_per_step),
        "hostname": clip_opt(p.hostname),
    }


def expected_process(proc: ProcInfo, read: ProbeRead | None, gpu, target_pid: int) -> ProcessFacts:
    p = read.payload if read is not None else None
    return ProcessFacts(
        pid=proc.pid,
        ppid=proc.ppid,
        depth=proc.depth,
        name=bounds.clip(proc.name) if isinstance(proc.name, str) else proc.name,
        is_target=proc.pid == target_pid,
        probe_state=read.state if read is not None else "missing",
        probe_error=clip_opt(read.error) if read is not None else None,
        probe_unreadable=bool(read and read.unreadable),
        mp_helper=is_mp_helper(proc.cmdline),
        mp_child=is_mp_child(proc.cmdline),
        gpu=gpu,
        **({} if p is None else expected_payload_facts(p)),
    )


@settings(max_examples=examples(400), deadline=None)
@given(
    payload=opt(payloads),
    state=st.sampled_from(["ok", "busy", "stale"]),
    error=opt(_texts),
    unreadable=st.booleans(),
    cmdline=cmdlines,
    name=_texts | st.none() | st.just(5),
    no_read=st.booleans(),
)
def test_a_processs_facts_are_its_payloads_values_clipped_and_clamped(payload, state, error, unreadable, cmdline, name, no_read):
    read = None if no_read else ProbeRead(5, state, payload, error, unreadable)
    proc = _proc(5, cmdline, name)
    gpu = (ProcGpu(0, 100.0, 5), ProcGpu(1, None, None, 2))
    got = c.process_facts(proc, read, gpu, 5)
    assert canon(got) == canon(expected_process(proc, read, gpu, 5))
    assert got.runtime is (None if read is None or payload is None else payload.runtime)  # the record itself


def test_seeded_payloads_give_their_values_clipped_and_clamped():
    """Payloads of collect_inputs.Draw (the same on every run) on a spawned child's command line."""
    proc = _proc(5, ("python", "-c", "from multiprocessing.spawn import x"))
    for seed in range(1500):
        read = ProbeRead(5, "ok", Draw(seed).payload(), None, False)
        assert outcome(c.process_facts, proc, read, (), 5) == outcome(expected_process, proc, read, (), 5), seed


@pytest.mark.parametrize(
    "model",
    [
        {"name": "", "class": "C", "devices": ["c" * 65]},  # one device, too long: clipped
        {"name": "", "class": ""},  # no name at all: "model"
        {"name": "n" * 257, "devices": ["cuda:0", "cuda:0", "cpu"]},
        {"name": "n", "device": "d" * 65, "input_device": "i" * 65, "autocast": "a" * 65, "step_source": "s" * 257},
        {"param_dtypes": ["float32", "b" * 65], "input_shape": [1, -2, 2**63], "loader_settings": {
            "num_workers": -1, "pin_memory": True, "persistent_workers": None, "batch_size": 2**63, "prefetch_factor": None}},
        {"data_wait_batches": -3, "compiled_uncounted": None},
        {"data_wait_batches": 5, "compiled_uncounted": False},
        {"compiled_uncounted": True, "forward_calls": -4, "forward_rate_hz": -1.0, "data_wait_fraction": 7.0},
    ],
)
def test_models_with_values_the_fast_paths_do_not_take(model):
    p = record_of(models=[model])
    assert canon(c.models_facts(p.models)) == canon(tuple(map(expected_model, p.models)))


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "rank", "worker_id": -1, "rank": 2**63, "local_rank": -7, "world_size": 0},
        {"dist_backend": "", "loader": "l" * 65, "hostname": "h" * 257, "syncs_per_step": -0.0},
        {"errors": [{"time": 1.0, "where": PUBLISH_FAILED, "message": ""}], "steps": {}, "math": {}},
        {"errors": [{"time": 1.0, "where": PUBLISH_FAILED, "message": "m" * 300}, {"time": 2.0, "where": "hook", "message": "x"}]},
        {"errors": [{"time": 1.0, "where": MODEL_COLLECTED, "message": "B"}, {"time": 1.0, "where": MODEL_COLLECTED, "message": "A"},
                    {"time": 1.0, "where": MODEL_COLLECTED, "message": ""}]},
        {"memory": [{"device": "cuda:0", "allocated_bytes": 0, "reserved_bytes": 3, "peak_allocated_bytes": 0, "peak_reserved_bytes": 0},
                    {"device": "cuda:1", "allocated_bytes": 0, "reserved_bytes": -1, "peak_allocated_bytes": 0, "peak_reserved_bytes": 0}]},
        {"steps": {"window_s": -5.0, "steps": -3, "step_s": -1.0, "data_wait_fraction": 7.0, "forward_fraction": -2.0}},
        {"math": {"float32_matmul_precision": "p" * 65}},
    ],
)  # fmt: skip
def test_payloads_with_values_the_fast_paths_do_not_take(fields):
    args = (_proc(5), ProbeRead(5, "ok", record_of(**fields), None, False), (), 5)
    assert outcome(c.process_facts, *args) == outcome(expected_process, *args)


def test_a_probes_payload_takes_the_fast_paths_and_gives_its_values():
    model = {
        "name": "ResNet50",
        "class": "ResNet",
        "params": 25_557_032,
        "device": "cuda:1",
        "devices": ["cuda:1"],
        "input_device": "cuda:1",
        "forward_calls": 48,
        "forward_rate_hz": 20.0,
        "data_wait_fraction": 0.05,
        "train_steps": 48,
        "step_rate_hz": 20.0,
        "step_source": "lightning",
        "shared_memory": False,
        "param_dtypes": ["float32"],
        "autocast": None,
        "input_shape": [8, 3, 224, 224],
        "loader_settings": {"num_workers": 4, "pin_memory": True, "persistent_workers": False, "batch_size": 8, "prefetch_factor": 2},
    }
    memory = [{"device": "cuda:1", "allocated_bytes": 0, "reserved_bytes": 8 << 30, "peak_allocated_bytes": 0, "peak_reserved_bytes": 0}]
    p = record_of(role="rank", rank=1, local_rank=1, world_size=8, dist_backend="nccl", runtime=FULL_RUNTIME,
                  memory=memory, models=[model], hostname="gpu-node-07")  # fmt: skip
    read = ProbeRead(5, "ok", p, None, False)
    got = c.process_facts(_proc(5), read, (), 5)
    assert canon(got) == canon(expected_process(_proc(5), read, (), 5))
    assert got.models[0].devices == ("cuda:1",) and got.rank == 1 and got.cuda_memory_mib == 8192.0
    assert got.hostname == "gpu-node-07" and got.runtime is p.runtime and got.runtime.torch == "2.5.1"
    m = got.models[0]
    assert (m.name, m.params, m.input_shape, m.loader_settings.num_workers) == ("ResNet50", 25_557_032, (8, 3, 224, 224), 4)


def test_with_gpu_sets_every_field_process_facts_takes():
    # _with_gpu passes ProcessFacts' fields by position: each one, in __init__'s order.
    init = [f for f in fields(ProcessFacts) if f.init]
    assert c._PF_FIELDS == tuple(f.name for f in init)
    assert not any(f.kw_only for f in init)
    read = ProbeRead(7, "ok", record_of(7, role="rank", models=[{"name": "m", "device": "cuda:0", "forward_calls": 3}]), None, False)
    pf = c.process_facts(_proc(7), read, (ProcGpu(0, 1.0, 1),), 7)
    moved = _proc(7, ("python", "-c", "from multiprocessing.spawn import spawn_main"), "renamed", 3, 2)
    gpu = (ProcGpu(1, 2.0, None),)
    assert canon(c._with_gpu(pf, moved, gpu, 8)) == canon(c.process_facts(moved, read, gpu, 8))


# ---------------------------------------------------------------------------------------------
# NVML: a device's facts, a snapshot split by the job's tree
# ---------------------------------------------------------------------------------------------
@st.composite
def snapshots(draw) -> NvmlSnapshot:
    pids = draw(st.lists(st.integers(1, 40), min_size=1, max_size=12))
    n = draw(st.integers(0, 6))
    indices = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n, unique=not draw(st.integers(0, 9)) == 0))
    devices = []
    for index in indices:
        mig = draw(st.booleans())
        rows = [
            GpuProcess(
                draw(st.sampled_from(pids)),  # a pid on several GPUs, or twice on one (MIG instances)
                draw(st.none() | st.floats(0, 1e6) | st.integers(0, 10**6)),
                draw(st.none() | st.integers(0, 100)),
                None,
                ("compute",),
                mig_index=draw(st.integers(0, 6)) if mig else None,
            )
            for _ in range(draw(st.integers(0, 8)))
        ]
        devices.append(GpuInfo(index, uuid=f"GPU-{index}", processes=rows, mig_mode=mig, util_gpu=draw(st.none() | st.integers(0, 100))))
    return NvmlSnapshot(ok=draw(st.integers(0, 9)) > 0, devices=devices)


@settings(max_examples=examples(300), deadline=None)
@given(nvml=snapshots(), trees=st.lists(st.sets(st.integers(1, 45), max_size=14), min_size=1, max_size=4))
def test_a_snapshot_split_by_a_tree_gives_each_tree_pid_its_rows_and_counts_the_rest(nvml, trees):
    devices = nvml.devices if nvml.ok else []
    made = tuple(c.gpu_facts(d) for d in devices)
    for tree in trees:
        for given_gpus in (made, None):
            got = c.nvml_facts(nvml, tree, given_gpus)
            # The devices as facts: the caller's when it made them (discovery, once a poll), else made here.
            assert got.gpus is made if given_gpus is made else canon(got.gpus) == canon(made)
            rows = [(d, gp) for d in devices for gp in d.processes]
            assert got.pids == {gp.pid for _, gp in rows}
            want = {}
            for d, gp in rows:  # in the snapshot's order, devices then their rows
                if gp.pid in tree:
                    want.setdefault(gp.pid, []).append(ProcGpu(d.index, gp.used_mib, gp.sm_util, gp.mig_index))
            assert canon(got.by_pid) == canon(want)
            others = {}
            for d, gp in rows:
                if gp.pid not in tree:
                    others[d.index] = others.get(d.index, 0) + 1
            assert got.other_processes == others and list(got.other_processes) == list(others)


@st.composite
def devices(draw) -> GpuInfo:
    """An NVML device with every field drawn, each its own value: a field read from the wrong
    position or name shows."""
    values = st.none() | _floats | _ints | _texts | st.booleans() | st.tuples(_texts)
    d = GpuInfo(draw(_ints))
    for f in fields(GpuInfo):
        if f.name not in ("index", "field_errors", "processes", "mig_devices"):
            setattr(d, f.name, draw(values))
    d.field_errors = draw(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=5))
    d.mig_devices = [
        MigDevice(draw(_ints), draw(values), draw(values), draw(values), draw(values), draw(values))
        for _ in range(draw(st.integers(0, 3)))
    ]
    return d


# GpuFacts's fields read from an NVML device under another name; the others carry the same name.
_RENAMED = {"util": "util_gpu", "mem_util": "util_mem"}


@settings(max_examples=examples(300), deadline=None)
@given(d=devices())
def test_a_devices_facts_are_its_fields(d):
    got = c.gpu_facts(d)
    for f in fields(GpuFacts):
        value = getattr(got, f.name)
        if f.name == "field_errors":  # sorted, a tuple of (field, why)
            assert value == tuple(sorted(d.field_errors.items()))
        elif f.name == "mig_devices":
            want = tuple(
                MigFacts(m.index, m.uuid, m.gpu_instance_id, m.compute_instance_id, m.mem_used_mib, m.mem_total_mib)
                for m in d.mig_devices
            )
            assert canon(value) == canon(want)
        else:
            assert canon(value) == canon(getattr(d, _RENAMED.get(f.name, f.name))), f.name


# Values equal to one another that a document shows differently (a type, a sign, a NaN).
_LOOKALIKES = [0, 0.0, -0.0, False, 1, 1.0, True, None, float("nan")]


@settings(max_examples=examples(300), deadline=None)
@given(
    d=devices(),
    changes=st.dictionaries(
        st.sampled_from([f.name for f in fields(GpuInfo) if f.name not in ("index", "field_errors", "processes", "mig_devices")]),
        st.tuples(st.sampled_from(_LOOKALIKES), st.sampled_from(_LOOKALIKES)),  # (before, now)
        max_size=3,
    ),
)
def test_a_device_that_reads_exactly_the_same_gives_the_last_facts_and_any_other_new_ones(d, changes):
    """The last poll's facts of a device again only for exactly its values: what a fresh gpu_facts
    makes, canonically, whatever came before; the very object when nothing changed and no MIG."""
    with_mig = c.gpu_facts(d)
    assert (c.gpu_facts(d, with_mig) is with_mig) == (not d.mig_devices)  # MIG devices: made afresh
    d.mig_devices = []
    for name, (before, _now) in changes.items():
        setattr(d, name, before)
    last = c.gpu_facts(d)
    now = GpuInfo(d.index, field_errors=dict(d.field_errors))
    for f in fields(GpuInfo):
        if f.name not in ("index", "field_errors", "processes", "mig_devices"):
            setattr(now, f.name, changes[f.name][1] if f.name in changes else getattr(d, f.name))
    assert canon(c.gpu_facts(now, last)) == canon(c.gpu_facts(now))
    snap = NvmlSnapshot(ok=True, devices=[d])
    first = c.nvml_facts(snap, set())
    again = c.nvml_facts(snap, set(), last_gpus=first.gpus)
    assert again.gpus is first.gpus and canon(again.gpus) == canon(first.gpus)


# ---------------------------------------------------------------------------------------------
# History rows and samples
# ---------------------------------------------------------------------------------------------
_values = st.none() | _floats | st.integers(-(2**40), 2**40) | st.booleans()


@settings(max_examples=examples(500), deadline=None)
@given(rows=st.lists(st.lists(_values, max_size=5), max_size=6))
def test_pack_is_each_value_as_a_double_nan_for_none(rows):
    """history.pack: "rows as doubles, NaN for 'no value'" (None, and a NaN or infinite value)."""
    got = history.pack(rows)
    want = [math.nan if v is None or not math.isfinite(v) else float(v) for row in rows for v in row]
    assert got.typecode == "d" and canon(list(got)) == canon(want)


@pytest.mark.parametrize("sm", [-0.0, 0.0, 5, True, 2.5, None, math.nan, math.inf])
@pytest.mark.parametrize("rows", [1, 2])
def test_a_processs_utilisation_is_the_sum_of_its_rows(sm, rows):
    # A process's SM % is the sum of its rows' (sum() adds one to 0: -0.0 is 0.0, True is 1); the
    # job's, the sum of its processes'. No row with a figure: none.
    gpu = tuple(ProcGpu(i, 10.0, sm) for i in range(rows))
    facts = Facts(target_pid=1, processes=(ProcessFacts(pid=1, gpu=gpu),), nvml_ok=True, gpus=(GpuFacts(0),))
    sample = samples.history_sample(1.0, facts, None)
    want = None if sm is None else sum([sm] * rows)
    # No figure from a listed process: NVML's "no recent sample", an idle GPU (not on MIG): 0.
    assert canon(sample.recent.tree_sm_util) == canon(0.0 if want is None else 0.0 + want)
    packed = list(sample._processes)  # pid, memory, SM %: a row as pack makes it
    assert canon(packed) == canon(list(history.pack(((1, 10.0 * rows, want),))))
