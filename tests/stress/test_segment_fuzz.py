"""Bad bytes in segments named like probe segments of live pids, through the sidecar's own poll.

10,000 hypothesis cases in all under HYPOTHESIS_PROFILE=thorough (random files and mutated valid
segments; the default ci profile caps each test, tests/helpers/hypothesis_profiles.py): the poll never raises,
answers for the pid with the state the reader gives, never hands out a payload that is not valid
schema 1, and the status document reports `probe-unreadable` (naming the pid and the reason)
exactly when the segment is corrupt. Allocation stays bounded: files are capped by the reader at
16 MiB and msgpack lengths by the data's own size (checked with tracemalloc on the worst cases)."""

from __future__ import annotations

import os
import random
import resource
import subprocess
import tracemalloc
import zlib

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import probe_wire as segment
from hostfs.procid import process_start_ticks
from probe_wire import HEADER, MAGIC, MAX_SEGMENT_BYTES, SegmentWriter, read_segment
from probe_wire import reader as wire_reader
from probe_wire.records import payload_record
from sidecar.poll.poller import Poller
from sidecar.sources.segments import BUSY_POLLS_UNREADABLE
from sidecar.verdict import Rules
from tests.helpers.harness import codes
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.recording_source import RecordingSegmentSource
from tests.helpers.stress_jobs import variant

RANDOM_CASES = examples(4000)
MUTATED_CASES = examples(6000)  # with RANDOM_CASES: the 10,000 under the thorough profile


class Target:
    """A live `sleep` watched by a real Poller; `put(bytes)` replaces its segment file."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.ticks = process_start_ticks(self.pid)
        self.path = segment.segment_path(self.pid)
        # No removal of dead processes' segments here: 10,000 polls in a tight loop would race other
        # test runs on this machine that look at their own dead segments (the kill tests cover it).
        self.src = RecordingSegmentSource(clean_dead=False)
        # Warnings are held for a few polls after their cause goes (hysteresis); each case here must
        # stand alone, so they are held for none.
        self.poller = Poller(
            self.pid,
            interval_s=1.0,
            segment_source=self.src,
            system_gpus_fn=list,
            rules=Rules(hysteresis_off_polls=1),
        )
        w = SegmentWriter(pid=self.pid, start_ticks=self.ticks)
        w.publish(variant(self.pid, self.ticks, 3))
        with open(self.path, "rb") as f:
            self.valid = f.read()  # a whole, valid segment of this pid: the seed of the mutations
        w.detach()
        self.cases = 0
        self.states: dict[str, int] = {}

    def put(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def check(self, data: bytes) -> None:
        self.put(data)
        expected = read_segment(self.pid, expected_start_ticks=self.ticks)
        # Each case stands alone: no busy streak, and no last good payload (which a closed or
        # vanished segment of a live process keeps showing, as after the probe's exit).
        self.src._busy_count.clear()
        self.src._last_good.clear()
        self.src._last_ok.clear()
        polls = BUSY_POLLS_UNREADABLE if expected.state == "busy" else 1
        for _ in range(polls):
            doc = self.poller.poll_once()
        r = self.src.last[self.pid]
        (shown,) = [p for p in doc["processes"] if p["pid"] == self.pid]
        # A segment marked closed gives its last payload (the probe's final publish): the sidecar
        # shows it as the live process's facts.
        want = "ok" if expected.state == "missing" and expected.payload is not None else expected.state
        assert r.state == want == shown["probe_state"], (r, expected)
        self.states[r.state] = self.states.get(r.state, 0) + 1
        self.cases += 1
        if r.state == "ok":
            # The source hands up the typed record of the payload the reader validates.
            clean, reason = segment.validate_payload(expected.payload)
            assert reason is None and clean is not None
            assert payload_record(clean) == r.payload and r.payload.pid == self.pid
        else:
            assert r.payload is None or r.state in ("busy", "corrupt")
        unreadable = r.state in ("corrupt", "foreign-owner", "busy")
        warned = [w for w in doc["warnings"] if w["code"] == "probe-unreadable"]
        if unreadable:
            (w,) = warned
            assert w["pids"] == [self.pid] and str(self.pid) in w["message"]
            assert (r.error or r.state) in w["message"], (r.error, w["message"])
            assert shown["probe_error"] == r.error
        else:
            assert not warned, (r, warned)
        assert "probe-unreadable" in codes(doc) or not unreadable

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        segment.remove_segment(self.pid)


@pytest.fixture(scope="module")
def target():
    t = Target()
    yield t
    t.close()
    print(f"\n{t.cases} fuzz cases through the sidecar's poll; states {t.states}")


@pytest.fixture(autouse=True)
def _no_retry_sleep(monkeypatch):
    # The reader sleeps 0.2 ms between retries to let a live writer finish a publish; no writer runs
    # here, so the sleeps would only make 10,000 cases slow. The retries themselves still happen.
    monkeypatch.setattr(wire_reader, "_RETRY_SLEEP_S", 0.0)


FUZZ = dict(
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.slow
@settings(max_examples=RANDOM_CASES, **FUZZ)
@given(data=st.one_of(st.binary(max_size=64), st.binary(min_size=64, max_size=1024)))
def test_random_bytes(target, data):
    target.check(data)


def header(body: bytes, **over) -> bytes:
    """A segment header for `body`: seq 2, the target's pid and start ticks, unless overridden."""
    fields = dict(
        magic=MAGIC,
        version=1,
        hsize=64,
        seq=2,
        pid=_VALID[1],
        flags=0,
        ticks=_VALID[2],
        length=len(body),
        crc=zlib.crc32(body),
        at=1000.0,
    )
    fields.update(over)
    return HEADER.pack(*fields.values())


