"""What a large corrupt segment costs the sidecar: a planted 16 MiB file (the reader's size cap)
whose header claims a payload that fills it is read whole at most twice on the poll that first sees
it, and judged by its header (one small pread) on every later poll while that header stays; a file
whose header names another writer likewise. Bytes are counted with a wrapper
around os.pread, which every read of the reader and the follower goes through."""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Iterator

import msgpack
import pytest

import probe_wire as segment
from probe_wire import HEADER, MAGIC, MAX_SEGMENT_BYTES, process_start_ticks, read_segment
from probe_wire.follower import SegmentFollower
from tests.helpers.stress_jobs import variant

# A poll that judges a file by its header reads the header and its seq: a few hundred bytes. The
# first sight of a 16 MiB payload reads it at most twice (a crc mismatch is retried once).
LATER_POLL_BYTES = 4096
FIRST_POLL_BYTES = 2 * MAX_SEGMENT_BYTES + LATER_POLL_BYTES
POLLS = 6


class Planted:
    """A live `sleep` whose segment name holds a file the test writes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.ticks = process_start_ticks(self.pid)
        self.path = segment.segment_path(self.pid)

    def put(self, body: bytes, **over) -> None:
        fields = dict(
            magic=MAGIC, version=1, hsize=64, seq=2, pid=self.pid, flags=0, ticks=self.ticks,
            length=len(body), crc=zlib.crc32(body), at=1000.0,
        )
        fields.update(over)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, HEADER.pack(*fields.values()))
            os.write(fd, body)
        finally:
            os.close(fd)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@pytest.fixture
def planted() -> Iterator[Planted]:
    p = Planted()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def pread_bytes(monkeypatch) -> list[int]:
    """Bytes copied by every os.pread since the list was last cleared."""
    counted: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        data = real(fd, n, offset)
        counted.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting)
    return counted


FULL = MAX_SEGMENT_BYTES - 64  # a payload that fills the largest file the reader accepts


@pytest.mark.parametrize(
    "case",
    ["crc-mismatch", "bad-msgpack", "not-the-schema"],
)
def test_a_16_mib_corrupt_segment_is_read_whole_once_then_judged_by_its_header(planted, pread_bytes, case):
    if case == "crc-mismatch":
        body = b"\x00" * FULL
        planted.put(body, crc=zlib.crc32(body) ^ 1)
    elif case == "bad-msgpack":
        planted.put(b"\xc1" * FULL)  # 0xc1: never used in msgpack
    else:
        planted.put(b"\xdb" + (FULL - 5).to_bytes(4, "big") + b"a" * (FULL - 5))  # one huge str
    follower = SegmentFollower()
    per_poll = []
    try:
        for _ in range(POLLS):
            pread_bytes.clear()
            r = follower.read(planted.pid, planted.ticks)
            per_poll.append(sum(pread_bytes))
            assert r.state == "corrupt" and r.payload is None, r
    finally:
        follower.close()
    assert per_poll[0] <= FIRST_POLL_BYTES, per_poll
    assert max(per_poll[1:]) <= LATER_POLL_BYTES, per_poll


def test_a_new_header_is_read_again(planted, pread_bytes):
    """The verdict stands only for the header it was made from: a writer's new publish moves the
    seq, and the new bytes are read (here a valid segment, which is then ok)."""
    planted.put(b"\xc1" * FULL)
    follower = SegmentFollower()
    try:
        assert follower.read(planted.pid, planted.ticks).state == "corrupt"
        assert follower.read(planted.pid, planted.ticks).state == "corrupt"
        planted.put(msgpack.packb(variant(planted.pid, planted.ticks, 1)), seq=4)  # same file, new header
        assert follower.read(planted.pid, planted.ticks).state == "ok"
    finally:
        follower.close()


def test_a_header_naming_another_writer_is_judged_by_it_after_the_first_poll(planted, pread_bytes):
    """Stale (a reused pid's old segment) and a header naming another pid: the same verdict for as
    long as the header stays, from the header alone."""
    body = b"\x00" * FULL
    for over in ({"ticks": planted.ticks + 1}, {"pid": planted.pid + 1}):
        planted.put(body, **over)
        follower = SegmentFollower()
        per_poll = []
        try:
            for _ in range(POLLS):
                pread_bytes.clear()
                r = follower.read(planted.pid, planted.ticks)
                per_poll.append(sum(pread_bytes))
                assert r.state in ("stale", "corrupt") and r.payload is None, r
        finally:
            follower.close()
        assert per_poll[0] <= FIRST_POLL_BYTES and max(per_poll[1:]) <= LATER_POLL_BYTES, (over, per_poll)


def test_read_segment_copies_a_crc_mismatched_payload_at_most_twice(planted, pread_bytes):
    body = b"\x00" * FULL
    planted.put(body, crc=zlib.crc32(body) ^ 1)
    r = read_segment(planted.pid, expected_start_ticks=planted.ticks)
    assert r.state == "corrupt" and "crc32" in r.error, r
    assert sum(pread_bytes) <= FIRST_POLL_BYTES, sum(pread_bytes)
