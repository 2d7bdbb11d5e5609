"""A probe's payload above the sources is its typed record (probe_wire/records.py), never its dict:

- each record is its map of the schema (probe_wire/schema.py): the same keys in the same order, each
  field of the type its schema kind says, every record reached from ProbePayload;
- the segment source (sidecar/sources/segments.py) hands up, for a payload the schema takes, a record
  whose fields are that payload's values (written by the probe's own writer into real shared memory,
  read back by the source), and for one the schema refuses no record, with the validator's reason,
  which names the field;
- nothing above the sources builds a record or indexes a payload.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe_wire import records
from probe_wire.records import ProbePayload, RuntimeRecord, runtime_record
from probe_wire.schema import _PAYLOAD, _Added, _Enum, _Exact, _List, _Opt, empty_runtime, validate_payload
from probe_wire.writer import SegmentWriter
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import SegmentSource
from tests.helpers.exact import canon
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.payloads import json_like, mutated, payload_paths
from tests.helpers.records import payload

REPO = Path(__file__).resolve().parents[2]
RENAMED = {"class": "class_name"}  # a wire key that is a keyword of Python -> its record's field
WIRE_KEY = {field: key for key, field in RENAMED.items()}
# A record's name in a field's annotation ("ModelRecord", "StepsRecord | None"), never None's.
RECORD_NAME = re.compile(r"\b(?!None\b)[A-Z]\w*")


def _expected(kind: Any, record_name: str | None) -> str:
    """The annotation of a record's field of schema kind ``kind``, as records.py writes it; a map is
    the record named ``record_name``."""
    if isinstance(kind, _Opt | _Added):
        return f"{_expected(kind.kind, record_name)} | None"
    if isinstance(kind, _List):
        return f"tuple[{_expected(kind.item, record_name)}, ...]"
    if isinstance(kind, dict):
        return str(record_name)
    if isinstance(kind, _Enum):
        return "str"
    if isinstance(kind, _Exact):
        return "int"
    return kind.__name__


def _map_of(kind: Any) -> dict:
    while not isinstance(kind, dict):
        kind = kind.item if isinstance(kind, _List) else kind.kind
    return kind


def _check_record(cls: type, kind: dict, seen: set[type]) -> None:
    """``cls`` is map ``kind`` of the schema, and so is each record under it."""
    seen.add(cls)
    assert [f.name for f in fields(cls)] == [RENAMED.get(k, k) for k in kind], cls.__name__
    for f, (key, sub) in zip(fields(cls), kind.items(), strict=True):
        named = RECORD_NAME.findall(f.type)
        assert len(named) <= 1, (cls.__name__, f.name, f.type)
        assert f.type == _expected(sub, named[0] if named else None), (cls.__name__, key, f.type)
        if named:
            _check_record(getattr(records, named[0]), _map_of(sub), seen)


def test_each_record_is_its_map_of_the_schema():
    seen: set[type] = set()
    _check_record(ProbePayload, _PAYLOAD, seen)
    every = {getattr(records, name) for name in records.__all__}
    assert seen == {x for x in every if is_dataclass(x)} and len(seen) == 10


def test_a_record_made_with_some_fields_reads_as_the_empty_runtime_for_the_rest():
    assert RuntimeRecord() == runtime_record(empty_runtime())
    assert RuntimeRecord(torch="2.5") == runtime_record({**empty_runtime(), "torch": "2.5"})


def as_wire(x: Any) -> Any:
    """A record as the validator's clean copy holds it: its fields under the wire's keys, a tuple a list."""
    if is_dataclass(x):
        return {WIRE_KEY.get(f.name, f.name): as_wire(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, tuple):
        return [as_wire(v) for v in x]
    return x


# ---------------------------------------------------------------------------------------------
# Payloads written by the probe's writer, read by the segment source
# ---------------------------------------------------------------------------------------------
_PLAIN = {
    int: st.integers(-(2**63), 2**64 - 1),
    float: st.floats(allow_nan=False, allow_infinity=False),
    str: st.text(max_size=12),
    bool: st.booleans(),
}


def values(kind: Any) -> st.SearchStrategy:
    """Any value of schema kind ``kind`` (a map's "added within schema 1" keys present or not)."""
    if isinstance(kind, _Opt | _Added):
        return st.none() | values(kind.kind)
    if isinstance(kind, _List):
        return st.lists(values(kind.item), max_size=min(kind.max_items, 3))
    if isinstance(kind, dict):
        required = {k: values(v) for k, v in kind.items() if not isinstance(v, _Added)}
        return st.fixed_dictionaries(required, optional={k: values(v) for k, v in kind.items() if isinstance(v, _Added)})
    if isinstance(kind, _Enum):
        return st.sampled_from(kind.values)
    if isinstance(kind, _Exact):
        return st.just(kind.value)
    return _PLAIN[kind]


class Segment:
    """A live process's segment, written by the probe's writer, and a segment source reading it as
    a poll would (the process its tree's one)."""

    def __init__(self, pid: int) -> None:
        self.writer = SegmentWriter(pid=pid)
        self.source = SegmentSource(clean_dead=False, sweep_foreign=False)
        proc = ProcInfo(pid, 1, self.writer.start_ticks, 1.0, "sleep", ("sleep",), None, 1.0, 0)
        self.tree = TreeSnapshot(pid, True, (proc,))

    def payload(self, p: dict) -> dict:
        """``p`` as this process's (its pid and start ticks)."""
        return {**p, "pid": self.writer.pid, "start_ticks": self.writer.start_ticks}

    def read(self, p: dict):
        self.writer.publish(p)
        return self.source.poll(self.tree)[self.writer.pid]

    def close(self) -> None:
        self.source.close()
        self.writer.close()


@pytest.fixture
def segment(live_pid):
    s = Segment(live_pid)
    yield s
    s.close()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=values(_PAYLOAD))
