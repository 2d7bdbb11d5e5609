"""The step breakdown, math settings and per-model efficiency fields, with real torch training on the CPU.

Real loops (a DataLoader whose dataset sleeps, a model whose forward sleeps, SGD, Adam, LBFGS),
read back through ``probe.snapshot()`` and validated against the wire schema.
"""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402
from probe._breakdown import CLOCK, FRAMEWORK, LOADER, OPTIMIZER  # noqa: E402
from probe._state import PROBE  # noqa: E402
from probe_wire import validate_payload  # noqa: E402

FRACTIONS = ("data_wait_fraction", "forward_fraction", "optimizer_fraction", "other_fraction")


@pytest.fixture(autouse=True)
def fresh_clock():
    """Each test starts from an empty breakdown (the probe is one per process); models unregistered."""
    if not PROBE.enabled:
        pytest.skip(f"the probe is off in this process: {PROBE.disabled_reason}")
    CLOCK.reset()
    yield
    for rec in list(PROBE.records):
        model = rec.module_ref()
        if model is not None:
            probe.unregister(model)
    CLOCK.reset()


class SlowData(torch.utils.data.Dataset):
    def __init__(self, n: int, sleep_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(1) > 0).long()
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.x[i], self.y[i]


class Net(torch.nn.Module):
    def __init__(self, forward_sleep_s: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.forward_sleep_s = forward_sleep_s

    def forward(self, x):
        if self.forward_sleep_s:
            time.sleep(self.forward_sleep_s)
        return self.body(x)


def train(model, loader, opt, epochs: int = 1, measured: dict | None = None) -> int:
    """Train; with ``measured``, also time the parts by hand from the first optimizer step's end on
    (the probe's first step boundary): {"wall_s", "data_s", "forward_s", "optimizer_s"}."""
    steps = 0
    t_start = None
    parts = {"data_s": 0.0, "forward_s": 0.0, "optimizer_s": 0.0}
    for _ in range(epochs):
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            opt.zero_grad()
            out = model(x)
            t2 = time.perf_counter()
            torch.nn.functional.cross_entropy(out, y).backward()
            t3 = time.perf_counter()
            opt.step()
            t4 = time.perf_counter()
            if t_start is not None:
                parts["data_s"] += t1 - t0
                parts["forward_s"] += t2 - t1
                parts["optimizer_s"] += t4 - t3
            else:
                t_start = t4
            steps += 1
    if measured is not None:
        measured.update(parts, wall_s=t4 - t_start)
    return steps


def assert_matches_hand_timing(s: dict, measured: dict) -> None:
    """The probe's fractions agree with the parts timed around the calls (which include a little of
    the loop's own overhead; an epoch's first batch, iterator start included, counts as wait in both)."""
    for key, part in (("data_wait_fraction", "data_s"), ("forward_fraction", "forward_s"), ("optimizer_fraction", "optimizer_s")):
        assert s[key] == pytest.approx(measured[part] / measured["wall_s"], abs=0.05), (key, s, measured)


def snapshot() -> dict:
    snap = probe.snapshot()
    clean, why = validate_payload(snap)
    assert why is None, why
    assert clean["steps"] == snap["steps"] and clean["math"] == snap["math"]
    return snap


def assert_sums_to_one(steps: dict) -> None:
    present = [steps[k] for k in FRACTIONS if steps[k] is not None]
    assert all(0.0 <= f <= 1.0 for f in present), steps
    assert sum(present) == pytest.approx(1.0, abs=0.02), steps


def test_slow_loader_makes_data_wait_dominate():
    # Sleeps, not work: what the loop waits for stays long however loaded the machine is.
    loader = torch.utils.data.DataLoader(SlowData(96, 0.012), batch_size=4)
    model = Net()
    probe.register(model, name="bd-slow-data", loader=loader)
    measured: dict = {}
    n = train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), measured=measured)
    s = snapshot()["steps"]
    assert_matches_hand_timing(s, measured)
    assert CLOCK.level == OPTIMIZER
    assert s["steps"] == n - 1  # boundaries at optimizer steps: the first one starts the count
    assert s["forward_fraction"] is not None and s["optimizer_fraction"] is not None
    # Dominates the phases the probe names. Not "> 0.5": on a 2-core machine at load 9 the
    # backward (in `other`) of even this net takes as long as the loader's sleeps (0.49 measured).
    assert s["data_wait_fraction"] > s["forward_fraction"] + s["optimizer_fraction"], s
    assert s["step_s"] == pytest.approx(s["window_s"] / s["steps"])
    assert s["step_s"] >= 4 * 0.012 * 0.9
    assert_sums_to_one(s)


