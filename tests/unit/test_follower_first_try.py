"""A follower's read of a kept file, whose check of the last read's bytes is the first try of the
new read (read_consistent's ``first``), is the plain read of the file: the check, then
read_consistent with no first try. Both read the same scripted file; every read is also held to the
reader's specification (docs/design.md, "Reading a segment"): an ok read hands out a payload some
state of the file published whole, with that state's bytes kept, and one state read alone gives the
state and error its kind of damage calls for.

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

from hostfs.procid import pid_namespace_id, process_start_ticks
from probe_wire import SegmentWriter, read_segment
from probe_wire import follower as follower_module
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
from probe_wire.prefix import PrefixSlot
from probe_wire.reader import CLOSED_ERROR, READ_ATTEMPTS, SegmentRead, read_consistent
from probe_wire.schema import MAX_EVENTS, validate_payload
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.payloads import rich_payload

PID, TICKS = 4242, 777
FD = 1_000_003  # no such descriptor: only the scripted pread below answers for it


# -------------------------------------------------------------------------------------------------
# The plain path: the check of the last read's bytes, then a read of the file from its first byte.


def _plain_read_again(fd, pid, size, expected, raw, last, slot):
    if os.pread(fd, len(raw), 0) == raw:
        return last, raw
    return read_consistent(fd, pid, size, expected, READ_ATTEMPTS, slot)


# The first-try path, twice: read_consistent given the check's bytes as its first try (every read it makes,
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
    p = rich_payload(PID)
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
def _state(draw, size: int, base: bytes, seq: int, kind: str | None = None) -> bytes:
    variant = draw(st.integers(0, 3))
    # Shorter, a little longer (within the slack), or much longer than the last read's payload; at
    # most the schema's MAX_EVENTS, so a whole publish is a valid one (the spec's "clean" is "ok").
    events = draw(st.sampled_from([0, 1, 2, 5, 40, MAX_EVENTS]))
    payload = _payload_bytes(variant, events)
    kind = draw(_HOSTILE) if kind is None else kind
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
    """The follower's last good read of ``state``, made as the follower made it (its first read)."""
    timeline = Timeline([state], [], size)
    real = os.pread
    os.pread = timeline.pread
    try:
        r, raw = read_consistent(FD, PID, size, TICKS, READ_ATTEMPTS, slot)
    finally:
        os.pread = real
    assert r.state == "ok", r
    return r, raw


def _same_read(a: SegmentRead, b: SegmentRead) -> bool:
    # msgpack tells 1, 1.0 and True apart where == does not.
    return a == b and msgpack.packb(a.payload) == msgpack.packb(b.payload)


def _published(state: bytes) -> tuple[dict, bytes] | None:
    """(payload, bytes to keep) of a state that holds a whole publish: an even seq, a msgpack payload
    of its header's length whose crc32 is its header's; None for any other state."""
    if len(state) < HEADER_BYTES:
        return None
    header = HEADER.unpack_from(state)
    seq, length, crc = header[3], header[7], header[8]
    data = state[HEADER_BYTES : HEADER_BYTES + length]
    if seq & 1 or header[0] != MAGIC or not length or len(data) != length or zlib.crc32(data) != crc:
        return None
    try:
        return msgpack.unpackb(data), state[: HEADER_BYTES + length]
    except ValueError:  # a whole publish of bytes that are not msgpack
        return None


