"""Host-device sync counting (``register(model, syncs=True)``): counted, never shown, nothing else changed.

Without a GPU, torch's sync debug mode is stood in for: the warnings are emitted as torch emits them
(a UserWarning through the warnings machinery, "called a synchronizing CUDA operation (Triggered
internally at ...)", stack level 1), and the CUDA getters are replaced for the duration of a test. The
real thing runs under ``-m gpu``.
"""

from __future__ import annotations

import logging
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402
from probe._breakdown import CLOCK, OPTIMIZER  # noqa: E402
from probe._state import PROBE  # noqa: E402
from probe._syncs import SYNC_MESSAGE, SyncCounter  # noqa: E402
from probe_wire import validate_payload  # noqa: E402

TORCH_TEXT = f"{SYNC_MESSAGE} (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:160.)"


def emit_sync() -> None:
    warnings.warn(TORCH_TEXT, UserWarning, stacklevel=1)


class FakeCuda:
    """torch's CUDA getters as a GPU process has them: initialised, sync debug mode settable."""

    def __init__(self, initialised: bool = True, mode: int = 0) -> None:
        self.initialised = initialised
        self.mode = mode
        self.sets: list[int] = []

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialised)
        monkeypatch.setattr(torch._C, "_cuda_get_sync_debug_mode", lambda: self.mode, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_set_sync_debug_mode", self._set, raising=False)

    def _set(self, mode: int) -> None:
        self.sets.append(mode)
        self.mode = mode


@pytest.fixture(autouse=True)
def clean():
    if not PROBE.enabled:
        pytest.skip(f"the probe is off in this process: {PROBE.disabled_reason}")
    CLOCK.reset()
    filters = list(warnings.filters)
    yield
    for rec in list(PROBE.records):
        model = rec.module_ref()
        if model is not None:
            probe.unregister(model)
    probe.refresh()  # a collected syncs=True model is dropped at the next publish, and its counting
    assert PROBE.sync_counter.state == "off"
    # Nothing of ours left behind (imports during a test may add filters of their own: sympy's).
    assert all(f is not PROBE.sync_counter.filter for f in warnings.filters)
    assert [f for f in warnings.filters if f in filters] == filters
    CLOCK.reset()


def test_counted_and_never_shown_even_under_the_programs_error_filter():
    counter = SyncCounter()
    cuda = FakeCuda()
    torch_ns = type(sys)("fake_torch")
    torch_ns.cuda = type("C", (), {"is_initialized": staticmethod(lambda: True)})
    torch_ns._C = type("C", (), {"_cuda_get_sync_debug_mode": staticmethod(lambda: cuda.mode),
                                "_cuda_set_sync_debug_mode": staticmethod(cuda._set)})
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("error")  # the program's: every warning an exception
        logging.captureWarnings(True)
        try:
            counter.request()
            assert counter.poll(torch_ns) is None and counter.state == "on" and cuda.mode == 1
            before = CLOCK.syncs
            for _ in range(5):
                emit_sync()  # neither raised nor recorded
            assert CLOCK.syncs == before + 5
            with pytest.raises(UserWarning, match="something else"):
                warnings.warn("something else", UserWarning, stacklevel=1)  # the program's filter, as before
            assert "__warningregistry__" not in globals() or not any(
                isinstance(k, tuple) and k[0] == TORCH_TEXT for k in globals()["__warningregistry__"]
            )
        finally:
            logging.captureWarnings(False)
            counter.release(torch_ns)
    assert shown == [] and cuda.mode == 0 and cuda.sets == [1, 0]
    assert all(f is not counter.filter for f in warnings.filters)


def test_a_warning_torch_raises_in_cpp_is_counted_and_dropped_the_same_way(monkeypatch):
    """torch's own C++ warning path (TORCH_WARN, turned into a Python warning by its binding layer),
    with a CPU warning standing in for the sync one: "An output ... was resized" (aten's resize_output)."""
    import probe._syncs as syncs

    monkeypatch.setattr(syncs, "SYNC_MESSAGE", "An output with one or more elements was resized")
    counter = SyncCounter()
    a = torch.ones(2)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("error")
        counter._front()
        before = CLOCK.syncs
        for _ in range(3):
            torch.add(a, a, out=torch.empty(3))  # neither raised nor recorded
        assert CLOCK.syncs == before + 3
        counter._remove_filter()
        with pytest.raises(UserWarning, match="was resized"):
            torch.add(a, a, out=torch.empty(3))  # the program's filter again, once ours is gone
    assert shown == []


def test_a_filter_the_program_adds_later_is_overtaken_at_the_next_poll():
    counter = SyncCounter()
    cuda = FakeCuda()
    torch_ns = type(sys)("fake_torch")
    torch_ns.cuda = type("C", (), {"is_initialized": staticmethod(lambda: True)})
    torch_ns._C = type("C", (), {"_cuda_get_sync_debug_mode": staticmethod(lambda: cuda.mode),
                                "_cuda_set_sync_debug_mode": staticmethod(cuda._set)})
    with warnings.catch_warnings(record=True) as shown:
        counter.request()
        counter.poll(torch_ns)
        warnings.simplefilter("always")  # goes in front of ours
        emit_sync()
        assert len(shown) == 1  # until the next publish polls...
        counter.poll(torch_ns)
        assert warnings.filters[0] is counter.filter
        emit_sync()
        assert len(shown) == 1  # ...after which ours is first again
        counter.release(torch_ns)


def test_a_mode_the_program_set_is_left_alone():
    cuda = FakeCuda(mode=1)
    torch_ns = type(sys)("fake_torch")
    torch_ns.cuda = type("C", (), {"is_initialized": staticmethod(lambda: True)})
    torch_ns._C = type("C", (), {"_cuda_get_sync_debug_mode": staticmethod(lambda: cuda.mode),
                                "_cuda_set_sync_debug_mode": staticmethod(cuda._set)})
    counter = SyncCounter()
    filters = list(warnings.filters)
    counter.request()
    assert "set torch's sync debug mode itself" in counter.poll(torch_ns)
    assert counter.state == "declined" and cuda.sets == [] and warnings.filters == filters
    counter.release(torch_ns)
    assert cuda.sets == []
    # Counting, then the program takes the mode over: we step aside and never restore it.
    cuda.mode = 0
    counter.request()
    counter.poll(torch_ns)
    cuda.mode = 2
    assert "changed" in counter.poll(torch_ns)
    counter.release(torch_ns)
    assert cuda.mode == 2 and cuda.sets == [1] and warnings.filters == filters


def test_without_cuda_syncs_stay_none_and_nothing_changes():
    assert not torch.cuda.is_initialized()
    model = torch.nn.Linear(4, 2)
    filters = list(warnings.filters)
    assert probe.register(model, name="sy-cpu", syncs=True) is model
    assert PROBE.sync_counter.state == "waiting" and warnings.filters == filters
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    snap = probe.snapshot()
    assert snap["steps"]["steps"] == 2 and snap["syncs_per_step"] is None
    assert validate_payload(snap)[1] is None
    assert probe.register(model) is model  # positional and keyword calls of old still work
    assert probe.register(model, "sy-cpu", None) is model


def test_register_syncs_counts_per_step_with_cuda_stood_in(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    model = torch.nn.Linear(4, 2)
    probe.register(model, name="sy-fake-gpu", syncs=True)
    assert PROBE.sync_counter.state == "on" and cuda.mode == 1
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        probe.refresh()  # a publish: our filter is first again
        for _ in range(6):
            opt.zero_grad()
            loss = model(torch.randn(2, 4)).sum()
            emit_sync()  # loss.item()
            emit_sync()  # a .cpu() copy
            loss.backward()
            opt.step()
    assert [str(w.message) for w in shown] == []
    assert CLOCK.level == OPTIMIZER
    snap = probe.snapshot()
    assert snap["syncs_per_step"] == 2.0 and validate_payload(snap)[1] is None
    probe.unregister(model)
    assert cuda.mode == 0 and PROBE.sync_counter.state == "off"
    assert probe.snapshot()["syncs_per_step"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_syncs_are_counted_and_not_shown():  # pragma: no cover - GPU machines only
    model = torch.nn.Linear(64, 8).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert torch.cuda.get_sync_debug_mode() == 0
    probe.register(model, name="sy-gpu", syncs=True)
    assert torch.cuda.get_sync_debug_mode() == 1
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        probe.refresh()
        for _ in range(8):
            opt.zero_grad()
            loss = model(torch.randn(32, 64, device="cuda")).square().mean()
            loss.backward()
            opt.step()
            loss.item()  # one sync per step
    assert not [w for w in shown if SYNC_MESSAGE in str(w.message)]
    snap = probe.snapshot()
    assert snap["syncs_per_step"] is not None and snap["syncs_per_step"] >= 1.0
    probe.unregister(model)
    assert torch.cuda.get_sync_debug_mode() == 0
