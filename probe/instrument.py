"""How a registered model's forward calls are counted, without changing what the program sees.

Three ways, tried in this order by ``install``:

- **class** (``ClassPatch``): the nearest class of the model's own (not torch's) gets a ``forward``
  that finds the instance's record by its id and then calls the forward it replaced. Nothing of the
  instance changes: ``type(model) is Net``, its ``__dict__``, ``torch.save`` bytes and
  ``torch.load(weights_only=True)`` are exactly as without the probe. Other instances of the class
  pass through after one dict lookup. The forward is put back when the class's last record goes.
- **subclass** (``ProbedClassHandle``): a model whose class is torch's own (``nn.Sequential``,
  ``nn.Linear``) gets a per-class probed subclass instead, so that every other ``Sequential`` in the
  process stays untouched. Its ``__class__`` answers the original class, so pickles are the same
  bytes.
- **pre-hook** (``PreHook``): where neither is safe (``swap_refusal``, a forward set on the
  instance, ``DSH_PROBE_INSTRUMENT=hook``), a forward pre-hook; torch's hook dispatch costs about
  1.5 µs more per call, and the hook is pickled with the model as a harmless stand-in.

Distributed wrappers (DDP, FSDP) are instrumented through the module they wrap, which is where
their forward goes: the wrapper itself then pickles as it always did.

This module never imports torch: the caller passes the torch module it found in sys.modules.
"""

from __future__ import annotations

import abc
import functools
import os
import sys
import time
import types
import weakref

from probe._breakdown import CLOCK
from probe._compiled import COUNTER

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DETACHED_AUDIT_EVENT",
    "ClassPatch",
    "PreHook",
    "ProbedClassHandle",
    "class_patch_target",
    "compiling_check",
    "hook_forced",
    "install",
    "swap_refusal",
]

DETACHED_AUDIT_EVENT = "dsh.probe.detached-hook"
_clock = time.time
_perf = time.perf_counter  # forward time (probe/_breakdown.py): the same clock as the loader timing


def _detached_hook() -> Any:
    # sys.audit(event, module, args, kwargs) returns None and does nothing unless the program installed
    # audit hooks; as a stdlib builtin it pickles by name, so a model saved with our hook in its
    # _forward_pre_hooks loads anywhere, with or without the probe installed.
    return functools.partial(sys.audit, DETACHED_AUDIT_EVENT)


