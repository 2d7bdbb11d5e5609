"""Sources → facts: the one place where what the sources read becomes the verdict's facts.

The poller reads the sources and hands their results here; the verdict decides on the facts; the
document builder (sidecar/documents/document.py) only presents facts and the verdict. Pure functions plus
`FactCollector`, which keeps what one poll's facts need from earlier polls (reused process facts,
the last live processes, when each stopped process was first seen stopped).
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any, Protocol, Union

from probe_wire.records import (
    ErrorRecord,
    LoaderSettingsRecord,
    MathRecord,
    MemoryRecord,
    ModelRecord,
    StepsRecord,
)
from probe_wire.schema import MODEL_COLLECTED, PUBLISH_FAILED
from sidecar.common.memo import for_the_same_objects
from sidecar.common.nvml_names import GPU_EFFICIENCY_FIELDS
from sidecar.documents import bounds
from sidecar.documents.bounds import MAX_ID_CHARS, clip, clip_opt
from sidecar.poll.vendor_gpus import VendorJoin
from sidecar.sources.lineage import PYTHON_C_ARGS, RootInfo, is_mp_child, is_mp_helper
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import ProbeRead
from sidecar.verdict import (
    Facts,
    GpuFacts,
    LoaderSettings,
    MathSettings,
    MigFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    Rules,
    StepBreakdown,
    SystemGpuFacts,
)

if TYPE_CHECKING:  # the nvml package imports the binding; sysfs is read by the poller
    from sidecar.poll.vendor_gpus import VendorReading
    from sidecar.sources.nvml.snapshot import GpuInfo
    from sidecar.sources.sysfs import SystemGpu

MIB = 1048576.0
# Exited processes of a running job whose last facts are kept (the ones that registered a model).
MAX_EXITED_KEPT = 64
# Process states (/proc/PID/stat field 3) of a process that does nothing until it is continued.
STOPPED_STATES = ("T", "t")


# ---------------------------------------------------------------------------------------------
# A probe payload → facts. The segment source hands up the payload's record (probe_wire.records), of
# the schema's types (an int is an int, a float finite, a str at most schema.MAX_STR_CHARS): here its
# strings are clipped (sidecar/documents/bounds.py), its shares clamped into 0-1, counts and times
# held at 0 and above (a process writes its own payload).
# ---------------------------------------------------------------------------------------------
_TEXT = bounds.MAX_TEXT_CHARS


def _fraction(x: float | None) -> float | None:
    """A share from a process (finite: the schema saw to that), clamped into 0-1."""
    return None if x is None else min(1.0, max(0.0, x))


def _nonnegative(x: float | None) -> float | None:
    return None if x is None else max(0.0, x)


def _devices(x: tuple[str, ...]) -> tuple[str, ...]:
    """A model's distinct device names, clipped, at most MAX_DEVICES_SHOWN."""
    if len(x) == 1 and len(x[0]) <= MAX_ID_CHARS:
        return x  # one device (most models): what the general case below gives
    kinds = list(dict.fromkeys(x))
    return tuple(clip(d, MAX_ID_CHARS) for d in kinds[: bounds.MAX_DEVICES_SHOWN])


def _loader_settings(x: LoaderSettingsRecord | None) -> LoaderSettings | None:
    if x is None:
        return None
    return LoaderSettings(x.num_workers, x.pin_memory, x.persistent_workers, x.batch_size, x.prefetch_factor)


def step_breakdown(x: StepsRecord | None) -> StepBreakdown | None:
    if x is None:
        return None
    return StepBreakdown(
        window_s=max(0.0, x.window_s),
        steps=max(0, x.steps),
        step_s=_nonnegative(x.step_s),
        data_wait_fraction=_fraction(x.data_wait_fraction),
        forward_fraction=_fraction(x.forward_fraction),
        optimizer_fraction=_fraction(x.optimizer_fraction),
        other_fraction=_fraction(x.other_fraction),
        backward_fraction=_fraction(x.backward_fraction),
    )


def math_settings(x: MathRecord | None) -> MathSettings | None:
    if x is None:
        return None
    return MathSettings(
        allow_tf32_matmul=x.allow_tf32_matmul,
        cudnn_allow_tf32=x.cudnn_allow_tf32,
        float32_matmul_precision=clip_opt(x.float32_matmul_precision, MAX_ID_CHARS),
        cudnn_benchmark=x.cudnn_benchmark,
    )


