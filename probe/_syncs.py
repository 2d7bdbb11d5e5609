"""Host-device synchronisations per training step: ``register(model, syncs=True)``, opt-in.

torch counts nothing itself, but its sync debug mode (``torch.cuda.set_sync_debug_mode("warn")``)
makes every synchronising CUDA call (``.item()``, ``.cpu()``, ``nonzero``, a blocking copy) raise a
c10 warning, which torch's binding layer turns into a Python ``UserWarning`` through
``PyErr_WarnEx``: "called a synchronizing CUDA operation (Triggered internally at ...)". Python
matches a warning against ``warnings.filters`` before anything shows it, calling each filter's
message pattern's ``match(text)``: our filter, first in the list, has a pattern object whose
``match`` counts sync warnings and answers True, and the action "ignore". So a sync warning is counted
and dropped before any filter of the program's, any ``showwarning``, logging handler or
``catch_warnings(record=True)`` sees it; "ignore" also leaves the ``__warningregistry__`` of the code
that synced alone; every other warning takes exactly the path it took before.

We only enable the mode when CUDA is initialised and the program has left it at "default"; we put it
back (and take our filter out) when the last model registered with ``syncs=True`` goes, and step
aside for good if the program sets the mode itself. A filter the program inserts later goes in
front of ours: the publisher moves ours back to the front at its next publish (a "error" filter
inserted in between could turn one sync into an exception until then; see docs/probe.md).
Standard library only; torch is handed in.
"""

from __future__ import annotations

import warnings

from probe._breakdown import CLOCK

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SYNC_MESSAGE", "SyncCounter", "SyncMatcher"]

SYNC_MESSAGE = "called a synchronizing CUDA operation"
_MODE_DEFAULT, _MODE_WARN = 0, 1


class SyncMatcher:
    """Stands where a filter's compiled message regex would: ``match`` counts sync warnings."""

    __slots__ = ()
    pattern = SYNC_MESSAGE  # for code that prints warnings.filters
    flags = 0

    def match(self, text: Any) -> bool:
        if type(text) is str and text.startswith(SYNC_MESSAGE):
            CLOCK.syncs += 1
            return True
        return False

    def __repr__(self) -> str:
        return f"<dsh probe: counts {SYNC_MESSAGE!r}>"


class SyncCounter:
    """The opt-in's state: "off", "waiting" (for CUDA), "on", or "declined" (the program's own mode)."""

    __slots__ = ("filter", "state", "why")

    def __init__(self) -> None:
        self.state = "off"
        self.why: str | None = None
        self.filter = ("ignore", SyncMatcher(), UserWarning, None, 0)

    def request(self) -> None:
        if self.state == "off":
            self.state = "waiting"

    def counting(self) -> bool:
        return self.state == "on"

    def poll(self, torch: Any) -> str | None:
        """Start counting once CUDA is initialised; keep our filter first; step aside when the program
        changed the mode. Returns why counting was declined, the first time it is."""
        if self.state == "waiting":
            return self._start(torch)
        if self.state == "on":
            mode = _get_mode(torch)
            if mode != _MODE_WARN:
                # The program set the mode itself: it is its own now; we neither count nor restore.
                self._remove_filter()
                self.state, self.why = "declined", "the program changed torch's sync debug mode"
                return self.why
            self._front()
        return None

    def _start(self, torch: Any) -> str | None:
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None  # never initialise CUDA ourselves: wait for the program to
        mode = _get_mode(torch)
        if mode is None:
            self.state, self.why = "declined", "this torch has no sync debug mode"
            return self.why
        if mode != _MODE_DEFAULT:
            self.state, self.why = "declined", "the program set torch's sync debug mode itself"
            return self.why
        self._front()  # the filter first: no sync warning may reach the program's filters
        _set_mode(torch, _MODE_WARN)
        CLOCK.sync_epoch += 1
        self.state, self.why = "on", None
        return None

    def release(self, torch: Any) -> None:
        """The last ``syncs=True`` model went: the mode and the filters as the program had them."""
        if self.state == "on" and torch is not None and _get_mode(torch) == _MODE_WARN:
            _set_mode(torch, _MODE_DEFAULT)
        self._remove_filter()
        CLOCK.sync_epoch = 0
        self.state, self.why = "off", None

    def reset_after_fork(self) -> None:
        # A forked child has no CUDA of its own; its copy of the filter only ever ignores sync warnings.
        self.state, self.why = "off", None

    def _front(self) -> None:
        filters = _filters()
        if filters and filters[0] is self.filter:
            return
        # Not through warnings.filterwarnings (which needs a str pattern), and without bumping the
        # filters' version: that would make every "default" warning already shown show once more.
        try:
            filters.remove(self.filter)
        except ValueError:
            pass
        filters.insert(0, self.filter)

    def _remove_filter(self) -> None:
        try:
            _filters().remove(self.filter)
        except ValueError:
            pass


def _filters() -> Any:
    """warnings.filters, the list: Any, for typeshed types it a Sequence of filters whose message is a
    compiled pattern, and ours holds a SyncMatcher there (the module calls only its ``match``)."""
    return warnings.filters


def _get_mode(torch: Any) -> int | None:
    getter = getattr(getattr(torch, "_C", None), "_cuda_get_sync_debug_mode", None)
    return getter() if callable(getter) else None


def _set_mode(torch: Any, mode: int) -> None:
    # torch._C's setter directly: torch.cuda.set_sync_debug_mode runs _lazy_init first.
    torch._C._cuda_set_sync_debug_mode(mode)
