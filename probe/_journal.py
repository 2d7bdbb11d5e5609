"""What the probe tells about itself: its errors and the user's events (both published), and the
warnings it has given (each once per process).

Forward hooks append errors without the probe's lock: deques take one append atomically, and the
payload copies them with one C-level ``tuple()`` (iterating a deque while another thread appends
raises "deque mutated during iteration").
"""

from __future__ import annotations

import collections
import time
import warnings

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

MESSAGE_MAX_CHARS = 512
EVENT_NAME_MAX_CHARS = 256


class ProbeWarning(UserWarning):
    """The probe could not do something; it carries on (or turns itself off) without raising."""


class Journal:
    def __init__(self) -> None:
        # Imported here: ProbeWarning is part of ``import probe``, the schema only of its first use.
        from probe_wire.schema import MAX_ERRORS, MAX_EVENTS

        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_EVENTS)
        self.errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_ERRORS)
        self.warned: set[str] = set()

    def warn_once(self, key: str, message: str) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        warnings.warn(message, ProbeWarning, stacklevel=4)

    def record_error(self, where: str, error: BaseException | str) -> None:
        if isinstance(error, BaseException):
            message = f"{type(error).__name__}: {error}"
        else:
            message = str(error)
        self.errors.append({"time": time.time(), "where": where[:64], "message": message[:MESSAGE_MAX_CHARS]})

    def event(self, name: object) -> None:
        self.events.append({"time": time.time(), "name": str(name)[:EVENT_NAME_MAX_CHARS]})

    def payload_fields(self) -> dict[str, Any]:
        """The payload's ``events`` and ``errors``, copied."""
        return {
            "events": [dict(e) for e in tuple(self.events)],
            "errors": [dict(e) for e in tuple(self.errors)],
        }

    def reset_after_fork(self) -> None:
        """A forked child tells its own story; the warnings it was given stay given."""
        self.events.clear()
        self.errors.clear()
