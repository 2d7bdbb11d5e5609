"""Forward instrumentation: what a registered model looks like, copies, wrappers, tools.

The probe counts forwards through a patched class forward (the program's own classes), a probed
subclass (torch's classes) or a forward pre-hook where neither is safe (probe/instrument.py). These
tests hold it to "nothing changes for the user's program": same class as far as the program can
tell, copies and pickles of the original class, wrappers and compilers working, exact restore.
Tests that take the ``kind`` fixture run both probed-forward paths on the program's own classes.
"""

from __future__ import annotations

import abc
import copy
import inspect
import io
import os
import pickle
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import probe  # noqa: E402
from probe import instrument as instrumentation  # noqa: E402
from probe._state import PROBE  # noqa: E402
from probe.hooks import ModelRecord  # noqa: E402
from probe.instrument import PreHook, ProbedClassHandle, swap_refusal  # noqa: E402
from probe_wire import segment_path  # noqa: E402


def instrument(model, name=None):
    errors = []
    rec = ModelRecord(model, name, torch, lambda where, e: errors.append((where, e)), lambda: None)
    rec.traverse()
    rec.install_hook(model)
    return rec, errors


class Net(torch.nn.Module):
    """A user model: a docstring, a forward with a keyword-only argument with a default."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x, *, scale=1.0):
        return torch.nn.functional.relu(self.lin(x)) * scale


class Slotted(torch.nn.Linear):
    __slots__ = ("note",)


class Registry(torch.nn.Linear):
    made: list = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Registry.made.append(cls)


class Meta(type):
    pass


class WithMeta(torch.nn.Linear, metaclass=Meta):
    pass


class RefusesClassChange(torch.nn.Linear):
    def __setattr__(self, name, value):
        if name == "__class__":
            raise TypeError("no class changes here")
        super().__setattr__(name, value)


class CustomDeepcopy(torch.nn.Linear):
    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new


X = torch.ones(4, 3)


@pytest.fixture
def subclass_only(monkeypatch):
    """The probed-subclass path for the program's own classes too (it serves torch's classes)."""
    monkeypatch.setattr(instrumentation, "class_patch_target", lambda model: (None, "forced by the test"))


@pytest.fixture(params=["class", "subclass"])
def kind(request, monkeypatch):
    if request.param == "subclass":
        monkeypatch.setattr(instrumentation, "class_patch_target", lambda model: (None, "forced by the test"))
    return request.param


# -- what the program sees ------------------------------------------------------------------------


def test_a_probed_model_looks_like_its_class_and_unregister_restores_it_exactly(subclass_only):
    model = Net()
    before = (repr(model), list(model.state_dict()), inspect.signature(model.forward))
    expected = model(X, scale=2.0)
    rec, errors = instrument(model)
    assert rec.instrumentation == "subclass"
    cls = type(model)
    assert cls is not Net and issubclass(cls, Net) and isinstance(model, Net)
    assert (cls.__name__, cls.__qualname__, cls.__module__, cls.__doc__) == (
        "Net",
        Net.__qualname__,
        Net.__module__,
        Net.__doc__,
    )
    assert (repr(model), list(model.state_dict()), inspect.signature(model.forward)) == before
    assert len(model._forward_pre_hooks) == 0  # nn.Module._call_impl stays on its fast path
    assert torch.equal(model(X, scale=2.0), expected)
    assert rec.forward_calls == 1 and rec.input_device == "cpu" and errors == []
    rec.remove_hook()
    assert type(model) is Net and "_dsh_probe_rec" not in model.__dict__
    assert rec.instrumentation is None and rec.handle is None
    model(X)
    assert rec.forward_calls == 1


def test_instrument_hook_forces_the_pre_hook_and_leaves_the_class_alone(monkeypatch):
    monkeypatch.setenv("DSH_PROBE_INSTRUMENT", "hook")
    model = Net()
    rec, errors = instrument(model)
    assert rec.instrumentation == "pre-hook"
    assert type(model) is Net and len(model._forward_pre_hooks) == 1
    model(X)
    assert rec.forward_calls == 1 and errors == []
    rec.remove_hook()
    assert type(model) is Net and len(model._forward_pre_hooks) == 0
    monkeypatch.delenv("DSH_PROBE_INSTRUMENT")
    rec, _ = instrument(model)
    assert rec.instrumentation == "class"
    rec.remove_hook()


def test_one_probed_class_per_class_and_two_models_count_apart():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    rec_a, _ = instrument(a)
    rec_b, _ = instrument(b)
    assert type(a) is type(b)
    for _ in range(3):
        a(X)
    b(X)
    assert (rec_a.forward_calls, rec_b.forward_calls) == (3, 1)
    rec_a.remove_hook()
    assert type(a) is torch.nn.Linear and type(b) is not torch.nn.Linear
    b(X)
    assert rec_b.forward_calls == 2
    rec_b.remove_hook()


def test_register_twice_keeps_one_instrumentation_and_unregister_restores():
    if not PROBE.enabled:
        pytest.skip(f"the probe is off in this process: {PROBE.disabled_reason}")
    was_active = PROBE.writer is not None
    model = torch.nn.Linear(2, 2)
    try:
        probe.register(model, name="sub-twice")
        probed = type(model)
        probe.register(model, name="sub-twice-renamed")
        assert type(model) is probed and probed is not torch.nn.Linear
        assert len(model._forward_pre_hooks) == 0
        model(torch.zeros(1, 2))
        snap = probe.snapshot()
        found = [m for m in snap["models"] if m["name"].startswith("sub-twice")]
        assert [(m["name"], m["forward_calls"]) for m in found] == [("sub-twice-renamed", 1)]
        assert probe.unregister(model) is True
        assert type(model) is torch.nn.Linear and "_dsh_probe_rec" not in model.__dict__
        assert probe.unregister(model) is False
    finally:
        probe.unregister(model)
        if not was_active:
            PROBE.shutdown()
            assert not os.path.exists(segment_path(os.getpid()))


def test_outputs_exceptions_and_arguments_pass_through_unchanged():
    class Echo(torch.nn.Module):
        def forward(self, *args, **kwargs):
            if kwargs.get("fail"):
                raise kwargs["fail"]
            return args, kwargs

    model = Echo()
    rec, errors = instrument(model)
    nested = ([1, {"x": (2, torch.zeros(1, device="meta"))}],)
    args, kwargs = model(*nested, key=3)
    assert args == nested and kwargs == {"key": 3}
    assert rec.input_device == "meta"
    boom = KeyError("from the model")
    with pytest.raises(KeyError) as info:
        model(fail=boom)
    assert info.value is boom  # the very exception object, not a wrapped one
    assert rec.forward_calls == 2 and errors == []  # counted before the forward ran, as the hook did


def test_the_class_forward_is_looked_up_on_each_call():
    model = torch.nn.Linear(3, 2)
    rec, _ = instrument(model)
    original = torch.nn.Linear.forward
    try:
        torch.nn.Linear.forward = lambda self, x: x * 0 + 7
        assert torch.equal(model(X), torch.full((4, 3), 7.0))
    finally:
        torch.nn.Linear.forward = original
    assert model(X).shape == (4, 2) and rec.forward_calls == 2
    rec.remove_hook()


def test_slotted_classes_are_swapped_and_keep_their_slots(subclass_only):
    model = Slotted(3, 2)
    model.note = "kept"
    rec, _ = instrument(model)
    assert rec.instrumentation == "subclass" and isinstance(model, Slotted)
    model(X)
    assert model.note == "kept" and rec.forward_calls == 1
    rec.remove_hook()
    assert type(model) is Slotted and model.note == "kept"


# -- copies -----------------------------------------------------------------------------------------


def test_pickles_and_copies_are_of_the_original_class_and_not_counted():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    rec, _ = instrument(model)
    for dup in (
        copy.deepcopy(model),
        copy.copy(model),
        pickle.loads(pickle.dumps(model)),
        pickle.loads(pickle.dumps(model, protocol=0)),
    ):
        assert type(dup) is torch.nn.Sequential and "_dsh_probe_rec" not in dup.__dict__
        assert torch.equal(dup(X), model(X))
    assert rec.forward_calls == 4  # the model's own calls only
    buf = io.BytesIO()
    torch.save(model, buf)
    assert b"probe" not in buf.getvalue()
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded) is torch.nn.Sequential and torch.equal(loaded(X), model(X))
    assert type(model) is not torch.nn.Sequential  # the original stays instrumented
    # The saved model loads in an interpreter where the probe cannot even be imported.
    code = (
        "import io, sys; sys.modules['probe'] = None; import torch; "
        "m = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=False); "
        "print(type(m).__name__, m(torch.ones(1, 3)).shape)"
    )
    out = subprocess.run([sys.executable, "-c", code], input=buf.getvalue(), capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert b"Sequential torch.Size([1, 2])" in out.stdout


def test_a_class_with_its_own_deepcopy_gets_a_detached_copy():
    model = CustomDeepcopy(3, 2)
    rec, _ = instrument(model)
    dup = copy.deepcopy(model)
    assert type(dup) is CustomDeepcopy and "_dsh_probe_rec" not in dup.__dict__
    dup(X)
    assert rec.forward_calls == 0


def test_containers_made_from_a_probed_one_pass_through_uncounted():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    rec, _ = instrument(model)
    head = model[0:2]  # Sequential builds this with self.__class__: the probed class, no record
    head(X)
    assert rec.forward_calls == 0
    assert type(pickle.loads(pickle.dumps(head))) is torch.nn.Sequential
    rec.remove_hook()


# -- wrappers -----------------------------------------------------------------------------------------


def test_data_parallel_replicas_run_their_own_parameters_and_count():
    model = torch.nn.Linear(3, 2)
    rec, _ = instrument(model)
    # What DataParallel.replicate does per GPU: copy __dict__, then set the replica's own tensors.
    replica = model._replicate_for_data_parallel()
    replica.weight = torch.zeros(2, 3)
    replica.bias = torch.ones(2)
    assert torch.equal(replica(X), torch.ones(4, 2))  # the replica's tensors, not the original's
    assert rec.forward_calls == 1  # replicas count as the registered module, as with the hook


def test_wrapping_a_registered_module_and_registering_a_wrapper():
    net = torch.nn.Linear(3, 2)
    rec_net, _ = instrument(net)
    dp = torch.nn.DataParallel(net)
    rec_dp, _ = instrument(dp)
    assert rec_dp.instrumentation == "pre-hook" and type(dp) is torch.nn.DataParallel
    assert torch.equal(dp(X), net(X))
    assert (rec_net.forward_calls, rec_dp.forward_calls) == (2, 1)
    assert rec_dp.cls_label == "DataParallel(Linear)"


def test_ddp_wrapping_a_registered_module(gloo_world_of_one):
    net = torch.nn.Linear(3, 2)
    rec, _ = instrument(net)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    ddp(X).sum().backward()
    assert rec.forward_calls == 1 and net.weight.grad is not None
    assert swap_refusal(ddp, type(ddp)) is not None  # a registered DDP keeps the hook


# -- compilers and tracers ----------------------------------------------------------------------------


def _skip_without_compile():
    try:
        torch.compile(torch.nn.Linear(3, 2), backend="eager", fullgraph=True)(X)
    except Exception as e:  # noqa: BLE001 -- environment-dependent: a broken dynamo is a skip
        pytest.skip(f"torch.compile does not run here: {type(e).__name__}: {e}")


@pytest.mark.parametrize("how", ["torch.compile", "module.compile"])
def test_compiled_calls_are_one_graph_and_counted(how):
    _skip_without_compile()
    from torch._dynamo.utils import counters

    model = Net()
    rec, errors = instrument(model)
    expected = model(X)
    torch._dynamo.reset()
    counters.clear()
    if how == "torch.compile":
        run = torch.compile(model, backend="aot_eager", fullgraph=True)
    else:
        model.compile(backend="aot_eager", fullgraph=True)
        run = model
    for _ in range(5):
        assert torch.allclose(run(X), expected)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    # One eager call, five compiled ones, counted after their graph (probe/_compiled.py).
    assert rec.forward_calls == 6 and rec.compiled_seen is True and rec.compiled_counted is True and errors == []
    rec.remove_hook()
    assert type(model) is Net
    assert torch.allclose(run(X), expected)  # the class changed back: one recompile, same result


def test_a_compiled_module_keeps_the_hook():
    _skip_without_compile()
    compiled = torch.compile(torch.nn.Linear(3, 2), backend="eager")
    rec, _ = instrument(compiled)
    assert rec.instrumentation == "pre-hook"  # OptimizedModule sets forward on the instance
    compiled(X)
    assert rec.forward_calls == 1


class Scaled(torch.nn.Module):
    """TorchScript takes no keyword-only parameters: the same model as Net, scriptable."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x, scale: float = 1.0):
        return torch.nn.functional.relu(self.lin(x)) * scale


