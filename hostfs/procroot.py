"""Files inside another process's root (``/proc/<pid>/root``), found as that process would find
them: how a reader outside a container reaches the container's ``/dev/shm`` and its files.

Walking ``/proc/<pid>/root/dev/shm/...`` as a plain path would follow a symbolic link in the
container with an absolute target from the reader's own root (``/dev/shm -> /run/shm`` would name
the host's ``/run/shm``): what the container's owner puts there would steer the reader. Here each
component is opened relative to the last with ``O_NOFOLLOW``; a link is read and followed inside
the process's root (an absolute target from that root), '..' is refused, and links and components
are bounded. Standard library only.
"""

from __future__ import annotations

import errno
import os

from hostfs.paths import HOST, HostPaths

__all__ = ["open_in_root", "proc_root"]

MAX_LINKS = 16
MAX_COMPONENTS = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def proc_root(pid: int, *, host: HostPaths = HOST) -> str:
    """The magic link to ``pid``'s root directory (in the /proc of ``host``)."""
    return host.proc_path(int(pid), "root")


def open_in_root(root: str, path: str, flags: int, *, follow_last: bool) -> int:
    """A descriptor of ``path`` resolved inside the directory ``root`` (``proc_root(pid)``), opened
    with ``flags`` (plus O_CLOEXEC; plus O_NOFOLLOW unless ``follow_last``). Raises OSError as
    os.open does: ELOOP for a link where none may be, too many links or components, or '..'."""
    parts = [p for p in path.split("/") if p and p != "."]
    parts.reverse()  # a stack: the next component last
    rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cur = os.dup(rootfd)
    links = 0
    try:
        while parts:
            name = parts.pop()
            if name == "..":
                raise OSError(errno.ELOOP, "'..' in a path inside a process's root", path)
            last = not parts
            if last:
                want = flags | os.O_CLOEXEC | os.O_NOFOLLOW
            else:
                want = _DIR_FLAGS
            try:
                fd = os.open(name, want, dir_fd=cur)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR) or (last and not follow_last):
                    raise
                target = _link(name, cur, e)
                links += 1
                if links > MAX_LINKS or len(parts) > MAX_COMPONENTS:
                    raise OSError(errno.ELOOP, "too many links inside a process's root", path) from None
                if target.startswith("/"):
                    os.close(cur)
                    cur = os.dup(rootfd)
                parts.extend(reversed([p for p in target.split("/") if p and p != "."]))
                continue
            if last:
                return fd
            os.close(cur)
            cur = fd
        raise OSError(errno.EISDIR, "no file named", path)
    finally:
        os.close(cur)
        os.close(rootfd)


def _link(name: str, dirfd: int, err: OSError) -> str:
    """The target of the link ``name`` in ``dirfd``; ``err`` again when it is no link."""
    try:
        target = os.readlink(name, dir_fd=dirfd)
    except OSError:
        raise err from None
    if len(target) > 4096:
        raise OSError(errno.ENAMETOOLONG, "link target too long", name)
    return target
