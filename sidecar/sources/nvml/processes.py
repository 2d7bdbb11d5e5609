"""A GPU's processes: the compute and graphics lists, and each process's utilisation samples.

Per-process utilisation: NVML returns samples only for processes that used the GPU since the
timestamp we pass, and NOT_FOUND when there are none. NOT_FOUND therefore means idle, so a process in
the running list without a sample gets `sm_util = mem_util = 0`. A sample counts if it arrived in this
poll or is at most `hold_s` old: polling faster than the driver's sample period (1/6 s to 1 s) then
repeats the last value instead of flapping to 0. The values are None only when the query itself fails
(NOT_SUPPORTED, e.g. under MIG). Samples over 100 % (which drivers occasionally emit) are dropped.
"""

from __future__ import annotations

from sidecar.sources.nvml._lib import (
    MIB,
    NO_INSTANCE_ID,
    FunctionNotFound,
    GpuLost,
    NotFound,
    NvmlError,
    call,
)
from sidecar.sources.nvml.direct import NOT_AVAILABLE, PROCESS_LISTS, process_samples
from sidecar.sources.nvml.query import DeviceQuery
from sidecar.sources.nvml.snapshot import GpuProcess


def running(q: DeviceQuery) -> list[GpuProcess]:
    """The compute and graphics lists as one row per process; raises GpuLost when lost."""
    st = q.state
    by_pid: dict[int, GpuProcess] = {}
    for kind in ("compute", "graphics"):
        fn = PROCESS_LISTS[kind, st.procs_v3]
        try:
            entries = q.attempt("processes", fn, st.handle, st.lists[kind])
        except FunctionNotFound:
            if not st.procs_v3:
                entries = None
            else:
                # A driver before 510: the same 24-byte entries under the _v2 name.
                st.procs_v3 = False
                q.errors.pop("processes", None)
                q.recorder.call_errors.pop(fn.__name__, None)
                entries = q.get("processes", PROCESS_LISTS[kind, False], st.handle, st.lists[kind])
        except GpuLost:
            raise
        except NvmlError:
            entries = None
        types = (kind,)
        for pid, used, gi, ci in entries or ():
            used_mib = None if used == NOT_AVAILABLE else used / MIB
            known = by_pid.get(pid)
            if known is None:
                gi = None if gi == NO_INSTANCE_ID else gi
                by_pid[pid] = GpuProcess(pid, used_mib, None, None, types, gi, None if ci == NO_INSTANCE_ID else ci)
            else:
                # A process with both contexts is listed twice; keep one row with both types.
                known.types = (*known.types, kind)
                if known.used_mib is None:
                    known.used_mib = used_mib
    return list(by_pid.values())


def utilisation(q: DeviceQuery, processes: list[GpuProcess], hold_s: float) -> None:
    """Each listed process's SM and memory utilisation from the samples since the last poll."""
    st = q.state
    try:
        samples = call(process_samples, st.handle, st.lists["samples"], st.last_seen_us)
    except NotFound:
        samples = None  # no new samples: nobody used the GPU since last time (where NOT_FOUND is raised)
    except NvmlError as err:
        q.record(err, "process_utilization")
        if isinstance(err, GpuLost):
            raise
        return  # unsupported or failed: the processes keep sm_util None (unknown)
    kept = st.samples
    last_seen_us = st.last_seen_us
    fresh: set[int] = set()
    for pid, stamp, sm, mem, _enc, _dec in samples or ():
        if stamp > last_seen_us:
            last_seen_us = stamp
        if sm > 100 or mem > 100:
            continue  # garbage some drivers emit for a context's first sample
        previous = kept.get(pid)
        if previous is None or stamp >= previous[0]:
            kept[pid] = (stamp, sm, mem)
            fresh.add(pid)
    st.last_seen_us = last_seen_us
    held_since_us = q.now_us - int(hold_s * 1_000_000)
    with_sample = 0  # listed processes with a kept sample (a process is listed once)
    for p in processes:
        sample = kept.get(p.pid)
        if sample is None:
            p.sm_util, p.mem_util = 0, 0
            continue
        with_sample += 1
        if sample[0] >= held_since_us or p.pid in fresh:
            p.sm_util, p.mem_util = sample[1], sample[2]
        else:
            p.sm_util, p.mem_util = 0, 0
    if with_sample == len(kept):
        return  # every kept sample belongs to a listed process: none to forget
    listed = {p.pid for p in processes}
    for pid in [pid for pid in kept if pid not in listed]:
        del kept[pid]  # gone from the GPU; a reused pid must not inherit its numbers