def test_the_probed_forward_has_the_original_signature_and_defaults(kind):
    class Odd(torch.nn.Module):
        def forward(this, a, b=2, /, c=3, *rest, d, e=5, **more):
            return (a, b, c, rest, d, e, more)

    for model, calls in (
        (Net(), [((X,), {}), ((X,), {"scale": 2.0})]),
        (Odd(), [((1,), {"d": 4}), ((1, 9, 8, 7, 6), {"d": 0, "e": 1, "z": 2})]),
    ):
        expected = [model(*a, **k) for a, k in calls]
        before = inspect.signature(model.forward)
        rec, errors = instrument(model)
        assert rec.instrumentation == kind
        assert inspect.signature(model.forward) == before
        assert type(model).forward.__qualname__ == type(model).forward.__wrapped__.__qualname__
        got = [model(*a, **k) for a, k in calls]
        for g, e in zip(got, expected):
            assert g == e if not isinstance(g, torch.Tensor) else torch.equal(g, e)
        assert rec.forward_calls == 2 and errors == []
        with pytest.raises(TypeError, match=r"forward\(\) missing 1 required"):
            model()  # the very message the original gives


class NoSelf(torch.nn.Module):
    def forward(*args):  # self arrives in args
        return args[1] + 1


class OddNames(torch.nn.Module):
    def forward(self, _dsh_probe_rec, **kw):  # a name of the probe's own: the generic pass-through
        return _dsh_probe_rec * 2, kw


