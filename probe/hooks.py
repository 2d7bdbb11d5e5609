"""Per-model bookkeeping: forward instrumentation, device traversal, input sampling, loader timing.

Counting a model's forward calls is the only probe code on the training hot path: a check that
torch.compile is not tracing it, a counter increment, one clock read and one flag test. Everything
that costs more (finding the input's device, walking the parameters) happens either when the
publisher thread arms the record (about once per publish interval) or in the publisher thread itself.

The registered instance's class is swapped for a subclass whose ``forward`` does that bookkeeping
and then calls the original class's ``forward`` (``ProbedClassHandle``): ``nn.Module._call_impl``
stays on its fast path, which any forward hook would push it off (that dispatch alone costs more
than the probe's own work). Models whose class cannot be swapped safely keep a forward pre-hook
(``PreHook``); see ``swap_refusal``.

This module never imports torch: the caller passes the torch module it found in sys.modules.
"""

from __future__ import annotations

import abc
import collections
import copyreg
import functools
import os
import sys
import time
import types
import weakref

from probe._rate import RateWindow

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "LoaderTimer",
    "ModelRecord",
    "PreHook",
    "ProbedClassHandle",
    "ProbeWorkerInit",
    "find_input_device",
    "swap_refusal",
    "unwrap_model",
]

# Wrappers whose parameters live in ``.module``; hooked as given, traversed through.
_MODULE_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel", "FullyShardedDataParallel"})
_MAX_UNWRAP = 8
INPUT_MAX_DEPTH = 4
INPUT_MAX_ITEMS = 32  # per container: the first items are where a batch's tensors are
LOADER_WINDOW_BATCHES = 64
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


