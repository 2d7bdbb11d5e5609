"""Sources -> facts and history samples (sidecar/poll/collect.py, sidecar/poll/history.py) over random and
hostile payloads, NVML snapshots and whole polls of several jobs, held to their specification:

- every value a process publishes is typed and clipped as collect's helpers (_str, _int, _float,
  _bool, _names, _shape, _loader_settings, ...) do, each helper as its docstring says (the model and
  process builders write the helpers out for speed: each field must still be the helper's result,
  of the same type, or raise what the helper raises);
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

from probe_wire.schema import MODEL_COLLECTED, PUBLISH_FAILED
from sidecar.documents import bounds
from sidecar.documents.bounds import ELLIPSIS, MAX_ID_CHARS, MAX_TEXT_CHARS
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
    MigFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
)
from tests.helpers.collect_inputs import DEVICES, Dict, Draw, Int, Str
from tests.helpers.collect_inputs import proc_info as _proc
from tests.helpers.exact import canon, outcome
from tests.helpers.hypothesis_profiles import examples


def test_canon_tells_apart_what_equality_does_not():
    for a, b in [(1, True), (1, 1.0), (0.0, -0.0), ((1,), [1]), ({1: 0, 2: 0}, {2: 0, 1: 0}), ("a", None)]:
        assert a != b or canon(a) != canon(b)
        assert canon(a) != canon(b)
    assert canon(float("nan")) == canon(-float("nan"))
    assert canon(ModelFacts("m", "cuda:0")) == canon(ModelFacts("m", "cuda:0"))


_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e308, -1e308, 0.5])
_ints = st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, -1, 255, 256, 2**63])
_texts = (
    st.text(max_size=8)
    | st.sampled_from(DEVICES + ["train", "nccl", "rank", "ResNet", "lightning"])
    | st.integers(60, 300).map(lambda n: "é" * n)  # longer than the 64 and 256 character bounds
)
atoms = (
    st.none()
    | st.booleans()
    | _ints
    | _floats
    | _texts
    | _ints.map(Int)
    | _texts.map(Str)
    | st.just(b"bytes")
)
junk = st.recursive(atoms, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)


def maybe(strategy):
    """A value as the schema has it, or anything at all."""
    return st.one_of(strategy, strategy, strategy, junk)


def _dicts(required: dict, optional: dict):
    plain = st.fixed_dictionaries(required, optional=optional)
    return plain | plain.map(Dict)


_loader = _dicts({}, {k: maybe(st.none() | _ints | st.booleans()) for k in ("num_workers", "pin_memory", "persistent_workers", "batch_size", "prefetch_factor")})
_model = _dicts(
    {},
    {
        "name": maybe(_texts),
        "class": maybe(_texts),
        "params": maybe(_ints),
        "device": maybe(st.sampled_from(DEVICES) | _texts),
        "devices": maybe(st.lists(st.sampled_from(DEVICES) | _texts | atoms, max_size=12)),
        "input_device": maybe(st.none() | st.sampled_from(DEVICES)),
        "forward_calls": maybe(_ints),
        "forward_rate_hz": maybe(_floats),
        "last_forward_time": maybe(_floats),
        "data_wait_fraction": maybe(st.none() | _floats),
        "train_steps": maybe(st.none() | _ints),
        "step_rate_hz": maybe(st.none() | _floats),
        "step_source": maybe(st.none() | _texts),
        "shared_memory": maybe(st.none() | st.booleans()),
        "param_dtypes": maybe(st.none() | st.lists(_texts | atoms, max_size=4)),
        "autocast": maybe(st.none() | _texts),
        "input_shape": maybe(st.none() | st.lists(_ints | atoms, max_size=4)),
        "loader_settings": maybe(st.none() | _loader),
        "data_wait_batches": maybe(st.none() | _ints),
    },
)
_errors = st.lists(
    _dicts({}, {"where": maybe(st.sampled_from([PUBLISH_FAILED, MODEL_COLLECTED, "other"])), "message": maybe(_texts)})
    | atoms,
    max_size=4,
)
_steps = _dicts(
    {},
    {
        k: maybe(st.none() | _floats | _ints)
        for k in ("window_s", "steps", "step_s", "data_wait_fraction", "forward_fraction", "optimizer_fraction", "other_fraction")
    },
)
_math = _dicts({}, {k: maybe(st.none() | st.booleans() | _texts) for k in ("allow_tf32_matmul", "cudnn_allow_tf32", "float32_matmul_precision", "cudnn_benchmark")})
_memory = st.lists(_dicts({}, {"device": maybe(_texts), "reserved_bytes": maybe(_ints | _floats)}) | atoms, max_size=3)
payloads = _dicts(
    {},
    {
        "schema": st.just(1),
        "pid": _ints,
        "role": maybe(st.sampled_from(["main", "dataloader-worker", "rank", "child"]) | _texts),
        "worker_id": maybe(st.none() | _ints),
        "rank": maybe(st.none() | _ints),
        "local_rank": maybe(st.none() | _ints),
        "world_size": maybe(st.none() | _ints),
        "dist_backend": maybe(st.none() | _texts),
        "loader": maybe(st.none() | _texts),
        "runtime": maybe(st.just({"torch": "2.5", "devices": [{"index": 0, "uuid": "GPU-0"}]}) | st.just({})),
        "memory": maybe(_memory),
        "models": maybe(st.lists(_model | atoms, max_size=4)),
        "events": maybe(st.just([])),
        "errors": maybe(_errors),
        "steps": maybe(st.none() | _steps),
        "math": maybe(st.none() | _math),
        "syncs_per_step": maybe(st.none() | _floats),
        "hostname": maybe(st.none() | _texts),
    },
)
# Payloads whose lists are lists (anything inside them): the old code raised for no part of them.
poll_payloads = payloads.map(
    lambda p: p if isinstance(p, Dict) else {**p, **{k: [] for k in ("models", "memory", "errors") if not isinstance(p.get(k), list | None)}}
)
any_payload = payloads | st.sampled_from([None, {}, [], 0, "", [1], "payload", 7])
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
# The helpers: a value from a process, typed and clipped (sidecar/documents/bounds.py)
# ---------------------------------------------------------------------------------------------
def test_each_helper_types_and_clips_as_its_docstring_says():
    long_text, long_id = "é" * (MAX_TEXT_CHARS + 1), "d" * (MAX_ID_CHARS + 1)
    # A string, clipped (its last character an ellipsis when cut); anything else None.
    assert c._str("abc") == "abc" and c._str(Str("abc")) == "abc" and c._str(5) is None and c._str(b"x") is None
    assert c._str(long_text) == "é" * (MAX_TEXT_CHARS - 1) + ELLIPSIS
    assert c._str(long_id, MAX_ID_CHARS) == "d" * (MAX_ID_CHARS - 1) + ELLIPSIS
    assert c._str("d" * MAX_ID_CHARS, MAX_ID_CHARS) == "d" * MAX_ID_CHARS
    # Numbers: a bool is neither an int nor a float; an int subclass is an int.
    assert c._int(3) == 3 and c._int(Int(3)) == 3 and c._int(True) is None and c._int(3.0) is None
    assert canon(c._float(3)) == canon(3.0) and c._float(True) is None and c._float("1") is None
    assert c._bool(True) is True and c._bool(1) is None
    assert c._fraction(1.5) == 1.0 and c._fraction(-0.5) == 0.0 and c._fraction(0.25) == 0.25
    assert c._count(-3) == 0 and c._count(Int(5)) == 5 and c._count(True) is None
    assert c._nonnegative(-2) == 0.0 and c._nonnegative(2) == 2.0 and c._nonnegative(None) is None
    assert c._names(["float32", 5, long_id]) == ("float32", "d" * (MAX_ID_CHARS - 1) + ELLIPSIS)
    assert c._names("float32") == () and c._shape([1, True, 2.0, 3]) == (1, 3) and c._shape((1, 2)) is None
    assert c._loader_settings({"num_workers": True, "pin_memory": True, "batch_size": Int(8)}) == LoaderSettings(
        None, True, None, 8, None
    )
    assert c._loader_settings([]) is None
    assert c._devices(["cuda:0", "cuda:0", 5, "cpu", long_id]) == ("cuda:0", "cpu", "d" * (MAX_ID_CHARS - 1) + ELLIPSIS)
    many = [f"cuda:{i}" for i in range(bounds.MAX_DEVICES_SHOWN + 3)]
    assert c._devices(many) == tuple(many[: bounds.MAX_DEVICES_SHOWN]) and c._devices("cuda:0") == ()


def expected_model(m: dict) -> ModelFacts:
    """A model's facts as the helpers make them, field by field (ModelFacts's own names)."""
    g = m.get
    return ModelFacts(
        name=c._str(g("name")) or c._str(g("class")) or "model",
        device=c._str(g("device"), MAX_ID_CHARS),
        devices=c._devices(g("devices")),
        params=c._int(g("params")),
        input_device=c._str(g("input_device"), MAX_ID_CHARS),
        forward_calls=c._int(g("forward_calls")) or 0,
        forward_rate_hz=c._float(g("forward_rate_hz")),
        data_wait_fraction=c._float(g("data_wait_fraction")),
        train_steps=c._int(g("train_steps")),
        step_rate_hz=c._float(g("step_rate_hz")),
        step_source=c._str(g("step_source")),
        shared_memory=c._bool(g("shared_memory")),
        param_dtypes=c._names(g("param_dtypes")),
        autocast=c._str(g("autocast"), MAX_ID_CHARS),
        input_shape=c._shape(g("input_shape")),
        loader_settings=c._loader_settings(g("loader_settings")),
        compiled_uncounted=g("compiled_uncounted") is True,
        data_wait_batches=c._count(g("data_wait_batches")),
    )


def expected_models(payload) -> tuple[ModelFacts, ...]:
    """Each dict of the payload's models, in order (anything else in the list skipped)."""
    return tuple(expected_model(m) for m in payload.get("models") or () if isinstance(m, dict))


