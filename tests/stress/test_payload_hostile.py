"""Hostile msgpack payloads in a well-formed segment (right header, right crc): huge declared
lengths, nesting deeper than any stack, non-string keys, and a wrong type for every field of schema 1.
Each is rejected ("corrupt") with a reason naming what is wrong, and the sidecar's status document
carries that reason in its probe-unreadable warning."""

from __future__ import annotations

import copy
import subprocess

import msgpack
import pytest

from hostfs.procid import process_start_ticks
from probe_wire import SegmentWriter, read_segment
from sidecar.poll.poller import Poller
from sidecar.verdict import Rules
from tests.helpers.payloads import full_payload
from tests.helpers.recording_source import RecordingSegmentSource


def leaves(obj, path="payload"):
    """(path, container, key, value) for every field, lists entered through their first item."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{path}.{k}", obj, k, v
            yield from leaves(v, f"{path}.{k}")
    elif isinstance(obj, list) and obj:
        yield from leaves(obj[0], f"{path}[0]")


WRONG = [None, True, 7, 7.5, "x", [], {}, float("nan"), 2**64 - 1, -(2**63)]


def same_kind(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b)
    if isinstance(a, float) and isinstance(b, float):
        return b == b  # NaN is never a valid float here
    return type(a) is type(b)


@pytest.fixture(scope="module")
def target():
    proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    ticks = process_start_ticks(proc.pid)
    w = SegmentWriter(pid=proc.pid, start_ticks=ticks)
    yield proc.pid, ticks, w
    w.close()
    proc.kill()
    proc.wait()


def publish(w: SegmentWriter, body: bytes) -> None:
    w.publish_bytes(body)


def test_the_full_payload_is_valid(target):
    pid, ticks, w = target
    publish(w, msgpack.packb(full_payload(pid, ticks)))
    r = read_segment(pid, expected_start_ticks=ticks)
    assert r.state == "ok", r.error


def test_a_wrong_type_in_every_field_is_rejected_with_its_path(target):
    pid, ticks, w = target
    base = full_payload(pid, ticks)
    checked = 0
    for path, _container, key, value in list(leaves(base)):
        for wrong in WRONG:
            if same_kind(value, wrong):
                continue
            p = copy.deepcopy(base)
            # Walk to the same container in the copy.
            holder = p
            for part in path.split(".")[1:-1]:
                name, _, index = part.partition("[")
                holder = holder[name][0] if index else holder[name]
            holder[key] = wrong
            publish(w, msgpack.packb(p))
            r = read_segment(pid, expected_start_ticks=ticks)
            if wrong is None and r.state == "ok":
                continue  # an optional field: None is its "absent"
            checked += 1
            assert r.state == "corrupt" and r.payload is None, (path, wrong, r)
            assert r.error.startswith(path), (path, wrong, r.error)
    assert checked >= 400, checked


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"\xdb\xff\xff\xff\xff" + b"ab", "bad msgpack"),  # str32 claiming 4 GiB
        (b"\xdd\xff\xff\xff\xff\xc0", "exceeds max_array_len"),
        (b"\xdf\xff\xff\xff\xff\xa1a\xc0", "exceeds max_map_len"),
        (b"\xc4\x03abc", "exceeds max_bin_len"),  # bytes where only text is allowed
        (b"\xd6\xff\x00\x00\x00\x01", "exceeds max_ext_len"),  # a msgpack timestamp extension
        (b"\x91" * 50_000 + b"\xc0", "bad msgpack"),  # nested deeper than the unpacker's stack
        (b"\x81\x01\x02", "int is not allowed for map key"),
        (b"\x92\x01\x02", "expected map"),
        (b"\xc0", "expected map"),
        (b"\xc1", "bad msgpack"),  # the one byte msgpack never uses
        (msgpack.packb({"schema": 2}), "unsupported schema"),
        (msgpack.packb({"schema": True}), "unsupported schema"),
        (msgpack.packb({"schema": 1}), "missing"),
        (msgpack.packb([[[[[]]]]] * 3), "expected map"),
    ],
    ids=[
        "str32",
        "array32",
        "map32",
        "bin",
        "ext",
        "deep",
        "int-key",
        "array",
        "nil",
        "never-used",
        "schema-2",
        "schema-bool",
        "fields-missing",
        "nested-lists",
    ],
)
def test_hostile_msgpack_is_rejected_with_a_reason(target, body, reason):
    pid, ticks, w = target
    publish(w, body)
    r = read_segment(pid, expected_start_ticks=ticks)
    assert r.state == "corrupt" and r.payload is None
    assert reason in r.error, r.error
    assert len(r.error) <= 300


def test_deep_nesting_inside_a_field_is_rejected_not_recursed(target):
    pid, ticks, w = target
    p = full_payload(pid, ticks)
    deep = []
    for _ in range(900):  # within msgpack's stack, far beyond any field's shape
        deep = [deep]
    p["models"] = deep
    publish(w, msgpack.packb(p))
    r = read_segment(pid, expected_start_ticks=ticks)
    assert r.state == "corrupt" and "models" in r.error
    p = full_payload(pid, ticks)
    p["unknown_key"] = deep  # unknown keys are dropped: harmless, and not kept
    publish(w, msgpack.packb(p))
    r = read_segment(pid, expected_start_ticks=ticks)
    assert r.state == "ok" and "unknown_key" not in r.payload


def test_the_sidecar_names_the_reason_in_its_status_document(target):
    pid, ticks, w = target
    poller = Poller(
        pid,
        interval_s=1.0,
        segment_source=RecordingSegmentSource(clean_dead=False),
        system_gpus_fn=list,
        rules=Rules(hysteresis_off_polls=1),
    )
    p = full_payload(pid, ticks)
    p["models"][0]["forward_calls"] = "lots"
    publish(w, msgpack.packb(p))
    doc = poller.poll_once()
    (proc,) = doc["processes"]
    assert proc["probe_state"] == "corrupt" and "forward_calls" in proc["probe_error"]
    (warning,) = [x for x in doc["warnings"] if x["code"] == "probe-unreadable"]
    assert "models[0].forward_calls: expected int, got str" in warning["message"]
    # Fixed by the writer: the next poll reads it and the warning goes.
    publish(w, msgpack.packb(full_payload(pid, ticks)))
    doc = poller.poll_once()
    assert doc["processes"][0]["probe_state"] == "ok"
    assert "probe-unreadable" not in {x["code"] for x in doc["warnings"]}