def find_input_device(args: tuple, kwargs: dict | None, tensor_type: type) -> str | None:
    """Device of the first tensor in args, then kwargs, looking inside lists, tuples and dicts.

    Bounded in depth and breadth, and it only indexes real containers: a generator, iterator or any
    other object is never iterated, so nothing the model is about to consume gets consumed here.
    The container types' own methods are used so a subclass's overridden iteration is not run either.
    """
    stack: list[tuple[Any, int]] = [(kwargs, 1), (args, 1)] if kwargs else [(args, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, tensor_type):
            return str(obj.device)
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
    """

    __slots__ = ("__weakref__", "last_end", "window")

    def __init__(self) -> None:
        self.window: collections.deque = collections.deque(maxlen=LOADER_WINDOW_BATCHES)
        self.last_end: float | None = None

    def install(self, loader: Any) -> None:
        loader_cls = type(loader)
        get_iterator = getattr(loader_cls, "_get_iterator", None)
        if get_iterator is None or not callable(get_iterator):
            raise TypeError(f"loader timing needs a torch.utils.data.DataLoader, got {loader_cls.__name__}")
        loader_ref = weakref.ref(loader)
        timer_ref = weakref.ref(self)

        def _get_iterator():
            ld = loader_ref()
            it = get_iterator(ld)
            timer = timer_ref()
            if timer is not None:
                timer.attach(it)
            return it

        _get_iterator.__dsh_probe__ = True
        loader.__dict__["_get_iterator"] = _get_iterator

    def attach(self, iterator: Any) -> None:
        next_data = getattr(type(iterator), "_next_data", None)
        if next_data is None:
            return
        it_ref = weakref.ref(iterator)
        timer_ref = weakref.ref(self)
        perf = time.perf_counter

        def _next_data():
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
        self.window.append((wait_s, step_s))

    def figures(self) -> tuple[float | None, float | None, float | None]:
        """(data_wait_fraction, mean data_wait_s per batch, mean step_s per batch) or Nones."""
        batches = tuple(self.window)  # one C-level copy: no bytecode of the loop thread interleaves
        if not batches:
            return None, None, None
        wait_s = sum(w for w, _ in batches)
        step_s = sum(s for _, s in batches)
        n = len(batches)
        fraction = min(1.0, wait_s / step_s) if step_s > 0 else None
        return fraction, wait_s / n, step_s / n


class ProbeWorkerInit:
    """A DataLoader ``worker_init_fn`` that starts the probe in the worker, then calls the user's.

    A module-level class so it pickles by reference for ``spawn`` workers (which would otherwise
    never import the probe); the user's function keeps running exactly as before, after ours.
    """

    __slots__ = ("user_fn",)

    def __init__(self, user_fn: Any = None) -> None:
        self.user_fn = user_fn

    def __getstate__(self) -> Any:
        return self.user_fn

    def __setstate__(self, state: Any) -> None:
        self.user_fn = state

    def __call__(self, worker_id: int) -> None:
        try:
            from probe import _state

            _state.PROBE.activate_worker(worker_id)
        except Exception:  # noqa: BLE001 -- the probe must never break a user's data loading
            pass
        if self.user_fn is not None:
            self.user_fn(worker_id)


_DETACHED_AUDIT_EVENT = "dsh.probe.detached-hook"
_clock = time.time


def _detached_hook() -> Any:
    # sys.audit(event, module, args, kwargs) returns None and does nothing unless the program installed
    # audit hooks; as a stdlib builtin it pickles by name, so a model saved with our hook in its
    # _forward_pre_hooks loads anywhere, with or without the probe installed.
    return functools.partial(sys.audit, _DETACHED_AUDIT_EVENT)


def _compiling_check(torch: Any) -> Any:
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None:
        check = getattr(getattr(torch, "_utils", None), "is_compiling", None)
    return check if check is not None else (lambda: False)


class PreHook:
    """The fallback forward pre-hook: a counter, a clock read, a flag test; the rest only when armed.

    Used where the class swap is refused (``swap_refusal``). It does what the probed ``forward``
    does, but torch's dispatch of any forward hook costs more than the hook itself.

    A class rather than a closure so that ``torch.save(model)`` (which pickles hooks) and
    ``copy.deepcopy(model)`` (an EMA copy, say) keep working: both get a harmless stand-in, so a copy
    never counts its forwards as the registered model's.

    Inside torch.compile / torch.export tracing (a registered module compiled afterwards) the hook
    only stores a constant: dynamo replays that store on every compiled call without a graph break
    or a recompile, whereas reading the counter would make it specialise on its value and recompile
    on every call (a hard error under ``fullgraph=True``), and the clock call would break the graph.
    """

    __slots__ = ("is_compiling", "rec")

    def __init__(self, rec: ModelRecord, is_compiling: Any) -> None:
        self.rec = rec
        self.is_compiling = is_compiling

    def __call__(self, module: Any, args: tuple, kwargs: dict) -> None:
        if self.is_compiling():
            self.rec.compiled_seen = True
            return
        rec = self.rec
        rec.forward_calls += 1
        rec.last_forward_time = _clock()
        if rec.armed:
            rec.sample(args, kwargs)

    def __reduce__(self) -> Any:
        return (functools.partial, (sys.audit, _DETACHED_AUDIT_EVENT))

    def __deepcopy__(self, memo: dict) -> Any:
        return _detached_hook()

    def __copy__(self) -> Any:
        return _detached_hook()


# -- instrumentation by class swap -------------------------------------------------------------------
# The registered instance's class becomes a subclass of its own class, made once per class, that
# differs only in ``forward`` (bookkeeping, then the original class's forward looked up anew on each
# call), ``__reduce_ex__`` (a pickle or copy is of the original class, without the record) and a
# class-level default record of None (an instance without a record of its own passes straight
# through). A class-level override, not an instance attribute: DataParallel's replicas copy
# ``__dict__``, and call ``forward`` with themselves as ``self``.
_REC_ATTR = "_dsh_probe_rec"  # the instance's ModelRecord, in its __dict__; read as self._dsh_probe_rec
_BASE_ATTR = "__dsh_probe_base__"  # on a probed class: the class it was made from
_SWAP_METACLASSES = (type, abc.ABCMeta)  # metaclasses that do nothing on their own when subclassed
# torch families that make, inspect or restore classes themselves (DataParallel, DDP, FSDP1/2,
# fully_shard, fx GraphModule's per-instance classes, TorchScript, OptimizedModule, parametrize's
# Parametrized* classes, quantization's type-keyed module swaps, export's unflattened modules):
# they keep the pre-hook.
_HOOK_ONLY_MODULES = (
    "torch.distributed",
    "torch.nn.parallel",
    "torch.fx",
    "torch.jit",
    "torch._dynamo",
    "torch.nn.utils.parametrize",
    "torch.ao",
    "torch.export",
    "torch._export",
)


_OBJECT_NEW = object.__dict__["__new__"]


def _static_lookup(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


ENV_INSTRUMENT = "DSH_PROBE_INSTRUMENT"


def hook_forced() -> bool:
    """``DSH_PROBE_INSTRUMENT=hook``: a forward pre-hook for every model, never a class swap (for
    code that compares classes exactly, ``type(model) is Net``, at about 1.5 µs more per call)."""
    return os.environ.get(ENV_INSTRUMENT, "").strip().lower() in ("hook", "pre-hook", "prehook")


def swap_refusal(model: Any, cls: type) -> str | None:
    """Why ``model`` keeps the forward pre-hook instead of a probed subclass; None when it need not.

    Conservative on purpose: anything that would run code of the user's (``__init_subclass__``, a
    metaclass), bypass a class-level ``forward`` (one set on the instance) or that manages classes
    itself keeps the hook, which costs a microsecond or two more per call and changes nothing else.
    """
    if _BASE_ATTR in cls.__dict__:
        return None  # already a probed class (an instance of it that had no record of its own)
    if type(cls) not in _SWAP_METACLASSES:
        return f"metaclass {type(cls).__name__}"
    inst_dict = getattr(model, "__dict__", None)
    if type(inst_dict) is not dict:
        return "no instance __dict__"
    if "forward" in inst_dict:
        return "forward set on the instance"
    modules = inst_dict.get("_modules")
    if isinstance(modules, dict) and "parametrizations" in modules:
        return "parametrized module"
    for klass in cls.__mro__[:-1]:  # all but object
        if "__init_subclass__" in klass.__dict__:
            return f"{klass.__name__} defines __init_subclass__"
        module_name = klass.__dict__.get("__module__")
        if isinstance(module_name, str) and module_name.startswith(_HOOK_ONLY_MODULES):
            return f"{klass.__name__} from {module_name}"
    if not isinstance(_static_lookup(cls, "forward"), types.FunctionType):
        return "forward is not a plain function"
    # Pickles and copies of a probed instance are rebuilt as object.__new__(original class); a class
    # that builds its instances otherwise keeps the hook.
    if _static_lookup(cls, "__new__") is not _OBJECT_NEW:
        return "defines __new__"
    for name in ("__getnewargs__", "__getnewargs_ex__"):
        if _static_lookup(cls, name) is not None:
            return f"defines {name}"
    return None


# The probed class's forward, generated with the original forward's parameters (read from its code
# object, so no names but its own identifiers go into the source). A copy of the signature costs
# half of a (*args, **kwargs) pass-through and lets torch.fx bind it like the original. The
# bookkeeping's names all start with _dsh_probe_, which no parameter may, and it reads no globals.
_FORWARD_SOURCE = """\
def _dsh_probe_factory(_dsh_probe_base, _dsh_probe_clock, _dsh_probe_dynamo, _dsh_probe_compiler,
                       _dsh_probe_compiling):
    def forward({params}):
        _dsh_probe_rec = {self}._dsh_probe_rec
        if _dsh_probe_rec is not None:
            if {compiling}:
                _dsh_probe_rec.compiled_seen = True
            else:
                _dsh_probe_rec.forward_calls += 1
                _dsh_probe_rec.last_forward_time = _dsh_probe_clock()
                if _dsh_probe_rec.armed:
                    _dsh_probe_rec.sample({sample_args}, {sample_kwargs})
        return _dsh_probe_base.forward({call})
    return forward
