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
from hostfs.procid import process_start_ticks
from probe_wire import HEADER, MAGIC, MAX_SEGMENT_BYTES, read_segment
from probe_wire.follower import JUDGE_BY_HEADER_BYTES, ReadBudget, SegmentFollower
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


# -- A monitor's budget for large payloads (probe_wire.follower.ReadBudget): one user's large segments
# republished at every poll cost the poll their share of time, not a copy each.


def _large_valid_body(planted: Planted, k: int) -> bytes:
    """A valid payload over JUDGE_BY_HEADER_BYTES: variant ``k`` with its models repeated."""
    payload = variant(planted.pid, planted.ticks, k)
    payload["models"] = (payload["models"] * 40)[:40]
    body = msgpack.packb(payload)
    assert len(body) > JUDGE_BY_HEADER_BYTES
    return body


def test_a_large_segment_republished_at_every_poll_is_read_as_its_users_time_allows(planted, pread_bytes):
    """A 16 MiB corrupt payload whose seq moves at every poll (a writer that only bumps it): without
    a budget (`--pid`) each poll copies it again; with one, the first poll reads it and the time that
    took is owed: later polls give the verdict of the last read from its header alone, until the
    polls have paid it back."""
    planted.put(b"\xc1" * FULL)
    budget = ReadBudget(per_poll_s=1e-9)  # paid back only after far more polls than this test makes
    per_poll, follower = [], SegmentFollower(budget=budget)
    try:
        for seq in range(2, 2 + 2 * POLLS, 2):
            planted.put(b"\xc1" * FULL, seq=seq)
            budget.new_poll()
            pread_bytes.clear()
            r = follower.read(planted.pid, planted.ticks)
            per_poll.append(sum(pread_bytes))
            assert r.state == "corrupt" and r.error.startswith("bad msgpack"), r
    finally:
        follower.close()
    assert per_poll[0] >= FULL and max(per_poll[1:]) <= LATER_POLL_BYTES, per_poll
    assert budget.owing() == {os.getuid()} and budget.deferred == {os.getuid()}
    unbudgeted = SegmentFollower()
    try:
        for seq in (100, 102):
            planted.put(b"\xc1" * FULL, seq=seq)
            pread_bytes.clear()
            assert unbudgeted.read(planted.pid, planted.ticks).state == "corrupt"
            assert sum(pread_bytes) >= FULL  # read again: each new header is a new publish
    finally:
        unbudgeted.close()


def test_a_large_ok_payload_is_judged_by_its_header_and_its_last_read_stands_while_put_off(planted, pread_bytes):
    """A large valid payload kept open: its unchanged header is its last read again (64 bytes); a
    new publish put off by the budget leaves the last payload in place (shown late), and is read
    once the user's time is back."""
    planted.put(_large_valid_body(planted, 1))
    budget = ReadBudget(per_poll_s=1.0)
    follower = SegmentFollower(budget=budget)
    try:
        first = follower.read(planted.pid, planted.ticks)
        assert first.state == "ok" and first.payload["published_at"] == 1001.0
        pread_bytes.clear()
        assert follower.read(planted.pid, planted.ticks) is first and sum(pread_bytes) <= HEADER.size
        budget.spend(os.getuid(), 2.0)  # owes a second: the next large read waits
        planted.put(_large_valid_body(planted, 2), seq=4)
        pread_bytes.clear()
        assert follower.read(planted.pid, planted.ticks) is first and sum(pread_bytes) <= HEADER.size
        budget.new_poll()
        budget.new_poll()  # paid back
        assert follower.read(planted.pid, planted.ticks).payload["published_at"] == 1002.0
    finally:
        follower.close()


def test_a_small_payload_is_never_put_off(planted):
    """Payloads a probe's default segment holds (64 KiB) are read at every new publish whatever the
    budget says: it bounds only what larger ones cost."""
    budget = ReadBudget(per_poll_s=1e-9)
    budget.spend(os.getuid(), 10.0)
    follower = SegmentFollower(budget=budget)
    try:
        for k in (1, 2, 3):
            planted.put(msgpack.packb(variant(planted.pid, planted.ticks, k)), seq=2 * k)
            assert follower.read(planted.pid, planted.ticks).payload["published_at"] == 1000.0 + k
    finally:
        follower.close()


def test_the_budget_gives_each_user_its_time_and_takes_what_reads_took():
    budget = ReadBudget(per_poll_s=0.001)
    assert budget.allows(1) and budget.allows(2)
    budget.spend(1, 0.0035)  # 2.5 ms owed
    assert not budget.allows(1) and budget.allows(2) and budget.deferred == {1}
    polls = 0
    while not budget.allows(1):
        budget.new_poll()
        polls += 1
    assert polls == 3 and budget.owing() == set() and budget.deferred == set()