KINDS = ("flip", "truncate", "extend", "field", "payload")
HEADER_FIELDS = ("version", "hsize", "seq", "pid", "flags", "ticks", "length", "crc")


def mutate(kind: str, rng: random.Random) -> bytes:
    """A valid segment of the target with a few bytes flipped, cut or grown, its header fields
    replaced by odd values (crc kept right or not), or one payload key given a random value (with a
    right crc, so only validation stands guard). Hypothesis draws the kind and the seed: cheap to
    draw, so the 10,000 cases go to the reader rather than to the generator."""
    base = bytearray(_VALID[0])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            base[rng.randrange(0, min(len(base), 64 + 2048))] ^= rng.randint(1, 255)
        return bytes(base)
    if kind == "truncate":
        return bytes(base[: rng.randrange(0, 64 + 2048)])
    if kind == "extend":
        return bytes(base) + rng.randbytes(rng.randrange(0, 512))
    body = bytes(base[64:])
    if kind == "field":
        over = {f: rng.randrange(0, 2**32) for f in rng.sample(HEADER_FIELDS, rng.randint(1, 3))}
        if "seq" in over:
            over["seq"] = rng.choice([rng.randrange(0, 2**64), 0, 1, 2**64 - 1])
        if "ticks" in over:
            over["ticks"] = rng.choice([0, _VALID[2] + 1, 2**64 - 1, over["ticks"]])
        if "length" in over:
            over["length"] = rng.choice([over["length"], 0, 1, len(body) - 1, len(body) + 1, 2**32 - 1])
            if rng.random() < 0.5:
                over["crc"] = zlib.crc32(body[: over["length"]])  # a consistent lie about the length
        return header(body, **over) + body
    p = dict(_VALID[3])  # one top-level key replaced: a shallow copy is enough
    p[rng.choice(sorted(p))] = random_value(rng)
    try:
        body = msgpack.packb(p, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        body = b"\xc1"  # a value msgpack cannot encode: the never-used type byte
    return header(body) + body


def random_value(rng: random.Random, depth: int = 0):
    pick = rng.randrange(10 if depth < 3 else 8)
    if pick == 0:
        return None
    if pick == 1:
        return rng.random() < 0.5
    if pick == 2:
        return rng.choice([0, -1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, rng.randrange(-1000, 1000)])
    if pick == 3:
        return rng.choice([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e308, rng.random()])
    if pick == 4:
        return "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(0, 40)))
    if pick == 5:
        return rng.randbytes(rng.randrange(0, 20))
    if pick == 6:
        return rng.choice(["main", "rank", "cuda:0", "x" * 5000, ""])
    if pick == 7:
        return rng.randrange(0, 100)
    if pick == 8:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {
        str(random_value(rng, depth + 1))[:10]: random_value(rng, depth + 1)
        for _ in range(rng.randrange(0, 4))
    }


_VALID: list = []


@pytest.mark.slow
@settings(max_examples=MUTATED_CASES, **FUZZ)
@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 2**64 - 1))
# Seeds that reach each state the reader gives (found by running `mutate`): a capped run reaches
# them all, whatever the random draws. The drawn values do not depend on the target's pid or ticks.
@example(kind="extend", seed=0)  # ok: trailing bytes after a whole segment
@example(kind="flip", seed=0)  # corrupt
@example(kind="field", seed=5)  # stale: start ticks of another process
@example(kind="field", seed=6)  # busy: an odd seq, a publish in progress
@example(kind="field", seed=12)  # missing: marked closed, its last payload shown as ok
def test_mutated_segments(target, kind, seed):
    target.check(mutate(kind, random.Random(seed)))