def test_forwards_whose_parameters_cannot_be_copied_get_a_pass_through(kind):
    for model, call, expected in (
        (NoSelf(), lambda m: m(X), X + 1),
        (OddNames(), lambda m: m(X, k=1)[0], X * 2),
        (OddNames(), lambda m: m(_dsh_probe_rec=X)[0], X * 2),
    ):
        rec, errors = instrument(model)
        assert rec.instrumentation == kind
        assert torch.equal(call(model), expected)
        assert rec.forward_calls == 1 and rec.input_device == "cpu" and errors == []
        assert inspect.signature(model.forward) == inspect.signature(
            type(model).forward.__wrapped__.__get__(model)
        )
        rec.remove_hook()


def test_export_fx_jit_script_and_trace_see_the_original_forward(kind):
    model = Scaled()
    plain_specs = [
        str(s.arg) for s in torch.export.export(model, (X,), {"scale": 3.0}).graph_signature.input_specs
    ]
    rec, errors = instrument(model)
    expected = model(X, scale=3.0)

    exported = torch.export.export(model, (X,), {"scale": 3.0})
    assert [str(s.arg) for s in exported.graph_signature.input_specs] == plain_specs  # names included
    assert torch.allclose(exported.module()(X, scale=3.0), expected)
    assert rec.compiled_seen is True

    for traced_model in (model, Net()):  # Net: a keyword-only parameter
        if traced_model is not model:
            instrument(traced_model)
        gm = torch.fx.symbolic_trace(traced_model)
        assert list(inspect.signature(gm.forward).parameters) == ["x", "scale"]
        assert torch.allclose(gm(X, scale=3.0), traced_model(X, scale=3.0))

    scripted = torch.jit.script(model)  # scripts the original forward: a separate, uninstrumented copy
    assert torch.allclose(scripted(X, scale=3.0), expected)
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    buf.seek(0)
    assert torch.allclose(torch.jit.load(buf)(X, scale=3.0), expected)

    traced = torch.jit.trace(model, (X,))
    assert torch.allclose(traced(X), model(X))
    calls = rec.forward_calls
    scripted(X)
    traced(X)
    assert rec.forward_calls == calls  # neither runs the probe
    assert type(model).__name__ == "Scaled" and rec.instrumentation == kind
    assert [e for e in errors if e[0] != "hook"] == []


