"""DRM clients' engine utilisation, from the kernel's cumulative counters at two monotonic times.

Per engine of a client (``Documentation/gpu/drm-usage-stats.rst``; IGT gputop divides by capacity
and clamps at 100 %):

- busy ns: ``Δbusy_ns / (Δt_ns × capacity)``;
- cycles and total cycles (xe): ``Δcycles / (Δtotal_cycles × capacity)``, the GPU's clock alone;
- cycles and max frequency: ``Δcycles / (Δt_s × maxfreq_hz × capacity)``;
- amdgpu 5.14-5.18: the driver's own percentage, as printed.

A client's first sample has no rate (None, never 0). A counter may briefly go backwards (the spec):
the previous counters and time are kept, this sample's rate is None, and the next one spans both
intervals. Rates are clamped to [0, 100] %.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths
from sidecar.sources.drm.clients import DrmClient, DrmFdIndex, StatFd, read_drm_clients
from sidecar.sources.drm.fdinfo import EngineCounters


@dataclass(frozen=True, slots=True)
class EngineUse:
    name: str
    busy_pct: float | None  # None: first sample, counters went backwards, or nothing to divide by


@dataclass(frozen=True, slots=True)
class DrmClientUse:
    client: DrmClient
    engines: tuple[EngineUse, ...]


@dataclass(frozen=True, slots=True)
class DrmSample:
    t_ns: int  # monotonic
    clients: tuple[DrmClientUse, ...]


@dataclass(frozen=True, slots=True)
class _Mark:
    t_ns: int
    counters: EngineCounters


def _clamp(pct: float) -> float:
    return min(100.0, max(0.0, pct))


def _busy_pct(prev: _Mark, cur: _Mark) -> float | None:
    """The engine's utilisation between two marks; None when there is none to compute."""
    a, b = prev.counters, cur.counters
    capacity = b.capacity
    if a.busy_ns is not None and b.busy_ns is not None:
        dt_ns = cur.t_ns - prev.t_ns
        return _clamp(100.0 * (b.busy_ns - a.busy_ns) / (dt_ns * capacity)) if dt_ns > 0 else None
    if a.cycles is None or b.cycles is None:
        return None
    d_cycles = b.cycles - a.cycles
    if a.total_cycles is not None and b.total_cycles is not None:
        d_total = b.total_cycles - a.total_cycles
        return _clamp(100.0 * d_cycles / (d_total * capacity)) if d_total > 0 else None
    if b.maxfreq_hz:
        dt_s = (cur.t_ns - prev.t_ns) / 1e9
        return _clamp(100.0 * d_cycles / (dt_s * b.maxfreq_hz * capacity)) if dt_s > 0 else None
    return None


def _backwards(a: EngineCounters, b: EngineCounters) -> bool:
    pairs = ((a.busy_ns, b.busy_ns), (a.cycles, b.cycles), (a.total_cycles, b.total_cycles))
    return any(x is not None and y is not None and y < x for x, y in pairs)


def _idle(name: str) -> EngineCounters:
    return EngineCounters(name=name, busy_ns=0)


class DrmSampler:
    """Reads the DRM clients of a set of pids and gives each engine's utilisation since the previous
    sample. Keeps one mark per (client, engine) seen in the last sample; forgets the rest."""

    def __init__(
        self,
        *,
        host: HostPaths = HOST,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        stat_fd: StatFd = os.stat,
        index: DrmFdIndex | None = None,
    ) -> None:
        """``index``: keep each process's DRM fds between samples (DrmFdIndex); None: scan every fd
        at every sample."""
        self._host = host
        self.index = index
        self._clock_ns = clock_ns
        self._stat_fd = stat_fd
        self._marks: dict[tuple[object, str], _Mark] = {}
        self._client_t_ns: dict[object, int] = {}  # when each client of the last sample was read

    def _unprinted(self, client: DrmClient, counters: EngineCounters) -> _Mark | None:
        """amdgpu prints an engine only once it has been busy: an ns engine new to a client that was
        in the last sample was at 0 then."""
        t_ns = self._client_t_ns.get(client.key)
        if t_ns is None or counters.busy_ns is None:
            return None
        return _Mark(t_ns, _idle(counters.name))

    def sample(self, pids: Iterable[int]) -> DrmSample:
        clients = read_drm_clients(pids, host=self._host, stat_fd=self._stat_fd, index=self.index)
        return self.sample_clients(clients, self._clock_ns())

    def sample_clients(self, clients: Iterable[DrmClient], t_ns: int) -> DrmSample:
        """The rates for clients read at monotonic ``t_ns`` (what ``sample`` does after its read)."""
        marks: dict[tuple[object, str], _Mark] = {}
        client_t_ns: dict[object, int] = {}
        out: list[DrmClientUse] = []
        for client in clients:
            client_t_ns[client.key] = t_ns
            uses: list[EngineUse] = []
            for counters in client.info.engines:
                key = (client.key, counters.name)
                cur = _Mark(t_ns, counters)
                prev = self._marks.get(key) or self._unprinted(client, counters)
                if counters.busy_pct is not None:
                    pct: float | None = _clamp(counters.busy_pct)
                elif prev is None:
                    pct = None
                elif _backwards(prev.counters, counters):
                    pct, cur = None, prev  # keep the larger counters (and their time) until they catch up
                else:
                    pct = _busy_pct(prev, cur)
                marks[key] = cur
                uses.append(EngineUse(counters.name, pct))
            out.append(DrmClientUse(client, tuple(uses)))
        self._marks, self._client_t_ns = marks, client_t_ns
        return DrmSample(t_ns, tuple(out))
