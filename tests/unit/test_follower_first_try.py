"""A follower's read of a kept file, whose check of the last read's bytes is the first try of the
new read (read_consistent's ``first``), gives the very read the follower gave before: the old path
is kept here as the oracle, and both read the same scripted file.

The file is a timeline of states (whole segment files: publishes, a writer mid-publish, flipped
bytes, a truncated file, a closed one). A writer may move on only where a reader could see it move:
between the copy of the bytes and the seq check, and during a retry's sleep. At those moments a
drawn schedule says whether the file goes on to its next state. Both paths see a writer move at
the same moments of their protocol, so they must agree on every field of every read (the reads a
follower does not keep included), on the bytes they keep and on the payload prefix they leave for
the next read.
"""

from __future__ import annotations

import os
import time
import zlib

import msgpack
from hypothesis import example, given, settings
from hypothesis import strategies as st

from probe_wire import SegmentWriter, read_segment
from probe_wire import follower as follower_module
from probe_wire.codec import decode_payload
from probe_wire.follower import READ_SLACK_BYTES, SegmentFollower
from probe_wire.header import (
    FLAG_CLOSED,
    FLAG_TRIMMED,
    FORMAT_VERSION,
    HEADER,
    HEADER_BYTES,
    MAGIC,
    PIDNS,
    PIDNS_OFFSET,
    SEQ,
    SEQ_OFFSET,
)
from probe_wire.prefix import PrefixSlot, decode_with_prefix, find_prefix
from probe_wire.procid import pid_namespace_id, process_start_ticks
from probe_wire.reader import CLOSED_ERROR, READ_ATTEMPTS, SegmentRead, _read_seq, read_consistent
from probe_wire.schema import validate_payload
from tests.unit.test_probe_segment import _rich_payload

PID, TICKS = 4242, 777
FD = 1_000_003  # no such descriptor: only the scripted pread below answers for it


# -------------------------------------------------------------------------------------------------
# The oracle: the follower's read of a kept file as it was before (probe_wire at 9a54028; _finish as
# it was at f765130, before the header's values went positionally into SegmentRead).


def _old_read_consistent(fd, pid, size, expected, attempts, slot=None):
    last = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(0.0002)
        raw = os.pread(fd, HEADER_BYTES, 0)
        if len(raw) < HEADER_BYTES:
            return (SegmentRead(pid=pid, state="corrupt", error="file shorter than the header"), None)
        magic, version, hsize, seq, wpid, flags, ticks, length, crc, published_at = HEADER.unpack(raw)
        wns = PIDNS.unpack_from(raw, PIDNS_OFFSET)[0]
        if seq & 1:
            last = SegmentRead(
                pid=pid, state="busy", error=f"writer mid-publish (seq {seq} odd) on every try", seq=seq
            )
            continue
        if seq == 0 and magic == b"\0" * 8:
            return (SegmentRead(pid=pid, state="initialising", error="header not written yet"), None)
        common = dict(
            pid=pid,
            writer_pid=wpid,
            writer_start_ticks=ticks,
            published_at=published_at,
            trimmed=bool(flags & FLAG_TRIMMED),
            seq=seq,
            writer_pidns=wns,
        )
        reason = None
        if magic != MAGIC:
            reason = f"bad magic {magic!r}"
        elif version != FORMAT_VERSION:
            reason = f"unsupported format version {version}"
        elif hsize != HEADER_BYTES:
            reason = f"header size {hsize}, expected {HEADER_BYTES}"
        elif length > size - HEADER_BYTES:
            reason = f"payload length {length} exceeds the segment's {size - HEADER_BYTES} bytes"
        elif length == 0:
            reason = "payload length 0"
        if reason is not None:
            if _read_seq(fd) != seq:
                continue
            return (SegmentRead(state="corrupt", error=reason, **common), None)
        data = os.pread(fd, length, HEADER_BYTES)
        if _read_seq(fd) != seq:
            last = SegmentRead(state="busy", error="writer kept publishing during every try", **common)
            continue
        if len(data) != length:
            return (
                SegmentRead(state="corrupt", error="file shorter than the payload length", **common),
                None,
            )
        if zlib.crc32(data) != crc:
            last = SegmentRead(state="corrupt", error="payload crc32 mismatch", **common)
            continue
        r = _old_finish(data, expected, common, slot)
        if flags & FLAG_CLOSED:  # issue 25: a closed segment's last payload, never kept
            return SegmentRead(state="missing", payload=r.payload, error=CLOSED_ERROR, **common), None
        return r, (raw + data if r.state == "ok" else None)
    return (
        last if last is not None else SegmentRead(pid=pid, state="busy", error="no consistent read")
    ), None