def expected_process(proc: ProcInfo, read: ProbeRead | None, gpu, target_pid: int) -> ProcessFacts:
    payload = read.payload if read is not None else None
    p = payload or {}
    g = p.get
    errors = g("errors")
    return ProcessFacts(
        pid=proc.pid,
        ppid=proc.ppid,
        depth=proc.depth,
        name=bounds.clip(proc.name) if isinstance(proc.name, str) else proc.name,
        is_target=proc.pid == target_pid,
        probe_state=read.state if read is not None else "missing",
        probe_error=c._str(read.error) if read is not None else None,
        probe_unreadable=bool(read and read.unreadable),
        role=c._str(g("role"), MAX_ID_CHARS),
        worker_id=c._int(g("worker_id")),
        rank=c._int(g("rank")),
        local_rank=c._int(g("local_rank")),
        world_size=c._int(g("world_size")),
        dist_backend=c._str(g("dist_backend"), MAX_ID_CHARS),
        loader=c._str(g("loader"), MAX_ID_CHARS),
        mp_helper=is_mp_helper(proc.cmdline),
        mp_child=is_mp_child(proc.cmdline),
        publish_failure=c._publish_failure(errors) if payload else None,
        collected_models=c._collected_models(errors) if payload else (),
        runtime=g("runtime") if isinstance(g("runtime"), dict) else None,
        cuda_memory_mib=c._reserved_mib(g("memory")) if payload else None,
        models=expected_models(p) if payload else (),
        gpu=gpu,
        steps=c.step_breakdown(g("steps")),
        math=c.math_settings(g("math")),
        syncs_per_step=c._nonnegative(g("syncs_per_step")),
        hostname=c._str(g("hostname")),
    )


