"""The writer: creates a process's segment and publishes payloads into it under the seqlock."""

from __future__ import annotations

import errno
import mmap
import os
import stat
import time
import zlib

from hostfs.procid import pid_namespace_id, process_start_ticks
from probe_wire.cleanup import remove_if_dead
from probe_wire.codec import encode_payload
from probe_wire.header import (
    DEFAULT_SEGMENT_BYTES,
    FIELDS,
    FIELDS_OFFSET,
    FLAG_CLOSED,
    FLAG_TRIMMED,
    FLAGS,
    FLAGS_OFFSET,
    FORMAT_VERSION,
    HEADER_BYTES,
    MAGIC,
    MIN_SEGMENT_BYTES,
    PIDNS,
    PIDNS_OFFSET,
    PREFIX,
    PUBLISH,
    PUBLISH_OFFSET,
    SEQ,
    SEQ_OFFSET,
    SegmentError,
    header_identity,
)
from probe_wire.names import SCRATCH_PREFIX, SHM_DIR, random_suffix, segment_name, segment_path

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SegmentWriter"]

# Random names tried when both of a writer's names are taken: 8 random bytes make even the second
# try all but certain to find a free name (another user cannot guess one; a clash retries).
RANDOM_NAME_TRIES = 4


def _describe(path: str) -> str:
    """What sits at ``path``, for a message: a link, another user's file, another namespace's."""
    try:
        st = os.lstat(path)
    except OSError:
        return "something that vanished"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "something that is not a regular file"
    if st.st_uid != os.geteuid():
        return f"a file of uid {st.st_uid}"
    head = header_identity(path)
    if head is not None and head[2] and head[2] != pid_namespace_id():
        return "a segment of another PID namespace"
    return "a file whose writer may still run"