# Read from each model record, in this order (one C call).
_model_values = attrgetter(
    "name", "class_name", "device", "devices", "params", "input_device", "forward_calls", "forward_rate_hz",
    "data_wait_fraction", "train_steps", "step_rate_hz", "step_source", "shared_memory", "param_dtypes",
    "autocast", "input_shape", "loader_settings", "compiled_uncounted", "data_wait_batches",
)  # fmt: skip


def models_facts(models: tuple[ModelRecord, ...]) -> tuple[ModelFacts, ...]:
    """A payload's models as facts, each string clipped as clip does: written out (this runs for every
    model of every changed payload), a short string (most of them) taken without a call."""
    out = []
    for m in models:
        (
            name,
            cls,
            dev,
            devs,
            params,
            in_dev,
            calls,
            fwd,
            wait,
            steps,
            rate,
            source,
            shared,
            dtypes,
            ac,
            shape,
            ls,
            unc,
            n,
        ) = _model_values(m)
        out.append(
            ModelFacts(  # positional, in its fields' order, as ProcessFacts below: keywords cost 1 us a model
                name if 0 < len(name) <= _TEXT else clip(name) or clip(cls) or "model",
                dev if len(dev) <= MAX_ID_CHARS else clip(dev, MAX_ID_CHARS),
                _devices(devs),
                params,
                in_dev if in_dev is None or len(in_dev) <= MAX_ID_CHARS else clip(in_dev, MAX_ID_CHARS),
                calls,
                fwd,
                wait,
                steps,
                rate,
                source if source is None or len(source) <= _TEXT else clip(source),
                shared,
                () if dtypes is None else tuple(clip(d, MAX_ID_CHARS) for d in dtypes),
                ac if ac is None or len(ac) <= MAX_ID_CHARS else clip(ac, MAX_ID_CHARS),
                shape,
                None if ls is None else _loader_settings(ls),
                unc is True,
                None if n is None else max(0, n),
            )
        )
    return tuple(out)


def cuda_reserved_mib(memory: tuple[MemoryRecord, ...]) -> float | None:
    """What the process's CUDA caching allocator holds, summed over its devices (exact: bytes / MiB);
    None when it holds on no device."""
    return sum(m.reserved_bytes / MIB for m in memory) if memory else None


def publish_failure(errors: tuple[ErrorRecord, ...]) -> str | None:
    """The message of a fallback payload (its last error is probe_wire.schema.PUBLISH_FAILED), else None."""
    if errors and errors[-1].where == PUBLISH_FAILED:
        return clip(errors[-1].message) or "unknown error"
    return None


def collected_models(errors: tuple[ErrorRecord, ...]) -> tuple[str, ...]:
    """The names of the registered models that were garbage-collected (probe_wire.schema.MODEL_COLLECTED)."""
    names = {clip(e.message) for e in errors if e.where == MODEL_COLLECTED}
    return tuple(sorted(n for n in names if n))[: bounds.MAX_MODELS_SHOWN]


# A command line's first arguments, in characters at most: the cache outlives the processes,
# and a process controls its command line (up to ARG_MAX, megabytes: 1024 of them would be GiBs).
_MP_FLAGS_CACHED_CHARS = 4096


@lru_cache(maxsize=1024)
def _mp_flags(head: tuple[str, ...]) -> tuple[bool, bool]:
    """(is_mp_helper, is_mp_child) of a command line's first PYTHON_C_ARGS arguments (all they
    read): a process's never change, and a poll asks for every process whose payload changed."""
    return is_mp_helper(head), is_mp_child(head)


def _mp_flags_of(cmdline: Any) -> tuple[bool, bool]:
    if type(cmdline) is not tuple:
        return is_mp_helper(cmdline), is_mp_child(cmdline)
    head = cmdline[:PYTHON_C_ARGS]
    if sum(map(len, head)) > _MP_FLAGS_CACHED_CHARS:
        return is_mp_helper(head), is_mp_child(head)
    return _mp_flags(head)


