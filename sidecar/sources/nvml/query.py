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

from sidecar.sources.nvml._lib import GpuLost, NvmlError, Recorder, call

if TYPE_CHECKING:
    from sidecar.sources.nvml.direct import Queries
    from sidecar.sources.nvml.snapshot import GpuInfo

# `into=FIELD_ERRORS` (the default): the failure goes to the device's field_errors; `into=None`: to
# the poll's call_errors only; a dict: there (a scratch dict the caller merges, or not).
FIELD_ERRORS: dict[str, str] = {}


class DeviceQuery:
    __slots__ = ("recorder", "index", "where", "handle", "info", "errors", "state", "queries", "now_us")

    def __init__(self, recorder: Recorder, index: int, info: GpuInfo, state: Any, queries: Queries, now_us: int):
        self.recorder = recorder
        self.index = index
        self.where = f"GPU {index}"
        self.handle: Any = None
        self.info = info
        self.errors = info.field_errors
        self.state = state  # source.DeviceState
        self.queries = queries
        self.now_us = now_us

    def record(self, err: NvmlError, key: str, into: dict[str, str] | None = FIELD_ERRORS) -> None:
        self.recorder.record(err, self.where, self.errors if into is FIELD_ERRORS else into, key)

    def get(self, key: str, fn: Callable[..., Any], *args: Any, into: dict[str, str] | None = FIELD_ERRORS) -> Any:
        try:
            return call(fn, *args)
        except GpuLost as err:
            self.record(err, key, into)
            raise
        except NvmlError as err:
            self.record(err, key, into)
            return None

    def reading(self, key: str, fn: Callable[..., Any], *args: Any, into: dict[str, str] | None = FIELD_ERRORS) -> Any:
        try:
            return call(fn, *args)
        except NvmlError as err:
            self.record(err, key, into)
            return None

    def attempt(self, key: str, fn: Callable[..., Any], *args: Any, into: dict[str, str] | None = FIELD_ERRORS) -> Any:
        try:
            return call(fn, *args)
        except NvmlError as err:
            self.record(err, key, into)
            raise