def _old_finish(data, expected, common, slot=None):
    pid = common["pid"]
    if common["writer_pid"] != pid & 0xFFFFFFFF:
        return SegmentRead(state="corrupt", error=f"header names writer pid {common['writer_pid']}", **common)
    ticks = common["writer_start_ticks"]
    wns, ours = common["writer_pidns"], pid_namespace_id()
    if wns and ours and wns != ours:
        return SegmentRead(state="stale", error=f"written in another PID namespace ({wns:#x})", **common)
    if expected is None:
        live = process_start_ticks(pid)
        if live is None:
            return SegmentRead(state="stale", error=f"process {pid} is not running", **common)
        if ticks != live:
            return SegmentRead(
                state="stale",
                error=f"writer start_ticks {ticks} != live process's {live} (pid reused)",
                **common,
            )
    elif ticks != expected:
        return SegmentRead(
            state="stale", error=f"writer start_ticks {ticks} != expected {expected}", **common
        )
    payload = decode_with_prefix(slot.prefix, data) if slot is not None and slot.prefix is not None else None
    if payload is None:
        try:
            obj = decode_payload(data)
        except Exception as e:  # noqa: BLE001
            return SegmentRead(state="corrupt", error=f"bad msgpack: {type(e).__name__}: {e}"[:300], **common)
        payload, reason = validate_payload(obj)
        if payload is None:
            return SegmentRead(state="corrupt", error=reason, **common)
        if slot is not None:
            slot.prefix = find_prefix(data, obj, payload)
    if payload["pid"] != pid:
        return SegmentRead(
            state="corrupt", error=f"payload.pid {payload['pid']} in segment of {pid}", **common
        )
    if payload["start_ticks"] is not None and payload["start_ticks"] != ticks:
        return SegmentRead(state="corrupt", error="payload.start_ticks differs from the header's", **common)
    return SegmentRead(state="ok", payload=payload, **common)


def _old_read_again(fd, pid, size, expected, raw, last, slot):
    if os.pread(fd, len(raw), 0) == raw:
        return last, raw
    return _old_read_consistent(fd, pid, size, expected, READ_ATTEMPTS, slot)


# The new path, twice: read_consistent given the check's bytes as its first try (every read it makes,
# kept or not), and the follower's own read of a kept file (what it returns and keeps).


def _first_try_read_again(fd, pid, size, expected, raw, last, slot):
    first = os.pread(fd, min(size, len(raw) + READ_SLACK_BYTES), 0)
    if first.startswith(raw):
        return last, raw
    return read_consistent(fd, pid, size, expected, READ_ATTEMPTS, slot, first)


REOPENED = SegmentRead(pid=PID, state="missing", error="the follower dropped the file and looked again")


def _follower_read_again(fd, pid, size, expected, raw, last, slot):
    follower = SegmentFollower()
    follower._keep((pid, expected), fd, size, raw, last, slot)
    follower._prefixes[(pid, expected)] = slot
    follower._open_read = lambda ident, name_ticks, *where: REOPENED  # what a drop leads to: not this test's
    r = follower.read(pid, expected)
    entry = follower._open.get((pid, expected))
    # A dropped file is looked for again by its path, unless it was closed: its last publish is the read.
    assert (entry is None) == (r is REOPENED or r.error == CLOSED_ERROR)
    return r, None if entry is None else entry[2]