@settings(max_examples=examples(400), deadline=None)
@given(
    payload=any_payload,
    state=st.sampled_from(["ok", "busy", "stale"]),
    error=maybe(st.none() | _texts),
    unreadable=st.booleans(),
    cmdline=cmdlines,
    name=maybe(_texts),
    no_read=st.booleans(),
)
def test_a_processs_facts_are_its_payloads_values_typed_and_clipped(payload, state, error, unreadable, cmdline, name, no_read):
    read = None if no_read else ProbeRead(5, state, payload, error, unreadable)
    proc = _proc(5, cmdline, name)
    gpu = (ProcGpu(0, 100.0, 5), ProcGpu(1, None, None, 2))
    assert outcome(c.process_facts, proc, read, gpu, 5) == outcome(expected_process, proc, read, gpu, 5)


def test_seeded_hostile_payloads_give_their_values_typed_and_clipped():
    """Payloads of collect_inputs.Draw (the same on every run) on a spawned child's command line."""
    proc = _proc(5, ("python", "-c", "from multiprocessing.spawn import x"))
    for seed in range(1500):
        read = ProbeRead(5, "ok", Draw(seed).payload(), None, False)
        assert outcome(c.process_facts, proc, read, (), 5) == outcome(expected_process, proc, read, (), 5), seed


