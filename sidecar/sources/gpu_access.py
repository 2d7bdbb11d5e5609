"""Whether a process may open the AMD GPU's device nodes: what ROCm's "no GPU" so often comes down to.

HIP and ROCr open ``/dev/kfd`` (compute queues) and a render node ``/dev/dri/renderD<N>`` (memory);
without read and write on both, ``torch.cuda.is_available()`` is False on a ROCm build with no word of
why. Distributions make both nodes ``crw-rw----`` owned by group ``render`` (``/dev/kfd`` and render
nodes on recent udev) or ``video`` (older ones), and ROCm's install guide has the user join both
groups; a user who did not, or a shell opened before joining, cannot use the GPU.

Three readers, each under ``host`` (hostfs.paths: --path.procfs / --path.sysfs), none raising:

- ``kfd_present``: the kernel's KFD is there (``/sys/class/kfd/kfd``: the amdgpu driver with HSA
  support loaded); None when the sysfs tree itself cannot be read.
- ``read_credentials``: the process's effective uid and gid and its supplementary groups, from
  ``/proc/<pid>/status`` (``Uid:``, ``Gid:``, ``Groups:``), which is readable by anyone.
- ``read_gpu_nodes``: mode, owner and group of ``/dev/kfd`` and the render nodes as the process
  sees them: through ``/proc/<pid>/root``, its own root (a container's /dev when it runs in one), not
  the sidecar's /dev. Reading another user's root needs the same rights as ptrace: None then.
"""

from __future__ import annotations

import grp
import os
import re
import stat
from dataclasses import dataclass

from hostfs.paths import HOST, HostPaths

__all__ = ["DeviceNode", "ProcessCredentials", "group_name", "kfd_present", "read_credentials"]
__all__ += ["read_gpu_nodes"]

MAX_STATUS_BYTES = 16 * 1024  # /proc/<pid>/status is ~1.5 KiB; Groups: holds at most 65536 ids
MAX_RENDER_NODES = 64
MAX_GROUPS = 1024
_RENDER_NODE = re.compile(r"renderD[0-9]{1,6}")
_ID = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True, slots=True)
class ProcessCredentials:
    uid: int  # effective
    gid: int  # effective
    groups: tuple[int, ...]  # supplementary


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str  # as the process names it: "/dev/kfd", "/dev/dri/renderD128"
    mode: int  # permission bits (st_mode & 0o777)
    uid: int
    gid: int


def kfd_present(*, host: HostPaths = HOST) -> bool | None:
    """The kernel has a KFD device (amdgpu with HSA support); None when sysfs is not readable."""
    if not os.path.isdir(host.sys_path("class")):
        return None
    return os.path.isdir(host.sys_path("class", "kfd", "kfd"))


def read_credentials(pid: int, *, host: HostPaths = HOST) -> ProcessCredentials | None:
    """The effective uid and gid and the supplementary groups of ``pid``; None when it is gone or
    its status does not say."""
    try:
        with open(host.proc_path(pid, "status"), "rb") as f:
            text = f.read(MAX_STATUS_BYTES).decode("ascii", errors="replace")
    except OSError:
        return None
    lines = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    uids, gids = _ids(lines.get("Uid", "")), _ids(lines.get("Gid", ""))
    groups = _ids(lines.get("Groups", ""))
    if len(uids) < 2 or len(gids) < 2 or groups is None:
        return None
    # The lines read real, effective, saved and filesystem ids: the kernel checks a device node's
    # permission against the filesystem ones (equal to the effective ones but under setfsuid).
    fs_uid, fs_gid = uids[3] if len(uids) > 3 else uids[1], gids[3] if len(gids) > 3 else gids[1]
    return ProcessCredentials(fs_uid, fs_gid, tuple(groups[:MAX_GROUPS]))


def _ids(text: str) -> list[int]:
    return [int(x) for x in text.split() if _ID.fullmatch(x)]


def read_gpu_nodes(pid: int, *, host: HostPaths = HOST) -> tuple[DeviceNode, ...] | None:
    """``/dev/kfd`` and ``/dev/dri/renderD*`` as ``pid`` sees them, in that order (render nodes by
    number); () when it has none; None when its root cannot be read (another user's process, gone)."""
    root = host.proc_path(pid, "root")
    if not os.access(root, os.X_OK):
        return None
    out: list[DeviceNode] = []
    kfd = _node(root, "/dev/kfd")
    if kfd is not None:
        out.append(kfd)
    try:
        names = [n for n in os.listdir(root + "/dev/dri") if _RENDER_NODE.fullmatch(n)]
    except OSError:
        names = []
    for name in sorted(names, key=lambda n: int(n[7:]))[:MAX_RENDER_NODES]:
        node = _node(root, "/dev/dri/" + name)
        if node is not None:
            out.append(node)
    return tuple(out)


def _node(root: str, path: str) -> DeviceNode | None:
    try:
        st = os.stat(root + path)
    except OSError:
        return None
    # A character device on a real /dev; a fixture tree's plain file stands for one in the tests.
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return None
    return DeviceNode(path, stat.S_IMODE(st.st_mode) & 0o777, st.st_uid, st.st_gid)


def group_name(gid: int) -> str | None:
    """The name of group ``gid`` in this machine's group database ("render"); None when unknown."""
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return None