def test_the_source_hands_up_a_record_of_every_value_of_a_payload_the_schema_takes(segment, drawn):
    p = segment.payload(drawn)
    clean, reason = validate_payload(p)
    assert reason is None
    r = segment.read(p)
    assert r.state == "ok" and r.error is None, (r.state, r.error)
    assert type(r.payload) is ProbePayload
    assert canon(as_wire(r.payload)) == canon(clean)  # every value, of its type, under its key


# Where a payload is changed: any position but those the reader checks against the header instead.
_OWN = {("pid",), ("start_ticks",)}


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=values(_PAYLOAD), data=st.data())
def test_a_payload_the_schema_refuses_goes_up_as_no_record_with_the_field_that_is_wrong(live_pid, drawn, data):
    segment = Segment(live_pid)  # a source that never read a good payload of this process
    try:
        good = segment.payload(drawn)
        paths = sorted((p for p in payload_paths(good) if p not in _OWN), key=repr)
        path = data.draw(st.sampled_from(paths))
        bad = mutated(copy.deepcopy(good), path, data.draw(json_like), data.draw(st.booleans()))
        clean, reason = validate_payload(bad)
        r = segment.read(bad)
    finally:
        segment.close()
    if clean is not None:  # still a payload of the schema (an optional value made None, say)
        assert r.state == "ok" and canon(as_wire(r.payload)) == canon(clean)
        return
    assert (r.state, r.payload, r.unreadable) == ("corrupt", None, True)
    assert r.error == reason and reason.startswith("payload"), (path, r.error, reason)


def test_a_refused_payload_keeps_the_last_record_and_a_republish_shares_the_runtimes_record(segment):
    """Between two good payloads, what goes up is a record or nothing: the last good one stays while
    the process's segment is refused (corrupt), as it does while it is caught mid-publish."""
    base = segment.payload(payload(models=[{"name": "net"}]))
    first = segment.read(base)
    again = segment.read({**base, "syncs_per_step": 2.5})  # the same prefix: its runtime map is kept
    assert again.payload is not first.payload and again.payload.syncs_per_step == 2.5
    assert again.payload.runtime is first.payload.runtime  # made once for the process's runtime
    refused = segment.read({**base, "role": "boss"})
    assert refused.state == "corrupt" and refused.payload is again.payload
    assert refused.error == "payload.role: expected one of main|dataloader-worker|rank|child, got 'boss'"


@pytest.mark.parametrize("seed", range(4))
def test_a_segment_read_again_unchanged_gives_what_a_source_without_its_shortcut_gives(segment, seed):
    """SegmentSource.poll hands up the very ProbeRead of the last poll for a read the follower
    gives again unchanged: what the full judgement gives, poll after poll, whatever happens between
    (a republish, a refused payload, nothing, the writer closing)."""
    rng = random.Random(seed)
    plain = SegmentSource(clean_dead=False, sweep_foreign=False)
    base = segment.payload(payload(models=[{"name": "net"}]))
    variants = [base, {**base, "syncs_per_step": 2.5}, {**base, "role": "boss"}]
    reused, closed = 0, False
    segment.writer.publish(base)
    try:
        for step in range(40):
            roll = rng.random()
            if closed:
                pass
            elif roll < 0.25:
                segment.writer.publish(rng.choice(variants))
            elif step > 30 and roll < 0.3:
                segment.writer.close()
                closed = True
            last = segment.source._same.get((segment.writer.pid, segment.writer.start_ticks))
            got = segment.source.poll(segment.tree)[segment.writer.pid]
            plain._same.clear()  # a source that judges every read afresh
            want = plain.poll(segment.tree)[segment.writer.pid]
            assert canon((got.state, got.error, got.unreadable, got.closed)) == canon(
                (want.state, want.error, want.unreadable, want.closed)
            ), step
            assert (got.payload is None) == (want.payload is None)
            if got.payload is not None:
                assert canon(as_wire(got.payload)) == canon(as_wire(want.payload)), step
            reused += last is not None and got is last[1]
    finally:
        plain.close()
    assert reused > 3  # the shortcut was taken


# ---------------------------------------------------------------------------------------------
# Above the sources
# ---------------------------------------------------------------------------------------------
ABOVE_SOURCES = ("cli", "serve", "poll", "documents", "verdict", "common")
# A payload read as a dict: payload["..."], payload.get(...), (r.payload or {}).
AS_DICT = re.compile(r"payload\s*\[|payload\.get\(|payload\s+or\s+\{\}")


def test_nothing_above_the_sources_builds_a_record_or_reads_a_payload_as_a_dict():
    """The import contracts (only-sources-read-the-os, payloads-through-sources) keep probe_wire's
    reader, follower, codec and prefix away from these layers; this keeps the records' builder and a
    payload's keys away too."""
    found = []
    for layer in ABOVE_SOURCES:
        for path in sorted((REPO / "sidecar" / layer).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for n, line in enumerate(text.splitlines(), 1):
                if "payload_record" in line or "runtime_record" in line or AS_DICT.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []
    # The check itself: it finds what it looks for.
    assert AS_DICT.search('ev = (r.payload or {}).get("events")') and AS_DICT.search('read.payload["role"]')
    assert AS_DICT.search('payload.get("models")') and not AS_DICT.search("r.payload.events")