def process_facts(
    proc: ProcInfo, read: ProbeRead | None, gpu: tuple[ProcGpu, ...], target_pid: int
) -> ProcessFacts:
    """The facts of process ``proc`` from its probe's read (None: no segment), clipped and clamped by
    the helpers above (this runs for every process whose payload changed, most of them at every poll)."""
    mp_helper, mp_child = _mp_flags_of(getattr(proc, "cmdline", None))
    # Positional, in its fields' order (tests/unit/test_collect_facts.py holds each field to its
    # helper's result, by name): keywords cost about 2 us of this call's 8.5.
    if read is None or read.payload is None:
        return ProcessFacts(
            proc.pid,
            proc.ppid,
            proc.depth,
            clip(proc.name) if isinstance(proc.name, str) else proc.name,
            proc.pid == target_pid,  # is_target
            read.state if read is not None else "missing",
            None if read is None else clip_opt(read.error),
            read is not None and read.unreadable,
            mp_helper=mp_helper,
            mp_child=mp_child,
            gpu=gpu,
        )
    p = read.payload
    errors = p.errors
    return ProcessFacts(
        proc.pid,
        proc.ppid,
        proc.depth,
        clip(proc.name) if isinstance(proc.name, str) else proc.name,
        proc.pid == target_pid,  # is_target
        read.state,
        None if read.error is None else clip(read.error),
        read.unreadable,
        p.role,  # one of schema.ROLES
        p.worker_id,
        p.rank,
        p.local_rank,
        p.world_size,
        clip_opt(p.dist_backend, MAX_ID_CHARS),
        clip_opt(p.loader, MAX_ID_CHARS),
        mp_helper,
        publish_failure(errors) if errors else None,
        mp_child,
        collected_models(errors) if errors else (),
        p.runtime,
        cuda_reserved_mib(p.memory),
        models_facts(p.models) if p.models else (),
        gpu,
        None if p.steps is None else step_breakdown(p.steps),
        None if p.math is None else math_settings(p.math),
        _nonnegative(p.syncs_per_step),
        clip_opt(p.hostname),
    )


# ---------------------------------------------------------------------------------------------
# NVML and the OS's graphics devices → facts
# ---------------------------------------------------------------------------------------------
# GpuFacts's fields before field_errors and after it, read from an NVML device in one call each (8 a
# poll, 33 fields: keyword arguments and a getattr each cost more than the rest of the copy).
# tests/unit/test_collect_facts.py holds the positions to GpuFacts's order.
_GPU_HEAD = attrgetter(
    "index", "uuid", "name", "pci_bus_id", "util_gpu", "util_mem", "mem_used_mib", "mem_total_mib", "lost"
)
_GPU_EFFICIENCY: attrgetter[tuple[Any, ...]] = attrgetter(*GPU_EFFICIENCY_FIELDS)  # a tuple of the fields


# A GpuFacts' values in order, NVML's (vendor and driver, last, are the other GPUs': their defaults)
_GPU_FACTS = attrgetter(*(f.name for f in fields(GpuFacts) if f.name not in ("vendor", "driver")))


def gpu_facts(d: GpuInfo, last: GpuFacts | None = None) -> GpuFacts:
    """An NVML device (sources.nvml.GpuInfo) as the verdict sees it: ``last`` (the last poll's
    facts of the device) again when every value reads exactly the same, for the caches downstream
    that compare facts by identity first (an idle GPU, a simulated one)."""
    mig = d.mig_devices
    migs = (
        tuple(
            MigFacts(
                m.index, m.uuid, m.gpu_instance_id, m.compute_instance_id, m.mem_used_mib, m.mem_total_mib
            )
            for m in mig
        )
        if mig
        else ()
    )
    # One tuple of every field, in order: the type checker takes arguments after a *tuple of no
    # fixed length for too many.
    values = (*_GPU_HEAD(d), tuple(sorted(d.field_errors.items())), *_GPU_EFFICIENCY(d), migs)
    if last is not None and not migs and _same_values(_GPU_FACTS(last), values):
        return last
    return GpuFacts(*values)


