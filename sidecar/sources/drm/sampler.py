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
from typing import NamedTuple

from hostfs.paths import HOST, HostPaths
from sidecar.sources.drm.clients import DrmClient, DrmFdIndex, StatFd, read_drm_clients
from sidecar.sources.drm.fdinfo import EngineCounters


class EngineUse(NamedTuple):
    name: str
    busy_pct: float | None  # None: first sample, counters went backwards, or nothing to divide by


class DrmClientUse(NamedTuple):
    client: DrmClient
    engines: tuple[EngineUse, ...]


class DrmSample(NamedTuple):
    t_ns: int  # monotonic
    clients: tuple[DrmClientUse, ...]  # of the processes read
    unread: frozenset[int] = frozenset()  # pids not read at this sample: their last reading stands


class _Mark(NamedTuple):
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


def _ns_only(a: EngineCounters, b: EngineCounters) -> bool:
    """Both samples have busy ns and no cycles: the rate is busy ns over time."""
    return (
        a.busy_ns is not None
        and b.busy_ns is not None
        and a.cycles is None
        and b.cycles is None
        and a.total_cycles is None
        and b.total_cycles is None
    )


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
        self._marks: dict[tuple[object, str], _Mark] = {}  # (client key, engine) -> its last mark
        # client key -> (the pid it is credited to, when it was last read, its engines then)
        self._clients: dict[object, tuple[int, int, tuple[str, ...]]] = {}
        self._by_pid: dict[int, set[object]] = {}  # pid -> the keys of the clients credited to it

    def _forget(self, clients_of: dict[int, set[object]], unread: frozenset[int]) -> None:
        """Forgets the clients not read at this sample, but those of ``unread`` pids (not read: the
        fd index's budget), whose marks are for their next read. ``clients_of``: the clients read,
        by the pid credited."""
        by_pid, known, marks = self._by_pid, self._clients, self._marks
        for pid in [p for p in by_pid if p not in unread]:
            now = clients_of.get(pid)
            for client_key in by_pid[pid] - now if now else by_pid[pid]:
                entry = known.get(client_key)
                if entry is not None and entry[0] == pid:  # not credited to another pid since
                    del known[client_key]
                    for name in entry[2]:
                        marks.pop((client_key, name), None)
            if not now:
                del by_pid[pid]
        by_pid.update(clients_of)

    def _unprinted(self, client: DrmClient, counters: EngineCounters) -> _Mark | None:
        """amdgpu prints an engine only once it has been busy: an ns engine new to a client that was
        in the last sample was at 0 then."""
        last = self._clients.get(client.key)
        if last is None or counters.busy_ns is None:
            return None
        return _Mark(last[1], _idle(counters.name))

    def sample(self, pids: Iterable[int]) -> DrmSample:
        """The clients of the processes read at this sample (all of ``pids`` unless the fd index's
        budget left some for later: ``DrmSample.unread``), with their engines' rates."""
        asked = set(pids)
        clients = read_drm_clients(asked, host=self._host, stat_fd=self._stat_fd, index=self.index)
        due = self.index.last_due if self.index is not None else None
        unread = frozenset(asked - due) if due is not None else frozenset()
        return self.sample_clients(clients, self._clock_ns(), unread)

    def sample_clients(
        self,
        clients: Iterable[DrmClient],
        t_ns: int,
        unread: frozenset[int] = frozenset(),
    ) -> DrmSample:
        """The rates for clients read at monotonic ``t_ns`` (what ``sample`` does after its read).
        ``unread``: the pids not read at this sample, whose clients' marks are kept for the next.
        Every other client not read now is forgotten."""
        marks, known = self._marks, self._clients
        clients_of: dict[int, set[object]] = {}  # the clients read, by the pid credited
        out: list[DrmClientUse] = []
        for client in clients:
            client_key = client.key
            uses: list[EngineUse] = []
            for counters in client.info.engines:
                key = (client_key, counters.name)
                cur = _Mark(t_ns, counters)
                prev = marks.get(key) or self._unprinted(client, counters)
                if counters.busy_pct is not None:
                    pct: float | None = _clamp(counters.busy_pct)
                elif prev is None:
                    pct = None
                elif _ns_only(prev.counters, counters):
                    # _backwards and _busy_pct for busy ns alone (amdgpu, i915), inlined: every client
                    d_ns, dt_ns = counters.busy_ns - prev.counters.busy_ns, t_ns - prev.t_ns  # type: ignore[operator]
                    if d_ns < 0:
                        pct, cur = None, prev
                    else:
                        pct = _clamp(100.0 * d_ns / (dt_ns * counters.capacity)) if dt_ns > 0 else None
                elif _backwards(prev.counters, counters):
                    pct, cur = None, prev  # keep the larger counters (and their time) until they catch up
                else:
                    pct = _busy_pct(prev, cur)
                marks[key] = cur
                uses.append(EngineUse(counters.name, pct))
            names = tuple(u.name for u in uses)
            last = known.get(client_key)
            if last is not None and last[2] != names:  # an engine no longer printed: its mark goes
                for name in set(last[2]) - set(names):
                    marks.pop((client_key, name), None)
            known[client_key] = (client.pid, t_ns, names)
            clients_of.setdefault(client.pid, set()).add(client_key)
            out.append(DrmClientUse(client, tuple(uses)))
        self._forget(clients_of, unread)
        return DrmSample(t_ns, tuple(out), unread)