# -------------------------------------------------------------------------------------------------
# The scripted file.


class Timeline:
    """A segment file that is ``states[i]``, moving on to the next state at a seq check or a retry's
    sleep when the schedule says so; every pread of FD is checked against the bound ``size``."""

    def __init__(self, states: list[bytes], schedule: list[bool], size: int):
        self.states, self.schedule, self.size = states, list(schedule), size
        self.i = self.events = 0
        self.preads = 0

    def _moment(self) -> None:
        moves = self.events < len(self.schedule) and self.schedule[self.events]
        self.events += 1
        if moves and self.i + 1 < len(self.states):
            self.i += 1

    def pread(self, fd, n, offset, _real=os.pread):
        if fd != FD:
            return _real(fd, n, offset)
        assert 0 <= n <= self.size, (n, self.size)  # never more than the file's size at open
        self.preads += 1
        if (n, offset) == (SEQ.size, SEQ_OFFSET):
            self._moment()  # the writer may have published between the copy and this check
        return self.states[self.i][offset : offset + n]

    def sleep(self, _seconds) -> None:
        self._moment()


def _run(read, states, schedule, size, raw, last, slot):
    timeline = Timeline(states, schedule, size)
    real_pread, real_sleep = os.pread, time.sleep
    os.pread, time.sleep = timeline.pread, timeline.sleep
    try:
        r, kept = read(FD, PID, size, TICKS, raw, last, slot)
    finally:
        os.pread, time.sleep = real_pread, real_sleep
    return r, kept, timeline


# -------------------------------------------------------------------------------------------------
# Segment states.


def _payload_bytes(variant: int, events: int) -> bytes:
    p = _rich_payload(PID)
    p["start_ticks"] = TICKS
    p["models"][0]["forward_calls"] += variant
    p["published_at"] = 1000.0 + variant
    p["events"] = [{"time": float(i), "name": f"event-{i}-" + "x" * (i % 7)} for i in range(events)]
    return msgpack.packb(p, use_bin_type=True)


def _segment(payload: bytes, size: int, *, seq: int = 2, flags: int = 0, pidns: int = 0, **fields) -> bytes:
    header = {
        "magic": MAGIC,
        "version": FORMAT_VERSION,
        "header_size": HEADER_BYTES,
        "seq": seq,
        "writer_pid": PID,
        "flags": flags,
        "start_ticks": TICKS,
        "length": len(payload),
        "crc": zlib.crc32(payload),
        "published_at": 1.5,
    }
    header.update(fields)
    raw = bytearray(HEADER.pack(*header.values()) + payload)
    PIDNS.pack_into(raw, PIDNS_OFFSET, pidns)
    return bytes(raw[:size].ljust(size, b"\0"))


_HOSTILE = st.sampled_from(
    [
        "clean",
        "mid-publish",  # odd seq, the new payload half written over the old
        "same-seq",  # new bytes under the old seq (a broken or hostile writer)
        "flip",
        "flip-in-place",  # a byte of the last read's own bytes flipped: its header, seq and all
        "truncate",
        "closed",
        "trimmed",
        "bad-magic",
        "bad-version",
        "bad-header-size",
        "length-past-size",
        "length-zero",
        "bad-crc",
        "other-writer-pid",
        "other-ticks",
        "other-pidns",
        "our-pidns",
        "zeroed",
        "not-msgpack",
    ]
)


