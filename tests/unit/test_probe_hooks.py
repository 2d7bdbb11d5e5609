"""Model bookkeeping with real torch: input-device search, unwrapping, traversal, instrumentation, loader timing."""

from __future__ import annotations

import collections
import copy
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


from probe._steps import StepCounter  # noqa: E402
from probe.hooks import (  # noqa: E402
    INPUT_MAX_DEPTH,
    LoaderTimer,
    ModelRecord,
    ProbeWorkerInit,
    find_input_device,
    unwrap_model,
)
from probe.instrument import PreHook  # noqa: E402
from probe_wire import segment_path  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CPU = torch.zeros(1)
META = torch.zeros(1, device="meta")


def dev(*args, **kwargs):
    return find_input_device(args, kwargs, torch.Tensor)


def test_input_device_first_tensor_in_args_then_kwargs():
    assert dev(CPU) == "cpu"
    assert dev(META, CPU) == "meta"
    assert dev(1, "x", None, x=META) == "meta"
    assert dev(CPU, x=META) == "cpu"  # positional arguments come first
    assert dev() is None
    assert dev(1, 2.0, "s", y=None) is None


def test_input_device_inside_nested_containers_in_order():
    assert dev([[1, 2], (3, [META])], CPU) == "meta"
    assert dev({"ids": [0, 1], "pixels": {"x": META}}) == "meta"
    assert dev(collections.OrderedDict(a=1, b=(META,))) == "meta"
    assert dev(collections.UserDict({"x": META})) == "meta"
    Batch = collections.namedtuple("Batch", "x y")
    assert dev(Batch(1, META)) == "meta"
    assert dev(torch.nn.utils.rnn.pack_sequence([torch.zeros(3, 2)])) == "cpu"


def test_input_device_search_is_bounded_in_depth():
    nested = META
    for _ in range(INPUT_MAX_DEPTH):
        nested = [nested]
    assert dev(nested) is None  # args tuple + INPUT_MAX_DEPTH lists: one level too deep
    assert dev(nested[0]) == "meta"


def test_input_device_never_consumes_iterators_or_generators():
    gen = (t for t in [META, CPU])
    it = iter([META])
    assert dev(gen, it) is None
    assert next(gen) is META and next(it) is META  # nothing was taken from them

    class Sneaky(list):
        def __iter__(self):
            raise AssertionError("iterated a list subclass through its own __iter__")

    assert dev(Sneaky([META])) == "meta"


def test_unwrap_wrappers_and_label():
    net = torch.nn.Linear(2, 2)
    assert unwrap_model(net, torch.nn.Module) == (net, "Linear")
    dp = torch.nn.DataParallel(net)
    assert unwrap_model(dp, torch.nn.Module) == (net, "DataParallel(Linear)")


def _record(model, name=None):
    errors, changes = [], []
    rec = ModelRecord(
        model, name, torch, lambda where, e: errors.append((where, e)), lambda: changes.append(1)
    )
    return rec, errors, changes


def test_traverse_cpu_mixed_meta_buffers_and_empty():
    # The record holds its model weakly: keep each model referenced while it is looked at.
    plain = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    rec, _, _ = _record(plain)
    rec.traverse()
    assert (rec.device, rec.devices, rec.params, rec.first_device) == ("cpu", ["cpu"], 21, "cpu")

    mixed = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1, device="meta"))
    rec, _, _ = _record(mixed)
    rec.traverse()
    assert (rec.device, rec.devices, rec.params) == ("mixed", ["cpu", "meta"], 21)

    bn = torch.nn.BatchNorm1d(3, affine=False)  # buffers only
    rec, _, _ = _record(bn)
    rec.traverse()
    assert (rec.device, rec.devices, rec.params) == ("cpu", ["cpu"], 0)

    relu = torch.nn.ReLU()
    rec, _, _ = _record(relu)
    rec.traverse()
    assert (rec.device, rec.devices, rec.params) == ("no-parameters", [], 0)


def test_lazy_parameters_do_not_break_traversal():
    lazy = torch.nn.LazyLinear(3)
    rec, _, _ = _record(lazy)
    rec.traverse()
    assert rec.device == "cpu" and rec.params == 0


