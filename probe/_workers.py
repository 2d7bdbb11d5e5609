"""``ProbeWorkerInit``, the DataLoader ``worker_init_fn`` that starts the probe in a worker process.

A leaf of its own, apart from probe/hooks.py (which exports it too): a spawned worker unpickles it by
reference, and ``import probe`` sets its starter (probe/_state.py) without importing the hooks, the
forward instrumentation and the schema, which only a registered model needs.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["ProbeWorkerInit", "set_worker_starter"]

# What ProbeWorkerInit calls in a worker: the process's Probe's activate_worker, set by probe._state
# when it creates that Probe (importing any probe module runs probe/__init__, which creates it, so it
# is set before a worker can unpickle a ProbeWorkerInit). Injected, not imported: _state imports us.
_worker_starter: Callable[[int], None] | None = None


def set_worker_starter(start: Callable[[int], None]) -> None:
    global _worker_starter
    _worker_starter = start


class ProbeWorkerInit:
    """A DataLoader ``worker_init_fn`` that starts the probe in the worker, then calls the user's.

    A module-level class so it pickles by reference for ``spawn`` workers (which would otherwise
    never import the probe); the user's function keeps running exactly as before, after ours.
    """

    __slots__ = ("user_fn",)

    def __init__(self, user_fn: Any = None) -> None:
        self.user_fn = user_fn

    def __reduce__(self) -> Any:
        # Rebuilt through __init__: a __getstate__ returning the user's function would be None when
        # there is none, and pickle then skips __setstate__, leaving user_fn unset in the worker.
        return (ProbeWorkerInit, (self.user_fn,))

    def __call__(self, worker_id: int) -> None:
        try:
            start = _worker_starter
            if start is not None:
                start(worker_id)
        except Exception:  # noqa: BLE001 -- the probe must never break a user's data loading
            pass
        if self.user_fn is not None:
            self.user_fn(worker_id)
