"""Issue 11: a registered model pickles to exactly the bytes it pickles to unregistered.

word_language_model saves its model with ``torch.save(model)`` and loads it back with
``torch.load(weights_only=True)`` and its own ``safe_globals``: anything the probe leaves in the
pickle (a reconstructor, a hook, a record) breaks that load. These tests register through the real
``probe.register`` and compare the bytes of ``torch.save`` and ``pickle.dumps`` with and without.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x)


class WithBuffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.norm = torch.nn.BatchNorm1d(3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x):
        return self.norm(self.lin(x)) * self.scale


X = torch.ones(4, 3)
SAFE = [Net, WithBuffers, torch.nn.Linear, torch.nn.BatchNorm1d, torch.nn.Sequential, torch.nn.ReLU]


def saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def pickled(obj) -> list[bytes]:
    return [pickle.dumps(obj, protocol=p) for p in range(pickle.HIGHEST_PROTOCOL + 1)]


def make(kind: str):
    torch.manual_seed(0)
    if kind == "plain":
        return Net()
    if kind == "sequential":
        return torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    if kind == "buffers":
        model = WithBuffers()
        model(X)  # moves the running statistics
        return model.eval()  # and keeps them still from here on
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["plain", "sequential", "buffers"])
def test_torch_save_bytes_are_the_same_registered_or_not(kind):
    model = make(kind)
    before_save, before_pickles = saved(model), pickled(model)
    assert saved(model) == before_save  # control: torch.save is deterministic here
    probe.register(model, name=f"pickling-{kind}")
    try:
        model(X)
        assert saved(model) == before_save
        assert pickled(model) == before_pickles
        assert saved(copy.deepcopy(model)) == before_save
        with torch.serialization.safe_globals(SAFE):
            loaded = torch.load(io.BytesIO(before_save), weights_only=True)
            again = torch.load(io.BytesIO(saved(model)), weights_only=True)
        assert type(again) is type(loaded)
        assert torch.equal(again(X), model(X))
    finally:
        probe.unregister(model)


def test_a_registered_models_class_is_its_own():
    model = Net()
    probe.register(model)
    try:
        assert type(model) is Net and model.__class__ is Net
        assert "forward" not in model.__dict__ and not any("probe" in k for k in model.__dict__)
    finally:
        probe.unregister(model)
    assert Net.forward.__name__ == "forward" and not hasattr(Net.forward, "__dsh_probe__")


def test_a_ddp_wrapped_model_saves_the_same_bytes(gloo_world_of_one):
    net = make("plain")
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    ddp(X).sum().backward()  # the wrapper's own state settles after its first step
    before_module, before_wrapper = saved(ddp.module), saved(ddp)
    probe.register(ddp, name="pickling-ddp")
    try:
        assert saved(ddp) == before_wrapper
        ddp(X).sum().backward()
        assert saved(ddp.module) == before_module
        rec = [r for r in probe._state.PROBE.records if r.module_ref() is ddp][0]
        assert rec.instrumentation == "class" and rec.forward_calls == 1
        assert type(ddp.module) is Net and len(ddp._forward_pre_hooks) == 0
    finally:
        probe.unregister(ddp)
