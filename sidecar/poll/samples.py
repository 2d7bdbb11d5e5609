"""Facts -> one poll's history sample: per GPU, per GPU process of the tree, and the job's sums
that the charts show and the verdict's windowed rules read back (Facts.recent)."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from operator import attrgetter, is_

from sidecar.common.memo import for_the_same_objects
from sidecar.common.runs import MinuteFigures
from sidecar.poll.history import GPU_COLUMNS, Sample, pack
from sidecar.sources.proctree import ProcInfo
from sidecar.verdict import (
    ACCELERATOR_TYPES,
    VENDOR_NVIDIA,
    Facts,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    device_type,
    primary_model_gpu_index,
)
from sidecar.verdict.stragglers import straggler_candidate


def _process_sm_util(gpu: tuple[ProcGpu, ...]) -> float | None:
    """A GPU process's SM utilisation summed over its GPUs' samples (None: no sample)."""
    if len(gpu) == 1:  # one GPU (most processes): what sum() of its one sample gives
        sm = gpu[0].sm_util
        return sm if sm is None else 0 + sm
    sms = [g.sm_util for g in gpu if g.sm_util is not None]
    return sum(sms) if sms else None


# (forward calls, steps, forward rate, step rate) of processes' models
ModelSums = tuple[int, int | None, float | None, float | None]
ProcessRow = tuple[int, float, float | None]  # a GPU process's pid, memory (MiB) and SM utilisation (%)
# history_sample's part made of the processes alone: their rows, SM and memory sums, and ModelSums
ProcessPart = tuple[
    tuple[ProcessRow, ...], float | None, float | None, int, int | None, float | None, float | None
]


def _add_model_sums(
    models: tuple[ModelFacts, ...], calls: int, steps: int | None, fwd: float | None, step_rate: float | None
) -> ModelSums:
    """The history's model sums with one process's models added, in their order: forward calls and
    training steps of the models on an accelerator, forward and step rates of all."""
    for m in models:
        # A model split over devices ("mixed") counts when some of it is on an accelerator.
        if device_type(m.device) in ACCELERATOR_TYPES or any(
            device_type(d) in ACCELERATOR_TYPES for d in m.devices
        ):
            calls += m.forward_calls
            if m.train_steps is not None:
                steps = (steps or 0) + m.train_steps
        if m.forward_rate_hz is not None:
            fwd = (fwd or 0.0) + m.forward_rate_hz
        if m.step_rate_hz is not None:
            step_rate = (step_rate or 0.0) + m.step_rate_hz
    return calls, steps, fwd, step_rate


class SampleMemo:
    """`last`: one poller's last processes' facts, history_sample's rows and sums of them and the
    rows packed: the same again while each process's facts are the very same object (FactCollector
    reuses them). `job`: the processes, their ProcInfo by pid and the job's CPU and RSS sums of
    them: the same again for those very objects (the collector keeps both while nothing changed)."""

    __slots__ = ("job", "last")

    def __init__(self) -> None:
        self.last: tuple[tuple[ProcessFacts, ...], ProcessPart, array[float]] | None = None
        self.job: (
            tuple[tuple[ProcessFacts, ...], Mapping[int, ProcInfo], tuple[float | None, float | None]] | None
        ) = None


def _process_part(processes: tuple[ProcessFacts, ...]) -> ProcessPart:
    """(GPU rows, SM, memory, forward calls, steps, forward rate, step rate) of the processes. The SM
    sum is None where an AMD or Intel row's utilisation is unknown (ProcGpu.unknown_reason: a first
    reading, no engine counters, ROCm's compute): the rest's sum is a floor, which idle-gpu would
    read as the job's whole use (a job that starts on a second Intel GPU, its first reading unknown,
    read as the first one's idle 0). NVML's rows without a figure are its "no recent sample": idle
    (history_sample)."""
    proc_rows: list[ProcessRow] = []
    partial = False
    sm_total: float | None = None
    mem_total: float | None = None
    calls = 0
    steps: int | None = None
    fwd: float | None = None
    step_rate: float | None = None
    for p in processes:
        gpu = p.gpu
        if gpu:
            sm = _process_sm_util(gpu)
            mem = p.gpu_mem_mib
            proc_rows.append((p.pid, mem, sm))
            mem_total = (mem_total or 0.0) + mem
            if sm is not None:
                sm_total = (sm_total or 0.0) + sm
            partial = partial or any(g.sm_util is None and g.vendor != VENDOR_NVIDIA for g in gpu)
        if p.models:
            calls, steps, fwd, step_rate = _add_model_sums(p.models, calls, steps, fwd, step_rate)
    return tuple(proc_rows), None if partial else sm_total, mem_total, calls, steps, fwd, step_rate


def history_sample(
    now: float, facts: Facts, proc_info: Mapping[int, ProcInfo] | None = None, memo: SampleMemo | None = None
) -> Sample:
    """What one poll adds to the history: per GPU, per GPU process of the tree, the job's sums
    (history.JOB_COLUMNS: its CPU, RSS and rates, what the charts show without a GPU), and the sums
    the verdict's windowed rules (idle GPU, memory growth) read back. Each sum adds in the
    processes' order. ``memo``: the caller's SampleMemo, kept between its polls."""
    procs = facts.processes
    hit = None if memo is None else memo.last
    if hit is not None and len(hit[0]) == len(procs) and all(map(is_, hit[0], procs)):
        part, packed = hit[1], hit[2]
    else:
        part = _process_part(procs)
        packed = pack(part[0])
        if memo is not None:
            memo.last = (procs, part, packed)
    proc_rows, sm_total, mem_total, calls, steps, fwd, step_rate = part
    cpu, rss = _job_sums(procs, proc_info, memo)
    # AMD and Intel GPUs (after NVML's: poll/vendor_gpus.py) give the rows' memory without NVML.
    other_vendors = bool(facts.gpus) and facts.gpus[-1].vendor != VENDOR_NVIDIA
    if (
        facts.nvml_ok
        and sm_total is None
        and proc_rows
        and not any(g.mig_mode for g in facts.gpus)
        and not (other_vendors and any(g.vendor != VENDOR_NVIDIA for p in procs for g in p.gpu))
    ):
        # Processes listed, no utilisation samples: NVML's NOT_FOUND means idle. Not on MIG, where
        # per-process utilisation does not exist at all (unknown, not idle), nor for another
        # vendor's rows, whose None says why it is unknown (ProcGpu.unknown_reason).
        sm_total = 0.0
    model_gpu = primary_model_gpu_index(facts)
    util = None
    for g in facts.gpus:
        if g.index == model_gpu:
            util = g.util
            break
    slow = straggler_candidate(facts)
    straggler = None if slow is None else (slow.rank, slow.cause)
    mem_known = facts.nvml_ok or other_vendors
    recent = RecentSample(now, sm_total, mem_total if mem_known else None, calls, util, steps, straggler)
    return Sample(
        time=now,
        gpus=packed_gpu_rows(facts.gpus),
        processes=packed,
        recent=recent,
        job=(cpu, rss, fwd, step_rate),
    )


def _job_sums(
    procs: tuple[ProcessFacts, ...], proc_info: Mapping[int, ProcInfo] | None, memo: SampleMemo | None
) -> tuple[float | None, float | None]:
    """The job's CPU share and RSS: its processes' ProcInfo's, summed in the processes' order."""
    job = None if memo is None else memo.job
    if job is not None and job[0] is procs and job[1] is proc_info:
        return job[2]
    cpu = rss = None
    if proc_info:
        for info in map(proc_info.get, (p.pid for p in procs)):
            if info is not None:
                if info.cpu_percent is not None:
                    cpu = (cpu or 0.0) + info.cpu_percent
                if info.rss_mib is not None:
                    rss = (rss or 0.0) + info.rss_mib
    if memo is not None and proc_info is not None:
        memo.job = (procs, proc_info, (cpu, rss))
    return cpu, rss


# A GpuFacts' values behind history.GPU_COLUMNS, in that order.
_GPU_ROW = attrgetter("index", "util", "mem_used_mib", *GPU_COLUMNS[3:])


@for_the_same_objects  # discovery gives its jobs one GpuFacts tuple a poll: their samples share the rows
def packed_gpu_rows(gpus: tuple[GpuFacts, ...]) -> array[float]:
    """history.GPU_COLUMNS of each GPU, packed (history.pack)."""
    return pack(tuple(map(_GPU_ROW, gpus)))


def recorded_sample(m: MinuteFigures, gpu_indices: tuple[int, ...], now: float) -> Sample:
    """A minute the runs ledger kept of the run, as a history point (Sample.recorded) at the
    minute's middle (the current minute, recorded in part before this sidecar's first poll at
    ``now``: the middle of what of it had passed): its means (the step rate, CPU, RSS), and on each of the job's GPUs
    ``gpu_indices`` its GPU means (utilisation, activity, SM clock, temperature) with its memory and
    power shared evenly (a minute keeps the job's sums, not each GPU's). No process rows."""
    time = min(m.start_unix_s + m.span_s / 2, (m.start_unix_s + now) / 2)
    n = len(gpu_indices)
    mem = None if m.gpu_mem_used_mib is None or not n else m.gpu_mem_used_mib / n
    power = None if m.power_w is None or not n else m.power_w / n
    rows = [
        (
            i,
            m.gpu_util_pct,
            mem,
            m.sm_activity_fraction,
            None,
            m.tensor_activity_fraction,
            m.sm_clock_mhz,
            power,
            m.temperature_c,
        )
        for i in gpu_indices
    ]
    recent = RecentSample(time, None, None, 0, None)  # never read: History keeps recorded samples apart
    return Sample(time, rows, (), recent, job=(m.cpu_pct, m.rss_mib, None, m.step_rate_hz), recorded=True)