def test_slow_forward_makes_forward_dominate_and_adam_is_counted():
    loader = torch.utils.data.DataLoader(SlowData(64, 0.0), batch_size=8)
    model = Net(forward_sleep_s=0.08)
    probe.register(model, name="bd-slow-forward", loader=loader)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    measured: dict = {}
    n = train(model, loader, opt, epochs=2, measured=measured)
    s = snapshot()["steps"]
    assert_matches_hand_timing(s, measured)
    assert s["steps"] == n - 1
    # Dominates the named phases (not "> 0.5": at load 9 the backward and Adam of this net took 0.6
    # of a step around the 80 ms forward sleep; the hand timing above holds the figures themselves).
    assert s["forward_fraction"] > s["data_wait_fraction"] + s["optimizer_fraction"], s
    assert s["data_wait_fraction"] < 0.3 and s["optimizer_fraction"] > 0.0
    assert_sums_to_one(s)


def test_time_between_forward_and_the_optimizer_step_is_backward_a_part_of_the_rest():
    """What a rank of a DDP job spends waiting in the gradient all-reduce (a sleep here) lies between
    its forward and its optimizer step: backward_fraction, a part of other_fraction."""
    loader = torch.utils.data.DataLoader(SlowData(96, 0.0), batch_size=4)
    model = Net(forward_sleep_s=0.004)
    probe.register(model, name="bd-backward", loader=loader)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    backward_s = wall_s = 0.0
    t_start = None  # the first optimizer step's end: the probe's first step boundary
    for x, y in loader:
        out = model(x)
        t0 = time.perf_counter()
        torch.nn.functional.cross_entropy(out, y).backward()
        time.sleep(0.02)  # the all-reduce waiting for a slower rank
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        if t_start is not None:
            backward_s += t1 - t0
            wall_s = time.perf_counter() - t_start
        else:
            t_start = time.perf_counter()
    s = snapshot()["steps"]
    assert s["backward_fraction"] is not None and s["backward_fraction"] > 0.5, s
    assert s["backward_fraction"] <= s["other_fraction"], s
    assert s["backward_fraction"] == pytest.approx(backward_s / wall_s, abs=0.1), (s, backward_s, wall_s)
    assert_sums_to_one(s)


def test_a_loop_without_an_optimizer_has_no_backward_figure():
    loader = torch.utils.data.DataLoader(SlowData(32, 0.0), batch_size=4)
    model = Net()
    probe.register(model, name="bd-no-optimizer", loader=loader)
    for x, _ in loader:
        model(x)
    s = snapshot()["steps"]
    assert s["steps"] > 0 and s["backward_fraction"] is None, s


def test_nested_registered_forwards_are_timed_once():
    outer = Net(forward_sleep_s=0.005)
    probe.register(outer, name="bd-outer")
    probe.register(outer.body, name="bd-inner")  # called inside outer's forward
    x = torch.randn(4, 8)
    before = CLOCK.forward_s
    t0 = time.perf_counter()
    for _ in range(20):
        outer(x)
    wall_s = time.perf_counter() - t0
    timed_s = CLOCK.forward_s - before
    assert 0.9 * 20 * 0.005 <= timed_s <= wall_s  # not twice the outer forward
    assert CLOCK.inside is False
    outer.body(x)  # the inner one alone is timed
    assert CLOCK.forward_s > before + timed_s