"""
# torch.compiler.is_compiling() is "not scripting and _is_compiling_flag". Under dynamo,
# is_dynamo_compiling() is the constant True, so the flag is never read there (dynamo would guard on
# its value and recompile every call); torch.export's non-strict tracing sets the flag. The same
# answer at about half the cost (this forward never runs inside TorchScript).
_FAST_COMPILING = "_dsh_probe_dynamo() or _dsh_probe_compiler._is_compiling_flag"
_GENERIC_PARAMS = ("self", (), 0, "args", (), "kwargs")


def _forward_params(code: Any) -> tuple | None:
    """(self, positional, positional-only count, *name, keyword-only, **name) of a forward's code."""
    import keyword

    n_pos, n_kwonly = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    i = n_pos + n_kwonly
    varargs = varkw = None
    if code.co_flags & 0x04:  # CO_VARARGS
        varargs, i = names[i], i + 1
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        varkw = names[i]
    every = [*names[: n_pos + n_kwonly], varargs or "x", varkw or "x"]
    if n_pos == 0 or any(
        not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_dsh_probe") for n in every
    ):
        return None
    return (
        names[0],
        names[1:n_pos],
        code.co_posonlyargcount,
        varargs,
        names[n_pos : n_pos + n_kwonly],
        varkw,
    )


