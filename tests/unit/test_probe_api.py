"""The public API in this very process: register real models, read our own segment back.

The probe is a per-process singleton, so these tests share it: each uses models of its own (and
unique names) and unregisters them; the module's teardown unlinks the test process's segment.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import warnings
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402
import probe._models as probe_models  # noqa: E402
from hostfs.procid import process_start_ticks  # noqa: E402
from probe._state import PROBE  # noqa: E402
from probe.hooks import ProbeWorkerInit  # noqa: E402
from probe_wire import read_segment, segment_path, validate_payload  # noqa: E402
from probe_wire.reader import CLOSED_ERROR  # noqa: E402
from tests.helpers.in_process_probe import stop_in_process_probe  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def probe_enabled():
    if not PROBE.enabled:
        pytest.skip(f"the probe is off in this process: {PROBE.disabled_reason}")
    yield
    assert stop_in_process_probe() in (None, CLOSED_ERROR)  # nothing left, or its own closed segment


@pytest.fixture
def keep():
    """Register through this: everything registered is unregistered after the test."""
    models = []

    def _register(model, **kw):
        models.append(model)
        return probe.register(model, **kw)

    yield _register
    for m in models:
        probe.unregister(m)
    # Freed now, not when pytest drops the fixture values after every teardown: a DDP model's Reducer
    # must not outlive its process group (see test_distributed_data_parallel_and_rank_role).
    models.clear()


def read_self() -> dict:
    r = read_segment(os.getpid())
    assert r.state == "ok", r.error
    return r.payload


def entry(name: str, payload: dict | None = None) -> dict:
    payload = payload or read_self()
    found = [m for m in payload["models"] if m["name"] == name]
    assert len(found) == 1, [m["name"] for m in payload["models"]]
    return found[0]


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


class Passthrough(torch.nn.Module):
    """No parameters; accepts anything, so inputs can sit on any device."""

    def forward(self, *args, **kwargs):
        return args, kwargs


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


# -------------------------------------------------------------------------------------------------


def test_every_field_for_a_cpu_model(keep):
    model = mlp()
    t0 = time.time()
    assert keep(model, name="api-cpu") is model
    x = torch.randn(3, 4)
    for _ in range(3):
        out = model(x)
    assert out.shape == (3, 2)
    probe.refresh()
    r = read_segment(os.getpid())
    assert r.state == "ok", r.error
    p = r.payload
    assert p["schema"] == 1
    assert (p["pid"], p["ppid"]) == (os.getpid(), os.getppid())
    assert p["start_ticks"] == process_start_ticks(os.getpid()) == r.writer_start_ticks
    assert p["argv0"] == sys.argv[0]
    # pytest's __main__ has a file; an xdist worker's (execnet's bootstrap) has none: then no script.
    main_file = getattr(sys.modules["__main__"], "__file__", None)
    assert p["script"] == (os.path.abspath(main_file) if main_file else None)
    assert p["hostname"] == os.uname().nodename
    expected_role = "child" if os.path.exists(segment_path(os.getppid())) else "main"
    if not any(os.environ.get(v) for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        assert p["role"] == expected_role
    assert p["worker_id"] is None and p["dist_backend"] is None
    rt = p["runtime"]
    assert rt["torch"] == torch.__version__ and rt["cuda_build"] == torch.version.cuda
    assert rt["cuda_initialized"] is False and p["memory"] == []
    m = entry("api-cpu", p)
    assert m == {
        "name": "api-cpu",
        "class": "Sequential",
        "params": 4 * 8 + 8 + 8 * 2 + 2,
        "device": "cpu",
        "devices": ["cpu"],
        "input_device": "cpu",
        "forward_calls": 3,
        "forward_rate_hz": m["forward_rate_hz"],
        "last_forward_time": m["last_forward_time"],
        "data_wait_fraction": None,
        "data_wait_s": None,
        "step_s": None,
        "train_steps": None,
        "step_rate_hz": None,
        "step_source": None,
        "shared_memory": False,
        "param_dtypes": ["float32"],
        "autocast": "off",
        "input_shape": [3, 4],
        "loader_settings": None,
        "compiled_uncounted": False,
        "data_wait_batches": None,
    }
    assert p["loader"] is None
    assert m["forward_rate_hz"] >= 0.0
    assert t0 <= m["last_forward_time"] <= time.time()
    assert p["published_at"] == r.published_at and t0 <= p["published_at"] <= time.time()
    assert p["trimmed"] is False and r.trimmed is False
    assert not torch.cuda.is_initialized()


def test_default_name_and_wrappers(keep):
    net = torch.nn.Linear(3, 3)
    keep(torch.nn.DataParallel(net))
    m = entry("Linear")
    assert m["class"] == "DataParallel(Linear)" and m["params"] == 12


def test_dataparallel_is_hooked_on_the_wrapper(keep):
    net = torch.nn.Linear(3, 1)
    dp = torch.nn.DataParallel(net)
    keep(dp, name="api-dp")
    out = dp(torch.ones(2, 3))
    assert torch.equal(out, net(torch.ones(2, 3)))
    probe.refresh()
    m = entry("api-dp")
    assert m["forward_calls"] == 1 and m["params"] == 4 and m["input_device"] == "cpu"


def test_distributed_data_parallel_and_rank_role(gloo_world_of_one, keep):
    # `keep` after the process group, so it is torn down first: the DDP model, whose Reducer holds
    # the group, is freed while the group still exists, and destroy_process_group then frees the
    # group. The other way round, the Reducer's dealloc destroyed the gloo group while holding the
    # GIL, joining gloo threads that may wait for it: the suite hung there once (torch's, pytorch#75097).
    net = torch.nn.Linear(3, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    keep(ddp, name="api-ddp")
    ddp(torch.ones(2, 3)).sum().backward()
    probe.refresh()
    p = read_self()
    assert (p["role"], p["rank"], p["world_size"], p["dist_backend"]) == ("rank", 0, 1, "gloo")
    m = entry("api-ddp", p)
    assert m["class"] == "DistributedDataParallel(Linear)"
    assert m["params"] == 4 and m["forward_calls"] == 1 and m["device"] == "cpu"


def test_torch_compile_wrapper(keep):
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile is not in this torch")
    net = torch.nn.Linear(3, 2)
    # The eager backend exercises dynamo and its OptimizedModule wrapper without a C++ toolchain.
    compiled = torch.compile(net, backend="eager")
    keep(compiled, name="api-compiled")
    x = torch.ones(2, 3)
    try:
        out = compiled(x)
    except Exception as e:  # noqa: BLE001 -- environment-dependent: a broken dynamo is a skip, not our bug
        pytest.skip(f"torch.compile does not run here: {type(e).__name__}: {e}")
    assert torch.equal(out, net(x))
    probe.refresh()
    m = entry("api-compiled")
    assert m["class"] == "OptimizedModule(Linear)"
    assert m["forward_calls"] == 1 and m["params"] == 8 and m["device"] == "cpu"


def _compile_works_here(fullgraph: bool) -> None:
    plain = torch.nn.Linear(3, 2)
    try:
        torch.compile(plain, backend="eager", fullgraph=fullgraph)(torch.ones(1, 3))
    except Exception as e:  # noqa: BLE001 -- environment-dependent: a broken dynamo is a skip, not our bug
        pytest.skip(f"torch.compile does not run here: {type(e).__name__}: {e}")


def test_registered_then_compiled_model_still_compiles_to_one_graph(keep, monkeypatch):
    _compile_works_here(fullgraph=True)
    from torch._dynamo.utils import counters

    net = torch.nn.Linear(3, 2)
    keep(net, name="api-inner-compiled")
    compiled = torch.compile(net, backend="eager", fullgraph=True)
    torch._dynamo.reset()  # an earlier test's cached graph for Linear would be reused
    counters.clear()
    x = torch.ones(2, 3)
    # The publisher looks at compiled calls on its periodic tick, from its own thread; warnings'
    # state is process-wide, and dynamo compiles inside its own catch_warnings, so a warning raised
    # meanwhile may never reach a pytest.warns around it. What the probe warns is recorded at its call.
    warned = []
    real_warn = probe_models.warnings.warn

    def spy(message, category, **kw):
        warned.append((category, message))
        real_warn(message, category, **kw)

    monkeypatch.setattr(probe_models, "warnings", SimpleNamespace(warn=spy))
    for _ in range(12):  # a hook that read its counter would recompile on each call and fail here
        assert torch.equal(compiled(x), net(x))
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    # Compiled calls are counted after their graph (probe/_compiled.py): 12 eager and 12 compiled.
    probe.refresh()
    assert entry("api-inner-compiled")["forward_calls"] == 24
    t = time.time()
    compiled(x)
    assert wait_for(
        lambda: (entry("api-inner-compiled")["last_forward_time"] or 0) >= t, 3 * PROBE.interval_s + 2
    )
    m = entry("api-inner-compiled")
    assert (m["forward_calls"], m["compiled_uncounted"]) == (25, False)
    assert not any(e["where"] == "compile" and "api-inner-compiled" in e["message"] for e in read_self()["errors"])
    assert not [m for c, m in warned if "'api-inner-compiled' runs inside torch.compile" in str(m)]


def test_a_registered_module_inside_a_compiled_parent_is_said_uncounted(keep, monkeypatch):
    """Dynamo replays the counting call only from the frame it compiles: a registered module
    inlined into a compiled parent is not counted, and its payload and errors say so."""
    _compile_works_here(fullgraph=True)
    inner = torch.nn.Linear(3, 3)
    keep(inner, name="api-inlined")
    parent = torch.nn.Sequential(inner, torch.nn.ReLU())
    compiled = torch.compile(parent, backend="eager", fullgraph=True)
    warned = []
    monkeypatch.setattr(probe_models, "warnings", SimpleNamespace(warn=lambda m, c, **kw: warned.append(m)))
    x = torch.ones(2, 3)
    assert wait_for(
        lambda: compiled(x) is not None and entry("api-inlined")["compiled_uncounted"] is True,
        3 * PROBE.interval_s + 2,
    )
    assert entry("api-inlined")["forward_calls"] == 0
    assert any(e["where"] == "compile" and "api-inlined" in e["message"] for e in read_self()["errors"])
    assert [m for m in warned if "'api-inlined' runs inside torch.compile" in m]


def test_registered_model_can_be_exported(keep):
    if not hasattr(torch, "export"):
        pytest.skip("torch.export is not in this torch")
    net = torch.nn.Linear(3, 2)
    keep(net, name="api-exported")
    x = torch.ones(2, 3)
    exported = torch.export.export(net, (x,))
    assert torch.equal(exported.module()(x), net(x))


def test_mixed_devices_with_meta(keep):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))
    keep(model, name="api-mixed")
    m = entry("api-mixed")
    assert m["device"] == "mixed" and m["devices"] == ["cpu", "meta"]


def test_no_parameter_model(keep):
    model = Passthrough()
    keep(model, name="api-noparams")
    model(torch.zeros(1))
    probe.refresh()
    m = entry("api-noparams")
    assert (m["device"], m["devices"], m["params"], m["input_device"]) == ("no-parameters", [], 0, "cpu")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m([1, {"x": (2, torch.zeros(1, device="meta"))}]),
        lambda m: m(batch={"ids": [0], "pixels": [torch.zeros(1, device="meta")]}),
        lambda m: m(3, "text", None, key=torch.zeros(1, device="meta")),
    ],
    ids=["nested-args", "nested-kwargs", "kwarg-after-scalars"],
)
def test_input_device_in_nested_containers(keep, call):
    model = Passthrough()
    keep(model, name="api-nested")
    call(model)
    probe.refresh()
    assert entry("api-nested")["input_device"] == "meta"


def test_generator_inputs_reach_the_model_unconsumed(keep):
    class Consumer(torch.nn.Module):
        def forward(self, items):
            return list(items)

    model = Consumer()
    keep(model, name="api-gen")
    assert model(i for i in range(5)) == [0, 1, 2, 3, 4]
    assert model(iter([torch.zeros(1)]))[0].shape == (1,)
    probe.refresh()
    m = entry("api-gen")
    assert m["forward_calls"] == 2 and m["input_device"] is None


def test_forward_that_raises(keep):
    class Fails(torch.nn.Module):
        def forward(self, x):
            raise KeyError("from the model")

    model = Fails()
    keep(model, name="api-raises")
    with pytest.raises(KeyError, match="from the model"):
        model(torch.zeros(1))
    probe.refresh()
    assert entry("api-raises")["forward_calls"] == 1


def test_device_change_seen_by_refresh_and_by_event(keep):
    model = mlp()
    keep(model, name="api-move")
    assert entry("api-move")["device"] == "cpu"
    model.to("meta")
    probe.refresh()
    assert entry("api-move")["devices"] == ["meta"]
    model.to_empty(device="cpu")
    probe.event("api-moved-back")
    assert entry("api-move")["device"] == "cpu"


def test_device_change_seen_by_the_publisher_alone(keep):
    model = mlp()
    keep(model, name="api-move-bg")
    model.to("meta")
    # No API call: the publisher thread notices the first parameter moved within an interval or two.
    deadline_s = 3 * PROBE.interval_s + 2
    assert wait_for(lambda: entry("api-move-bg")["device"] == "meta", deadline_s)


def test_forward_rate_from_the_publisher(keep):
    model = torch.nn.Linear(2, 2)
    keep(model, name="api-rate")
    x = torch.zeros(1, 2)
    for _ in range(200):
        model(x)
    # Calls per second come from the count's change between two periodic publishes.
    assert wait_for(lambda: entry("api-rate")["forward_rate_hz"] > 0, 3 * PROBE.interval_s + 2)
    assert entry("api-rate")["forward_calls"] == 200


def test_a_periodic_tick_with_nothing_new_leaves_the_segment_alone(keep):
    model = torch.nn.Linear(2, 2)
    keep(model, name="api-quiet")

    def tick() -> int:
        with PROBE.lock:
            PROBE._publish_locked(periodic=True)
        return read_segment(os.getpid()).seq

    tick()
    tick()  # whatever was pending (a rate going back to 0) is out
    quiet = tick()
    assert tick() == quiet == tick()  # nothing new: not republished, so readers skip the segment
    model(torch.zeros(1, 2))
    busy = tick()
    assert busy > quiet and entry("api-quiet")["forward_calls"] == 1
    assert read_segment(os.getpid()).payload["published_at"] > 0


def test_events_publish_at_once_and_keep_the_last_64():
    seq0 = read_segment(os.getpid()).seq
    probe.event("api-first")
    r = read_segment(os.getpid())
    assert r.seq > seq0
    assert r.payload["events"][-1]["name"] == "api-first"
    t = time.time()
    for i in range(70):
        probe.event(f"api-e{i}")
    events = read_self()["events"]
    assert len(events) == 64
    assert [e["name"] for e in events] == [f"api-e{i}" for i in range(6, 70)]
    assert all(t <= e["time"] <= time.time() for e in events)
    probe.event(12345)  # any object: recorded by its str()
    assert read_self()["events"][-1]["name"] == "12345"


def test_not_a_module_is_an_error_not_an_exception():
    PROBE.warned.discard("register-type")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert probe.register(None) is None
        assert probe.register("model.pt") == "model.pt"
    ours = [w for w in caught if w.category is probe.ProbeWarning]
    assert len(ours) == 1 and "NoneType" in str(ours[0].message)
    errors = read_self()["errors"]
    assert errors[-2]["where"] == "register" and "got NoneType" in errors[-2]["message"]
    assert "got str" in errors[-1]["message"]
    for _ in range(20):
        probe.register(3)
    assert len(read_self()["errors"]) == 16


def test_errors_inside_the_hook_are_recorded_and_the_forward_goes_on(keep):
    class NoDevice(torch.Tensor):
        @property
        def device(self):
            raise RuntimeError("this tensor has no device")

    model = Passthrough()
    keep(model, name="api-bad-input")
    x = torch.zeros(2).as_subclass(NoDevice)
    args, _ = model(x)
    assert args[0] is x
    probe.refresh()
    err = read_self()["errors"][-1]
    assert err["where"] == "hook" and "this tensor has no device" in err["message"]


def test_register_twice_and_unregister(keep):
    model = torch.nn.Linear(2, 2)
    keep(model, name="api-twice")
    keep(model, name="api-twice-renamed")
    # Instrumented once, by class swap (no forward hook: torch's fast call path stays).
    assert type(model) is not torch.nn.Linear and isinstance(model, torch.nn.Linear)
    assert len(model._forward_pre_hooks) == 0
    entry("api-twice-renamed")
    assert probe.unregister(model) is True
    assert type(model) is torch.nn.Linear and len(model._forward_pre_hooks) == 0
    assert not [m for m in read_self()["models"] if m["name"].startswith("api-twice")]
    assert probe.unregister(model) is False


def test_a_collected_model_leaves_the_payload():
    model = torch.nn.Linear(2, 2)
    probe.register(model, name="api-gone")
    entry("api-gone")
    del model
    gc.collect()
    probe.refresh()
    assert not [m for m in read_self()["models"] if m["name"] == "api-gone"]


def test_loader_timing_and_worker_init_through_register(keep):
    def user_init(worker_id):
        pass

    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(8, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=2, worker_init_fn=user_init)
    model = torch.nn.Linear(1, 1)
    keep(model, name="api-loader", loader=loader)
    assert isinstance(loader.worker_init_fn, ProbeWorkerInit) and loader.worker_init_fn.user_fn is user_init
    seen = []
    for (batch,) in loader:
        time.sleep(0.01)
        model(batch)
        seen.extend(batch.flatten().tolist())
    assert seen == [float(i) for i in range(8)]
    probe.refresh()
    m = entry("api-loader")
    assert 0.0 < m["data_wait_fraction"] < 0.5  # loading from memory is quick next to a 10 ms step
    assert 0.0 < m["data_wait_s"] < m["step_s"]
    # The window of those figures: the 4 batches so far but the first (its wait is the loop's start).
    assert m["data_wait_batches"] == 3
    # A second model on the same loader shares its timer; the worker_init_fn is not wrapped twice.
    other = torch.nn.Linear(1, 1)
    keep(other, name="api-loader-2", loader=loader)
    assert loader.worker_init_fn.user_fn is user_init
    assert entry("api-loader-2")["step_s"] == entry("api-loader")["step_s"]


def test_a_non_dataloader_loader_is_an_error(keep):
    model = torch.nn.Linear(1, 1)
    PROBE.warned.discard("loader")
    with pytest.warns(probe.ProbeWarning, match="needs a torch.utils.data.DataLoader, got list"):
        keep(model, name="api-badloader", loader=[1, 2, 3])
    assert entry("api-badloader")["data_wait_fraction"] is None
    assert entry("api-badloader")["data_wait_batches"] is None
    assert any(e["where"] == "loader" for e in read_self()["errors"])


def test_snapshot_status_and_activate():
    assert probe.activate() is True
    st = probe.status()
    assert st["enabled"] is True and st["segment"] == f"/dsh-probe.{os.getpid()}"
    snap = probe.snapshot()
    clean, reason = validate_payload(snap)
    assert reason is None and clean["pid"] == os.getpid()


def test_the_probe_never_initialised_cuda():
    assert torch.cuda.is_initialized() is False


def test_a_registered_model_that_is_collected_is_reported_by_name():
    import gc

    probe.register(torch.nn.Linear(2, 2), name="dropped-at-once")  # nothing keeps it
    gc.collect()
    probe.refresh()
    errors = probe.snapshot()["errors"]
    assert {"where": "model-collected", "message": "dropped-at-once"} in [
        {"where": e["where"], "message": e["message"]} for e in errors
    ]