# -- where the class is not swapped -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: Registry(3, 2), "__init_subclass__"),
        (lambda: WithMeta(3, 2), "metaclass"),
        (lambda: RefusesClassChange(3, 2), None),
        (lambda: _with_instance_forward(torch.nn.Linear(3, 2)), "instance"),
        (lambda: _parametrized(torch.nn.Linear(3, 2)), "parametrized"),
        (lambda: torch.nn.DataParallel(torch.nn.Linear(3, 2)), "torch.nn.parallel"),
    ],
    ids=["init_subclass", "metaclass", "refuses-__class__", "instance-forward", "parametrized", "wrapper"],
)
def test_classes_that_cannot_be_swapped_safely_keep_the_pre_hook(make, reason, subclass_only):
    model = make()
    cls = type(model)
    made_before = list(Registry.made)
    refusal = swap_refusal(model, cls)
    if reason is None:
        assert refusal is None  # refused only when assigned
    else:
        assert reason in refusal
    expected = model(X)
    rec, errors = instrument(model)
    assert rec.instrumentation == "pre-hook" and type(model) is cls
    assert "_dsh_probe_rec" not in model.__dict__
    assert isinstance(next(iter(model._forward_pre_hooks.values())), PreHook)
    assert Registry.made == made_before  # the user's __init_subclass__ never ran for us
    assert torch.equal(model(X), expected)
    assert rec.forward_calls == 1 and errors == []
    rec.remove_hook()
    assert len(model._forward_pre_hooks) == 0 and type(model) is cls