def _same_values(last: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """Exactly the same values (plain ones: numbers, text, None and tuples of them): == first, which
    tells most polls apart at once, then their marshalled bytes, which also tell 1 from 1.0 and True
    and 0.0 from -0.0 (a value shown differently is no value to reuse). Format 2: the bytes of a
    value whatever else refers to it (3 and later mark objects referred to elsewhere)."""
    return last == now and marshal.dumps(last, 2) == marshal.dumps(now, 2)


@dataclass
class NvmlFacts:
    """One NVML snapshot split by the job's tree: its GPUs, the tree's rows per pid, and how many
    processes outside the tree each GPU runs."""

    gpus: tuple[GpuFacts, ...] = ()
    by_pid: dict[int, list[ProcGpu]] = field(default_factory=dict)
    other_processes: dict[int, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)  # every pid NVML listed
    rows: dict[RowKey, ProcGpu] = field(default_factory=dict)  # the tree's rows by their values


RowKey = tuple[int, "float | None", "float | None", "int | None"]  # a ProcGpu's values: GPU, MiB, SM %, MIG


def nvml_facts(
    nvml: NvmlReading,
    tree_pids: set[int],
    gpus: tuple[GpuFacts, ...] | None = None,
    rows: dict[RowKey, ProcGpu] | None = None,
    last_gpus: tuple[GpuFacts, ...] = (),
) -> NvmlFacts:
    """``gpus``: the snapshot's devices as facts when the caller made them already (discovery: once
    per poll for all its jobs). ``rows``: the last poll's NvmlFacts.rows: a row that reads the same
    is the same object (the facts' caches compare rows: `is` first). ``last_gpus``: the last poll's
    NvmlFacts.gpus: a device that reads the same is the same object, all of them the same tuple."""
    out = NvmlFacts()
    made: list[GpuFacts] = []
    last, now = rows or {}, out.rows
    # Looked up once: the rows' loop runs for every GPU process of the machine at every poll.
    add_pid, by_pid, others = out.pids.add, out.by_pid, out.other_processes
    for i, d in enumerate(nvml.devices if nvml.ok else ()):
        if gpus is None:
            made.append(gpu_facts(d, last_gpus[i] if i < len(last_gpus) else None))
        index = d.index
        for gp in d.processes:
            pid = gp.pid
            add_pid(pid)
            if pid in tree_pids:
                key = (index, gp.used_mib, gp.sm_util, getattr(gp, "mig_index", None))
                row = now[key] = last.get(key) or ProcGpu(*key)
                by_pid.setdefault(pid, []).append(row)
            else:
                others[index] = others.get(index, 0) + 1
    if gpus is not None:
        out.gpus = gpus
    else:
        out.gpus = (
            last_gpus if len(made) == len(last_gpus) and all(map(is_, made, last_gpus)) else tuple(made)
        )
    return out


def _norm_pci(pci: str | None) -> str | None:
    """NVML writes an 8-digit PCI domain, sysfs a 4-digit one."""
    if not pci:
        return None
    parts = pci.lower().split(":")
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}" if len(parts) == 3 else pci.lower()
    except ValueError:
        return pci.lower()


def system_gpu_facts(
    system_gpus: Sequence[SystemGpu], gpus: tuple[GpuFacts, ...]
) -> tuple[SystemGpuFacts, ...]:
    """Match OS graphics devices to NVML devices by PCI address."""
    return _system_gpu_facts(gpus, *system_gpus) if system_gpus else ()


