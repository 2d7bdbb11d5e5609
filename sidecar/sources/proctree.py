"""The job's process tree: the target and all its descendants.

A process is (pid, start_ticks), never a pid alone. On Linux the tree is read straight from /proc:
the kernel lists a task's children in /proc/<pid>/task/<tid>/children, and one read of
/proc/<pid>/stat gives ppid, CPU ticks, RSS and the start time, so a poll costs a few reads per
process instead of psutil's scan of every process on the machine. What never changes for a
process (name, cmdline, create time) is read once per identity. Elsewhere psutil does the work.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from sidecar.redact import redact_args

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROC = "/proc"


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int | None
    start_ticks: int | None
    create_time: float | None
    name: str
    cmdline: tuple[str, ...]  # redacted
    cpu_percent: float | None  # of one core, since the previous poll
    rss_mib: float | None
    depth: int  # 0 for the target

    @property
    def identity(self) -> tuple[int, int | None]:
        return (self.pid, self.start_ticks)


@dataclass(frozen=True)
class TreeSnapshot:
    target_pid: int
    target_alive: bool
    processes: tuple[ProcInfo, ...]  # parents before children
    error: str | None = None

    def pids(self) -> set[int]:
        return {p.pid for p in self.processes}


@dataclass
class _Stat:
    ppid: int
    state: str
    cpu_ticks: int
    start_ticks: int
    rss_pages: int


def _read_stat(pid: int) -> _Stat | None:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces and parentheses.
    close = raw.rfind(b")")
    if close < 0:
        return None
    fields = raw[close + 2 :].split()
    try:
        return _Stat(
            ppid=int(fields[1]),
            state=fields[0].decode(),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            start_ticks=int(fields[19]),
            rss_pages=int(fields[21]),
        )
    except (IndexError, ValueError):
        return None


def _children_of(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"{_PROC}/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def _boot_time() -> float:
    try:
        return psutil.boot_time()
    except Exception:  # psutil raises its own and OSError types on odd systems
        return time.time() - time.monotonic()


def _has_children_files() -> bool:
    return os.path.exists(f"{_PROC}/self/task/{os.getpid()}/children")


def read_nspid(pid: int) -> tuple[int, ...] | None:
    """The pid of a process in each nested PID namespace, outermost (ours) first."""
    try:
        with open(f"{_PROC}/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        return None
    return None


def pid_visible(pid: int) -> bool:
    return os.path.exists(f"{_PROC}/{pid}") if os.path.isdir(_PROC) else psutil.pid_exists(pid)


class ProcessTreeSource:
    """Polls the tree under one target pid. The target is pinned by its start time, so a pid
    reused after the job died is reported as "exited", never adopted."""

    def __init__(self, target_pid: int, *, max_processes: int = 4096):
        self.target_pid = target_pid
        self.max_processes = max_processes
        self._use_proc = os.path.isdir(_PROC) and _has_children_files()
        self._boot_time = _boot_time()
        self._static: dict[tuple[int, int], tuple[str, tuple[str, ...]]] = {}
        self._prev_cpu: dict[tuple[int, int], tuple[int, float]] = {}
        self._psutil_procs: dict[int, psutil.Process] = {}
        self.target_start_ticks: int | None = None
        st = _read_stat(target_pid) if self._use_proc else None
        if st is not None:
            self.target_start_ticks = st.start_ticks
        elif not self._use_proc and psutil.pid_exists(target_pid):
            self.target_start_ticks = int(psutil.Process(target_pid).create_time() * _CLK_TCK)

    def poll(self) -> TreeSnapshot:
        try:
            if self._use_proc:
                return self._poll_proc()
            return self._poll_psutil()
        except Exception as exc:  # a poll must never die of one odd process
            return TreeSnapshot(self.target_pid, False, (), error=f"process tree: {exc}")

    # -- Linux: /proc --------------------------------------------------------------------------
    def _poll_proc(self) -> TreeSnapshot:
        now = time.monotonic()
        root = _read_stat(self.target_pid)
        if root is None or root.start_ticks != self.target_start_ticks or root.state in ("Z", "X"):
            return TreeSnapshot(self.target_pid, False, ())
        out: list[ProcInfo] = []
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[int, int, _Stat]] = [(self.target_pid, 0, root)]
        while stack and len(out) < self.max_processes:
            pid, depth, st = stack.pop()
            if st.state in ("Z", "X"):
                continue  # a zombie does no work; its parent will reap it
            ident = (pid, st.start_ticks)
            seen.add(ident)
            name, cmdline = self._static_info(pid, ident)
            cpu = self._cpu_percent(ident, st.cpu_ticks, now)
            out.append(
                ProcInfo(
                    pid=pid,
                    ppid=st.ppid,
                    start_ticks=st.start_ticks,
                    create_time=self._boot_time + st.start_ticks / _CLK_TCK,
                    name=name,
                    cmdline=cmdline,
                    cpu_percent=cpu,
                    rss_mib=st.rss_pages * _PAGE_SIZE / 1048576,
                    depth=depth,
                )
            )
            for kid in sorted(_children_of(pid), reverse=True):
                kst = _read_stat(kid)
                if kst is not None and kst.ppid == pid:
                    stack.append((kid, depth + 1, kst))
        # Forget identities that are gone, so the caches stay bounded by the live tree.
        for ident in list(self._static):
            if ident not in seen:
                del self._static[ident]
                self._prev_cpu.pop(ident, None)
        return TreeSnapshot(self.target_pid, True, tuple(out))

    def _static_info(self, pid: int, ident: tuple[int, int]) -> tuple[str, tuple[str, ...]]:
        cached = self._static.get(ident)
        if cached is not None:
            return cached
        name = ""
        args: list[str] = []
        try:
            with open(f"{_PROC}/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"{_PROC}/{pid}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            pass
        info = (name, tuple(redact_args(args)))
        self._static[ident] = info
        return info

    def _cpu_percent(self, ident: tuple[int, int], cpu_ticks: int, now: float) -> float | None:
        prev = self._prev_cpu.get(ident)
        self._prev_cpu[ident] = (cpu_ticks, now)
        if prev is None or now <= prev[1]:
            return None
        return round(100.0 * (cpu_ticks - prev[0]) / _CLK_TCK / (now - prev[1]), 1)

    # -- portable: psutil ------------------------------------------------------------------------
    def _poll_psutil(self) -> TreeSnapshot:
        try:
            root = psutil.Process(self.target_pid)
            if int(root.create_time() * _CLK_TCK) != self.target_start_ticks:
                return TreeSnapshot(self.target_pid, False, ())
            procs = [root, *root.children(recursive=True)][: self.max_processes]
        except psutil.Error:
            return TreeSnapshot(self.target_pid, False, ())
        depth = {self.target_pid: 0}
        out = []
        for p in procs:
            try:
                with p.oneshot():
                    ppid = p.ppid()
                    cached = self._psutil_procs.setdefault(p.pid, p)
                    out.append(
                        ProcInfo(
                            pid=p.pid,
                            ppid=ppid,
                            start_ticks=int(p.create_time() * _CLK_TCK),
                            create_time=p.create_time(),
                            name=p.name(),
                            cmdline=tuple(redact_args(p.cmdline())),
                            cpu_percent=cached.cpu_percent(None),
                            rss_mib=p.memory_info().rss / 1048576,
                            depth=depth.get(ppid, 0) + 1 if p.pid != self.target_pid else 0,
                        )
                    )
                    depth[p.pid] = out[-1].depth
            except psutil.Error:
                continue
        return TreeSnapshot(self.target_pid, True, tuple(out))