def _with_instance_forward(model):
    inner = model.forward
    model.forward = lambda x: inner(x)
    return model


def _parametrized(model):
    class Same(torch.nn.Module):
        def forward(self, w):
            return w

    torch.nn.utils.parametrize.register_parametrization(model, "weight", Same())
    return model


class Identity(torch.nn.Module):
    def forward(self, w):
        return w


def test_a_class_swapped_again_by_someone_else_is_left_to_them():
    # parametrize builds its class on model.__class__, which a probed subclass answers with the
    # original (as pickle needs): torch's Linear then runs uncounted but unchanged, and unregistering
    # must not undo parametrize's class.
    model = torch.nn.Linear(3, 2)
    expected = model(X)
    rec, _ = instrument(model)
    parametrize = torch.nn.utils.parametrize
    parametrize.register_parametrization(model, "weight", Identity())
    assert torch.equal(model(X), expected)
    rec.remove_hook()
    assert parametrize.is_parametrized(model) and "_dsh_probe_rec" not in model.__dict__
    calls = rec.forward_calls
    model(X)
    assert rec.forward_calls == calls
    parametrize.remove_parametrizations(model, "weight")
    assert type(model) is torch.nn.Linear and torch.equal(model(X), expected)


def test_a_patched_class_keeps_counting_through_parametrize():
    class Lin(torch.nn.Linear):
        pass

    model = Lin(3, 2)
    rec, _ = instrument(model)
    assert rec.instrumentation == "class"
    parametrize = torch.nn.utils.parametrize
    parametrize.register_parametrization(model, "weight", Identity())  # ParametrizedLin(Lin)
    model(X)
    assert rec.forward_calls == 1
    parametrize.remove_parametrizations(model, "weight")
    rec.remove_hook()
    assert type(model) is Lin and "forward" not in Lin.__dict__


def test_a_second_record_on_a_probed_instance_uses_the_hook():
    model = torch.nn.Linear(3, 2)
    first, _ = instrument(model)
    second, _ = instrument(model)
    assert (first.instrumentation, second.instrumentation) == ("subclass", "pre-hook")
    model(X)
    assert first.forward_calls == second.forward_calls == 1
    second.remove_hook()
    first.remove_hook()
    assert type(model) is torch.nn.Linear and len(model._forward_pre_hooks) == 0


def test_a_handle_outliving_its_model_does_nothing():
    model = torch.nn.Linear(3, 2)
    rec, _ = instrument(model)
    handle = rec.handle
    assert isinstance(handle, ProbedClassHandle)
    del model
    import gc

    gc.collect()
    handle.remove()
    assert rec.alive is False


def test_abc_models_are_swapped(kind):
    class Base(torch.nn.Module, abc.ABC):
        @abc.abstractmethod
        def forward(self, x): ...

    class Impl(Base):
        def forward(self, x):
            return x + 1

    model = Impl()
    rec, _ = instrument(model)
    assert rec.instrumentation == kind and torch.equal(model(X), X + 1)
    rec.remove_hook()
    assert type(model) is Impl