def check_read_of_timeline(r: SegmentRead, kept, states, raw, last) -> None:
    """What the reader's specification says of a read of a file that went through ``states``: the
    last read again exactly when the file still began with its bytes; an ok read never a torn one
    (the payload one state published whole, with its header's seq, and that state's bytes kept)."""
    unchanged = states[0].startswith(raw)
    assert (r is last) == unchanged, (r, unchanged)
    if r is last:
        assert kept is raw
    elif r.state == "ok":
        whole = [_published(state) for state in states]
        match = [w for w, state in zip(whole, states) if w and w[1] == kept and HEADER.unpack_from(state)[3] == r.seq]
        assert match, (r, "an ok read of no state's whole publish")
        assert msgpack.packb(r.payload) == msgpack.packb(validate_payload(match[0][0])[0])
    else:
        assert kept is None  # only an ok read is kept


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
    (plain_slot, last, raw), (new_slot, _, _), (follower_slot, _, _) = slots
    r_plain, kept_plain, t_plain = _run(_plain_read_again, states, schedule, size, raw, last, plain_slot)
    r_new, kept_new, t_new = _run(_first_try_read_again, states, schedule, size, raw, last, new_slot)
    check_read_of_timeline(r_plain, kept_plain, states, raw, last)
    assert _same_read(r_plain, r_new), (r_plain, r_new)
    assert kept_plain == kept_new and (kept_plain is raw) == (kept_new is raw)
    assert (r_new is last) == (r_plain is last)
    assert _prefix_of(plain_slot) == _prefix_of(new_slot)
    assert t_new.events == t_plain.events  # the writer could move at the same moments in both
    # The follower: the same read when it is ok (the very same object when unchanged), the same
    # bytes kept, the same prefix; a read that is not ok drops the file.
    r_fol, kept_fol, t_fol = _run(_follower_read_again, states, schedule, size, raw, last, follower_slot)
    if r_plain.state == "ok":
        assert _same_read(r_plain, r_fol) and (r_fol is last) == (r_plain is last) and kept_fol == kept_plain
    elif r_plain.error == CLOSED_ERROR:  # the writer's last publish: returned, the file dropped
        assert _same_read(r_plain, r_fol) and kept_fol is None
    else:
        assert r_fol is REOPENED and kept_fol is None
    assert _prefix_of(follower_slot) == _prefix_of(plain_slot)
    assert (t_fol.events, t_fol.preads) == (t_new.events, t_new.preads)
    return r_new, t_plain, t_new


@settings(max_examples=examples(1500), deadline=None)
@given(_scenario())
def test_a_kept_files_read_is_the_plain_read(scenario):
    _compare(*scenario)


@settings(max_examples=examples(300), deadline=None)
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
    r, t_plain, t_new = _compare(size, base, True, states, [True, True, False, True])
    assert r.state == "ok"
    if not mid_publish and not seq_moves and len(new) <= len(_payload_bytes(0, last_events)) + READ_SLACK_BYTES:
        # The check's copy held the whole new payload: the seq check was the read's one more pread.
        assert (t_new.preads, t_plain.preads) == (2, 4)


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
            payload = rich_payload(live_pid)
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
# retain: what it closes and forgets.


class _Recording(SegmentFollower):
    def __init__(self):
        super().__init__()
        self.dropped = []

    def _drop(self, ident):
        self.dropped.append(ident)
        self._open.pop(ident, None)


_IDENTS = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2)), max_size=8)
_FORGETS = ("_open", "_missing_reads", "_prefixes", "_judged", "_random")


@settings(max_examples=examples(300), deadline=None)
@given(opened=_IDENTS, missing=_IDENTS, prefixes=_IDENTS, judged=_IDENTS, random_names=_IDENTS, kept=_IDENTS)
def test_retain_closes_and_forgets_every_identity_it_is_not_given(opened, missing, prefixes, judged, random_names, kept):
    """retain(identities): "close the files of every identity not in identities": each such file
    closed once, in the order the files were opened; whatever else is remembered of such an
    identity forgotten; what is remembered of the others kept as it was, in its order."""
    f = _Recording()
    for n, (name, idents) in enumerate(zip(_FORGETS, (opened, missing, prefixes, judged, random_names))):
        table = getattr(f, name)
        for k, ident in enumerate(idents):
            table[ident] = (FD,) if name == "_open" else (n, k)
    before = {name: list(getattr(f, name).items()) for name in _FORGETS}
    f.retain(set(kept))
    assert f.dropped == [i for i, _ in before["_open"] if i not in kept]
    for name in _FORGETS:
        assert list(getattr(f, name).items()) == [(i, v) for i, v in before[name] if i in kept], name


# -------------------------------------------------------------------------------------------------
# One read of one state: the state and error the reader's specification gives each kind of file.

# Kinds whose header the reader refuses before it looks at the payload, and what it says.
_HEADER_REFUSED = {
    "bad-magic": ("corrupt", "bad magic b'DSHPRB\\x00\\x02'"),
    "bad-version": ("corrupt", "unsupported format version 2"),
    "bad-header-size": ("corrupt", f"header size 72, expected {HEADER_BYTES}"),
    "length-zero": ("corrupt", "payload length 0"),
    "bad-crc": ("corrupt", "payload crc32 mismatch"),
    "other-writer-pid": ("corrupt", f"header names writer pid {PID + 1}"),
    "other-pidns": ("stale", "written in another PID namespace"),
    "not-msgpack": ("corrupt", "bad msgpack: "),
    "zeroed": ("initialising", "header not written yet"),
    "mid-publish": ("busy", "writer mid-publish (seq 11 odd) on every try"),
}
# Kinds that leave the publish whole: read as any publish is.
_WHOLE = {"clean", "same-seq", "trimmed", "our-pidns", "closed"}


