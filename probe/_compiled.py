"""Counting a registered model's calls while torch.compile runs it (nanoGPT's order: register, then compile).

Inside a compiled graph no Python of ours runs, and reading the call counter while dynamo traces
would make it guard on the value and recompile on every call. Dynamo has one way to run a function
after each compiled call without a graph break or a guard on our state: a function in
``torch._dynamo.config.reorderable_logging_functions`` (meant for ``print``-like logging) is
recorded while tracing and called after the graph with the same constant arguments, on every call.
The probed forward calls ``COUNTER.fn(rec.compiled_key)`` when it runs under dynamo: ``count_compiled``
once it is in that set, else ``_not_counted``, which dynamo traces away.

Dynamo replays such calls only from the frame it compiles (a registered model compiled itself);
a registered module inlined into a compiled parent is not counted there (torch's "TODO get
debug_locals working for nested graph breaks"), and the probe says so (``compiled_uncounted``).

The function must be in the set before dynamo first traces the forward, which usually follows
``torch.compile`` at once: a meta-path finder notices the first import under ``torch._dynamo``
after its config module loaded (``torch._dynamo/__init__`` imports config first and dozens of
modules after it), adds the function and takes itself off ``sys.meta_path``. It never supplies a
module, so every import goes on exactly as without it.

This module never imports torch.
"""

from __future__ import annotations

import itertools
import sys
import time
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COUNTER", "count_compiled", "enroll", "reorderable"]

_DYNAMO_CONFIG = "torch._dynamo.config"
_SET_NAME = "reorderable_logging_functions"
_records: dict[str, Any] = {}  # compiled_key -> weakref to its ModelRecord
_keys = itertools.count(1)


def _not_counted(key: str) -> None:
    """What the probed forward calls under dynamo until counting is on: traced away, nothing runs."""


def count_compiled(key: str) -> None:
    """Called by dynamo's generated code after each compiled call of a registered module's frame."""
    ref = _records.get(key)
    rec = ref() if ref is not None else None
    if rec is not None:
        rec.forward_calls += 1
        rec.last_forward_time = time.time()
        rec.compiled_counted = True


class _Counter:
    """The function the probed forward calls under dynamo: an attribute, so that dynamo guards on it."""

    __slots__ = ("fn",)

    def __init__(self) -> None:
        self.fn = _not_counted


COUNTER = _Counter()


def reorderable() -> bool:
    """Put ``count_compiled`` in dynamo's reorderable set if dynamo's config is loaded; True once it is."""
    if COUNTER.fn is count_compiled:
        return True
    config = sys.modules.get(_DYNAMO_CONFIG)
    functions = getattr(config, _SET_NAME, None) if config is not None else None
    if not isinstance(functions, set):
        return False  # not imported yet, still importing, or a torch without the set
    functions.add(count_compiled)
    COUNTER.fn = count_compiled
    return True


class _DynamoWatch:
    """A meta-path finder that turns counting on at dynamo's import; it never finds a module."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.startswith("torch._dynamo.") and reorderable():
            _unwatch()
        return None


_WATCH = _DynamoWatch()


def _unwatch() -> None:
    try:
        sys.meta_path.remove(_WATCH)
    except ValueError:
        pass


def enroll(rec: Any) -> str:
    """A key for ``rec`` that dynamo reads as a constant; turns counting on now or at dynamo's import."""
    key = f"m{next(_keys)}"

    def forget(_ref: object) -> None:  # the record is gone: so is its key
        _records.pop(key, None)

    _records[key] = weakref.ref(rec, forget)
    if not reorderable() and _WATCH not in sys.meta_path:
        sys.meta_path.insert(0, _WATCH)
    return key