@st.composite
def _state(draw, size: int, base: bytes, seq: int) -> bytes:
    variant = draw(st.integers(0, 3))
    # Shorter, a little longer (within the slack), or much longer than the last read's payload.
    events = draw(st.sampled_from([0, 1, 2, 5, 40, 120]))
    payload = _payload_bytes(variant, events)
    kind = draw(_HOSTILE)
    if kind == "mid-publish":
        cut = draw(st.integers(0, len(payload)))
        half = bytearray(base)
        half[HEADER_BYTES : HEADER_BYTES + cut] = payload[:cut]
        SEQ.pack_into(half, SEQ_OFFSET, seq + 1)
        return bytes(half[:size])
    if kind == "flip-in-place":
        at = draw(st.integers(0, HEADER_BYTES + int.from_bytes(base[40:44], "little") - 1))
        return base[:at] + bytes([base[at] ^ draw(st.integers(1, 255))]) + base[at + 1 :]
    fields: dict = {}
    if kind == "same-seq":
        fields["seq"] = seq
    elif kind == "closed":
        fields["flags"] = FLAG_CLOSED
    elif kind == "trimmed":
        fields["flags"] = FLAG_TRIMMED
    elif kind == "bad-magic":
        fields["magic"] = b"DSHPRB\x00\x02"
    elif kind == "bad-version":
        fields["version"] = 2
    elif kind == "bad-header-size":
        fields["header_size"] = 72
    elif kind == "length-past-size":
        fields["length"] = size - HEADER_BYTES + draw(st.integers(1, 100))
    elif kind == "length-zero":
        fields["length"] = 0
    elif kind == "bad-crc":
        fields["crc"] = zlib.crc32(payload) ^ 1
    elif kind == "other-writer-pid":
        fields["writer_pid"] = PID + 1
    elif kind == "other-ticks":
        fields["start_ticks"] = TICKS + 1
    elif kind == "other-pidns":
        fields["pidns"] = pid_namespace_id() ^ 0xFF
    elif kind == "our-pidns":
        fields["pidns"] = pid_namespace_id()
    elif kind == "not-msgpack":
        payload = b"\xc1" + payload[1:]
    state = _segment(payload, size, **{"seq": seq + 2, **fields})
    if kind == "flip":
        at = draw(st.integers(0, min(size, HEADER_BYTES + len(payload)) - 1))
        state = state[:at] + bytes([state[at] ^ draw(st.integers(1, 255))]) + state[at + 1 :]
    elif kind == "truncate":
        state = state[: draw(st.integers(0, min(size, HEADER_BYTES + len(payload) + 10)))]
    elif kind == "zeroed":
        state = bytes(size)
    return state


def _good_read(state: bytes, size: int, slot: PrefixSlot) -> tuple[SegmentRead, bytes]:
    """The follower's last good read of ``state``, made by the oracle (as the follower made it)."""
    timeline = Timeline([state], [], size)
    real = os.pread
    os.pread = timeline.pread
    try:
        r, raw = _old_read_consistent(FD, PID, size, TICKS, READ_ATTEMPTS, slot)
    finally:
        os.pread = real
    assert r.state == "ok", r
    return r, raw


def _same_read(a: SegmentRead, b: SegmentRead) -> bool:
    # msgpack tells 1, 1.0 and True apart where == does not.
    return a == b and msgpack.packb(a.payload) == msgpack.packb(b.payload)


def _prefix_of(slot: PrefixSlot):
    p = slot.prefix
    return None if p is None else (p.data, msgpack.packb(p.clean), p.rest_header)


@st.composite
def _scenario(draw):
    last_events = draw(st.sampled_from([0, 1, 5, 40]))
    first_payload = _payload_bytes(0, last_events)
    # From just the first payload's bytes (a longer one then exceeds the file) to the usual 8 KiB.
    size = draw(st.sampled_from([HEADER_BYTES + len(first_payload), HEADER_BYTES + len(first_payload) + 300, 8192]))
    seq = 2 * draw(st.integers(1, 2**20))
    base = _segment(first_payload, size, seq=seq)
    with_prefix = draw(st.booleans())  # a slot that knows the prefix, or one that does not yet
    states = [draw(_state(size, base, seq)) for _ in range(draw(st.integers(1, 4)))]
    if draw(st.booleans()):
        states.insert(0, base)  # the file as it was at the last read: unchanged, at first
    schedule = draw(st.lists(st.booleans(), max_size=2 * READ_ATTEMPTS + 2))
    return size, base, with_prefix, states, schedule


