"""A payload's prefix (probe_wire/prefix.py): a payload read through the prefix of an earlier one is
the very payload the whole decode and validation give, or the prefix is not used at all."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import probe_wire as wire
from hostfs.procid import process_start_ticks
from probe_wire.codec import decode_payload
from probe_wire.prefix import Prefix, decode_with_prefix, find_prefix
from probe_wire.schema import PREFIX_KEYS, validate_payload
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.payloads import RICH_PATHS, json_like, mutated, rich_payload


def _whole(data: bytes) -> dict | None:
    """What the reader makes of payload bytes without a prefix."""
    try:
        obj = decode_payload(data)
    except Exception:  # noqa: BLE001 -- any msgpack error: not a payload
        return None
    return validate_payload(obj)[0]


def _prefix_of(payload: dict) -> tuple[bytes, Prefix]:
    data = msgpack.packb(payload)
    obj = decode_payload(data)
    found = find_prefix(data, obj, validate_payload(obj)[0])
    assert found is not None
    return data, found


def _same(a: dict | None, b: dict | None) -> bool:
    # msgpack tells 1, 1.0 and True apart where == does not.
    return a == b and msgpack.packb(a) == msgpack.packb(b)


def test_the_probes_payload_has_a_prefix_and_a_new_publish_reads_through_it():
    data, prefix = _prefix_of(rich_payload(7))
    assert set(prefix.clean) == PREFIX_KEYS and len(prefix.data) > len(data) // 3
    changed = rich_payload(7)
    changed["models"][0]["forward_calls"] += 20
    changed["published_at"] += 1.0
    new = msgpack.packb(changed)
    via = decode_with_prefix(prefix, new)
    assert via is not None and _same(via, _whole(new))
    assert via["runtime"] is prefix.clean["runtime"]  # not decoded again


@settings(max_examples=examples(1500), deadline=None)
@given(path=st.sampled_from(RICH_PATHS), value=json_like, drop=st.booleans())
def test_a_payload_read_through_a_prefix_is_the_whole_reads_payload(path, value, drop):
    _, prefix = _prefix_of(rich_payload(7))
    payload = mutated(rich_payload(7), path, value, drop)
    data = msgpack.packb(payload)
    via, whole = decode_with_prefix(prefix, data), _whole(data)
    if via is not None:
        assert _same(via, whole), (path, value)
    if path[0] not in PREFIX_KEYS and whole is not None and not drop:  # (a dropped key: another map header)
        assert via is not None, path  # a change after the prefix is read through it


def _with_rest(data: bytes, extra: bytes, pairs: int) -> bytes:
    """``data`` (a map of 16 or more pairs) with ``extra`` appended and its header counting
    ``pairs`` more pairs."""
    assert data[0] == 0xDE  # map 16
    return b"\xde" + (int.from_bytes(data[1:3], "big") + pairs).to_bytes(2, "big") + data[3:] + extra


def test_a_prefix_key_again_after_the_prefix_falls_back_to_the_whole_payload():
    _, prefix = _prefix_of(rich_payload(7))
    shorter = rich_payload(7)
    del shorter["syncs_per_step"]  # one pair fewer: "pid" again takes its place, same map header
    forged = _with_rest(msgpack.packb(shorter), msgpack.packb("pid") + msgpack.packb(8), 1)
    assert forged.startswith(prefix.data)
    assert _whole(forged) is not None and _whole(forged)["pid"] == 8  # the last value counts
    assert decode_with_prefix(prefix, forged) is None


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00",  # a byte after the map
        msgpack.packb("memory"),  # a key without its value
    ],
)
def test_a_rest_that_does_not_decode_falls_back(tail):
    data, prefix = _prefix_of(rich_payload(7))
    assert decode_with_prefix(prefix, data + tail) is None and _whole(data + tail) is None


def test_other_leading_bytes_or_an_invalid_rest_fall_back():
    data, prefix = _prefix_of(rich_payload(7))
    other = rich_payload(7)
    other["runtime"]["device_count"] = 3
    assert decode_with_prefix(prefix, msgpack.packb(other)) is None
    bad = rich_payload(7)
    bad["models"][0]["forward_calls"] = "many"
    assert decode_with_prefix(prefix, msgpack.packb(bad)) is None and _whole(msgpack.packb(bad)) is None


def test_no_prefix_for_a_payload_in_another_order_or_with_a_key_twice():
    payload = rich_payload(7)
    reordered = {"memory": payload.pop("memory"), **payload}
    data = msgpack.packb(reordered)
    obj = decode_payload(data)
    assert find_prefix(data, obj, validate_payload(obj)[0]) is None
    data, _ = _prefix_of(rich_payload(7))
    twice = _with_rest(data, msgpack.packb("models") + msgpack.packb([]), 1)
    obj = decode_payload(twice)
    assert find_prefix(twice, obj, validate_payload(obj)[0]) is None


def test_a_follower_reads_a_new_publish_through_its_prefix(live_pid):
    ticks = process_start_ticks(live_pid)
    payload = rich_payload(live_pid)
    payload["start_ticks"] = ticks
    writer = wire.SegmentWriter(pid=live_pid, start_ticks=ticks)
    follower = wire.SegmentFollower()
    try:
        writer.publish(payload)
        first = follower.read(live_pid, ticks)
        payload["models"][0]["forward_calls"] += 1
        writer.publish(payload)
        second = follower.read(live_pid, ticks)
        assert second.state == "ok" and second.payload["models"][0]["forward_calls"] == 101
        assert second.payload["runtime"] is first.payload["runtime"]  # through the prefix
        assert second == wire.read_segment(live_pid, expected_start_ticks=ticks)
        payload["role"] = "main"  # a fact of the prefix changed: read whole, and a new prefix
        writer.publish(payload)
        third = follower.read(live_pid, ticks)
        assert third.payload["role"] == "main" and third == wire.read_segment(live_pid, expected_start_ticks=ticks)
        assert third.payload["runtime"] is not first.payload["runtime"]
    finally:
        follower.close()
        writer.close()


def test_no_prefix_is_kept_for_leading_bytes_beyond_the_probes_own():
    """A follower keeps a prefix per process, open file or not, besides its last read: a process
    controls its payload's leading bytes too (a runtime with keys no reader knows, dropped by the
    validation, megabytes of them), so a prefix longer than MAX_PREFIX_BYTES is not kept."""
    from probe_wire.prefix import MAX_PREFIX_BYTES

    payload = rich_payload(7)
    payload["runtime"]["padding"] = ["x" * 4000] * (MAX_PREFIX_BYTES // 4000 + 1)
    data = msgpack.packb(payload)
    obj = decode_payload(data)
    clean = validate_payload(obj)[0]
    assert clean is not None and "padding" not in clean["runtime"]
    assert find_prefix(data, obj, clean) is None
    data, prefix = _prefix_of(rich_payload(7))  # the probe's own, on 8 GPUs: well within
    assert len(prefix.data) * 4 < MAX_PREFIX_BYTES