@pytest.fixture(params=["swap", "pre-hook"])
def instrumentation(request, monkeypatch):
    """Both kinds of instrumentation: a probed forward (a patched class for the program's own
    classes, a probed subclass for torch's), and the pre-hook the probe falls back to."""
    if request.param == "pre-hook":
        monkeypatch.setenv("DSH_PROBE_INSTRUMENT", "hook")
    return request.param


def _kind(instrumentation, model):
    if instrumentation == "pre-hook":
        return "pre-hook"
    return "subclass" if type(model).__module__.startswith("torch.") else "class"


def test_hook_counts_samples_once_per_arming_and_notices_a_move(instrumentation):
    model = torch.nn.Linear(2, 2)
    rec, errors, changes = _record(model, "n")
    rec.traverse()
    rec.install_hook(model)
    assert rec.instrumentation == _kind(instrumentation, model)
    t0 = time.time()
    model(torch.zeros(1, 2))
    assert rec.forward_calls == 1 and rec.last_forward_time >= t0
    assert rec.input_device == "cpu" and rec.armed is False
    model.to("meta")
    model(torch.zeros(1, 2, device="meta"))
    assert rec.input_device == "cpu"  # not armed: the second call is not inspected
    rec.armed = True
    model(torch.zeros(1, 2, device="meta"))
    assert rec.input_device == "meta"
    assert changes == [1]  # the armed call saw the first parameter on another device
    assert rec.forward_calls == 3 and errors == []
    rec.remove_hook()
    model(torch.zeros(1, 2, device="meta"))
    assert rec.forward_calls == 3
    assert type(model) is torch.nn.Linear and len(model._forward_pre_hooks) == 0


def test_hook_never_changes_outputs_or_exceptions(instrumentation):
    class Boom(torch.nn.Module):
        def forward(self, x, *, scale=1.0):
            if x.sum() < 0:
                raise ValueError("negative")
            return x * scale

    model = Boom()
    rec, errors, _ = _record(model)
    kind = _kind(instrumentation, model)
    rec.install_hook(model)
    assert rec.instrumentation == kind
    x = torch.ones(2)
    assert torch.equal(model(x, scale=3.0), x * 3.0)
    with pytest.raises(ValueError, match="negative"):
        model(-x)
    assert rec.forward_calls == 2 and errors == []


def test_pickled_or_copied_models_do_not_depend_on_the_probe(instrumentation):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    rec, _, _ = _record(model)
    rec.install_hook(model)
    if instrumentation == "pre-hook":
        assert isinstance(next(iter(model._forward_pre_hooks.values())), PreHook)
    else:
        assert type(model) is not torch.nn.Sequential and len(model._forward_pre_hooks) == 0

    ema = copy.deepcopy(model)
    ema(torch.zeros(1, 2))
    assert rec.forward_calls == 0  # the copy does not report as the registered model
    if instrumentation == "swap":
        assert type(ema) is torch.nn.Sequential  # a copy is of the original class, uninstrumented

    blob = pickle.dumps(model)
    assert b"probe.hooks" not in blob and b"_dsh_probe" not in blob
    # The saved model loads in an interpreter where the probe cannot even be imported.
    code = (
        "import pickle, sys; sys.modules['probe'] = None; import torch; "
        "m = pickle.loads(sys.stdin.buffer.read()); print(type(m).__name__, m(torch.zeros(1, 2)).shape)"
    )
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert b"Sequential torch.Size([1, 2])" in out.stdout


def test_worker_init_pickles_and_calls_the_users_function_after_ours(tmp_path):
    from probe._state import PROBE

    was_active = PROBE.writer is not None
    wrapped = pickle.loads(pickle.dumps(ProbeWorkerInit(_write_marker)))
    assert wrapped.user_fn is _write_marker
    os.environ["PROBE_TEST_MARKER"] = str(tmp_path / "m")
    try:
        wrapped(5)
        if PROBE.enabled:  # it started the probe of the process it ran in: this one
            assert os.path.exists(segment_path(os.getpid()))
    finally:
        del os.environ["PROBE_TEST_MARKER"]
        if not was_active:
            PROBE.shutdown()  # leave no segment behind: later tests' subprocesses would see a probing parent
    assert (tmp_path / "m").read_text() == "5"
    ProbeWorkerInit(None)(0)  # no user function: nothing to call, nothing raised
    if not was_active:
        PROBE.shutdown()