def _compare(size, base, with_prefix, states, schedule):
    slots = []
    for _ in range(3):
        slot = PrefixSlot()
        last, raw = _good_read(base, size, slot)
        if not with_prefix:
            slot.prefix = None
        slots.append((slot, last, raw))
    (old_slot, last, raw), (new_slot, _, _), (follower_slot, _, _) = slots
    r_old, kept_old, t_old = _run(_old_read_again, states, schedule, size, raw, last, old_slot)
    r_new, kept_new, t_new = _run(_first_try_read_again, states, schedule, size, raw, last, new_slot)
    assert _same_read(r_old, r_new), (r_old, r_new)
    assert kept_old == kept_new and (kept_old is raw) == (kept_new is raw)
    assert (r_new is last) == (r_old is last)
    assert _prefix_of(old_slot) == _prefix_of(new_slot)
    assert t_new.events == t_old.events  # the writer could move at the same moments in both
    # The follower: the same read when it is ok (the very same object when unchanged), the same
    # bytes kept, the same prefix; a read that is not ok drops the file.
    r_fol, kept_fol, t_fol = _run(_follower_read_again, states, schedule, size, raw, last, follower_slot)
    if r_old.state == "ok":
        assert _same_read(r_old, r_fol) and (r_fol is last) == (r_old is last) and kept_fol == kept_old
    elif r_old.error == CLOSED_ERROR:  # the writer's last publish: returned, the file dropped
        assert _same_read(r_old, r_fol) and kept_fol is None
    else:
        assert r_fol is REOPENED and kept_fol is None
    assert _prefix_of(follower_slot) == _prefix_of(old_slot)
    assert (t_fol.events, t_fol.preads) == (t_new.events, t_new.preads)
    return r_new, t_old, t_new


@settings(max_examples=1500, deadline=None)
@given(_scenario())
def test_a_kept_files_read_is_the_old_paths_read(scenario):
    _compare(*scenario)


