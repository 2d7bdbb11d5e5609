"""Per-model bookkeeping: forward instrumentation, device traversal, input sampling, loader timing.

Counting a model's forward calls is the only probe code on the training hot path: a check that
torch.compile is not tracing it, a counter increment, one clock read and one flag test. Everything
that costs more (finding the input's device, walking the parameters) happens either when the
publisher thread arms the record (about once per publish interval) or in the publisher thread itself.

How the forward is instrumented (a patched class, a probed subclass, or a forward pre-hook) lives
in probe/instrument.py: ``nn.Module._call_impl`` stays on its fast path, which any forward hook
would push it off (that dispatch alone costs more than the probe's own work).

This module never imports torch: the caller passes the torch module it found in sys.modules.
"""

from __future__ import annotations

import collections
import sys
import time
import weakref

from probe import _compiled, _settings
from probe._breakdown import CLOCK
from probe._rate import RateWindow
from probe._workers import ProbeWorkerInit  # exported here too: its callers' name for it
from probe.instrument import DETACHED_AUDIT_EVENT, compiling_check, install
from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "LoaderTimer",
    "ModelRecord",
    "ProbeWorkerInit",
    "find_input_device",
    "find_input_tensor",
    "unwrap_model",
]

# Wrappers whose parameters live in ``.module``; hooked as given, traversed through.
_MODULE_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel", "FullyShardedDataParallel"})
_MAX_UNWRAP = 8
INPUT_MAX_DEPTH = 4
INPUT_MAX_ITEMS = 32  # per container: the first items are where a batch's tensors are
LOADER_WINDOW_BATCHES = 64
PARAM_DTYPES_MAX = 16
# Calls outside training sampled back to back while no training call was (see ModelRecord.sample).
UNTRAINED_SAMPLES_ARMED = 256
NAME_MAX_CHARS = 256


def unwrap_model(model: Any, module_type: type) -> tuple[Any, str]:
    """The module that owns the parameters, and a class label like ``DataParallel(Net)``."""
    chain = []
    inner = model
    for _ in range(_MAX_UNWRAP):
        orig = getattr(inner, "_orig_mod", None)  # torch.compile's OptimizedModule
        if isinstance(orig, module_type):
            chain.append(type(inner).__name__)
            inner = orig
            continue
        wrapped = getattr(inner, "module", None) if type(inner).__name__ in _MODULE_WRAPPERS else None
        if isinstance(wrapped, module_type):
            chain.append(type(inner).__name__)
            inner = wrapped
            continue
        break
    label = type(inner).__name__
    for wrapper in reversed(chain):
        label = f"{wrapper}({label})"
    return inner, label


def find_input_device(args: tuple[Any, ...], kwargs: dict[str, Any] | None, tensor_type: type) -> str | None:
    """Device of the first tensor in args, then kwargs (see ``find_input_tensor``)."""
    tensor = find_input_tensor(args, kwargs, tensor_type)
    return None if tensor is None else str(tensor.device)


def find_input_tensor(args: tuple[Any, ...], kwargs: dict[str, Any] | None, tensor_type: type) -> Any:
    """The first tensor in args, then kwargs, looking inside lists, tuples and dicts.

    Bounded in depth and breadth, and it only indexes real containers: a generator, iterator or any
    other object is never iterated, so nothing the model is about to consume gets consumed here.
    The container types' own methods are used so a subclass's overridden iteration is not run either.
    """
    stack: list[tuple[Any, int]] = [(kwargs, 1), (args, 1)] if kwargs else [(args, 1)]
    items: Sequence[Any]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, tensor_type):
            return obj
        if depth > INPUT_MAX_DEPTH:
            continue
        if isinstance(obj, tuple):
            items = tuple.__getitem__(obj, slice(0, INPUT_MAX_ITEMS))
        elif isinstance(obj, list):
            items = list.__getitem__(obj, slice(0, INPUT_MAX_ITEMS))
        elif isinstance(obj, dict):
            items = [v for _, v in zip(range(INPUT_MAX_ITEMS), dict.values(obj))]
        elif isinstance(obj, collections.UserDict) and type(obj.data) is dict:
            items = [v for _, v in zip(range(INPUT_MAX_ITEMS), dict.values(obj.data))]
        else:
            continue
        # Reversed onto the stack so the first item is examined first (depth-first, in order).
        for item in reversed(items):
            stack.append((item, depth + 1))
    return None


