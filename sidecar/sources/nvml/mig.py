"""MIG (nvml.h, "Multi Instance GPU Management"): a MIG-enabled GPU's devices, their memory, and its
processes, each mapped to the MIG device it runs in. NVML reports no per-process utilisation there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecar.sources.nvml._lib import MIB, NO_INSTANCE_ID, NotFound, NvmlError, call, pynvml, text
from sidecar.sources.nvml.query import DeviceQuery
from sidecar.sources.nvml.snapshot import GpuInfo, GpuProcess, MigDevice

# MIG devices looked for per GPU at most (A100 and H100 split into 7; a driver's count past this is
# not believed).
MAX_MIG_DEVICES = 64
MIG_NO_PROCESS_UTILIZATION = "per-process utilisation is not available on a MIG-enabled GPU (NVML)"
# The parent's process lists, by the names their failures are recorded under.
_PARENT_LISTS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
)


@dataclass
class MigHandle:
    index: int
    handle: Any
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


def handles(q: DeviceQuery, errors: dict[str, str]) -> list[MigHandle]:
    """The MIG devices that exist now: NVML numbers them 0..max-1 with gaps (NOT_FOUND). Read with
    the rare queries; a GPU_IS_LOST here is the MIG field's failure (the MIG mode query decides)."""
    n = pynvml
    found = []
    count = q.reading("mig_devices", n.nvmlDeviceGetMaxMigDeviceCount, q.handle, into=errors)
    if count is not None and count > MAX_MIG_DEVICES:
        # A driver answering 0xFFFFFFFF would cost billions of calls a poll: the first ones only.
        errors["mig_devices"] = f"NVML reported {count} MIG devices at most; looked at the first {MAX_MIG_DEVICES}"
        count = MAX_MIG_DEVICES
    for k in range(count or 0):
        try:
            mh = call(n.nvmlDeviceGetMigDeviceHandleByIndex, q.handle, k)
        except NotFound:
            continue  # no MIG device at this index: an expected answer, recorded nowhere
        except NvmlError as err:
            q.record(err, "mig_devices", errors)
            continue
        uuid = text(q.reading("mig_devices", n.nvmlDeviceGetUUID, mh, into=errors))
        gi = q.reading("mig_devices", n.nvmlDeviceGetGpuInstanceId, mh, into=errors)
        ci = q.reading("mig_devices", n.nvmlDeviceGetComputeInstanceId, mh, into=errors)
        found.append(MigHandle(k, mh, uuid, gi, ci))
    return found


def devices(q: DeviceQuery, found: list[MigHandle]) -> None:
    """Memory of each MIG device, every poll (the handles and ids come from the rare queries)."""
    for mh in found:
        mem = q.get("mig_devices", pynvml.nvmlDeviceGetMemoryInfo, mh.handle)
        q.info.mig_devices.append(
            MigDevice(
                mh.index,
                mh.uuid,
                mh.gpu_instance_id,
                mh.compute_instance_id,
                mem.used / MIB if mem is not None else None,
                mem.total / MIB if mem is not None else None,
            )
        )


def _per_device_processes(q: DeviceQuery, found: list[MigHandle]) -> list[GpuProcess] | None:
    """Compute processes read per MIG device: the parent's aggregate list needs privileges (nvml.h).

    MIG has no graphics contexts, so the compute list is all there is. None when a list failed.
    """
    out: list[GpuProcess] = []
    for mh in found:
        entries = q.reading("processes", pynvml.nvmlDeviceGetComputeRunningProcesses, mh.handle, into={})
        if entries is None:
            return None
        for e in entries:
            used = e.usedGpuMemory
            process = GpuProcess(e.pid, used / MIB if used is not None else None, None, None, ("compute",))
            gi, ci = e.gpuInstanceId, e.computeInstanceId
            process.gpu_instance_id = mh.gpu_instance_id if gi == NO_INSTANCE_ID else gi
            process.compute_instance_id = mh.compute_instance_id if ci == NO_INSTANCE_ID else ci
            out.append(process)
    return out


def map_processes(info: GpuInfo, processes: list[GpuProcess]) -> None:
    """Each process's MIG device (by GPU instance, then compute instance), as MigDevice.index."""
    if not info.mig_devices:
        return
    for p in processes:
        for m in info.mig_devices:
            if p.gpu_instance_id == m.gpu_instance_id and p.compute_instance_id in (m.compute_instance_id, None):
                p.mig_index = m.index
                break


def view(q: DeviceQuery, found: list[MigHandle], processes: list[GpuProcess]) -> list[GpuProcess]:
    """The processes of a MIG-enabled GPU, each with its MIG device; no per-process utilisation.

    The parent's list (as root) already carries each process's instance ids. Without the
    privileges it fails (NO_PERMISSION), and the lists are read per MIG device instead.
    """
    errors = q.errors
    if "processes" in errors:
        per_device = _per_device_processes(q, found)
        if per_device is not None:
            errors.pop("processes")
            for name in _PARENT_LISTS:
                q.recorder.call_errors.pop(name, None)
            processes = per_device
    # nvml.h: "On MIG-enabled GPUs, querying process utilization is not currently supported."
    errors["process_utilization"] = MIG_NO_PROCESS_UTILIZATION
    map_processes(q.info, processes)
    return processes