def _write_marker(worker_id):
    Path(os.environ["PROBE_TEST_MARKER"]).write_text(str(worker_id))


class SlowRange(torch.utils.data.Dataset):
    def __init__(self, n, delay_s):
        self.n, self.delay_s = n, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return torch.tensor([i])


@pytest.mark.parametrize("persistent", [False, True])
def test_loader_timer_measures_without_changing_batches(persistent):
    kwargs = {"num_workers": 1, "persistent_workers": True} if persistent else {}
    # A batch takes 0.04 s to load and 0.02 s to train on: the loader is the slower of the two, so a
    # worker prefetching ahead still leaves a wait in every batch (with 0.02 s each a persistent worker
    # kept pace with the step and the mean wait fell under the bound by chance).
    loader = torch.utils.data.DataLoader(SlowRange(6, 0.02), batch_size=2, **kwargs)
    timer = LoaderTimer()
    timer.install(loader)
    assert timer.figures() == (None, None, None, None)
    for _epoch in range(2):
        got = []
        for batch in loader:
            time.sleep(0.02)  # the "training step"
            got.append(batch.flatten().tolist())
        assert got == [[0, 1], [2, 3], [4, 5]]
    fraction, wait_s, step_s, batches = timer.figures()
    assert len(timer.window) == 5 and batches == 5  # 3 batches an epoch, the very first left out
    assert 0.0 < fraction < 1.0
    assert wait_s > 0.005 and step_s > wait_s
    if persistent:
        assert loader._iterator is not None  # the same iterator served both epochs


def test_a_slow_start_is_not_a_loop_that_waits() -> None:
    """Issue 39 item 13: workers that take 3 s to start made the first batch's wait 95 % of the
    window over the first batches. The first batch has no step before it: it is left out; an
    epoch's first batch after it counts, as wait only."""
    timer = LoaderTimer()
    timer.record(0.0, 3.0, True)  # workers starting: 3 s
    assert timer.figures() == (None, None, None, None)
    t = 3.0
    for _ in range(4):  # 4 steps of 100 ms, each waiting 2 ms for its batch
        timer.record(t + 0.098, t + 0.1, False)
        t += 0.1
    fraction, wait_s, step_s, batches = timer.figures()
    assert batches == 4 and fraction == pytest.approx(0.02) and step_s == pytest.approx(0.1)
    timer.record(t + 1.0, t + 1.5, True)  # the next epoch's first batch: wait only
    fraction, _, _, batches = timer.figures()
    assert batches == 5 and fraction == pytest.approx((4 * 0.002 + 0.5) / (4 * 0.1 + 0.5))


def test_a_trainers_slow_start_is_not_a_loop_that_waits() -> None:
    """The same through a framework callback's step hooks (Lightning, the HF Trainer): the wait
    before the first batch, the workers' start, is left out."""
    steps = StepCounter("lightning")
    steps.epoch_start()
    time.sleep(0.3)  # the workers start
    for _ in range(5):
        steps.batch_start()
        time.sleep(0.02)  # the step
        steps.step_end(boundary=False)
    fraction, _, step_s, batches = steps.timer.figures()
    assert batches == 4 and fraction is not None and fraction < 0.2 and step_s is not None and step_s < 0.2


def test_loader_timer_rejects_non_dataloaders():
    with pytest.raises(TypeError, match="DataLoader"):
        LoaderTimer().install([1, 2, 3])


def test_loader_timer_leaves_no_reference_cycle():
    # The multiprocessing iterator shuts its workers down in __del__: a cycle would delay that to gc.
    loader = torch.utils.data.DataLoader(SlowRange(2, 0.0), batch_size=1)
    timer = LoaderTimer()
    timer.install(loader)
    it = iter(loader)
    next(it)
    import weakref

    ref = weakref.ref(it)
    del it
    assert ref() is None