def _forward_source(params: tuple, compiling: str) -> str:
    self_name, positional, n_posonly, varargs, kwonly, varkw = params
    declared = [self_name, *positional]
    if n_posonly:
        declared.insert(n_posonly, "/")
    if varargs:
        declared.append("*" + varargs)
    elif kwonly:
        declared.append("*")
    declared += kwonly
    if varkw:
        declared.append("**" + varkw)
    star = ["*" + varargs] if varargs else []
    sample_args = "(" + "".join(f"{a}, " for a in [*positional, *star]) + ")"
    sample_kwargs = "{" + "".join(f"{k!r}: {k}, " for k in kwonly) + (f"**{varkw}" if varkw else "") + "}"
    call = [self_name, *positional, *star, *(f"{k}={k}" for k in kwonly), *(["**" + varkw] if varkw else [])]
    return _FORWARD_SOURCE.format(
        params=", ".join(declared),
        self=self_name,
        compiling=compiling,
        sample_args=sample_args,
        sample_kwargs=sample_kwargs,
        call=", ".join(call),
    )


def _make_forward(base: type, torch: Any) -> Any:
    """The probed class's ``forward``: bookkeeping, then ``base.forward`` (looked up on each call).

    It has the original forward's parameters and defaults, its globals (it reads none itself), its
    name and qualified name, and ``__wrapped__`` pointing at it: tools that read a forward's source
    or signature (torch.jit.script, torch.fx, inspect.signature for torch.export's input names) see
    the original, resolved in its own module, as they would without the probe. A forward whose
    parameters cannot be copied gets a ``(self, *args, **kwargs)`` pass-through instead.
    """
    import linecache

    original = _static_lookup(base, "forward")
    compiler = getattr(torch, "compiler", None)
    dynamo_compiling = getattr(compiler, "is_dynamo_compiling", None)
    fast = callable(dynamo_compiling) and isinstance(getattr(compiler, "_is_compiling_flag", None), bool)
    params = _forward_params(original.__code__)
    copied = params is not None
    source = _forward_source(
        params if copied else _GENERIC_PARAMS, _FAST_COMPILING if fast else "_dsh_probe_compiling()"
    )
    qualname = getattr(original, "__qualname__", "forward")
    filename = f"<dsh probe: {base.__module__}.{qualname}>"
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)  # identifiers from a code object only
    # Tracebacks through this frame show its source, like any other.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    inner = namespace["_dsh_probe_factory"](base, _clock, dynamo_compiling, compiler, _compiling_check(torch))
    wrapper = types.FunctionType(
        inner.__code__,
        original.__globals__,
        "forward",
        original.__defaults__ if copied else None,
        inner.__closure__,
    )
    if copied and original.__kwdefaults__:
        wrapper.__kwdefaults__ = original.__kwdefaults__
    wrapper.__qualname__ = qualname
    wrapper.__doc__ = original.__doc__
    wrapper.__annotations__ = getattr(original, "__annotations__", {})
    wrapper.__wrapped__ = original
    return wrapper


