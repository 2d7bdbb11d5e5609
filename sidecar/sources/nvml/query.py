"""`DeviceQuery`: one GPU's part of one poll, handed to every module that asks the GPU something.

It carries what each query needs (the handle, where failures are recorded, the device's state kept
between polls, the direct getters) and three ways to ask:

- `get`: the value, or None with the failure recorded under the field's name; GPU_IS_LOST is
  recorded and raised (`GpuLost`), which ends the device's poll at its one catch (source.py).
- `reading`: the same, except that GPU_IS_LOST too is only that field's failure. For the queries
  read in a group whose deciding member (asked with `get`) follows them: a GPU that is really lost
  answers GPU_IS_LOST to every query, and the decider says so.
- `attempt`: the value, or the failure recorded and raised as its `NvmlError` subclass, for callers
  whose next step depends on what the failure was (a function missing, NOT_SUPPORTED).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sidecar.sources.nvml._lib import GpuLost, NvmlError, Recorder, retry_or_raise

if TYPE_CHECKING:
    from sidecar.sources.nvml.direct import Queries
    from sidecar.sources.nvml.snapshot import GpuInfo

# `into=FIELD_ERRORS` (the default): the failure goes to the device's field_errors; `into=None`: to
# the poll's call_errors only; a dict: there (a scratch dict the caller merges, or not).
FIELD_ERRORS: dict[str, str] = {}


class DeviceQuery:
    __slots__ = ("recorder", "index", "handle", "info", "errors", "state", "queries", "now_us")

    def __init__(self, recorder: Recorder, index: int, info: GpuInfo, state: Any, queries: Queries, now_us: int):
        self.recorder = recorder
        self.index = index
        self.handle: Any = None
        self.info = info
        self.errors = info.field_errors
        self.state = state  # source.DeviceState
        self.queries = queries
        self.now_us = now_us

    def record(self, err: NvmlError, key: str, into: dict[str, str] | None = FIELD_ERRORS) -> None:
        self.recorder.record(err, f"GPU {self.index}", self.errors if into is FIELD_ERRORS else into, key)

    # Each is _lib.call(fn, *args) inlined, its failures handled in _failed: every query of every GPU
    # comes through here at every poll, and a call less each is ~70 a poll of 8 GPUs.
    def get(self, key: str, fn: Callable[..., Any], *args: Any, into: dict[str, str] | None = FIELD_ERRORS) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 -- as _lib.call: NVMLError, and anything a binding bug may raise
            return self._failed(exc, fn, args, key, into, _GET)

    def reading(self, key: str, fn: Callable[..., Any], *args: Any, into: dict[str, str] | None = FIELD_ERRORS) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 -- as _lib.call
            return self._failed(exc, fn, args, key, into, _READING)

    def attempt(self, key: str, fn: Callable[..., Any], *args: Any, into: dict[str, str] | None = FIELD_ERRORS) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 -- as _lib.call
            return self._failed(exc, fn, args, key, into, _ATTEMPT)

    def _failed(
        self, exc: Exception, fn: Callable[..., Any], args: tuple[Any, ...], key: str,
        into: dict[str, str] | None, how: int,
    ) -> Any:
        """After ``fn(*args)`` raised ``exc``: the value of _lib.call's retry, or the failure recorded
        and, as ``how`` says (get, reading, attempt: see the module's docstring), raised or None."""
        try:
            return retry_or_raise(exc, fn, args)
        except NvmlError as err:
            self.record(err, key, into)
            if how == _ATTEMPT or (how == _GET and isinstance(err, GpuLost)):
                raise
            return None


_GET, _READING, _ATTEMPT = 0, 1, 2