def compiling_check(torch: Any) -> Any:
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

    __slots__ = ("is_compiling", "rec", "timed")

    def __init__(self, rec: Any, is_compiling: Any) -> None:
        self.rec = rec
        self.is_compiling = is_compiling
        self.timed = False  # set once its PostHook is installed: only then is a started time ended

    def __call__(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.is_compiling():
            self.rec.compiled_seen = True
            COUNTER.fn(self.rec.compiled_key)  # counted after the graph (probe/_compiled.py)
            return
        rec = self.rec
        rec.forward_calls += 1
        rec.last_forward_time = _clock()
        if rec.armed:
            rec.sample(args, kwargs)
        if self.timed and not CLOCK.inside:
            CLOCK.inside = True
            rec.forward_t0 = _perf()

    def __reduce__(self) -> Any:
        return (functools.partial, (sys.audit, DETACHED_AUDIT_EVENT))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return _detached_hook()

    def __copy__(self) -> Any:
        return _detached_hook()


class PostHook(PreHook):
    """The fallback's forward hook (``always_call``: it runs when the forward raises, too): ends the
    forward time its PreHook started. Pickled and copied as the same stand-in."""

    __slots__ = ()

    def __call__(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:  # type: ignore[override]
        if self.is_compiling():
            return
        rec = self.rec
        t0 = rec.forward_t0
        if t0:
            rec.forward_t0 = 0.0
            CLOCK.forward_s += _perf() - t0
            CLOCK.inside = False


class _HookHandles:
    """The fallback's two hook handles, removed together."""

    __slots__ = ("handles",)

    def __init__(self, *handles: Any) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


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
# The outermost registered forward is timed for the step breakdown (probe/_breakdown.py): one flag
# test for a nested one, and a try/finally, so the flag is cleared when the forward raises.
_FORWARD_SOURCE = """\
def _dsh_probe_factory(_dsh_probe_base, _dsh_probe_clock, _dsh_probe_dynamo, _dsh_probe_compiler,
                       _dsh_probe_compiling, _dsh_probe_records, _dsh_probe_id, _dsh_probe_original,
                       _dsh_probe_times, _dsh_probe_perf, _dsh_probe_counter):
    def forward({params}):
        _dsh_probe_rec = {lookup}
        if _dsh_probe_rec is not None:
            if {compiling}:
                _dsh_probe_rec.compiled_seen = True
                _dsh_probe_counter.fn(_dsh_probe_rec.compiled_key)
            else:
                _dsh_probe_rec.forward_calls += 1
                _dsh_probe_rec.last_forward_time = _dsh_probe_clock()
                if _dsh_probe_rec.armed:
                    _dsh_probe_rec.sample({sample_args}, {sample_kwargs})
                if not _dsh_probe_times.inside:
                    _dsh_probe_times.inside = True
                    _dsh_probe_t0 = _dsh_probe_perf()
                    try:
                        return {target}({call})
                    finally:
                        _dsh_probe_times.forward_s += _dsh_probe_perf() - _dsh_probe_t0
                        _dsh_probe_times.inside = False
        return {target}({call})
    return forward
"""
# Where the record is found and what is called after the bookkeeping: a probed subclass reads the
# instance's record and looks the base's forward up anew on each call; a patched class finds the
# record by the instance's id and calls the forward it replaced.
_SUBCLASS_LOOKUP = ("{self}._dsh_probe_rec", "_dsh_probe_base.forward")
_CLASS_LOOKUP = ("_dsh_probe_records.get(_dsh_probe_id({self}))", "_dsh_probe_original")
# torch.compiler.is_compiling() is "not scripting and _is_compiling_flag". Under dynamo,
# is_dynamo_compiling() is the constant True, so the flag is never read there (dynamo would guard on
# its value and recompile every call); torch.export's non-strict tracing sets the flag. The same
# answer at about half the cost (this forward never runs inside TorchScript).
_FAST_COMPILING = "_dsh_probe_dynamo() or _dsh_probe_compiler._is_compiling_flag"
_GENERIC_PARAMS = ("self", (), 0, "args", (), "kwargs")


def _forward_params(code: Any) -> tuple[Any, ...] | None:
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


def _forward_source(params: tuple[Any, ...], compiling: str, lookup: tuple[str, str]) -> str:
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
        lookup=lookup[0].format(self=self_name),
        target=lookup[1],
        self=self_name,
        compiling=compiling,
        sample_args=sample_args,
        sample_kwargs=sample_kwargs,
        call=", ".join(call),
    )


def _make_forward(base: type, torch: Any, records: dict[int, Any] | None = None, original: Any = None) -> Any:
    """The probed class's ``forward``: bookkeeping, then ``base.forward`` (looked up on each call).

    It has the original forward's parameters and defaults, its globals (it reads none itself), its
    name and qualified name, and ``__wrapped__`` pointing at it: tools that read a forward's source
    or signature (torch.jit.script, torch.fx, inspect.signature for torch.export's input names) see
    the original, resolved in its own module, as they would without the probe. A forward whose
    parameters cannot be copied gets a ``(self, *args, **kwargs)`` pass-through instead.
    """
    import linecache

    by_class = records is not None
    if not by_class:
        original = _static_lookup(base, "forward")
    compiler = getattr(torch, "compiler", None)
    dynamo_compiling = getattr(compiler, "is_dynamo_compiling", None)
    fast = callable(dynamo_compiling) and isinstance(getattr(compiler, "_is_compiling_flag", None), bool)
    params = _forward_params(original.__code__)
    copied = params is not None
    source = _forward_source(
        params if params is not None else _GENERIC_PARAMS,
        _FAST_COMPILING if fast else "_dsh_probe_compiling()",
        _CLASS_LOOKUP if by_class else _SUBCLASS_LOOKUP,
    )
    qualname = getattr(original, "__qualname__", "forward")
    filename = f"<dsh probe: {base.__module__}.{qualname}>"
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 -- identifiers from a code object only
    # Tracebacks through this frame show its source, like any other.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    inner = namespace["_dsh_probe_factory"](
        base, _clock, dynamo_compiling, compiler, compiling_check(torch), records, id, original, CLOCK, _perf, COUNTER
    )
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
    wrapper.__dict__.update(__wrapped__=original, __dsh_probe__=True)  # functools.wraps' mark, and ours
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
    if isinstance(args, tuple):
        # pickle accepts __newobj__(base) because the probed class's __class__ answers base: the
        # same opcodes, byte for byte, as the uninstrumented instance gives.
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
    sub: type
    for sub in cls.__subclasses__():
        if sub.__dict__.get(_BASE_ATTR) is cls:
            return sub
    probed: type
    # The class as its module made it, for its unbound __reduce_ex__ (the type checker would read
    # cls.__reduce_ex__ as the metaclass's, bound to the class).
    base: Any = cls

    def __reduce_ex__(self: Any, protocol: int) -> Any:
        # pickle, torch.save, copy.copy and copy.deepcopy: the copy is of the original class and
        # carries no record, so it loads without the probe and never counts as the registered model.
        return _unprobe_reduction(base.__reduce_ex__(self, protocol), probed, cls)

    namespace = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "__slots__": (),  # the same instance layout, so __class__ can be assigned both ways
        _BASE_ATTR: cls,
        _REC_ATTR: None,
        "forward": _make_forward(cls, torch),
        "__reduce_ex__": __reduce_ex__,
        # pickle (which checks __newobj__'s class against obj.__class__), repr and code that builds
        # siblings with self.__class__(...) see the original class; type() still says probed.
        "__class__": property(lambda self: cls, _set_class),
    }
    # A class's own __copy__/__deepcopy__ run instead of __reduce_ex__: detach what they return.
    for name in ("__copy__", "__deepcopy__"):
        if _static_lookup(cls, name) is not None:
            namespace[name] = _detaching_copier(cls, name, lambda: probed)
    probed = type(cls)(cls.__name__, (cls,), namespace)
    return probed