@settings(max_examples=300, deadline=None)
@given(
    last_events=st.sampled_from([0, 5, 40]),
    events=st.sampled_from([0, 1, 2, 5, 40, 41]),
    variant=st.integers(1, 3),
    mid_publish=st.booleans(),
    seq_moves=st.booleans(),
)
@example(last_events=5, events=40, variant=1, mid_publish=False, seq_moves=False)  # longer than the slack
@example(last_events=40, events=0, variant=1, mid_publish=True, seq_moves=True)
def test_a_publish_read_by_a_protocol_writer_timeline(last_events, events, variant, mid_publish, seq_moves):
    """The writer as the probe is: seq odd while it writes, seq even and the new bytes after."""
    size = 8192
    base = _segment(_payload_bytes(0, last_events), size, seq=10)
    new = _payload_bytes(variant, events)
    done = _segment(new, size, seq=12)
    half = bytearray(base)
    half[HEADER_BYTES : HEADER_BYTES + len(new) // 2] = new[: len(new) // 2]
    SEQ.pack_into(half, SEQ_OFFSET, 11)
    states = ([bytes(half)] if mid_publish else []) + [done]
    if seq_moves:  # and again, while the reader copies
        states.append(_segment(_payload_bytes(variant + 1, events), size, seq=14))
    r, t_old, t_new = _compare(size, base, True, states, [True, True, False, True])
    assert r.state == "ok"
    if not mid_publish and not seq_moves and len(new) <= len(_payload_bytes(0, last_events)) + READ_SLACK_BYTES:
        # The check's copy held the whole new payload: the seq check was the read's one more pread.
        assert (t_new.preads, t_old.preads) == (2, 4)


def test_a_follower_reads_a_real_writers_publishes_as_read_segment_does(live_pid, monkeypatch):
    """Publishes longer and shorter than the last, and one longer than the slack: each read through
    the kept file, each what read_segment says of it."""
    firsts = []

    def counted(*args):
        firsts.append(args[6] if len(args) > 6 else None)
        return read_consistent(*args)

    monkeypatch.setattr(follower_module, "read_consistent", counted)
    ticks = process_start_ticks(live_pid)
    writer = SegmentWriter(pid=live_pid, start_ticks=ticks)
    follower = SegmentFollower()
    try:
        for events in (0, 3, 1, 60, 2, 2):
            payload = _rich_payload(live_pid)
            payload["start_ticks"] = ticks
            payload["events"] = [{"time": float(i), "name": f"e{i}"} for i in range(events)]
            writer.publish(payload)
            r = follower.read(live_pid, ticks)
            assert _same_read(r, read_segment(live_pid, expected_start_ticks=ticks))
            assert r.state == "ok" and len(follower) == 1
        assert firsts[0] is None and all(first is not None for first in firsts[1:]) and len(firsts) == 6
    finally:
        follower.close()
        writer.close()


# -------------------------------------------------------------------------------------------------
# retain: what it closes and forgets, in the order it did before its subset tests.


def _old_retain(follower, identities):
    for ident in [i for i in follower._open if i not in identities]:
        follower._drop(ident)
    for ident in [i for i in follower._missing_reads if i not in identities]:
        del follower._missing_reads[ident]
    for ident in [i for i in follower._prefixes if i not in identities]:
        del follower._prefixes[ident]


class _Recording(SegmentFollower):
    def __init__(self):
        super().__init__()
        self.dropped = []

    def _drop(self, ident):
        self.dropped.append(ident)
        self._open.pop(ident, None)


_IDENTS = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(opened=_IDENTS, missing=_IDENTS, prefixes=_IDENTS, kept=_IDENTS)
def test_retain_closes_and_forgets_what_it_did_before(opened, missing, prefixes, kept):
    followers = []
    for _ in range(2):
        f = _Recording()
        for i in opened:
            f._open[i] = (FD,)
        for n, i in enumerate(missing):
            f._missing_reads[i] = n
        for i in prefixes:
            f._prefixes[i] = PrefixSlot()
        followers.append(f)
    old, new = followers
    _old_retain(old, set(kept))
    new.retain(set(kept))
    assert new.dropped == old.dropped
    assert list(new._open) == list(old._open)
    assert list(new._missing_reads.items()) == list(old._missing_reads.items())
    assert list(new._prefixes) == list(old._prefixes)


@settings(max_examples=400, deadline=None)
@given(
    kind=_HOSTILE,
    expected=st.sampled_from([None, TICKS, TICKS + 1]),
    with_prefix=st.booleans(),
    payload_change=st.sampled_from(["none", "pid", "start_ticks", "no-start-ticks"]),
    data=st.data(),
)
def test_every_outcome_of_one_read_is_the_old_codes(kind, expected, with_prefix, payload_change, data):
    """read_consistent against the oracle on one state of the file, for every outcome: the header's
    values go into SegmentRead positionally now (no dict of them), in SegmentRead's order, on
    every path (a process that is not running, when no start_ticks is expected, included)."""
    size = 8192
    base = _segment(_payload_bytes(0, 1), size, seq=10)
    state = data.draw(_state(size, base, 10))
    if payload_change != "none":
        p = _rich_payload(PID)
        p["start_ticks"] = TICKS
        if payload_change == "pid":
            p["pid"] = PID + 1
        elif payload_change == "start_ticks":
            p["start_ticks"] = TICKS + 5
        else:
            p["start_ticks"] = None
        state = _segment(msgpack.packb(p, use_bin_type=True), size, seq=12)
    slots = [PrefixSlot(), PrefixSlot()]
    if with_prefix:
        for slot in slots:
            _good_read(base, size, slot)
    real = os.pread
    reads = []
    for slot, read in zip(slots, (_old_read_consistent, read_consistent)):
        os.pread = Timeline([state], [], size).pread
        try:
            reads.append(read(FD, PID, size, expected, READ_ATTEMPTS, slot))
        finally:
            os.pread = real
    (r_old, kept_old), (r_new, kept_new) = reads
    assert _same_read(r_old, r_new) and kept_old == kept_new, (r_old, r_new)
    assert _prefix_of(slots[0]) == _prefix_of(slots[1])