# Discovery's jobs share one poll's devices, and each job's list of the OS's devices (a list of its
# own) holds the same frozen sysfs.SystemGpu objects: made once per poll for all of them.
@for_the_same_objects
def _system_gpu_facts(gpus: tuple[GpuFacts, ...], *system_gpus: SystemGpu) -> tuple[SystemGpuFacts, ...]:
    by_pci = {_norm_pci(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    return tuple(
        SystemGpuFacts(
            vendor=s.vendor,
            name=s.name,
            pci=s.pci,
            driver=s.driver,
            nvml_index=by_pci.get(_norm_pci(s.pci)),
            device_id=s.device_id,
            integrated=s.integrated,
        )
        for s in system_gpus
    )


# ---------------------------------------------------------------------------------------------
# One poll's facts, with what they need from earlier polls
# ---------------------------------------------------------------------------------------------
@dataclass
class TargetInfo:
    """The watched process (the job's root) as first seen alive (kept after it exits)."""

    pid: int = 0
    name: str | None = None
    cmdline: list[str] | None = None
    create_time: float | None = None
    start_ticks: int | None = None
    root: RootInfo | None = None  # owner, working directory, ancestors (read once, when first seen)

    @property
    def job_id(self) -> str:
        """`<pid>-<start ticks>`: a job is its root process, and a process is (pid, start ticks)."""
        return job_id(self.pid, self.start_ticks)


def job_id(pid: int, start_ticks: int | None) -> str:
    return f"{pid}-{start_ticks if start_ticks is not None else 0}"


class NvmlReading(Protocol):
    """One NVML snapshot as the facts read it: sources.nvml's NvmlSnapshot, or poll.poller's stand-in
    for a poll whose source failed (not ok, no devices)."""

    @property
    def ok(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def driver(self) -> str | None: ...
    @property
    def cuda_driver(self) -> str | None: ...
    @property
    def devices(self) -> Sequence[GpuInfo]: ...


Identity = tuple[int, "int | None"]  # a process: (pid, start ticks)
# What an exited process is kept under (_exit_key): its identity, or a DataLoader worker's place
ExitKey = Union[Identity, tuple[str, "int | None", "str | None", "int | None"]]
# A process's place in the tree (start ticks, ppid, depth, name, command line): what its facts reuse
Place = tuple["int | None", "int | None", int, str, tuple[str, ...]]
_Cached = tuple["ProbeRead | None", Place, ProcessFacts]  # a process's read, place and facts, last poll


class FactCollector:
    """Builds each poll's `Facts`. Not thread-safe: the poller runs one poll at a time."""

    def __init__(
        self,
        target_pid: int,
        rules: Rules,
        pid_visible: Callable[[int], bool],
        root_info: Callable[[int], RootInfo] | None = None,
    ) -> None:
        self.target_pid = target_pid
        self.rules = rules
        self.pid_visible = pid_visible  # sources.proctree.pid_visible (a /proc lookup)
        self.root_info = root_info  # sources.lineage.root_info (a few /proc reads, once per job)
        self.kfd_present: bool | None = None  # Facts.kfd_present, as the poller last read it
        self.target = TargetInfo(target_pid)
        self.proc_info: dict[int, ProcInfo] = {}  # pid -> proctree.ProcInfo of the facts' processes
        self.other_processes: dict[int, int] = {}  # GPU index -> processes outside the tree
        self._last_alive: tuple[ProcessFacts, ...] = ()
        # identity -> the last facts of a process of the job that has exited (see _depart)
        self._exited: dict[ExitKey, ProcessFacts] = {}
        self._exited_info: dict[int, ProcInfo] = {}  # pid -> its proctree.ProcInfo (command line)
        self._cache: dict[int, _Cached] = {}
        self._rows: dict[RowKey, ProcGpu] = {}  # the last poll's NVML rows of the tree (nvml_facts)
        self._gpus: tuple[GpuFacts, ...] = ()  # and its GPUs
        self._joined = VendorJoin()  # NVML's GPUs and rows with the AMD and Intel ones
        # The last live tree's processes (the source's tuple), their pids and ProcInfo by pid
        self._tree: tuple[tuple[ProcInfo, ...], set[int], dict[int, ProcInfo]] = ((), set(), {})
        self._stopped_since: dict[Identity, float] = {}

    def facts(
        self,
        now: float,
        tree: TreeSnapshot,
        reads: dict[int, ProbeRead],
        nvml: NvmlReading,
        system_gpus: Sequence[SystemGpu],
        gpus: tuple[GpuFacts, ...] | None = None,
        departed: dict[Identity, ProbeRead] | None = None,
        vendor: VendorReading | None = None,
    ) -> Facts:
        """``departed``: the segment source's last reads of the processes that left the tree since
        the last poll (SegmentSource.departed), by identity. ``vendor``: the AMD and Intel GPUs and
        the tree's rows on them (poll/vendor_gpus.py), after NVML's."""
        # The very tuple of the last poll's tree (the source keeps it while each process reads the
        # same): the same pids, none gone, none stopped anew.
        same_tree = tree.target_alive and tree.processes is self._tree[0]
        tree_pids = self._tree[1] if same_tree else tree.pids()
        nv = nvml_facts(nvml, tree_pids, gpus, self._rows, self._gpus)
        if departed:
            self._adopt(tree, departed)
        all_gpus, by_pid, others = self._joined.join(nv.gpus, nv.by_pid, vendor, nv.other_processes, reads)
        if tree.target_alive:
            procs = self._process_facts(tree, reads, by_pid)
            if self._last_alive and not same_tree:
                self._depart(tree_pids, departed or {}, every=False)
            if not same_tree:
                self._tree = (tree.processes, tree_pids, {p.pid: p for p in tree.processes})
            self._last_alive, self.proc_info = procs, self._tree[2]
            root = tree.processes[0] if tree.processes else None
            if root is not None and self.target.name is None:
                info = self.root_info(root.pid) if self.root_info is not None else None
                self.target = TargetInfo(
                    root.pid, root.name, list(root.cmdline), root.create_time, root.start_ticks, info
                )
            if self._exited and not any(p.has_probe for p in procs):
                # The probed part of the job has finished (mp.spawn's ranks before their parent):
                # what it did stands until the job ends.
                procs += tuple(self._exited.values())
                self.proc_info = {**self._exited_info, **self.proc_info}
        else:
            # Keep showing what the job did, every process that ran its probe included (the target
            # first); the driver no longer sees its processes.
            self._depart(tree_pids, departed or {}, every=True)
            procs = tuple(sorted(self._exited.values(), key=lambda p: not p.is_target))
            self.proc_info = {**self._exited_info, **self.proc_info}
        self.other_processes, self._rows, self._gpus = others, nv.rows, nv.gpus
        return Facts(
            target_pid=self.target_pid,
            target_alive=tree.target_alive,
            processes=procs,
            nvml_ok=bool(nvml.ok),
            nvml_error=nvml.error,
            driver=getattr(nvml, "driver", None),
            cuda_driver=getattr(nvml, "cuda_driver", None),
            gpus=all_gpus,
            system_gpus=system_gpu_facts(system_gpus, nv.gpus),
            kfd_present=self.kfd_present,
            pid_namespace_suspect=self._pid_namespace_suspect(nvml, nv, tree_pids, procs),
            stopped=() if same_tree and not self._stopped_since else self._stopped(now, tree),
            target_age_s=None if self.target.create_time is None else now - self.target.create_time,
            rules=self.rules,
        )

    def _adopt(self, tree: TreeSnapshot, departed: dict[Identity, ProbeRead]) -> None:
        """Keep, marked exited, the processes of ``departed`` the last poll did not see: children of
        the tree that ran the probe and exited before the first poll (SegmentSource._exited_before),
        known by their final publish alone."""
        seen = {pf.pid for pf in self._last_alive}
        depth = {p.pid: p.depth for p in tree.processes}
        for ident, read in departed.items():
            payload = read.payload
            if ident[0] in seen or payload is None:
                continue
            argv0 = payload.argv0 or "?"
            info = ProcInfo(
                ident[0],
                payload.ppid,
                ident[1],
                None,
                argv0.rsplit("/", 1)[-1],
                (),
                None,
                None,
                (depth.get(payload.ppid, 0) if payload.ppid is not None else 0) + 1,
            )
            pf = process_facts(info, read, (), self.target_pid)
            self._exited[_exit_key(pf, ident)] = replace(pf, exited=True)
            self._exited_info[info.pid] = info

    def _depart(self, here: set[int], departed: dict[Identity, ProbeRead], every: bool) -> None:
        """Keep the last facts of the last poll's processes that have left the tree (``here``: the
        tree's pids now), marked exited and with no GPU rows (the driver no longer lists them), from
        their final publish when the segment source read it. While the job runs, only processes
        that ran the probe are kept, a DataLoader worker only as the newest of its loader's worker
        id (workers of each epoch replace those of the last), at most MAX_EXITED_KEPT, the newest;
        when the job ends, also the target and any process that used a GPU or whose probe could not
        be read, but no unprobed helper (a resource tracker, a launcher's agent: _kept_at_the_end)."""
        for pf in self._last_alive:
            if pf.pid in here:
                continue
            info = self.proc_info.get(pf.pid)
            ident: Identity = info.identity if info is not None else (pf.pid, None)
            read = departed.get(ident)
            if read is not None and info is not None:
                pf = process_facts(info, read, (), self.target_pid)
            key = _exit_key(pf, ident)
            kept = self._exited.get(key)
            if (kept is not None and kept.pid == pf.pid) or not (
                pf.has_probe or (every and _kept_at_the_end(pf))
            ):
                continue
            if kept is not None:  # an earlier epoch's worker: this one stands for it, the newest
                del self._exited[key]
            self._exited[key] = replace(pf, gpu=(), exited=True)
            if info is not None:
                self._exited_info[pf.pid] = info
        while not every and len(self._exited) > MAX_EXITED_KEPT:
            self._exited_info.pop(self._exited.pop(next(iter(self._exited))).pid, None)

    def _pid_namespace_suspect(
        self, nvml: NvmlReading, nv: NvmlFacts, tree_pids: set[int], procs: tuple[ProcessFacts, ...]
    ) -> bool:
        """NVML lists processes, none of them ours, while our probes hold CUDA memory, and none of
        NVML's pids exists here: the sidecar runs in another PID namespace than the job."""
        return bool(
            nvml.ok
            and nv.pids
            and nv.pids.isdisjoint(tree_pids)
            and any((p.cuda_memory_mib or 0) > 0 for p in procs)
            and not any(self.pid_visible(pid) for pid in nv.pids)
        )

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

    def _process_facts(
        self, tree: TreeSnapshot, reads: dict[int, ProbeRead], by_pid: dict[int, list[ProcGpu]]
    ) -> tuple[ProcessFacts, ...]:
        """ProcessFacts of each process, reused from the last poll when nothing it is made of changed
        (same probe read object, same place in the tree and command line, same NVML rows): most processes of a big
        tree, most polls. When only its NVML rows changed (a GPU's per-process samples), the last
        poll's facts with the new rows and what comes from the process itself (_with_gpu)."""
        cache: dict[int, _Cached] = self._cache
        fresh: dict[int, _Cached] = {}
        out = []
        target = self.target_pid
        for p in tree.processes:
            pid = p.pid
            read = reads.get(pid)
            rows = by_pid.get(pid)
            gpu = tuple(rows) if rows else ()
            place = (p.start_ticks, p.ppid, p.depth, p.name, p.cmdline)  # the command line: an exec
            hit = cache.get(pid)
            if hit is None or hit[0] is not read or hit[1] != place:
                pf = process_facts(p, read, gpu, target)
            elif hit[2].gpu == gpu:
                pf = hit[2]
            else:
                pf = _with_gpu(hit[2], p, gpu, target)
            fresh[pid] = (read, place, pf)
            out.append(pf)
        self._cache = fresh
        last = self._last_alive  # the last poll's: the same tuple again when each is the same object
        return last if len(out) == len(last) and all(map(is_, out, last)) else tuple(out)


# ProcessFacts' fields as its __init__ takes them (a test sees that it takes them all in order), and
# where those that come from the process itself and NVML are (_with_gpu).
_PF_FIELDS = tuple(f.name for f in fields(ProcessFacts) if f.init)
_pf_values = attrgetter(*_PF_FIELDS)
_PF_AT = {name: _PF_FIELDS.index(name) for name in ("pid", "ppid", "depth", "name", "is_target", "gpu")}
_PF_MP_AT = (_PF_FIELDS.index("mp_helper"), _PF_FIELDS.index("mp_child"))


def _with_gpu(pf: ProcessFacts, proc: ProcInfo, gpu: tuple[ProcGpu, ...], target_pid: int) -> ProcessFacts:
    """process_facts(proc, read, gpu, target_pid) given ``pf``, process_facts of the same read:
    ``pf``'s values of the payload, the process's own values (as process_facts takes them) and
    ``gpu``. A third of the cost: a payload's values are the most of it."""
    values = list(_pf_values(pf))
    at = _PF_AT
    values[at["pid"]] = proc.pid
    values[at["ppid"]] = proc.ppid
    values[at["depth"]] = proc.depth
    values[at["name"]] = clip(proc.name) if isinstance(proc.name, str) else proc.name
    values[at["is_target"]] = proc.pid == target_pid
    values[_PF_MP_AT[0]], values[_PF_MP_AT[1]] = _mp_flags_of(getattr(proc, "cmdline", None))
    values[at["gpu"]] = gpu
    return ProcessFacts(*values)


def _kept_at_the_end(pf: ProcessFacts) -> bool:
    """Whether a process without a probe's facts stays in the job's final state: the target (what
    was watched), one that used a GPU (what it held says what ran), one whose probe could not be
    read (a probe ran there). Helpers with nothing of their own to tell (multiprocessing's resource
    tracker, torchrun's agent under a launcher script) would stand there with no role."""
    return pf.is_target or bool(pf.gpu) or pf.probe_state != "missing"


def _exit_key(pf: ProcessFacts, ident: Identity) -> ExitKey:
    """What an exited process is kept under: its identity; a DataLoader worker, its parent, loader
    and worker id (a worker of the next epoch stands for the one before)."""
    if pf.role == "dataloader-worker":
        return ("worker", pf.ppid, pf.loader, pf.worker_id)
    return ident
