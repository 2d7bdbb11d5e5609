"""A process's access to the AMD GPU's device nodes as the verdict's fact (ProcessFacts.gpu_access),
from the two reads of sidecar/sources/gpu_access.py."""

from __future__ import annotations

from sidecar.sources.gpu_access import group_name, read_credentials, read_gpu_nodes
from sidecar.sources.host import HOST, HostPaths
from sidecar.verdict import DeviceNodeFacts, GpuAccessFacts

__all__ = ["gpu_access_facts"]


def gpu_access_facts(pid: int, host: HostPaths = HOST) -> GpuAccessFacts | None:
    """Whether ``pid`` may open the AMD GPU's device nodes (ProcessFacts.gpu_access): its groups and
    /dev/kfd and the render nodes as it sees them; None when either cannot be read. A few reads: for
    a ROCm build without a GPU only (the verdict's cuda-unavailable reasons), not every process."""
    creds, nodes = read_credentials(pid, host=host), read_gpu_nodes(pid, host=host)
    if creds is None or nodes is None:
        return None
    named = tuple(DeviceNodeFacts(n.path, n.mode, n.uid, n.gid, group_name(n.gid)) for n in nodes)
    return GpuAccessFacts(creds.uid, creds.gid, creds.groups, named)