def _first_tensor_device(module: Any) -> str | None:
    for p in module.parameters():
        return str(p.device)
    for b in module.buffers():
        return str(b.device)
    return None


class LoaderTimer:
    """Time spent waiting for each batch vs time between batches, over the last batches.

    Installed on one DataLoader instance: its ``_get_iterator`` is shadowed by an instance attribute
    whose iterators get a timed ``_next_data``. Both are looked up on the instance by DataLoader's own
    code, so what the loader yields, its workers and its persistent-workers reuse are unchanged.
    Only weak references point back at the loader and its iterators: an iterator that referred to
    itself would outlive its last user, and with it its worker processes.

    Its very first batch is not in the window: no step came before it, and its wait is the job's
    start (workers that take seconds to start, the dataset opened) rather than a step's, which would
    read as a loop that waits 95 % of each step over its first few (the step breakdown leaves out
    what comes before its first boundary too). An epoch's first batch is in it, as wait only.
    """

    __slots__ = ("__weakref__", "framework", "last_end", "started", "window")

    def __init__(self, framework: bool = False) -> None:
        self.window: collections.deque[tuple[float, float]] = collections.deque(maxlen=LOADER_WINDOW_BATCHES)
        self.last_end: float | None = None
        self.started = False  # its first batch has come
        # Waits measured between a framework's step hooks (probe._steps.StepCounter), not in a loader.
        self.framework = framework

    def install(self, loader: Any) -> None:
        loader_cls = type(loader)
        get_iterator = getattr(loader_cls, "_get_iterator", None)
        if get_iterator is None or not callable(get_iterator):
            raise TypeError(f"loader timing needs a torch.utils.data.DataLoader, got {loader_cls.__name__}")
        loader_ref = weakref.ref(loader)
        timer_ref = weakref.ref(self)

        def _get_iterator() -> Any:
            ld = loader_ref()
            it = get_iterator(ld)
            timer = timer_ref()
            if timer is not None:
                timer.attach(it)
            return it

        _get_iterator.__dict__["__dsh_probe__"] = True  # the mark of what the probe installed
        loader.__dict__["_get_iterator"] = _get_iterator

    def attach(self, iterator: Any) -> None:
        next_data = getattr(type(iterator), "_next_data", None)
        if next_data is None:
            return
        it_ref = weakref.ref(iterator)
        timer_ref = weakref.ref(self)
        perf = time.perf_counter

        def _next_data() -> Any:
            it = it_ref()
            # _num_yielded is 0 on the first batch of each epoch (also after a persistent iterator's
            # reset): the gap before it is epoch turnover, not a training step.
            first = getattr(it, "_num_yielded", 1) == 0
            t0 = perf()
            data = next_data(it)
            t1 = perf()
            timer = timer_ref()
            if timer is not None:
                timer.record(t0, t1, first)
            return data

        iterator.__dict__["_next_data"] = _next_data
        self.last_end = None

    def record(self, t0: float, t1: float, first: bool) -> None:
        wait_s = t1 - t0
        step_s = wait_s if first or self.last_end is None else t1 - self.last_end
        self.last_end = t1
        if self.started:
            self.window.append((wait_s, step_s))
        self.started = True
        CLOCK.add_wait(wait_s, self.framework)

    def figures(self) -> tuple[float | None, float | None, float | None, int | None]:
        """(data_wait_fraction, mean data_wait_s per batch, mean step_s per batch, the batches they
        cover) or Nones: the count names the figures' window, which a reader shows beside them."""
        batches = tuple(self.window)  # one C-level copy: no bytecode of the loop thread interleaves
        if not batches:
            return None, None, None, None
        wait_s = sum(w for w, _ in batches)
        step_s = sum(s for _, s in batches)
        n = len(batches)
        fraction = min(1.0, wait_s / step_s) if step_s > 0 else None
        return fraction, wait_s / n, step_s / n, n