@pytest.fixture(scope="module", autouse=True)
def _seed(target):
    _VALID[:] = [target.valid, target.pid, target.ticks, variant(target.pid, target.ticks, 0)]


@pytest.mark.slow
def test_the_whole_fuzz_ran(target):
    """After the two fuzz tests (pytest keeps file order, and scripts/test.sh keeps a file on one
    xdist worker): all their cases did run, and reached every state the reader can give a file of
    a live pid."""
    assert target.cases >= RANDOM_CASES + MUTATED_CASES
    assert set(target.states) >= {"ok", "corrupt", "busy", "stale"}, target.states


# -------------------------------------------------------------------------------------------------
# Allocation: the worst files the reader can be handed.


def peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_file_over_the_size_cap_is_refused_without_reading_it(target):
    target.put(b"")
    os.truncate(target.path, MAX_SEGMENT_BYTES + 1)  # sparse: no memory used by the file itself
    with open(target.path, "r+b") as f:
        body = b"\x80"
        f.write(header(body, length=MAX_SEGMENT_BYTES))
    r = None

    def read():
        nonlocal r
        r = read_segment(target.pid, expected_start_ticks=target.ticks)

    peak = peak_while(read)
    assert r.state == "corrupt" and "outside" in r.error
    assert peak < 1 << 20, peak


@pytest.mark.parametrize(
    "body",
    [
        b"\xdb\xff\xff\xff\xff" + b"a" * 100,  # str32 claiming 4 GiB
        b"\xdd\xff\xff\xff\xff" + b"\xc0" * 100,  # array32 claiming 4 G items
        b"\xdf\xff\xff\xff\xff" + b"\xa1a\xc0" * 100,  # map32 claiming 4 G entries
        b"\x91" * 100_000 + b"\xc0",  # nesting deeper than any stack
        b"\xdd\x00\x00\x04\x00" + b"\xdd\x00\x00\x04\x00" * 2 + b"\xc0" * 5000,  # 1024 x 1024 claimed
    ],
    ids=["str32", "array32", "map32", "deep", "nested-arrays"],
)
def test_msgpack_bombs_in_a_full_size_segment_stay_bounded(target, body):
    """A 16 MiB segment (the reader's cap) whose payload claims far more than it holds."""
    size = MAX_SEGMENT_BYTES
    pad = body + b"\x00" * (size - 64 - len(body))
    target.put(header(pad) + pad)
    r = None

    def read():
        nonlocal r
        r = read_segment(target.pid, expected_start_ticks=target.ticks)

    peak = peak_while(read)
    assert r.state == "corrupt" and r.payload is None and r.error, r
    # One copy of the payload (16 MiB) plus the unpacker's own bounded working set.
    assert peak < 3 * size, f"peak {peak / 1048576:.1f} MiB for a {size / 1048576:.0f} MiB segment"
    target.check(open(target.path, "rb").read())  # and the poll says so


def test_maximum_rss_of_the_fuzzing_process_stays_put(target):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rng = random.Random(7)
    for _ in range(300):
        target.check(rng.randbytes(rng.randrange(0, 65536)))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 64 * 1024, (before, after)  # KiB