def expected_one_read(kind: str, expected: int | None, payload_change: str, state: bytes, size: int):
    """(state, error or its start) that the specification gives one read of ``state``, None for a
    kind whose outcome depends on which byte it damaged (flips, truncations)."""
    if payload_change != "none":
        kind = "clean"  # a whole publish of a changed payload
    if kind == "length-past-size":
        length = HEADER.unpack_from(state)[7]
        return "corrupt", f"payload length {length} exceeds the segment's {size - HEADER_BYTES} bytes"
    if kind in _HEADER_REFUSED and kind != "not-msgpack":
        return _HEADER_REFUSED[kind]
    if kind not in _WHOLE and kind not in ("other-ticks", "not-msgpack"):
        return None
    # The header's writer, then the payload: its identity first, then its bytes, then its fields.
    ticks = TICKS + 1 if kind == "other-ticks" else TICKS
    payload_pid = PID + 1 if payload_change == "pid" else PID
    payload_ticks = {"start_ticks": TICKS + 5, "no-start-ticks": None}.get(payload_change, TICKS)
    live = process_start_ticks(PID)
    if expected is None and live is None:
        identity = ("stale", f"process {PID} is not running")
    elif expected is None and ticks != live:
        identity = ("stale", f"writer start_ticks {ticks} != live process's {live} (pid reused)")
    elif expected is not None and ticks != expected:
        identity = ("stale", f"writer start_ticks {ticks} != expected {expected}")
    elif kind == "not-msgpack":
        identity = _HEADER_REFUSED[kind]
    elif payload_pid != PID:
        identity = ("corrupt", f"payload.pid {payload_pid} in segment of {PID}")
    elif payload_ticks is not None and payload_ticks != ticks:
        identity = ("corrupt", "payload.start_ticks differs from the header's")
    else:
        identity = ("ok", None)
    if kind == "closed":
        return "missing", CLOSED_ERROR  # the writer's last publish, whatever its identity said
    return identity


@settings(max_examples=examples(400), deadline=None)
@given(
    kind=_HOSTILE,
    expected=st.sampled_from([None, TICKS, TICKS + 1]),
    with_prefix=st.booleans(),
    payload_change=st.sampled_from(["none", "pid", "start_ticks", "no-start-ticks"]),
    data=st.data(),
)
def test_every_outcome_of_one_read(kind, expected, with_prefix, payload_change, data):
    """read_consistent on one state of the file, for every outcome: the state and error the
    specification gives its kind; the header's values in the read wherever the header was whole and
    consistent; an ok read's payload the published one; a payload prefix never changes a read."""
    size = 8192
    base = _segment(_payload_bytes(0, 1), size, seq=10)
    state = data.draw(_state(size, base, 10, kind))
    if payload_change != "none":
        p = rich_payload(PID)
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
        _good_read(base, size, slots[0])
    real = os.pread
    reads = []
    for slot in slots:
        os.pread = Timeline([state], [], size).pread
        try:
            reads.append(read_consistent(FD, PID, size, expected, READ_ATTEMPTS, slot))
        finally:
            os.pread = real
    (r, kept), (r_fresh, kept_fresh) = reads
    assert _same_read(r, r_fresh) and kept == kept_fresh, (r, r_fresh)  # the prefix changes nothing
    want = expected_one_read(kind, expected, payload_change, state, size)
    if want is not None:
        assert r.state == want[0] and (r.error or "").startswith(want[1] or ""), (kind, r, want)
        assert (r.error is None) == (want[1] is None), (kind, r)
    assert (kept is not None) == (r.state == "ok")
    whole = _published(state)
    if r.state == "ok":
        assert whole is not None and kept == whole[1]
        assert msgpack.packb(r.payload) == msgpack.packb(validate_payload(whole[0])[0])
    if r.state not in ("busy", "initialising") and r.error != "file shorter than the header":
        # The header's values, positionally in SegmentRead's order, on every path that read it whole.
        header = HEADER.unpack_from(state)
        wanted = (header[4], header[6], header[9], bool(header[5] & FLAG_TRIMMED), header[3])
        assert (r.writer_pid, r.writer_start_ticks, r.published_at, r.trimmed, r.seq) == wanted, (kind, r)
        assert r.writer_pidns == PIDNS.unpack_from(state, PIDNS_OFFSET)[0]