@pytest.mark.parametrize("instrumentation", ["class", "pre-hook"])
def test_a_raising_forward_leaves_no_timing_behind(instrumentation, monkeypatch):
    if instrumentation == "pre-hook":
        monkeypatch.setenv("DSH_PROBE_INSTRUMENT", "hook")

    class Boom(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    model = Boom()
    probe.register(model, name="bd-boom")
    assert PROBE.records[-1].instrumentation == instrumentation
    with pytest.raises(ValueError, match="boom"):
        model(torch.zeros(1))
    assert CLOCK.inside is False
    before = CLOCK.forward_s
    good = Net()
    probe.register(good, name="bd-after-boom")
    good(torch.zeros(1, 8))
    assert CLOCK.forward_s > before


def test_pre_hook_fallback_times_forwards(monkeypatch):
    monkeypatch.setenv("DSH_PROBE_INSTRUMENT", "hook")
    model = Net(forward_sleep_s=0.005)
    probe.register(model, name="bd-pre-hook")
    assert PROBE.records[-1].instrumentation == "pre-hook"
    before = CLOCK.forward_s
    for _ in range(4):
        model(torch.zeros(1, 8))
    assert CLOCK.forward_s - before >= 4 * 0.005 * 0.9


def test_two_optimizers_make_one_step_and_a_closure_is_not_optimizer_time():
    gen, disc = Net(), Net()
    probe.register(gen, name="bd-gen")
    probe.register(disc, name="bd-disc")
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    for _ in range(6):
        for model, opt in ((gen, opt_g), (disc, opt_d)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert CLOCK.steps == 6
    # LBFGS runs the closure (forward and backward) inside step(): its forwards count as forward time.
    slow = Net(forward_sleep_s=0.003)
    probe.register(slow, name="bd-lbfgs")
    lbfgs = torch.optim.LBFGS(slow.parameters(), max_iter=4)

    def closure():
        lbfgs.zero_grad()
        loss = torch.nn.functional.cross_entropy(slow(x), y)
        loss.backward()
        return loss

    fwd0, opt0 = CLOCK.forward_s, CLOCK.optimizer_s
    t0 = time.perf_counter()
    lbfgs.step(closure)
    wall_s = time.perf_counter() - t0
    fwd_s, opt_s = CLOCK.forward_s - fwd0, CLOCK.optimizer_s - opt0
    assert fwd_s >= 0.003 and opt_s > 0.0 and fwd_s + opt_s <= wall_s * 1.01


def test_a_closure_given_to_step_is_not_optimizer_time_and_is_returned_unchanged():
    """Lightning without its callback: training_step and backward run in a closure inside
    optimizer.step, through a module the probe does not time; the closure's time is not the optimizer's."""
    model, unregistered = Net(), Net()
    probe.register(model, name="bd-closure")
    opt = torch.optim.SGD(unregistered.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    closure_s = 0.2  # far above what an SGD step of a small net costs on a loaded machine

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(unregistered(x), y)
        loss.backward()
        time.sleep(closure_s)
        return loss

    for args, kwargs in (((closure,), {}), ((), {"closure": closure})):
        opt0 = CLOCK.optimizer_s
        loss = opt.step(*args, **kwargs)
        assert isinstance(loss, torch.Tensor) and loss.requires_grad  # the closure's own loss
        assert CLOCK.optimizer_s - opt0 < closure_s / 2, CLOCK.optimizer_s - opt0
    assert CLOCK.opt_closure_s is None and CLOCK.opt_depth == 0

    def raising():
        raise ValueError("closure failed")

    with pytest.raises(ValueError, match="closure failed"):
        opt.step(raising)
    opt.step()  # the next step is timed as usual
    assert CLOCK.opt_depth == 0


def test_optimizer_hooks_never_raise_and_a_raising_step_does_not_stick():
    model = Net()
    probe.register(model, name="bd-hooks")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert CLOCK._pre_step(None, (), {}) is None  # odd arguments: still nothing raised
    CLOCK.opt_depth = 0
    CLOCK._post_step(object(), None, None)  # a post without a pre
    assert CLOCK.opt_depth == 0

    class Broken(torch.optim.SGD):
        def step(self, closure=None):
            raise RuntimeError("step failed")

    broken = Broken(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="step failed"):
        broken.step()
    with pytest.raises(RuntimeError, match="step failed"):
        broken.step()  # its own stale pre-hook state is dropped, not stacked
    assert CLOCK.opt_depth == 1
    steps = CLOCK.steps
    opt.step()  # right after, another optimizer's step may be nested in it: not counted
    assert CLOCK.steps == steps and CLOCK.opt_depth == 1
    CLOCK.opt_t0 -= 120.0  # a "step in progress" for two minutes raised long ago
    opt.step()
    assert CLOCK.steps == steps + 1 and CLOCK.opt_depth == 0


def test_missing_optimizer_hooks_leave_the_rest_of_the_breakdown(monkeypatch):
    optimizer_module = __import__("sys").modules["torch.optim.optimizer"]
    CLOCK.remove_optimizer_hooks()
    monkeypatch.delattr(optimizer_module, "register_optimizer_step_pre_hook")
    try:
        loader = torch.utils.data.DataLoader(SlowData(32, 0.008), batch_size=4)
        model = Net()
        assert probe.register(model, name="bd-no-hooks", loader=loader) is model
        assert CLOCK.handles == ()
        train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
        s = snapshot()["steps"]
        assert CLOCK.level == LOADER and s["steps"] == 7  # loader batches are the steps
        # The loader's 32 ms a batch is measured (never 0) without the optimizer's hooks; its share
        # depends on the machine's load, so only that it is there and the rest is not lost.
        assert s["optimizer_fraction"] is None and s["data_wait_fraction"] > 0.05
        assert_sums_to_one(s)
        assert not [e for e in PROBE.errors if e["where"] == "optimizer-hooks"]
    finally:
        monkeypatch.undo()
        CLOCK.handles = None  # the next register installs them again


def test_a_stronger_step_source_takes_over_and_gives_way_after_a_window(monkeypatch):
    CLOCK.step(FRAMEWORK)
    CLOCK.step(OPTIMIZER)  # ignored: the framework counts
    assert (CLOCK.level, CLOCK.steps) == (FRAMEWORK, 1)
    stale = CLOCK.mark
    CLOCK.mark = (stale[0], stale[1], stale[2] - 60.0, *stale[3:])  # no framework step for a minute
    CLOCK.step(OPTIMIZER)
    assert (CLOCK.level, CLOCK.steps) == (OPTIMIZER, 2)
    steps, _ = CLOCK.figures()
    assert steps["steps"] == 0 and steps["step_s"] is None  # a new source's first boundary


def test_nothing_before_the_first_step():
    assert CLOCK.figures() == (None, None)
    snap = snapshot()
    assert snap["steps"] is None and snap["syncs_per_step"] is None


def test_param_dtypes_autocast_and_input_shape():
    model = Net().to(torch.bfloat16)
    probe.register(model, name="bd-bf16")
    x = torch.randn(5, 8, dtype=torch.bfloat16)
    model(x)
    m = next(e for e in snapshot()["models"] if e["name"] == "bd-bf16")
    assert m["param_dtypes"] == ["bfloat16"] and m["autocast"] == "off" and m["input_shape"] == [5, 8]

    mixed = Net()
    mixed.body[0].to(torch.float16)
    probe.register(mixed, name="bd-mixed")
    fp32 = Net()
    probe.register(fp32, name="bd-autocast")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fp32(torch.randn(2, 3, 8))
    models = {e["name"]: e for e in snapshot()["models"]}
    assert models["bd-mixed"]["param_dtypes"] == ["float16", "float32"]
    assert models["bd-autocast"]["autocast"] == "bfloat16"
    assert models["bd-autocast"]["input_shape"] == [2, 3, 8]
    with PROBE.lock:
        for rec in PROBE.records:
            rec.armed = True  # as the publisher does once per interval
    fp32(torch.randn(2, 8))  # no autocast now
    models = {e["name"]: e for e in snapshot()["models"]}
    assert models["bd-autocast"]["autocast"] == "off" and models["bd-autocast"]["input_shape"] == [2, 8]


def test_input_shape_keeps_eight_dimensions():
    model = torch.nn.Identity()
    probe.register(model, name="bd-9d")
    model(torch.zeros(*([1] * 9)))
    m = next(e for e in snapshot()["models"] if e["name"] == "bd-9d")
    assert m["input_shape"] == [1] * 8


def _math_now() -> tuple:
    c = torch._C
    return (
        c._get_cublas_allow_tf32(),
        c._get_cudnn_allow_tf32(),
        c._get_float32_matmul_precision(),
        c._get_cudnn_benchmark(),
        tuple(c._get_fp32_precision_getter(*k) for k in (("cuda", "matmul"), ("cuda", "all"), ("generic", "all"))),
    )


def test_math_settings_follow_the_program_and_are_never_changed():
    model = Net()
    probe.register(model, name="bd-math")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark
    saved_new_api = torch.backends.cuda.matmul.fp32_precision  # the legacy setter changes it too
    try:
        before = _math_now()
        m = snapshot()["math"]
        assert _math_now() == before
        assert m["allow_tf32_matmul"] == before[0] and m["float32_matmul_precision"] == before[2]
        torch.backends.cuda.matmul.allow_tf32 = not before[0]
        torch.backends.cudnn.benchmark = True
        changed = _math_now()
        m = snapshot()["math"]
        assert _math_now() == changed
        assert m == {
            "allow_tf32_matmul": not before[0],
            "cudnn_allow_tf32": changed[1],
            "float32_matmul_precision": changed[2],
            "cudnn_benchmark": True,
        }
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark = saved
        torch.backends.cuda.matmul.fp32_precision = saved_new_api
    assert _math_now() == before


def test_math_settings_after_a_mix_of_the_old_and_new_tf32_apis(monkeypatch):
    if not hasattr(torch._C, "_get_fp32_precision_getter"):
        pytest.skip("this torch has no fp32_precision API")
    from probe._settings import math_settings

    def refusing():
        raise RuntimeError("mix of the legacy and new APIs")

    monkeypatch.setattr(torch._C, "_get_cublas_allow_tf32", refusing)
    monkeypatch.setattr(torch._C, "_get_float32_matmul_precision", refusing)
    m = math_settings(torch)
    expected = torch._C._get_fp32_precision_getter("cuda", "matmul") == "tf32" or None
    assert m["allow_tf32_matmul"] in (expected, False, None)
    assert m["float32_matmul_precision"] in ("high", "highest", None)


def test_loader_settings_from_register_and_from_a_batch_sampler():
    data = SlowData(16, 0.0)
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=0, pin_memory=False)
    model = Net()
    probe.register(model, name="bd-loader", loader=loader)
    m = next(e for e in snapshot()["models"] if e["name"] == "bd-loader")
    # prefetch_factor: torch's None without workers.
    assert m["loader_settings"] == {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "batch_size": 4,
        "prefetch_factor": None,
    }
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(data), batch_size=3, drop_last=False)
    by_sampler = torch.utils.data.DataLoader(
        data, batch_sampler=sampler, num_workers=2, persistent_workers=True, prefetch_factor=6
    )
    other = Net()
    probe.register(other, name="bd-loader-sampler", loader=by_sampler)
    m = next(e for e in snapshot()["models"] if e["name"] == "bd-loader-sampler")
    assert m["loader_settings"] == {
        "num_workers": 2,
        "pin_memory": False,
        "persistent_workers": True,
        "batch_size": 3,
        "prefetch_factor": 6,
    }


def test_breakdown_is_none_in_a_forked_child():
    model = Net()
    probe.register(model, name="bd-fork")
    CLOCK.step(OPTIMIZER)
    CLOCK.step(OPTIMIZER)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ok = CLOCK.figures() == (None, None) and CLOCK.inside is False and CLOCK.steps == 0
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.waitpid(pid, 0)
