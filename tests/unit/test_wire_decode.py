"""decode_payload's bounds written without min(): the same objects, or the same error, for any bytes."""

from __future__ import annotations

import msgpack
from hypothesis import example, given, settings
from hypothesis import strategies as st

from probe_wire.codec import decode_payload
from probe_wire.schema import MAX_MODELS, MAX_STR_CHARS
from tests.helpers.payloads import json_like, rich_payload


def _old_decode_payload(data: bytes):
    n = len(data)
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        max_str_len=min(n, MAX_STR_CHARS * 4),
        max_bin_len=0,
        max_ext_len=0,
        max_array_len=min(n, MAX_MODELS),
        max_map_len=min(n, 64),
    )


def _outcome(decode, data: bytes):
    try:
        return "ok", msgpack.packb(decode(data))
    except Exception as e:  # noqa: BLE001 -- the very error, whatever msgpack raises
        return type(e), str(e)


def _bounded(size: int) -> bytes:
    """msgpack of a str, an array and a map of ``size`` items: each at a bound, or one past it."""
    return msgpack.packb(["x" * size, list(range(size)), {str(i): 0 for i in range(size)}])


@settings(max_examples=600, deadline=None)
@given(data=st.binary(max_size=300) | json_like.map(msgpack.packb) | st.sampled_from([0, 1]).map(bytes))
@example(data=msgpack.packb(rich_payload(7)))
@example(data=_bounded(63))
@example(data=_bounded(64))
@example(data=_bounded(65))
@example(data=_bounded(MAX_MODELS))
@example(data=_bounded(MAX_MODELS + 1))
@example(data=msgpack.packb("é" * MAX_STR_CHARS))
@example(data=msgpack.packb("é" * (2 * MAX_STR_CHARS + 1)))
@example(data=msgpack.packb(b"bin"))
@example(data=b"")
def test_decode_payload_is_the_old_decode(data):
    assert _outcome(decode_payload, data) == _outcome(_old_decode_payload, data)


@given(size=st.sampled_from([62, 63, 64, 65, 66, MAX_MODELS - 1, MAX_MODELS, MAX_MODELS + 1]), pad=st.integers(0, 20000))
def test_the_bounds_are_the_old_bounds_around_each_limit(size, pad):
    data = _bounded(size) + b"\xc0" * pad  # trailing bytes: an error, after the bounds were applied
    assert _outcome(decode_payload, data) == _outcome(_old_decode_payload, data)
