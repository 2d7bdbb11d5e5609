"""The poll loop: every interval, read each source once (each failing alone), decide the verdict,
append a history sample and publish the status document. HTTP requests only read what the last
poll published; they never touch /proc, /dev/shm or NVML.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sidecar import document
from sidecar.history import History, Sample
from sidecar.sources.proctree import ProcessTreeSource, TreeSnapshot, pid_visible
from sidecar.sources.segments import SegmentSource
from sidecar.verdict import (
    Facts,
    GpuFacts,
    HysteresisState,
    ProcGpu,
    RecentSample,
    Rules,
    Verdict,
    decide,
    device_type,
    primary_model_gpu_index,
    settle,
)

# How often the OS graphics devices are re-read: they change only on hot-plug.
SYSFS_EVERY_POLLS = 20
# Process states (/proc/PID/stat field 3) of a process that does nothing until it is continued.
STOPPED_STATES = ("T", "t")


class Poller:
    def __init__(
        self,
        target_pid: int,
        *,
        interval_s: float = 1.5,
        history_s: float = 600.0,
        rules: Rules | None = None,
        tree_source: ProcessTreeSource | None = None,
        segment_source: SegmentSource | None = None,
        nvml_source: Any = None,
        system_gpus_fn: Callable[[], list] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.target_pid = target_pid
        self.interval_s = interval_s
        self.rules = rules or Rules()
        self.tree_source = tree_source or ProcessTreeSource(target_pid)
        self.segment_source = segment_source or SegmentSource()
        if nvml_source is None:
            from sidecar.sources.nvml import NvmlSource

            nvml_source = NvmlSource()
        self.nvml_source = nvml_source
        if system_gpus_fn is None:
            from sidecar.sources.sysfs import list_system_gpus

            system_gpus_fn = list_system_gpus
        self.system_gpus_fn = system_gpus_fn
        self.clock = clock
        self.history = History(history_s, interval_s)
        self.poll_count = 0
        self.poll_errors: Counter[str] = Counter()
        self.poll_durations_s: list[float] = []  # read (never drained) by the metrics collector
        self.last_poll_time: float | None = None
        self.latest: dict[str, Any] | None = None
        self.latest_verdict: Verdict | None = None
        self.target_gone_at: float | None = None
        self._hysteresis = HysteresisState()
        self._system_gpus: list = []
        self._last_alive_procs: tuple = ()
        self._last_proc_info: dict[int, Any] = {}
        self._facts_cache: dict[int, tuple] = {}
        self._entry_cache: dict[int, tuple] = {}
        self._target_name: str | None = None
        self._target_cmdline: list[str] | None = None
        self._target_create_time: float | None = None
        self._stopped_since: dict[tuple, float] = {}
        self._lock = threading.Lock()  # guards what snapshot() reads
        self._poll_lock = threading.Lock()  # one poll at a time (poll_once)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.poll_lag_s: list[float] = []

    # -- one poll --------------------------------------------------------------------------------
    def poll_once(self) -> dict[str, Any]:
        """One poll; safe from any thread. Polls never overlap: the poller thread and a caller (the
        CLI polls once more when the job exits) take turns, because the sources keep state between
        polls that only one poll at a time may touch (the segment follower's open files, the
        process tree's kept /proc files, the hysteresis, the caches)."""
        with self._poll_lock:
            return self._poll_once_locked()

    def _poll_once_locked(self) -> dict[str, Any]:
        started = time.perf_counter()
        now = self.clock()
        tree = self.tree_source.poll()
        if tree.error:
            self.poll_errors["proctree"] += 1
        reads = self.segment_source.poll(tree)
        self.poll_errors["probe"] += sum(1 for r in reads.values() if r.unreadable)
        nvml = self._poll_nvml()
        if self.poll_count % SYSFS_EVERY_POLLS == 0:
            try:
                self._system_gpus = list(self.system_gpus_fn())
            except Exception:
                self.poll_errors["sysfs"] += 1
        facts, proc_info, other = self._facts(now, tree, reads, nvml)
        sample = self._sample(now, facts)
        self.history.append(sample)
        facts = replace(
            facts, recent=self.history.recent(max(self.rules.idle_window_s, self.rules.growth_window_s))
        )
        live = {p.pid for p in facts.processes}
        verdict, self._hysteresis = settle(self._hysteresis, decide(facts), self.rules, live)
        self.history.add_events(self._events(reads))
        doc = document.status_document(
            facts,
            verdict,
            time_s=now,
            interval_s=self.interval_s,
            target_name=self._target_name,
            target_cmdline=self._target_cmdline,
            target_create_time=self._target_create_time,
            proc_info=proc_info,
            other_processes=other,
            events=self.history.events(),
            entry_cache=self._entry_cache,
        )
        with self._lock:
            self.latest = doc
            self.latest_verdict = verdict
            self.last_poll_time = now
            self.poll_count += 1
            self.poll_durations_s.append(time.perf_counter() - started)
            del self.poll_durations_s[:-1000]
        return doc

    def _poll_nvml(self):
        try:
            snap = self.nvml_source.poll()
        except Exception as exc:  # the source promises not to raise; the poll must not depend on it
            self.poll_errors["nvml"] += 1
            return _NvmlDown(f"NVML source failed: {exc}")
        if not snap.ok or snap.call_errors:
            self.poll_errors["nvml"] += 1
        return snap

    def _facts(
        self, now: float, tree: TreeSnapshot, reads, nvml
    ) -> tuple[Facts, dict[int, Any], dict[int, int]]:
        tree_pids = tree.pids()
        by_pid: dict[int, list[ProcGpu]] = {}
        other: dict[int, int] = {}
        gpus: list[GpuFacts] = []
        nvml_pids: set[int] = set()
        for d in nvml.devices if nvml.ok else ():
            gpus.append(
                GpuFacts(
                    index=d.index,
                    uuid=d.uuid,
                    name=d.name,
                    pci_bus_id=d.pci_bus_id,
                    util=d.util_gpu,
                    mem_util=d.util_mem,
                    mem_used_mib=d.mem_used_mib,
                    mem_total_mib=d.mem_total_mib,
                    lost=d.lost,
                    field_errors=tuple(sorted(d.field_errors.items())),
                )
            )
            for gp in d.processes:
                nvml_pids.add(gp.pid)
                if gp.pid in tree_pids:
                    by_pid.setdefault(gp.pid, []).append(ProcGpu(d.index, gp.used_mib, gp.sm_util))
                else:
                    other[d.index] = other.get(d.index, 0) + 1
        if tree.target_alive:
            procs = self._process_facts(tree, reads, by_pid)
            proc_info = {p.pid: p for p in tree.processes}
            self._last_alive_procs, self._last_proc_info = procs, proc_info
            root = tree.processes[0] if tree.processes else None
            if root is not None and self._target_name is None:
                self._target_name = root.name
                self._target_cmdline = list(root.cmdline)
                self._target_create_time = root.create_time
        else:
            if self.target_gone_at is None:
                self.target_gone_at = now
            # Keep showing what the job was doing; the driver no longer sees its processes.
            procs = tuple(replace(p, gpu=()) for p in self._last_alive_procs)
            proc_info = self._last_proc_info
        suspect = bool(
            nvml.ok
            and nvml_pids
            and not (nvml_pids & tree_pids)
            and any((p.cuda_memory_mib or 0) > 0 for p in procs)
            and not any(pid_visible(pid) for pid in nvml_pids)
        )
        gpu_t = tuple(gpus)
        facts = Facts(
            target_pid=self.target_pid,
            target_alive=tree.target_alive,
            processes=procs,
            nvml_ok=bool(nvml.ok),
            nvml_error=nvml.error,
            driver=getattr(nvml, "driver", None),
            cuda_driver=getattr(nvml, "cuda_driver", None),
            gpus=gpu_t,
            system_gpus=document.system_gpu_facts(self._system_gpus, gpu_t),
            pid_namespace_suspect=suspect,
            stopped=self._stopped(now, tree),
            rules=self.rules,
        )
        return facts, proc_info, other

    def _stopped(self, now: float, tree: TreeSnapshot) -> tuple[tuple[int, float], ...]:
        """(pid, seconds since this sidecar first saw it stopped) of each stopped process of the
        tree. The kernel keeps no time of the stop, so a job found stopped counts from then."""
        since, self._stopped_since = self._stopped_since, {}
        out = []
        for p in tree.processes if tree.target_alive else ():
            if p.state in STOPPED_STATES:
                self._stopped_since[p.identity] = t = since.get(p.identity, now)
                out.append((p.pid, now - t))
        return tuple(out)

    def _process_facts(self, tree: TreeSnapshot, reads, by_pid) -> tuple:
        """ProcessFacts of each process, reused from the last poll when nothing it is made of changed
        (same probe read object, same place in the tree, same NVML rows): most processes of a big
        tree, most polls."""
        cache, fresh = self._facts_cache, {}
        out = []
        for p in tree.processes:
            read = reads.get(p.pid)
            gpu = tuple(by_pid.get(p.pid, ()))
            place = (p.start_ticks, p.ppid, p.depth, p.name)
            hit = cache.get(p.pid)
            if hit is not None and hit[0] is read and hit[1] == place and hit[2].gpu == gpu:
                pf = hit[2]
            else:
                pf = document.process_facts(p, read, gpu, self.target_pid)
            fresh[p.pid] = (read, place, pf)
            out.append(pf)
        self._facts_cache = fresh
        return tuple(out)

    def _sample(self, now: float, facts: Facts) -> Sample:
        proc_rows = []
        sm_total = mem_total = None
        for p in facts.processes:
            if not p.gpu:
                continue
            mem = sum(g.mem_used_mib or 0.0 for g in p.gpu)
            sms = [g.sm_util for g in p.gpu if g.sm_util is not None]
            sm = sum(sms) if sms else None
            proc_rows.append((p.pid, mem, sm))
            mem_total = (mem_total or 0.0) + mem
            if sm is not None:
                sm_total = (sm_total or 0.0) + sm
        if facts.nvml_ok and sm_total is None and proc_rows:
            sm_total = 0.0  # processes listed, no utilisation samples: NVML's NOT_FOUND means idle
        calls = 0
        steps = None
        model_gpu_util = None
        for p in facts.processes:
            for m in p.models:
                if device_type(m.device) in ("cuda", "mps", "xpu") or any(
                    device_type(d) == "cuda" for d in m.devices
                ):
                    calls += m.forward_calls
                    if m.train_steps is not None:
                        steps = (steps or 0) + m.train_steps
        model_gpu = primary_model_gpu_index(facts)
        g = next((g for g in facts.gpus if g.index == model_gpu), None)
        if g is not None:
            model_gpu_util = g.util
        recent = RecentSample(now, sm_total, mem_total if facts.nvml_ok else None, calls, model_gpu_util, steps)
        return Sample(
            time=now,
            gpus=tuple((g.index, g.util, g.mem_used_mib) for g in facts.gpus),
            processes=tuple(proc_rows),
            recent=recent,
        )

    @staticmethod
    def _events(reads) -> list[dict[str, Any]]:
        out = []
        for pid, r in reads.items():
            for ev in (r.payload or {}).get("events") or ():
                if isinstance(ev, dict) and isinstance(ev.get("name"), str):
                    t = ev.get("time")
                    if isinstance(t, int | float) and not isinstance(t, bool):
                        out.append({"time": float(t), "name": ev["name"], "pid": pid})
        return out

    # -- the loop --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dsh-sidecar-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            lag = time.monotonic() - next_at
            self.poll_lag_s.append(lag)
            del self.poll_lag_s[:-1000]
            try:
                self.poll_once()
            except Exception:  # keep polling: the next poll may succeed; count it for /metrics
                self.poll_errors["poll"] += 1
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow source): skip missed slots rather than bursting
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        # Never close a source under a poll still running in another thread; a poll stuck past the
        # join above (a hung driver call) keeps its sources, and the exit that follows frees them.
        if not self._poll_lock.acquire(timeout=5):
            return
        try:
            for source in (self.nvml_source, self.segment_source, self.tree_source):
                try:
                    source.close()
                except Exception:
                    pass
        finally:
            self._poll_lock.release()

    def snapshot(self) -> tuple[dict[str, Any] | None, float | None]:
        with self._lock:
            return self.latest, self.last_poll_time


class _NvmlDown:
    ok = False
    devices: tuple = ()
    driver = None
    cuda_driver = None
    call_errors: dict = {}

    def __init__(self, error: str):
        self.error = error