class SegmentWriter:
    """Creates ``/dsh-probe.<pid>`` (0600, allocated up front) and publishes payloads into it.

    Allocation up front (posix_fallocate, else explicit zero writes) makes a full /dev/shm fail here
    with ENOSPC instead of killing the process with SIGBUS on a later write to the mapping. One
    writer per segment; callers serialise ``publish`` (the probe holds its lock).

    The file is made whole under a scratch name first (sized, allocated, its header naming the
    writer and its PID namespace), then hard-linked to its public name: ``link`` never replaces nor
    follows what already sits there. When ``dsh-probe.<pid>`` is taken by anything but a provably
    dead writer's segment (another user's file, a link, a live segment of another PID namespace),
    the writer publishes as ``dsh-probe.<pid>.<start_ticks>`` instead and says why in
    ``fallback_reason``; when that is taken too (another user planted both names for the next pids
    and plausible start ticks), as ``dsh-probe.<pid>.<start_ticks>.<random hex>``, a name no one can
    plant ahead of it (readers find it by listing /dev/shm and trust it as they trust the others:
    owned by the process's user, its header naming the process).
    """

    def __init__(
        self,
        pid: int | None = None,
        start_ticks: int | None = None,
        size_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        try:
            import posix_ipc
        except ImportError as e:
            raise SegmentError(errno.ENOSYS, f"posix_ipc is not installed ({e})") from None
        if not MIN_SEGMENT_BYTES <= size_bytes:
            raise ValueError(f"size_bytes must be at least {MIN_SEGMENT_BYTES}")
        self.pid = os.getpid() if pid is None else int(pid)
        ticks = process_start_ticks(self.pid) if start_ticks is None else start_ticks
        # 0 stands for "unknown" (no /proc): the header field is an unsigned integer.
        self.start_ticks = int(ticks or 0)
        self.pidns = pid_namespace_id()
        self.name = segment_name(self.pid)
        self.fallback_reason: str | None = None
        self.size_bytes = int(size_bytes)
        self.capacity_bytes = self.size_bytes - HEADER_BYTES
        self._seq = 0
        self._mm: mmap.mmap | None = None
        self._posix_ipc = posix_ipc
        self._create()

    def _create(self) -> None:
        ipc = self._posix_ipc
        mode = stat.S_IRUSR | stat.S_IWUSR
        scratch = f"/{SCRATCH_PREFIX}{self.pidns}.{self.pid}.{self.start_ticks}.{os.urandom(4).hex()}"
        try:
            # O_CREAT | O_EXCL: a fresh file, never one planted under the (random) name.
            shm = ipc.SharedMemory(scratch, flags=ipc.O_CREX, mode=mode, size=0)
        except (ipc.Error, OSError, ValueError) as e:
            raise SegmentError(errno.EIO, f"cannot create {self.name}: {e}") from None
        fd = shm.fd
        try:
            os.fchmod(fd, mode)  # the creation mode went through the umask
            os.ftruncate(fd, self.size_bytes)
            self._allocate(fd)
            self._mm = mmap.mmap(fd, self.size_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            # Who wrote it, before any name shows it: a cleaner can then judge it from its header.
            FIELDS.pack_into(self._mm, FIELDS_OFFSET, self.pid & 0xFFFFFFFF, 0, self.start_ticks, 0, 0, 0.0)
            PIDNS.pack_into(self._mm, PIDNS_OFFSET, self.pidns)
            self.name = self._link_public(SHM_DIR + scratch)
        except OSError as e:
            self.detach()
            raise SegmentError(
                e.errno or errno.EIO, f"cannot allocate {self.name}: {e.strerror or e}"
            ) from None
        finally:
            shm.close_fd()
            self._unlink_quietly(scratch)

    def _link_public(self, scratch_path: str) -> str:
        """Give the made file its public name (see the class doc); the name taken."""
        taken: list[str] = []
        for ticks in (None, self.start_ticks):
            path = segment_path(self.pid, ticks)
            for attempt in (0, 1):
                try:
                    os.link(scratch_path, path, follow_symlinks=False)
                    if taken:
                        self.fallback_reason = f"{taken[0]}: publishing as {path} instead"
                    return segment_name(self.pid, ticks)
                except FileExistsError:
                    # A leftover of a dead process that had this pid before us (SIGKILL skips
                    # atexit) is replaced; anything else is left alone.
                    if attempt == 0 and remove_if_dead(self.pid, ticks):
                        continue
                    taken.append(f"{path} is taken by {_describe(path)}")
                    break
        for _ in range(RANDOM_NAME_TRIES):
            suffix = random_suffix()
            path = segment_path(self.pid, self.start_ticks, suffix=suffix)
            try:
                # link fails on an existing name (O_EXCL's semantics): a clash draws again.
                os.link(scratch_path, path, follow_symlinks=False)
            except FileExistsError:
                continue
            self.fallback_reason = f"{'; '.join(taken)}: publishing as {path} instead"
            return segment_name(self.pid, self.start_ticks, suffix)
        raise SegmentError(errno.EEXIST, f"{'; '.join(taken)}: not ours to replace, and no random name was free")

    def _allocate(self, fd: int) -> None:
        try:
            os.posix_fallocate(fd, 0, self.size_bytes)
            return
        except AttributeError:
            pass  # no posix_fallocate on this platform
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
        chunk = b"\0" * 65536
        for offset in range(0, self.size_bytes, len(chunk)):
            os.pwrite(fd, chunk[: self.size_bytes - offset], offset)

    def _unlink_quietly(self, name: str | None = None) -> None:
        try:
            self._posix_ipc.unlink_shared_memory(self.name if name is None else name)
        except Exception:  # noqa: BLE001 -- cleanup after a failure already being reported
            pass

    @property
    def closed(self) -> bool:
        return self._mm is None

    def _mapped(self) -> mmap.mmap:
        """The segment's mapping; SegmentError once the writer is closed."""
        if self._mm is None:
            raise SegmentError(errno.EBADF, f"{self.name} is closed")
        return self._mm

    # The three steps of one publish, separate so the tests can stop a writer between them.
    def _begin(self) -> None:
        self._seq += 1
        SEQ.pack_into(self._mapped(), SEQ_OFFSET, self._seq)

    def _fill(self, data: bytes, flags: int, published_at: float) -> None:
        mm = self._mapped()
        mm[HEADER_BYTES : HEADER_BYTES + len(data)] = data
        PREFIX.pack_into(mm, 0, MAGIC, FORMAT_VERSION, HEADER_BYTES)
        # Never the identity (pid, start_ticks): see header.PUBLISH.
        FLAGS.pack_into(mm, FLAGS_OFFSET, flags)
        PUBLISH.pack_into(mm, PUBLISH_OFFSET, len(data), zlib.crc32(data), published_at)

    def _end(self) -> None:
        self._seq += 1
        SEQ.pack_into(self._mapped(), SEQ_OFFSET, self._seq)

    def publish_bytes(self, data: bytes, trimmed: bool = False, published_at: float | None = None) -> None:
        """Publish an already encoded payload (at most ``capacity_bytes``)."""
        if self._mm is None:
            raise SegmentError(errno.EBADF, f"{self.name} is closed")
        if len(data) > self.capacity_bytes:
            raise SegmentError(errno.EMSGSIZE, f"{len(data)} bytes do not fit in {self.capacity_bytes}")
        if published_at is None:
            published_at = time.time()
        self._begin()
        try:
            self._fill(data, FLAG_TRIMMED if trimmed else 0, float(published_at))
        finally:
            # Even after a failed fill the seq must go even again, or readers would see "busy" forever;
            # the crc then tells them whether what is there is whole.
            self._end()

    def publish(self, payload: dict[str, Any]) -> bool:
        """Encode (trimming if needed) and publish ``payload``; returns whether it was trimmed."""
        data, trimmed = encode_payload(payload, self.capacity_bytes)
        published_at = payload.get("published_at")
        self.publish_bytes(data, trimmed, published_at if isinstance(published_at, float) else None)
        return trimmed

    def _shrink(self, size: int) -> None:
        """Cut the (unmapped) file to ``size`` bytes: a kept final publish holds a few KiB of
        /dev/shm, not the whole segment. Best effort: a file left whole is read the same."""
        try:
            fd = os.open(SHM_DIR + self.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, size)
        except OSError:
            pass
        finally:
            os.close(fd)

    def detach(self) -> None:
        """Unmap without unlinking: what a forked child does with its parent's segment."""
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.close()

    def close(self, unlink: bool = True, keep_final: bool = False) -> None:
        """Unmap, and unlink the name unless told not to. Idempotent.

        Unlinking first marks the header closed (FLAG_CLOSED, under the seqlock), so a reader that
        keeps this file open (SegmentFollower) drops it instead of following a dead file. With
        ``keep_final`` the file is marked closed and left under its name, shrunk to its last
        publish, for a reader that comes after the writer's end (a process that lived less than a
        monitor's poll): a monitor reads it once and removes it (its writer is provably dead by
        then: probe_wire.cleanup), and so does the next probe of the same user at its start."""
        length = None
        if (unlink or keep_final) and self._mm is not None and self._seq:
            try:
                self._begin()
                flags = FLAGS.unpack_from(self._mm, FLAGS_OFFSET)[0]
                FLAGS.pack_into(self._mm, FLAGS_OFFSET, flags | FLAG_CLOSED)
                self._end()
                length = PUBLISH.unpack_from(self._mm, PUBLISH_OFFSET)[0]
            except (ValueError, OSError):
                pass  # unmapped under us: nothing a reader could still see
        self.detach()
        if keep_final and length is not None:
            self._shrink(HEADER_BYTES + length)
            return
        if unlink:
            try:
                self._posix_ipc.unlink_shared_memory(self.name)
            except self._posix_ipc.ExistentialError:
                pass
