"""Where a process comes from: its ancestors, owner and working directory (/proc), and which of
its ancestors is the root of its job.

Discovery (sidecar/poll/discovery.py) starts from a process it found (a probe segment, an NVML row) and walks
up to the job's root: the topmost ancestor that is probed, uses a GPU, or is a known launcher
(torchrun, accelerate launch, deepspeed, mpirun, srun) or the parent of a process multiprocessing
started (spawn, forkserver). Every read is bounded, and a pid is taken
with its start ticks, never alone. /proc is ``host``'s (hostfs.paths: --path.procfs), the host's own
by default.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from hostfs.paths import HOST, HostPaths
from hostfs.procid import process_identity, process_real_uid
from sidecar.sources.slurm import slurm_job

MAX_ANCESTORS = 32  # a job's root is never deeper than this below pid 1 in practice
MAX_CMDLINE_BYTES = 4096

# Launchers whose children are the job: argv[0]'s name, or `python -m MODULE`.
LAUNCHER_NAMES = frozenset({"torchrun", "accelerate", "deepspeed", "mpirun", "mpiexec", "srun", "horovodrun"})
LAUNCHER_MODULES = frozenset(
    {"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch"}
)
# What multiprocessing's own helper processes run (python -c "from multiprocessing.X import main; ...").
_MP_HELPER_MODULES = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
_MP_CHILD_MODULES = ("multiprocessing.spawn", "multiprocessing.forkserver")


@dataclass(frozen=True)
class RootInfo:
    """What a job's list entry says of its root, read once when the job is found."""

    uid: int | None
    user: str | None
    cwd: str | None
    ancestor_pids: tuple[int, ...]
    # Its Slurm job (sources/slurm.py): its cgroup's, else the SLURM_JOB_ID of its environment when
    # it is the sidecar's user's own process (another user's environment is that user's claim).
    slurm_job: str | None = None


def parent_pid(pid: int, *, host: HostPaths = HOST) -> int | None:
    """Field 4 of /proc/PID/stat (after the name in parentheses, which may hold any bytes)."""
    try:
        with open(host.proc_path(pid, "stat"), "rb") as f:
            raw = f.read(1024)
        return int(raw[raw.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestors(pid: int, *, host: HostPaths = HOST) -> tuple[int, ...]:
    """Parent, grandparent, ... up to (not including) pid 0, at most MAX_ANCESTORS."""
    out: list[int] = []
    cur = parent_pid(pid, host=host)
    while cur and cur > 0 and len(out) < MAX_ANCESTORS and cur not in out:
        out.append(cur)
        cur = parent_pid(cur, host=host)
    return tuple(out)


def cmdline(pid: int, *, host: HostPaths = HOST) -> tuple[str, ...]:
    try:
        with open(host.proc_path(pid, "cmdline"), "rb") as f:
            raw = f.read(MAX_CMDLINE_BYTES)
    except OSError:
        return ()
    return tuple(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)


def is_launcher(argv: tuple[str, ...]) -> bool:
    """torchrun, `python -m torch.distributed.run`, `accelerate launch`, deepspeed, mpirun, srun."""
    if not argv:
        return False
    name = os.path.basename(argv[0])
    if name in LAUNCHER_NAMES:
        return True
    if name.startswith("python") and "-m" in argv[1:6]:
        i = argv.index("-m", 1)
        return i + 1 < len(argv) and argv[i + 1] in LAUNCHER_MODULES
    if name.startswith("python"):
        # A console script (`torchrun`, `accelerate`, `deepspeed` installed by pip) runs through its
        # #! line: the kernel makes it `python3 /venv/bin/torchrun ...`, the script the first argument
        # after the interpreter's flags.
        script = next((a for a in argv[1:6] if not a.startswith("-")), None)
        return script is not None and os.path.basename(script) in LAUNCHER_NAMES
    return False


# The arguments _python_c_code reads (python, its flags, -c, CODE): all the multiprocessing flags
# (is_mp_helper, is_mp_child) depend on, so a cache of them keys on these alone (collect.py).
PYTHON_C_ARGS = 8


def _python_c_code(cmdline: tuple[str, ...] | None) -> str:
    """The code of ``python [flags] -c CODE``, after interpreter flags such as -B, -s, -E; else ""."""
    if not cmdline:
        return ""
    head = list(cmdline[1:PYTHON_C_ARGS])
    return head[head.index("-c") + 1] if "-c" in head[:-1] else ""


def is_mp_helper(cmdline: tuple[str, ...] | None) -> bool:
    """multiprocessing's resource tracker or forkserver process: it never runs the user's code."""
    code = _python_c_code(cmdline)
    return any(m in code for m in _MP_HELPER_MODULES)


def is_mp_child(cmdline: tuple[str, ...] | None) -> bool:
    """Started by multiprocessing's spawn or forkserver (a DataLoader worker, a spawned rank): such a
    process runs only what it was handed, and the probe only if that imports it."""
    code = _python_c_code(cmdline)
    return any(m in code for m in _MP_CHILD_MODULES)


@lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def root_info(pid: int, *, host: HostPaths = HOST) -> RootInfo:
    uid = process_real_uid(pid, host=host)
    try:
        cwd = os.readlink(host.proc_path(pid, "cwd"))
    except OSError:
        cwd = None  # another user's process, or gone
    return RootInfo(
        uid,
        user_name(uid) if uid is not None else None,
        cwd,
        ancestors(pid, host=host),
        slurm_job(pid, os.getuid(), host=host),
    )


def job_root(
    pid: int,
    is_job_process: Callable[[int, tuple[str, ...]], bool],
    owner: int | None = None,
    *,
    host: HostPaths = HOST,
) -> tuple[int, int] | None:
    """The identity (pid, start ticks) of the topmost ancestor of ``pid`` (itself included) for
    which ``is_job_process(pid, argv)`` holds, walking up while the owner stays the same; None when
    ``pid`` is gone, or is not ``owner``'s (a real uid) when one is given: a non-root discovery's
    check of a candidate, read here afresh whatever it read before (sources/owners.py).
    `is_job_process` says whether a process is probed, uses a GPU, or launches."""
    walked = job_root_walk(pid, is_job_process, owner, host=host)
    return None if walked is None else walked[0]


def job_root_walk(
    pid: int,
    is_job_process: Callable[[int, tuple[str, ...]], bool],
    owner: int | None = None,
    *,
    host: HostPaths = HOST,
) -> tuple[tuple[int, int], frozenset[int]] | None:
    """``job_root``'s answer with the ancestors it walked: a root found once stays right until a
    process among those becomes a job process (a trainer whose DataLoader worker started its probe
    first) or stops being one (its probe ended), which only a candidate that came or went can be."""
    ident = process_identity(pid, host=host)
    if ident is None:
        return None
    uid = process_real_uid(pid, host=host)
    if owner is not None and uid != owner:
        return None
    root = ident
    below = cmdline(pid, host=host)
    walked: list[int] = []
    for up in ancestors(pid, host=host):
        if up == 1 or process_real_uid(up, host=host) != uid:
            break  # init, or another user's process (a shell of root's, sudo): never a job's root
        walked.append(up)
        argv = cmdline(up, host=host)
        # A process multiprocessing started (spawn, forkserver: a rank of mp.spawn, a worker) runs
        # what its parent handed it: the parent is part of the job.
        if is_job_process(up, argv) or is_mp_child(below):
            up_ident = process_identity(up, host=host)
            if up_ident is not None:
                root = up_ident
        below = argv
    return root, frozenset(walked)
