"""What the framework callbacks (``probe.lightning``, ``probe.transformers``) call: the process's
probe, through its one instance. Above ``probe._state`` in the probe's import order (probe/__init__.py):
nothing the probe imports for itself imports this module.
"""

from __future__ import annotations

import sys

from probe._state import PROBE
from probe._steps import StepCounter, find_dataloader

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Hook = Callable[..., None]  # a callback's hook: whatever arguments its framework passes

__all__ = ["attach_loader", "attach_steps", "event", "guarded_hook", "record_error", "registered"]


def attach_steps(model: Any, name: str | None, source: str) -> StepCounter | None:
    """Register ``model`` (once) and give its record a StepCounter; None when the probe is off.

    The counter's data-wait window becomes the model's own unless ``register(..., loader=)`` already
    times a real DataLoader for it."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(model, torch.nn.Module):
        return None  # not something a trainer trains: nothing the user could act on, so no warning
    PROBE.register(model, name=name)
    with PROBE.lock:
        rec = next((r for r in PROBE.records if r.module_ref() is model), None)
        if rec is None:
            return None
        old = rec.steps
        steps: StepCounter = StepCounter(source) if old is None or old.source != source else old
        rec.steps = steps
        if rec.loader_timer is None or (old is not None and rec.loader_timer is old.timer):
            rec.loader_timer = steps.timer
        return steps


def attach_loader(model: Any, loader: Any) -> None:
    """The DataLoader a trainer feeds ``model`` from, for its ``loader_settings`` (unless
    ``register(..., loader=)`` named one already)."""
    base = find_dataloader(loader)
    if base is None:
        return
    with PROBE.lock:
        for rec in PROBE.records:
            if rec.module_ref() is model and (rec.loader_ref is None or rec.loader_ref() is None):
                rec.attach_loader(base)


def record_error(where: str, error: BaseException) -> None:
    """A callback's failure: recorded in the payload's errors, never raised or printed."""
    try:
        PROBE.record_error(where, error)
    except Exception:  # noqa: BLE001 -- nothing left to tell
        pass


def event(name: str) -> None:
    PROBE.event(name)


def registered(model: Any) -> bool:
    with PROBE.lock:
        return any(r.module_ref() is model for r in PROBE.records)


def guarded_hook(where: str) -> Callable[[Hook], Hook]:
    """Decorate a framework callback's hook: a failure is recorded under ``where``, never raised into
    the trainer; the hook returns None (a transformers ``control`` is left untouched)."""

    def wrap(fn: Hook) -> Hook:
        def hook(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                fn(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 -- the probe must never break the trainer
                record_error(where, e)

        hook.__name__ = fn.__name__
        hook.__qualname__ = fn.__qualname__
        hook.__doc__ = fn.__doc__
        return hook

    return wrap