def _detaching_copier(base: type, name: str, get_probed: Any) -> Any:
    def copier(self: Any, *args: Any) -> Any:
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


def _set_class(self: Any, value: type) -> None:
    object.__dict__["__class__"].__set__(self, value)


# -- instrumentation by class patch ------------------------------------------------------------------
def _from_torch(cls: type) -> bool:
    module_name = cls.__dict__.get("__module__")
    return isinstance(module_name, str) and (module_name == "torch" or module_name.startswith("torch."))


def class_patch_target(model: Any) -> tuple[type | None, str | None]:
    """(the class whose forward is patched for ``model``, None) or (None, why not).

    The nearest class in the MRO that is not torch's own, provided no torch class before it defines
    forward: for ``class Net(nn.Module)`` that is Net, for parametrize's ``ParametrizedNet`` too, for
    ``nn.Sequential`` there is none (patching it would slow every Sequential in the process).
    """
    if hook_forced():
        return None, f"{ENV_INSTRUMENT}=hook"
    inst_dict = getattr(model, "__dict__", None)
    if type(inst_dict) is not dict:
        return None, "no instance __dict__"
    if "forward" in inst_dict:
        return None, "forward set on the instance"
    target = None
    for klass in type(model).__mro__[:-1]:
        if not _from_torch(klass):
            target = klass
            break
        if "forward" in klass.__dict__:
            return None, f"forward comes from torch's {klass.__name__}"
    if target is None:
        return None, "no class of the program's own"
    if type(target).__setattr__ is not type.__setattr__:
        return None, f"metaclass {type(target).__name__} overrides __setattr__"
    if not isinstance(_static_lookup(target, "forward"), types.FunctionType):
        return None, "forward is not a plain function"
    return target, None


class ClassPatch:
    """One patched class: its records by instance id, the forward it replaced, how to undo it."""

    __slots__ = ("cls", "had_own", "original", "records", "wrapper")

    def __init__(self, cls: type, torch: Any) -> None:
        original = _static_lookup(cls, "forward")
        # An ancestor patched already: call what that patch replaced (its table never holds our
        # instances), so the calls go through one probed forward, never two.
        while getattr(original, "__dsh_probe__", False):
            original = original.__wrapped__
        self.cls = cls
        self.had_own = "forward" in cls.__dict__
        self.original = original
        self.records: dict[int, Any] = {}
        self.wrapper = _make_forward(cls, torch, records=self.records, original=original)
        type.__setattr__(cls, "forward", self.wrapper)

    def restore(self) -> None:
        """Put the class's forward back, unless someone replaced ours since (then it is theirs)."""
        if _CLASS_PATCHES.get(self.cls) is self:
            del _CLASS_PATCHES[self.cls]
        if self.cls.__dict__.get("forward") is not self.wrapper:
            return
        if self.had_own:
            type.__setattr__(self.cls, "forward", self.original)
        else:
            type.__delattr__(self.cls, "forward")


