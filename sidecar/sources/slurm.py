"""The Slurm job a process runs in: from its cgroup, which slurmstepd (root) makes, else from its
initial environment's SLURM_JOB_ID, read only for a process of the reader's own uid.

slurmstepd puts each job's processes in a cgroup whose path names the job. cgroup v1 (every
hierarchy alike; ``slurm_<node>`` under several slurmds on one host)::

    /slurm/uid_<uid>/job_<id>/step_<step>/task_<n>

cgroup v2, below slurmstepd's scope (``<node>_slurmstepd.scope`` under several slurmds)::

    /system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>

A job's id is its number, or (Slurm 25.11 and later) its SLUID: "s" and 13 Crockford base-32
digits. Only a path of those shapes names a job: a user's delegated cgroup subtree lies under
``/user.slice`` and cannot make one, and v1's ``uid_<uid>`` must be the process's own uid. Another
user's environment is never read (its variables are that user's to set, and to keep); a process's
own environment is: it says what the job was started as (srun, sbatch).

Every read is bounded, and a value is taken only in its exact shape (digits, or a SLUID).
"""

from __future__ import annotations

import re

from hostfs.paths import HOST, HostPaths
from hostfs.procid import process_real_uid

MAX_CGROUP_FILE_BYTES = 64 * 1024  # as sources/pods.py: a longer file is cut, never read whole
MAX_CGROUP_LINES = 64
MAX_ENVIRON_BYTES = 128 * 1024  # as sources/kubelet/lookup.py
MAX_JOB_ID_CHARS = 20  # a job number is a uint32 (10 digits); 20 leaves room, never more

_NUMBER_RE = re.compile(rf"[0-9]{{1,{MAX_JOB_ID_CHARS}}}")
# sluid.c's sluid2str: "s" and 13 digits of Crockford's base 32 (no I, L, O, U); str2sluid takes
# either case.
_SLUID_RE = re.compile(r"[sS][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{13}")
_V1_ROOT_RE = re.compile(r"slurm(?:_[A-Za-z0-9_.-]{1,255})?")
_V2_SCOPE_RE = re.compile(r"(?:[A-Za-z0-9_.-]{1,255}_)?slurmstepd\.scope")
_UID_RE = re.compile(r"uid_([0-9]{1,10})")


def job_id_value(text: str | None) -> str | None:
    """``text`` when it is a Slurm job id (a number, or a SLUID), else None."""
    if text is None or len(text) > MAX_JOB_ID_CHARS:
        return None
    if _NUMBER_RE.fullmatch(text) or _SLUID_RE.fullmatch(text):
        return text
    return None


def _job_segment(segment: str) -> str | None:
    return job_id_value(segment[4:]) if segment.startswith("job_") else None


def job_from_cgroup_path(path: str, uid: int | None) -> str | None:
    """The job a cgroup path names (the module's docstring), None when it names none. ``uid``: the
    process's real uid, which v1's ``uid_<uid>`` must be."""
    parts = path.split("/")
    if len(parts) < 4 or parts[0] != "":
        return None
    if _V1_ROOT_RE.fullmatch(parts[1]):
        owner = _UID_RE.fullmatch(parts[2])
        if owner is None or uid is None or int(owner.group(1)) != uid:
            return None
        return _job_segment(parts[3])
    if parts[1] == "system.slice" and _V2_SCOPE_RE.fullmatch(parts[2]):
        return _job_segment(parts[3])
    return None


def job_from_cgroup_file(data: bytes, uid: int | None) -> str | None:
    """The job named by any line of a /proc/PID/cgroup (``id:controllers:path``)."""
    for line in data.split(b"\n")[:MAX_CGROUP_LINES]:
        path = line.split(b":", 2)[-1]
        try:
            text = path.decode("ascii")
        except UnicodeDecodeError:
            continue
        found = job_from_cgroup_path(text, uid)
        if found is not None:
            return found
    return None


def job_from_environ(data: bytes) -> str | None:
    """SLURM_JOB_ID of an environ block (NUL-separated), in its exact shape, else None."""
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            value = item[len(b"SLURM_JOB_ID=") :]
            if len(value) > MAX_JOB_ID_CHARS:
                return None
            try:
                return job_id_value(value.decode("ascii"))
            except UnicodeDecodeError:
                return None
    return None


def _read(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def slurm_job(pid: int, reader_uid: int, *, host: HostPaths = HOST) -> str | None:
    """The Slurm job of process ``pid``: its cgroup's, else (a process of ``reader_uid`` only) its
    environment's SLURM_JOB_ID; None when neither says (not a Slurm job, gone, unreadable)."""
    uid = process_real_uid(pid, host=host)
    data = _read(host.proc_path(int(pid), "cgroup"), MAX_CGROUP_FILE_BYTES)
    if data is not None:
        found = job_from_cgroup_file(data, uid)
        if found is not None:
            return found
    if uid is None or uid != reader_uid:
        return None
    environ = _read(host.proc_path(int(pid), "environ"), MAX_ENVIRON_BYTES)
    return None if environ is None else job_from_environ(environ)