def _strip_state(state: Any) -> Any:
    if isinstance(state, dict) and _REC_ATTR in state:
        state = state.copy()
        del state[_REC_ATTR]
    elif (
        isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict) and _REC_ATTR in state[0]
    ):
        inst_dict = state[0].copy()
        del inst_dict[_REC_ATTR]
        state = (inst_dict, state[1])
    return state


def _unprobe_reduction(rv: Any, probed: type, base: type) -> Any:
    """The reduction of an instance of ``probed``, as if it were an uninstrumented ``base``."""
    if not isinstance(rv, tuple) or len(rv) < 2:
        return rv  # a global's name, or something we do not understand: leave it alone
    func, args = rv[0], rv[1]
    if func is copyreg.__newobj__ and args == (probed,):
        # pickle refuses __newobj__ for a class other than obj.__class__; protocols 0 and 1 spell
        # the same object.__new__(base) this way, with stdlib names only.
        func, args = copyreg._reconstructor, (base, object, None)
    elif isinstance(args, tuple):
        args = tuple(base if a is probed else a for a in args)
    if len(rv) == 2:
        return (func, args)
    return (func, args, _strip_state(rv[2]), *rv[3:])


def _detach_instance(obj: Any, probed: type, base: type) -> None:
    inst_dict = getattr(obj, "__dict__", None)
    if isinstance(inst_dict, dict):
        inst_dict.pop(_REC_ATTR, None)
    if type(obj) is probed:
        obj.__class__ = base


def _probed_class(cls: type, torch: Any) -> type:
    """The probed subclass of ``cls``: found among its live subclasses, or made (and found next time)."""
    for sub in cls.__subclasses__():
        if sub.__dict__.get(_BASE_ATTR) is cls:
            return sub
    probed: type

    def __reduce_ex__(self, protocol):
        # pickle, torch.save, copy.copy and copy.deepcopy: the copy is of the original class and
        # carries no record, so it loads without the probe and never counts as the registered model.
        return _unprobe_reduction(cls.__reduce_ex__(self, protocol), probed, cls)

    namespace = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "__slots__": (),  # the same instance layout, so __class__ can be assigned both ways
        _BASE_ATTR: cls,
        _REC_ATTR: None,
        "forward": _make_forward(cls, torch),
        "__reduce_ex__": __reduce_ex__,
    }
    # A class's own __copy__/__deepcopy__ run instead of __reduce_ex__: detach what they return.
    for name in ("__copy__", "__deepcopy__"):
        if _static_lookup(cls, name) is not None:
            namespace[name] = _detaching_copier(cls, name, lambda: probed)
    probed = type(cls)(cls.__name__, (cls,), namespace)
    return probed


def _detaching_copier(base: type, name: str, get_probed: Any) -> Any:
    def copier(self, *args):
        new = getattr(base, name)(self, *args)
        if new is not self:
            _detach_instance(new, get_probed(), base)
        return new

    copier.__name__ = name
    return copier


class ProbedClassHandle:
    """Undoes a class swap: ``remove()`` drops the record and restores the original class.

    If something else swapped the class again since (``register_parametrization`` on the registered
    module, say), that class is left alone: without its record the probed ``forward`` only passes
    calls through, and restoring our base would undo the other swap.
    """

    __slots__ = ("base", "model_ref", "probed", "rec")

    def __init__(self, model: Any, probed: type, base: type, rec: Any) -> None:
        self.model_ref = weakref.ref(model)
        self.probed = probed
        self.base = base
        self.rec = rec

    def remove(self) -> None:
        model = self.model_ref()
        if model is None:
            return
        inst_dict = model.__dict__
        if inst_dict.get(_REC_ATTR) is self.rec:
            del inst_dict[_REC_ATTR]
        if _REC_ATTR not in inst_dict and type(model) is self.probed:
            try:
                model.__class__ = self.base
            except Exception:  # noqa: BLE001 -- refused now: without its record it only passes through
                pass