# The probe's lock serialises register and unregister; forward calls only read these dicts.
_CLASS_PATCHES: dict[type, ClassPatch] = {}


class ClassPatchHandle:
    """Removes one instance from its class's records (also when the instance is collected)."""

    __slots__ = ("key", "patch", "rec", "watch")

    def __init__(self, model: Any, patch: ClassPatch, rec: Any) -> None:
        self.key = id(model)
        self.patch = patch
        self.rec = rec
        # A collected model's id can be reused by a new object: its entry goes with it.
        self.watch = weakref.ref(model, self._collected)
        patch.records[self.key] = rec

    def _collected(self, _ref: Any) -> None:
        self.remove()

    def remove(self) -> None:
        records = self.patch.records
        if records.get(self.key) is self.rec:
            del records[self.key]
        if not records:
            self.patch.restore()


def _patch_class(model: Any, target: type, rec: Any, torch: Any) -> ClassPatchHandle | None:
    patch = _CLASS_PATCHES.get(target)
    if patch is not None and target.__dict__.get("forward") is not patch.wrapper:
        patch.restore()  # replaced by the program since: patch what is there now
        patch = None
    if patch is None:
        patch = _CLASS_PATCHES[target] = ClassPatch(target, torch)
    if id(model) in patch.records:
        return None  # another record watches this instance already
    return ClassPatchHandle(model, patch, rec)


def _swap_class(model: Any, rec: Any, torch: Any) -> ProbedClassHandle | None:
    cls = type(model)
    if swap_refusal(model, cls) is not None or model.__dict__.get(_REC_ATTR) is not None:
        return None
    inst_dict = model.__dict__
    try:
        probed = cls if _BASE_ATTR in cls.__dict__ else _probed_class(cls, torch)
        inst_dict[_REC_ATTR] = rec  # before the swap: the first probed call finds it
        model.__class__ = probed
        if type(model) is probed:
            return ProbedClassHandle(model, probed, probed.__dict__[_BASE_ATTR], rec)
    except Exception:  # noqa: BLE001 -- e.g. a __setattr__ that refuses __class__: use the hook
        pass
    if inst_dict.get(_REC_ATTR) is rec:
        del inst_dict[_REC_ATTR]
    return None


def _forward_owner(model: Any, module_type: type) -> Any:
    """The module whose forward runs a distributed wrapper's calls (DDP, FSDP), else ``model``."""
    for _ in range(8):
        inner = getattr(model, "module", None)
        if type(model).__name__ not in _DISTRIBUTED_WRAPPERS or not isinstance(inner, module_type):
            break
        model = inner
    return model


# DataParallel stays instrumented itself: on several GPUs its calls run in per-GPU replicas that a
# class patch (keyed by instance) would not recognise.
_DISTRIBUTED_WRAPPERS = frozenset({"DistributedDataParallel", "FullyShardedDataParallel"})


def install(model: Any, rec: Any, torch: Any) -> tuple[Any, str]:
    """Instrument ``model``'s forward for ``rec``: (handle with ``remove()``, how)."""
    owner = _forward_owner(model, torch.nn.Module)
    try:
        target, _why = class_patch_target(owner)
        if target is not None:
            handle = _patch_class(owner, target, rec, torch)
            if handle is not None:
                return handle, "class"
        if not hook_forced():
            swapped = _swap_class(owner, rec, torch)
            if swapped is not None:
                return swapped, "subclass"
    except Exception:  # noqa: BLE001 -- an odd model: the hook works on any module
        pass
    hook = PreHook(rec, rec.is_compiling)
    pre = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        post = model.register_forward_hook(PostHook(rec, rec.is_compiling), with_kwargs=True, always_call=True)
    except TypeError:  # a torch without always_call: counted, but its forward time is not
        return pre, "pre-hook"
    hook.timed = True
    return _HookHandles(pre, post), "pre-hook"