class ModelRecord:
    """One registered model. Attributes written by the hook are plain slots: no locks, no calls."""

    __slots__ = (
        "armed",
        "autocast",
        "cls_label",
        "compiled_counted",
        "compiled_key",
        "compiled_noted",
        "compiled_seen",
        "compiled_uncounted",
        "device",
        "devices",
        "first_device",
        "forward_calls",
        "forward_t0",
        "handle",
        "inherited",
        "inner_ref",
        "input_device",
        "input_shape",
        "input_shape_training",
        "untrained_samples",
        "instrumentation",
        "is_compiling",
        "last_forward_time",
        "loader_ref",
        "loader_settings",
        "loader_timer",
        "module_ref",
        "name",
        "on_error",
        "on_device_change",
        "param_dtypes",
        "params",
        "rate_hz",
        "rate_window",
        "steps",
        "syncs",
        "tensor_type",
        "torch",
        "traversed_at",
        "__weakref__",  # probe/_compiled.py finds the record by its key, weakly
    )

    def __init__(
        self, model: Any, name: str | None, torch: Any, on_error: Any, on_device_change: Any
    ) -> None:
        inner, label = unwrap_model(model, torch.nn.Module)
        self.module_ref = weakref.ref(model)
        self.inner_ref = weakref.ref(inner)
        self.cls_label = label[:NAME_MAX_CHARS]
        self.name = str(name)[:NAME_MAX_CHARS] if name is not None else type(inner).__name__[:NAME_MAX_CHARS]
        self.torch = torch
        self.tensor_type = torch.Tensor
        self.is_compiling = compiling_check(torch)
        self.compiled_seen = False  # set by the hook on every call of a compiled graph
        self.compiled_noted = False
        # Compiled calls counted after their graph ran (probe/_compiled.py), since the last tick;
        # compiled_uncounted: compiled calls ran that could not be counted (published).
        self.compiled_counted = False
        self.compiled_uncounted = False
        self.compiled_key = _compiled.enroll(self)
        self.on_error = on_error
        self.on_device_change = on_device_change
        self.handle: Any = None
        self.instrumentation: str | None = None  # "subclass" or "pre-hook" once installed
        self.forward_calls = 0
        self.last_forward_time: float | None = None
        self.armed = True  # inspect the very first call's inputs
        self.input_device: str | None = None
        self.input_shape: list[int] | None = None
        self.input_shape_training = False  # input_shape came from a call in training (train mode, grad on)
        self.untrained_samples = 0  # non-training calls sampled while armed for a training one
        self.autocast: str | None = None  # "off" or a dtype name, as of the last armed call
        self.forward_t0 = 0.0  # the pre-hook fallback's start of a timed forward (0.0: none)
        self.param_dtypes: list[str] = []
        self.loader_ref: Any = None  # weakref to the DataLoader it is fed from, once known
        # Its settings as last read: they outlive a loader its trainer dropped after the run.
        self.loader_settings: dict[str, Any] | None = None
        self.syncs = False  # register(..., syncs=True)
        self.params = 0
        self.devices: list[str] = []
        self.device = DEVICE_NO_PARAMETERS
        self.first_device: str | None = None
        self.traversed_at = 0.0
        self.rate_window = RateWindow(time.monotonic())
        self.rate_hz = 0.0
        self.steps: Any = None  # a probe._steps.StepCounter once a framework callback counts steps
        self.loader_timer: LoaderTimer | None = None
        self.inherited = False

    # -- hot path ---------------------------------------------------------------------------------
    def install_hook(self, model: Any) -> None:
        """Instrument ``model``'s forward (see probe/instrument.py for how, and why in that order)."""
        self.handle, self.instrumentation = install(model, self, self.torch)

    def sample(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Armed call: note the input's device and whether the first parameter moved. Never raises."""
        self.armed = False
        try:
            tensor = find_input_tensor(args, kwargs, self.tensor_type)
            inner = self.inner_ref()
            if tensor is not None:
                self.input_device = str(tensor.device)
                # The training batch's shape: a validation or inference call (eval mode, or no grad)
                # does not replace one seen in training (Lightning validates the same module).
                training = bool(getattr(inner, "training", True)) and self.torch.is_grad_enabled()
                if training or not self.input_shape_training:
                    self.input_shape = _settings.input_shape(tensor)
                    self.input_shape_training = training
                if not training and not self.input_shape_training and self.untrained_samples < UNTRAINED_SAMPLES_ARMED:
                    # Lightning's sanity check validates before the first training step, which may
                    # then come and go within one publish tick: stay armed for it (boundedly, so an
                    # inference-only job samples once a tick again after that).
                    self.untrained_samples += 1
                    self.armed = True
            self.sample_autocast(tensor)
            if inner is not None and _first_tensor_device(inner) != self.first_device:
                self.on_device_change()
        except Exception as e:  # noqa: BLE001 -- recorded, never raised into the user's forward
            self.on_error("hook", e)

    def sample_autocast(self, tensor: Any) -> None:
        """Whether autocast is on for the input's device type (else the parameters'), inside the call."""
        device_type = None
        if tensor is not None:
            device_type = tensor.device.type
        elif self.first_device is not None:
            device_type = self.first_device.split(":", 1)[0]
        if device_type in (None, "meta"):
            return
        try:
            self.autocast = _settings.autocast_of(self.torch, device_type)
        except Exception:  # noqa: BLE001 -- a device type autocast does not know: nothing to say
            self.autocast = None

    # -- publisher side ---------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.module_ref() is not None

    def first_device_changed(self) -> bool:
        inner = self.inner_ref()
        return inner is not None and _first_tensor_device(inner) != self.first_device

    def traverse(self) -> None:
        """Walk every parameter and buffer: parameter count and the set of devices."""
        inner = self.inner_ref()
        if inner is None:
            return
        devices: dict[str, None] = {}  # insertion-ordered set
        dtypes: dict[Any, None] = {}
        params = 0
        first = None
        for p in inner.parameters():
            d = str(p.device)
            devices[d] = None
            dtypes[p.dtype] = None
            first = first or d
            try:
                params += p.numel()
            except (RuntimeError, ValueError):
                pass  # an uninitialised lazy parameter has no size yet
        for b in inner.buffers():
            d = str(b.device)
            devices[d] = None
            first = first or d
        self.params = int(params)
        self.param_dtypes = [_settings.dtype_name(t) for t in list(dtypes)[:PARAM_DTYPES_MAX]]
        self.first_device = first
        self.devices = sorted(devices)
        if not devices:
            self.device = DEVICE_NO_PARAMETERS
        elif len(devices) > 1:
            self.device = DEVICE_MIXED
        else:
            self.device = first or DEVICE_NO_PARAMETERS  # (first: the one device)
        self.traversed_at = time.monotonic()

    def update_rate(self, now_mono: float) -> None:
        self.rate_hz = self.rate_window.update(now_mono, self.forward_calls)
        if self.steps is not None:
            self.steps.update_rate(now_mono)

    def reset_after_fork(self) -> None:
        self.inherited = True
        self.forward_calls = 0
        self.rate_window.reset(time.monotonic())
        self.rate_hz = 0.0
        self.steps = None  # the parent's trainer counts its steps, not this process
        self.last_forward_time = None
        self.forward_t0 = 0.0
        self.armed = True
        if self.loader_timer is not None:
            self.loader_timer.window.clear()

    def remove_hook(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            self.instrumentation = None
            handle.remove()

    # A record travels with its model's __dict__ only by accident (a class's own copier, a module
    # that reduces its __dict__ by hand): such copies get None, i.e. an uninstrumented model.
    def __reduce__(self) -> Any:
        return (sys.audit, (DETACHED_AUDIT_EVENT,))

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        return None

    def __copy__(self) -> None:
        return None

    def attach_loader(self, loader: Any) -> None:
        """The DataLoader this model is fed from (weakly held): its settings go in the payload."""
        self.loader_ref = weakref.ref(loader)
        self.loader_settings = _settings.loader_settings(loader)

    def to_payload(self) -> dict[str, Any]:
        fraction = wait_s = step_s = batches = None
        if self.loader_timer is not None:
            fraction, wait_s, step_s, batches = self.loader_timer.figures()
        last = self.last_forward_time
        loader = self.loader_ref() if self.loader_ref is not None else None
        if loader is not None:
            self.loader_settings = _settings.loader_settings(loader)
        return {
            "name": self.name,
            "class": self.cls_label,
            "params": self.params,
            "device": self.device,
            "devices": list(self.devices),
            "input_device": self.input_device,
            "forward_calls": int(self.forward_calls),
            "forward_rate_hz": float(self.rate_hz),
            "last_forward_time": float(last) if last is not None else None,
            "data_wait_fraction": fraction,
            "data_wait_s": wait_s,
            "step_s": step_s,
            "data_wait_batches": batches,
            "param_dtypes": list(self.param_dtypes),
            "autocast": self.autocast,
            "input_shape": list(self.input_shape) if self.input_shape is not None else None,
            "loader_settings": dict(self.loader_settings) if self.loader_settings is not None else None,
            "compiled_uncounted": self.compiled_uncounted,
        }
