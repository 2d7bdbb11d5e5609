"""dsh probe: tells the dsh sidecar what only the training process knows.

    import probe
    probe.register(model)                      # or register(model, name="policy", loader=train_loader)
    probe.register(model, syncs=True)          # + host-device syncs per step (opt-in, CUDA)
    probe.event("epoch 3")                     # timestamped marker, published at once

The probe publishes to the POSIX shared-memory segment ``/dsh-probe.<pid>`` (see docs/probe.md and
docs/design.md). It never raises into your program, never changes what your model returns, never
initialises CUDA, and ``import probe`` imports neither torch nor anything heavy. ``DSH_PROBE=0``
turns every call into a no-op.
"""

from __future__ import annotations

# The probe's modules import one another downwards only (tests/unit/test_code_shape.py checks it,
# function-level and type-only imports included); each line imports only lines below it:
#
#   lightning, transformers        the framework callbacks (imported by the user, never by us)
#   _frameworks                    what they call: the process's Probe
#   probe (this file)              the public API
#   _state                         Probe: the segment, its thread, fork and exit; composes
#   _publisher                       the payload and when it is written
#   _models                          registration, DataLoader timing, each tick's updates
#   _journal                         errors, events, warnings given
#   _steps                         step counters, DataLoader wrappers, worker labels
#   hooks                          ModelRecord, LoaderTimer
#   instrument                     the forward class swap and hooks
#   _syncs, _breakdown, _compiled, _settings, _rate, facts      leaves (then probe_wire)
#   _workers                       ProbeWorkerInit (its starter injected by _state): a leaf
#
# ``import probe`` loads this file, _state (the Probe alone), _journal's ProbeWarning, _workers and
# probe_wire.header: the Probe imports the rest when first asked for something (register, event,
# activate, a snapshot), so that a program that imports the probe and never uses it pays ~ms.
from probe._state import PROBE as _PROBE
from probe._state import ProbeWarning

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ProbeWarning",
    "activate",
    "event",
    "refresh",
    "register",
    "snapshot",
    "status",
    "unregister",
]

__version__ = "0.1.0"


def register(model: Any, name: str | None = None, loader: Any = None, syncs: bool = False) -> Any:
    """Watch ``model`` (any torch.nn.Module, wrappers included) and return it unchanged.

    ``name`` defaults to the class name of the unwrapped model. ``loader``, a DataLoader, adds data
    wait timing (data_wait_fraction, data_wait_s, step_s) and makes its worker processes publish
    their own segments, also under the ``spawn`` start method. ``syncs=True`` counts host-device
    synchronisations per training step once CUDA is initialised, through torch's sync debug mode
    (see docs/probe.md: it costs a few microseconds per sync). Anything that is not a module is
    recorded as an error (and warned about once); nothing is raised.
    """
    try:
        return _PROBE.register(model, name=name, loader=loader, syncs=syncs)
    except Exception as e:  # noqa: BLE001 -- the probe must never break the program it watches
        _PROBE.record_error("register", e)
        return model


def unregister(model: Any) -> bool:
    """Stop watching ``model`` and remove its hook; True when it was registered."""
    try:
        return _PROBE.unregister(model)
    except Exception as e:  # noqa: BLE001 -- the probe never raises into the user's script
        _PROBE.record_error("unregister", e)
        return False


def event(name: str) -> None:
    """Record a timestamped event (the last 64 are kept), re-check every model's devices, publish now."""
    try:
        _PROBE.event(name)
    except Exception as e:  # noqa: BLE001 -- the probe never raises into the user's script
        _PROBE.record_error("event", e)


def refresh() -> None:
    """Re-check every model's devices and publish now (after moving a model by hand, say)."""
    try:
        _PROBE.refresh()
    except Exception as e:  # noqa: BLE001 -- the probe never raises into the user's script
        _PROBE.record_error("refresh", e)


def activate() -> bool:
    """Publish this process's identity and runtime facts without registering a model.

    For helper processes that should appear in the sidecar's view; returns False when the probe is
    off (DSH_PROBE=0, no posix_ipc, no shared memory).
    """
    try:
        return _PROBE.activate()
    except Exception as e:  # noqa: BLE001 -- the probe never raises into the user's script
        _PROBE.record_error("activate", e)
        return False


def snapshot() -> dict[str, Any] | None:
    """The payload the probe would publish right now (None when the probe is off)."""
    try:
        return _PROBE.snapshot()
    except Exception as e:  # noqa: BLE001 -- the probe never raises into the user's script
        _PROBE.record_error("snapshot", e)
        return None


def status() -> dict[str, Any]:
    """enabled, reason (why not), segment name, interval_s, number of models, publishes so far."""
    return _PROBE.status()
