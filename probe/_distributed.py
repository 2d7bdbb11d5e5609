"""The job's distributed identity: a key that the processes of one distributed job agree on (across
nodes wherever the launcher makes that possible), and this process's place in it.

The key, the first source that names one:

1. ``torchelastic``: ``TORCHELASTIC_RUN_ID``, torchrun's ``--rdzv-id``, the same on every node;
   ignored when it is ``none``, torchrun's default (a static rendezvous without an id).
2. ``slurm``: ``SLURM_JOB_ID`` and ``SLURM_STEP_ID`` (``<cluster>/<job>.<step>``): every task of
   one step, on every node, has them.
3. ``pod``: in a Kubernetes pod that a JobSet started, ``<namespace>/<JOBSET_NAME>`` (the JobSet
   controller puts the name in each of its pods' environment; its pods on every node share it).
4. ``launch``: a hash of what the ranks share. Several nodes (``GROUP_WORLD_SIZE`` > 1, or
   ``WORLD_SIZE`` over ``LOCAL_WORLD_SIZE``): ``MASTER_ADDR:MASTER_PORT`` alone, the one thing
   that every node's launcher is given alike. No two live jobs share it (the rendezvous store
   listens on that port), though a later run given the same address does: torchrun's
   ``--rdzv-id`` tells runs apart. One node: the launcher (this rank's parent, pid and start ticks,
   on this host) with the address, so each run has its own key; the ranks of one torchrun or one
   ``mp.spawn`` share their parent. Only a rank takes a launch key from its parent: a DataLoader
   worker's parent is its rank, not the launcher.

Standard library only, and nothing here changes the process: the environment is read, never set.
"""

from __future__ import annotations

import os

from hostfs.procid import process_parent

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["KEY_MAX_CHARS", "distributed", "job_key"]

KEY_MAX_CHARS = 128
MAX_FILE_BYTES = 256
NO_RUN_ID = "none"  # torchrun's --rdzv-id when none is given
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# (pid, ppid, the parent's identity): a rank asks at every publish, its parent never changes while
# it lives (a re-parented rank keeps the launcher it had: its key must not change).
_launcher: tuple[int, tuple[int, int] | None] | None = None


def _env(environ: Mapping[str, str], name: str) -> str | None:
    raw = environ.get(name)
    if raw is None:
        return None
    raw = raw.strip()
    return raw[:KEY_MAX_CHARS] if raw else None


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = _env(environ, name)
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def _first_int(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = _env_int(environ, name)
        if value is not None:
            return value
    return None


def _hash(*parts: object) -> str:
    import hashlib  # only a rank without a named job pays for it (~1 ms)

    text = "\0".join("" if p is None else str(p) for p in parts)
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def _namespace(environ: Mapping[str, str]) -> str | None:
    ns = _env(environ, "POD_NAMESPACE")
    if ns is not None:
        return ns
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, "rb") as f:
            return f.read(MAX_FILE_BYTES).decode("ascii", "replace").strip()[:KEY_MAX_CHARS] or None
    except OSError:
        return None


def _multi_node(environ: Mapping[str, str]) -> bool:
    groups = _env_int(environ, "GROUP_WORLD_SIZE")
    if groups is not None:
        return groups > 1
    world, local = _env_int(environ, "WORLD_SIZE"), _env_int(environ, "LOCAL_WORLD_SIZE")
    return world is not None and local is not None and world > local


def _launcher_of_this_process() -> tuple[int, int] | None:
    global _launcher
    pid = os.getpid()
    if _launcher is None or _launcher[0] != pid:
        _launcher = (pid, process_parent(pid))
    return _launcher[1]


def job_key(environ: Mapping[str, str], is_rank: bool, hostname: str | None = None) -> tuple[str | None, str | None]:
    """(key, source) of the job this process belongs to, from ``environ`` (os.environ); (None, None)
    when nothing names it (a process that is no rank of a launched job)."""
    run_id = _env(environ, "TORCHELASTIC_RUN_ID")
    if run_id is not None and run_id != NO_RUN_ID:
        return run_id, "torchelastic"
    slurm_job = _env(environ, "SLURM_JOB_ID")
    if slurm_job is not None:
        cluster, step = _env(environ, "SLURM_CLUSTER_NAME"), _env(environ, "SLURM_STEP_ID")
        key = f"{cluster + '/' if cluster else ''}{slurm_job}{'.' + step if step else ''}"
        return key[:KEY_MAX_CHARS], "slurm"
    jobset = _env(environ, "JOBSET_NAME")
    if jobset is not None and _env(environ, "KUBERNETES_SERVICE_HOST") is not None:
        ns = _namespace(environ)
        return (f"{ns}/{jobset}" if ns else jobset)[:KEY_MAX_CHARS], "pod"
    addr, port = _env(environ, "MASTER_ADDR"), _env(environ, "MASTER_PORT")
    if addr is not None and port is not None and _multi_node(environ):
        return _hash("master", addr, port), "launch"
    if not is_rank:
        return None, None
    launcher = _launcher_of_this_process()
    if launcher is None:
        return None, None
    return _hash("launcher", hostname, *launcher, addr, port), "launch"


def distributed(is_rank: bool, hostname: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """job_key, job_key_source, node_rank, restart_count: the payload's fields of the job's
    distributed identity (rank, local_rank and world_size are facts.role's)."""
    environ = os.environ if environ is None else environ
    key, source = job_key(environ, is_rank, hostname)
    return {
        "job_key": key,
        "job_key_source": source,
        "node_rank": _first_int(environ, "GROUP_RANK", "NODE_RANK", "SLURM_NODEID"),
        "restart_count": _first_int(environ, "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"),
    }
