"""sidecar/poll/collect.py as it was before its facts and samples were made faster (commit 9a54028), with
history.pack and history.Sample's packing as they were then: the oracle that
tests/unit/test_collect_oracle.py and benchmarks/collect_parts.py hold the new code to. Kept verbatim
but for this docstring, the old `pack` and `Sample` at the end, and the model's `data_wait_batches`
(a field added since, read as the new code reads it); never imported by the sidecar.

Original docstring: Sources → facts: the one place where what the sources read becomes the verdict's
facts.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace
from functools import lru_cache
from operator import attrgetter
from typing import Any

from probe_wire.schema import MODEL_COLLECTED, PUBLISH_FAILED
from sidecar.common.memo import for_the_same_objects
from sidecar.common.nvml_names import GPU_EFFICIENCY_FIELDS
from sidecar.documents import bounds
from sidecar.documents.bounds import MAX_ID_CHARS, clip, clip_opt
from sidecar.poll.history import GPU_COLUMNS, Sample, pack
from sidecar.sources.lineage import PYTHON_C_ARGS, RootInfo, is_mp_child, is_mp_helper
from sidecar.verdict import (
    ACCELERATOR_TYPES,
    Facts,
    GpuFacts,
    LoaderSettings,
    MathSettings,
    MigFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    Rules,
    StepBreakdown,
    SystemGpuFacts,
    device_type,
    primary_model_gpu_index,
)

MIB = 1048576.0
# Process states (/proc/PID/stat field 3) of a process that does nothing until it is continued.
STOPPED_STATES = ("T", "t")


# ---------------------------------------------------------------------------------------------
# A probe payload → facts (values from a process: typed and clipped here, sidecar/documents/bounds.py)
# ---------------------------------------------------------------------------------------------
def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    return float(x) if isinstance(x, int | float) else None


def _str(x: Any, limit: int = bounds.MAX_TEXT_CHARS) -> str | None:
    """A string from a process, clipped (sidecar/documents/bounds.py); anything else None."""
    # Most strings are short: returned without the two calls of clip_opt (a poll makes hundreds).
    return x if type(x) is str and len(x) <= limit else clip_opt(x, limit)


def _bool(x: Any) -> bool | None:
    return x if isinstance(x, bool) else None


def _fraction(x: Any) -> float | None:
    """A share from a process: finite (the payload's schema saw to that), clamped into 0-1."""
    v = _float(x)
    return None if v is None else min(1.0, max(0.0, v))


def _nonnegative(x: Any) -> float | None:
    v = _float(x)
    return None if v is None else max(0.0, v)


def _names(x: Any) -> tuple[str, ...]:
    return tuple(clip(v, MAX_ID_CHARS) for v in x if isinstance(v, str)) if isinstance(x, list) else ()


def _shape(x: Any) -> tuple[int, ...] | None:
    return tuple(v for v in x if _int(v) is not None) if isinstance(x, list) else None


def _loader_settings(x: Any) -> LoaderSettings | None:
    if not isinstance(x, dict):
        return None
    return LoaderSettings(
        num_workers=_int(x.get("num_workers")),
        pin_memory=_bool(x.get("pin_memory")),
        persistent_workers=_bool(x.get("persistent_workers")),
        batch_size=_int(x.get("batch_size")),
        prefetch_factor=_int(x.get("prefetch_factor")),
    )


def step_breakdown(x: Any) -> StepBreakdown | None:
    if not isinstance(x, dict) or _float(x.get("window_s")) is None or _int(x.get("steps")) is None:
        return None
    step_s = _float(x.get("step_s"))
    return StepBreakdown(
        window_s=max(0.0, x["window_s"]),
        steps=max(0, x["steps"]),
        step_s=None if step_s is None else max(0.0, step_s),
        data_wait_fraction=_fraction(x.get("data_wait_fraction")),
        forward_fraction=_fraction(x.get("forward_fraction")),
        optimizer_fraction=_fraction(x.get("optimizer_fraction")),
        other_fraction=_fraction(x.get("other_fraction")),
    )


def math_settings(x: Any) -> MathSettings | None:
    if not isinstance(x, dict):
        return None
    return MathSettings(
        allow_tf32_matmul=_bool(x.get("allow_tf32_matmul")),
        cudnn_allow_tf32=_bool(x.get("cudnn_allow_tf32")),
        float32_matmul_precision=_str(x.get("float32_matmul_precision"), MAX_ID_CHARS),
        cudnn_benchmark=_bool(x.get("cudnn_benchmark")),
    )


def models_from_payload(payload: dict[str, Any]) -> tuple[ModelFacts, ...]:
    out = []
    for m in payload.get("models") or ():
        if not isinstance(m, dict):
            continue
        devices = m.get("devices")
        kinds = (
            list(dict.fromkeys(d for d in devices if isinstance(d, str))) if isinstance(devices, list) else []
        )
        out.append(
            ModelFacts(
                name=_str(m.get("name")) or _str(m.get("class")) or "model",
                device=_str(m.get("device"), MAX_ID_CHARS),
                devices=tuple(clip(d, MAX_ID_CHARS) for d in kinds[: bounds.MAX_DEVICES_SHOWN]),
                params=_int(m.get("params")),
                input_device=_str(m.get("input_device"), MAX_ID_CHARS),
                forward_calls=_int(m.get("forward_calls")) or 0,
                forward_rate_hz=_float(m.get("forward_rate_hz")),
                data_wait_fraction=_float(m.get("data_wait_fraction")),
                train_steps=_int(m.get("train_steps")),
                step_rate_hz=_float(m.get("step_rate_hz")),
                step_source=_str(m.get("step_source")),
                shared_memory=_bool(m.get("shared_memory")),
                param_dtypes=_names(m.get("param_dtypes")),
                autocast=_str(m.get("autocast"), MAX_ID_CHARS),
                input_shape=_shape(m.get("input_shape")),
                loader_settings=_loader_settings(m.get("loader_settings")),
                data_wait_batches=None if (n := _int(m.get("data_wait_batches"))) is None else max(0, n),
            )
        )
    return tuple(out)


def cuda_reserved_mib(payload: dict[str, Any]) -> float | None:
    """What the process's CUDA caching allocator holds, summed over its devices (exact: bytes / MiB)."""
    total = None
    for m in payload.get("memory") or ():
        if isinstance(m, dict) and _int(m.get("reserved_bytes")) is not None:
            total = (total or 0.0) + m["reserved_bytes"] / MIB
    return total


def publish_failure(payload: dict[str, Any]) -> str | None:
    """The message of a fallback payload (probe_wire.schema.PUBLISH_FAILED), else None."""
    errors = payload.get("errors")
    last = errors[-1] if isinstance(errors, list) and errors else None
    if isinstance(last, dict) and last.get("where") == PUBLISH_FAILED:
        return _str(last.get("message")) or "unknown error"
    return None


def collected_models(payload: dict[str, Any]) -> tuple[str, ...]:
    errors = payload.get("errors")
    if not isinstance(errors, list):
        return ()
    names = (_str(e.get("message")) for e in errors if isinstance(e, dict) and e.get("where") == MODEL_COLLECTED)
    return tuple(sorted({n for n in names if n}))[: bounds.MAX_MODELS_SHOWN]


# A cached command line's first arguments, in characters at most: the cache outlives the processes,
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


def process_facts(proc, read, gpu: tuple[ProcGpu, ...], target_pid: int) -> ProcessFacts:
    """`proc` is a proctree.ProcInfo, `read` a segments.ProbeRead or None."""
    payload = read.payload if read is not None else None
    runtime = payload.get("runtime") if payload and isinstance(payload.get("runtime"), dict) else None
    cmdline = getattr(proc, "cmdline", None)
    mp_flags = _mp_flags_of(cmdline)
    p = payload or {}
    return ProcessFacts(
        pid=proc.pid,
        ppid=proc.ppid,
        depth=proc.depth,
        name=clip(proc.name) if isinstance(proc.name, str) else proc.name,
        is_target=proc.pid == target_pid,
        probe_state=read.state if read is not None else "missing",
        probe_error=_str(read.error) if read is not None else None,
        probe_unreadable=bool(read and read.unreadable),
        role=_str(p.get("role"), MAX_ID_CHARS),
        worker_id=_int(p.get("worker_id")),
        rank=_int(p.get("rank")),
        local_rank=_int(p.get("local_rank")),
        world_size=_int(p.get("world_size")),
        dist_backend=_str(p.get("dist_backend"), MAX_ID_CHARS),
        loader=_str(p.get("loader"), MAX_ID_CHARS),
        mp_helper=mp_flags[0],
        mp_child=mp_flags[1],
        publish_failure=publish_failure(payload) if payload else None,
        collected_models=collected_models(payload) if payload else (),
        runtime=runtime,
        cuda_memory_mib=cuda_reserved_mib(payload) if payload else None,
        models=models_from_payload(payload) if payload else (),
        gpu=gpu,
        steps=step_breakdown(p.get("steps")),
        math=math_settings(p.get("math")),
        syncs_per_step=_nonnegative(p.get("syncs_per_step")),
    )


# ---------------------------------------------------------------------------------------------
# NVML and the OS's graphics devices → facts
# ---------------------------------------------------------------------------------------------
def gpu_facts(d) -> GpuFacts:
    """An NVML device (sources.nvml.GpuInfo) as the verdict sees it."""
    return GpuFacts(
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
        **{name: getattr(d, name, None) for name in GPU_EFFICIENCY_FIELDS},
        mig_devices=tuple(
            MigFacts(m.index, m.uuid, m.gpu_instance_id, m.compute_instance_id, m.mem_used_mib, m.mem_total_mib)
            for m in getattr(d, "mig_devices", ())
        ),
    )


@dataclass
class NvmlFacts:
    """One NVML snapshot split by the job's tree: its GPUs, the tree's rows per pid, and how many
    processes outside the tree each GPU runs."""

    gpus: tuple[GpuFacts, ...] = ()
    by_pid: dict[int, list[ProcGpu]] = field(default_factory=dict)
    other_processes: dict[int, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)  # every pid NVML listed


def nvml_facts(nvml, tree_pids: set[int], gpus: tuple[GpuFacts, ...] | None = None) -> NvmlFacts:
    """``gpus``: the snapshot's devices as facts when the caller made them already (discovery makes
    them once per poll for all its jobs)."""
    out = NvmlFacts()
    made = []
    for d in nvml.devices if nvml.ok else ():
        if gpus is None:
            made.append(gpu_facts(d))
        for gp in d.processes:
            out.pids.add(gp.pid)
            if gp.pid in tree_pids:
                out.by_pid.setdefault(gp.pid, []).append(
                    ProcGpu(d.index, gp.used_mib, gp.sm_util, getattr(gp, "mig_index", None))
                )
            else:
                out.other_processes[d.index] = out.other_processes.get(d.index, 0) + 1
    out.gpus = tuple(made) if gpus is None else gpus
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


@for_the_same_objects  # discovery's jobs share one poll's devices
def system_gpu_facts(system_gpus, gpus: tuple[GpuFacts, ...]) -> tuple[SystemGpuFacts, ...]:
    """Match OS graphics devices to NVML devices by PCI address."""
    by_pci = {_norm_pci(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    return tuple(
        SystemGpuFacts(vendor=s.vendor, name=s.name, pci=s.pci, driver=s.driver, nvml_index=by_pci.get(_norm_pci(s.pci)))
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


class FactCollector:
    """Builds each poll's `Facts`. Not thread-safe: the poller runs one poll at a time."""

    def __init__(self, target_pid: int, rules: Rules, pid_visible, root_info=None):
        self.target_pid = target_pid
        self.rules = rules
        self.pid_visible = pid_visible  # sources.proctree.pid_visible (a /proc lookup)
        self.root_info = root_info  # sources.lineage.root_info (a few /proc reads, once per job)
        self.target = TargetInfo(target_pid)
        self.proc_info: dict[int, Any] = {}  # pid -> proctree.ProcInfo of the facts' processes
        self.other_processes: dict[int, int] = {}  # GPU index -> processes outside the tree
        self._last_alive: tuple[ProcessFacts, ...] = ()
        self._cache: dict[int, tuple] = {}
        self._stopped_since: dict[tuple, float] = {}

    def facts(self, now: float, tree, reads, nvml, system_gpus, gpus: tuple[GpuFacts, ...] | None = None) -> Facts:
        nv = nvml_facts(nvml, tree.pids(), gpus)
        if tree.target_alive:
            procs = self._process_facts(tree, reads, nv.by_pid)
            self._last_alive, self.proc_info = procs, {p.pid: p for p in tree.processes}
            root = tree.processes[0] if tree.processes else None
            if root is not None and self.target.name is None:
                info = self.root_info(root.pid) if self.root_info is not None else None
                self.target = TargetInfo(
                    root.pid, root.name, list(root.cmdline), root.create_time, root.start_ticks, info
                )
        else:
            # Keep showing what the job was doing; the driver no longer sees its processes.
            procs = tuple(replace(p, gpu=()) for p in self._last_alive)
        self.other_processes = nv.other_processes
        return Facts(
            target_pid=self.target_pid,
            target_alive=tree.target_alive,
            processes=procs,
            nvml_ok=bool(nvml.ok),
            nvml_error=nvml.error,
            driver=getattr(nvml, "driver", None),
            cuda_driver=getattr(nvml, "cuda_driver", None),
            gpus=nv.gpus,
            system_gpus=system_gpu_facts(system_gpus, nv.gpus),
            pid_namespace_suspect=self._pid_namespace_suspect(nvml, nv, tree, procs),
            stopped=self._stopped(now, tree),
            rules=self.rules,
        )

    def _pid_namespace_suspect(self, nvml, nv: NvmlFacts, tree, procs) -> bool:
        """NVML lists processes, none of them ours, while our probes hold CUDA memory, and none of
        NVML's pids exists here: the sidecar runs in another PID namespace than the job."""
        return bool(
            nvml.ok
            and nv.pids
            and not (nv.pids & tree.pids())
            and any((p.cuda_memory_mib or 0) > 0 for p in procs)
            and not any(self.pid_visible(pid) for pid in nv.pids)
        )

    def _stopped(self, now: float, tree) -> tuple[tuple[int, float], ...]:
        """(pid, seconds since this sidecar first saw it stopped) of each stopped process of the
        tree. The kernel keeps no time of the stop, so a job found stopped counts from then."""
        since, self._stopped_since = self._stopped_since, {}
        out = []
        for p in tree.processes if tree.target_alive else ():
            if p.state in STOPPED_STATES:
                self._stopped_since[p.identity] = t = since.get(p.identity, now)
                out.append((p.pid, now - t))
        return tuple(out)

    def _process_facts(self, tree, reads, by_pid) -> tuple[ProcessFacts, ...]:
        """ProcessFacts of each process, reused from the last poll when nothing it is made of changed
        (same probe read object, same place in the tree, same NVML rows): most processes of a big
        tree, most polls."""
        cache, fresh = self._cache, {}
        out = []
        for p in tree.processes:
            read = reads.get(p.pid)
            gpu = tuple(by_pid.get(p.pid, ()))
            place = (p.start_ticks, p.ppid, p.depth, p.name)
            hit = cache.get(p.pid)
            if hit is not None and hit[0] is read and hit[1] == place and hit[2].gpu == gpu:
                pf = hit[2]
            else:
                pf = process_facts(p, read, gpu, self.target_pid)
            fresh[p.pid] = (read, place, pf)
            out.append(pf)
        self._cache = fresh
        return tuple(out)


def _job_sums(facts: Facts, proc_info: dict[int, Any] | None) -> tuple[float | None, ...]:
    """history.JOB_COLUMNS: the job's CPU, RSS and rates (what the charts show without a GPU)."""
    cpu = rss = fwd = steps = None
    for p in facts.processes:
        info = proc_info.get(p.pid) if proc_info else None
        if info is not None and info.cpu_percent is not None:
            cpu = (cpu or 0.0) + info.cpu_percent
        if info is not None and info.rss_mib is not None:
            rss = (rss or 0.0) + info.rss_mib
        for m in p.models:
            if m.forward_rate_hz is not None:
                fwd = (fwd or 0.0) + m.forward_rate_hz
            if m.step_rate_hz is not None:
                steps = (steps or 0.0) + m.step_rate_hz
    return cpu, rss, fwd, steps


def history_sample(now: float, facts: Facts, proc_info: dict[int, Any] | None = None) -> Sample:
    """What one poll adds to the history: per GPU, per GPU process of the tree, the job's sums, and
    the sums the verdict's windowed rules (idle GPU, memory growth) read back."""
    proc_rows = []
    sm_total = mem_total = None
    calls = 0
    steps = None
    for p in facts.processes:
        if p.gpu:
            sms = [g.sm_util for g in p.gpu if g.sm_util is not None]
            sm = sum(sms) if sms else None
            proc_rows.append((p.pid, p.gpu_mem_mib, sm))
            mem_total = (mem_total or 0.0) + p.gpu_mem_mib
            if sm is not None:
                sm_total = (sm_total or 0.0) + sm
        for m in p.models:
            if device_type(m.device) in ACCELERATOR_TYPES or any(device_type(d) == "cuda" for d in m.devices):
                calls += m.forward_calls
                if m.train_steps is not None:
                    steps = (steps or 0) + m.train_steps
    if facts.nvml_ok and sm_total is None and proc_rows and not any(g.mig_mode for g in facts.gpus):
        # Processes listed, no utilisation samples: NVML's NOT_FOUND means idle. Not on MIG, where
        # per-process utilisation does not exist at all (unknown, not idle).
        sm_total = 0.0
    model_gpu = primary_model_gpu_index(facts)
    g = next((g for g in facts.gpus if g.index == model_gpu), None)
    recent = RecentSample(
        now, sm_total, mem_total if facts.nvml_ok else None, calls, g.util if g is not None else None, steps
    )
    return Sample(
        time=now,
        gpus=packed_gpu_rows(facts.gpus),
        processes=tuple(proc_rows),
        recent=recent,
        job=_job_sums(facts, proc_info),
    )


# A GpuFacts' values behind history.GPU_COLUMNS, in that order.
_GPU_ROW = attrgetter("index", "util", "mem_used_mib", *GPU_COLUMNS[3:])


@for_the_same_objects  # discovery gives its jobs one GpuFacts tuple a poll: their samples share the rows
def packed_gpu_rows(gpus: tuple[GpuFacts, ...]) -> array:
    """history.GPU_COLUMNS of each GPU, packed (history.pack)."""
    return pack(tuple(map(_GPU_ROW, gpus)))


# history.pack and history.Sample.__init__ as they were (sidecar/poll/history.py, commit 9a54028).
import math  # noqa: E402

from sidecar.poll import history as _history  # noqa: E402


def pack(rows: tuple[tuple[float | None, ...], ...]) -> array:  # noqa: F811
    return array("d", [_history._NAN if v is None or not math.isfinite(v) else v for row in rows for v in row])


class Sample(_history.Sample):  # noqa: F811
    __slots__ = ()

    def __init__(self, time, gpus, processes, recent, job=(None,) * len(_history.JOB_COLUMNS)):
        self.time = time
        self._gpus = gpus if isinstance(gpus, array) else pack(gpus)
        self._processes = pack(processes)
        self._job = pack((job,))
        self.recent = recent