@settings(max_examples=examples(400), deadline=None)
@given(models=maybe(st.lists(_model | atoms, max_size=5)))
def test_a_payloads_models_are_its_values_typed_and_clipped(models):
    payload = {"models": models}
    assert outcome(c.models_from_payload, payload) == outcome(expected_models, payload)


@pytest.mark.parametrize(
    "model",
    [
        {"name": "", "class": "C", "devices": ["c" * 65]},  # one device, too long: clipped
        {"name": "n" * 257, "devices": [Str("cuda:0")]},
        {"name": Str("n"), "device": "d" * 65, "input_device": "i" * 65, "autocast": "a" * 65, "step_source": "s" * 257},
        {"params": True, "forward_calls": False, "train_steps": Int(3), "forward_rate_hz": 1, "step_rate_hz": True},
        {"data_wait_fraction": Int(1), "shared_memory": 1, "param_dtypes": "float32", "input_shape": (1, 2)},
        {"devices": ["cuda:0", "cuda:0", 5, "cpu"], "loader_settings": Dict(num_workers=True)},
        {"data_wait_batches": -3},
        {"data_wait_batches": Int(5)},
        {"data_wait_batches": True},
        {"compiled_uncounted": 1},
        Dict(name="sub", devices=["cuda:1"]),
    ],
)
def test_models_with_values_the_fast_paths_do_not_take(model):
    payload = {"models": [model]}
    assert outcome(c.models_from_payload, payload) == outcome(expected_models, payload)


@pytest.mark.parametrize(
    "payload",
    [
        {"role": "r" * 65, "worker_id": True, "rank": Int(2), "local_rank": 1.0, "world_size": False},
        {"dist_backend": "", "loader": Str("l"), "runtime": Dict(), "errors": None, "memory": None, "models": None},
        {"errors": [{"where": PUBLISH_FAILED, "message": ""}], "syncs_per_step": -0.0, "steps": {}, "math": {}},
        {"errors": [{"where": MODEL_COLLECTED, "message": "B"}, {"where": MODEL_COLLECTED, "message": "A"}]},
        {"errors": "", "memory": "", "models": ""},
        Dict(role="rank", models=[{"name": "m"}]),
    ],
)
def test_payloads_with_values_the_fast_paths_do_not_take(payload):
    args = (_proc(5), ProbeRead(5, "ok", payload, None, False), (), 5)
    assert outcome(c.process_facts, *args) == outcome(expected_process, *args)


def test_a_probes_payload_takes_the_fast_paths_and_gives_its_values():
    payload = {
        "role": "rank",
        "worker_id": None,
        "rank": 1,
        "local_rank": 1,
        "world_size": 8,
        "dist_backend": "nccl",
        "loader": None,
        "runtime": {"torch": "2.5"},
        "memory": [{"device": "cuda:1", "reserved_bytes": 8 << 30}],
        "models": [
            {
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
                "loader_settings": {"num_workers": 4, "pin_memory": True, "persistent_workers": False, "batch_size": 8},
            }
        ],
        "errors": [],
        "steps": None,
        "math": None,
        "syncs_per_step": None,
        "hostname": "gpu-node-07",
    }
    read = ProbeRead(5, "ok", payload, None, False)
    got = c.process_facts(_proc(5), read, (), 5)
    assert canon(got) == canon(expected_process(_proc(5), read, (), 5))
    assert got.models[0].devices == ("cuda:1",) and got.rank == 1 and got.cuda_memory_mib == 8192.0
    assert got.hostname == "gpu-node-07"
    m = got.models[0]
    assert (m.name, m.params, m.input_shape, m.loader_settings.num_workers) == ("ResNet50", 25_557_032, (8, 3, 224, 224), 4)


def test_with_gpu_sets_every_field_process_facts_takes():
    # _with_gpu passes ProcessFacts' fields by position: each one, in __init__'s order.
    init = [f for f in fields(ProcessFacts) if f.init]
    assert c._PF_FIELDS == tuple(f.name for f in init)
    assert not any(f.kw_only for f in init)
    payload = {"role": "rank", "models": [{"name": "m", "device": "cuda:0", "forward_calls": 3}], "runtime": {}}
    read = ProbeRead(7, "ok", payload, None, False)
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