class ModelRecord:
    """One registered model. Attributes written by the hook are plain slots: no locks, no calls."""

    __slots__ = (
        "armed",
        "cls_label",
        "compiled_seen",
        "compiled_noted",
        "device",
        "devices",
        "first_device",
        "forward_calls",
        "handle",
        "inherited",
        "inner_ref",
        "input_device",
        "instrumentation",
        "is_compiling",
        "last_forward_time",
        "loader_timer",
        "module_ref",
        "name",
        "on_error",
        "on_device_change",
        "params",
        "rate_hz",
        "rate_window",
        "steps",
        "tensor_type",
        "torch",
        "traversed_at",
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
        self.is_compiling = _compiling_check(torch)
        self.compiled_seen = False  # set by the hook on every call of a compiled graph
        self.compiled_noted = False
        self.on_error = on_error
        self.on_device_change = on_device_change
        self.handle: Any = None
        self.instrumentation: str | None = None  # "subclass" or "pre-hook" once installed
        self.forward_calls = 0
        self.last_forward_time: float | None = None
        self.armed = True  # inspect the very first call's inputs
        self.input_device: str | None = None
        self.params = 0
        self.devices: list[str] = []
        self.device = "no-parameters"
        self.first_device: str | None = None
        self.traversed_at = 0.0
        self.rate_window = RateWindow(time.monotonic())
        self.rate_hz = 0.0
        self.steps: Any = None  # a probe._steps.StepCounter once a framework callback counts steps
        self.loader_timer: LoaderTimer | None = None
        self.inherited = False

    # -- hot path ---------------------------------------------------------------------------------
    def install_hook(self, model: Any) -> None:
        """Instrument ``model``'s forward: by class swap where that is safe, else a forward pre-hook."""
        cls = type(model)
        try:
            # Another record already in this instance (not from the probe's own register, which
            # keeps one record per model): leave it to that one, and use the hook.
            swap = (
                not hook_forced()
                and swap_refusal(model, cls) is None
                and model.__dict__.get(_REC_ATTR) is None
            )
        except Exception:  # noqa: BLE001 -- an odd model: the hook works on any module
            swap = False
        if swap:
            inst_dict = model.__dict__
            try:
                probed = cls if _BASE_ATTR in cls.__dict__ else _probed_class(cls, self.torch)
                inst_dict[_REC_ATTR] = self  # before the swap: the first probed call finds it
                model.__class__ = probed
                if type(model) is probed:
                    self.handle = ProbedClassHandle(model, probed, probed.__dict__[_BASE_ATTR], self)
                    self.instrumentation = "subclass"
                    return
            except Exception:  # noqa: BLE001 -- e.g. a __setattr__ that refuses __class__: use the hook
                pass
            if inst_dict.get(_REC_ATTR) is self:
                del inst_dict[_REC_ATTR]
        hook = PreHook(self, self.is_compiling)
        self.handle = model.register_forward_pre_hook(hook, with_kwargs=True)
        self.instrumentation = "pre-hook"

    def sample(self, args: tuple, kwargs: dict) -> None:
        """Armed call: note the input's device and whether the first parameter moved. Never raises."""
        self.armed = False
        try:
            device = find_input_device(args, kwargs, self.tensor_type)
            if device is not None:
                self.input_device = device
            inner = self.inner_ref()
            if inner is not None and _first_tensor_device(inner) != self.first_device:
                self.on_device_change()
        except Exception as e:  # noqa: BLE001 -- recorded, never raised into the user's forward
            self.on_error("hook", e)

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
        params = 0
        first = None
        for p in inner.parameters():
            d = str(p.device)
            devices[d] = None
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
        self.first_device = first
        self.devices = sorted(devices)
        if not devices:
            self.device = "no-parameters"
        elif len(devices) > 1:
            self.device = "mixed"
        else:
            self.device = first
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
        return (sys.audit, (_DETACHED_AUDIT_EVENT,))

    def __deepcopy__(self, memo: dict) -> None:
        return None

    def __copy__(self) -> None:
        return None

    def to_payload(self) -> dict:
        fraction = wait_s = step_s = None
        if self.loader_timer is not None:
            fraction, wait_s, step_s = self.loader_timer.figures()
        last = self.last_forward_time
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
        }
