"""decode_payload's bounds, as its docstring states them: untrusted msgpack is unpacked within bounds
set by its size and the schema's limits (no bin, no ext), and raises whatever msgpack raises on bad
input. A str holds at most MAX_STR_CHARS characters (4 UTF-8 bytes each at most), an array at most
MAX_MODELS items, a map at most 64 pairs (the payload's own map is the biggest the schema has), none
of them more than the data's length in bytes, and a bin or an ext no byte; map keys are strings."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from probe_wire.codec import decode_payload
from probe_wire.schema import MAX_MODELS, MAX_STR_CHARS
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.payloads import json_like, rich_payload

MAX_STR_BYTES = MAX_STR_CHARS * 4
MAX_MAP_PAIRS = 64


def _within_bounds(obj, n: int) -> bool:
    """Every str, array and map of ``obj`` within the bounds of data ``n`` bytes long; no bin, no ext."""
    if isinstance(obj, str):
        return len(obj.encode("utf-8", "surrogatepass")) <= min(n, MAX_STR_BYTES)
    if isinstance(obj, list):
        return len(obj) <= min(n, MAX_MODELS) and all(_within_bounds(v, n) for v in obj)
    if isinstance(obj, dict):
        return len(obj) <= min(n, MAX_MAP_PAIRS) and all(
            _within_bounds(k, n) and _within_bounds(v, n) for k, v in obj.items()
        )
    if isinstance(obj, bytes):
        return not obj  # no bin: its bound is 0 bytes
    if isinstance(obj, msgpack.ExtType):
        return not obj.data  # nor ext
    return obj is None or isinstance(obj, bool | int | float)


def _unbounded(data: bytes):
    """msgpack's own reading of ``data``, with no bound but the data's own end."""
    limit = 2**31 - 1
    return msgpack.unpackb(
        data, raw=False, strict_map_key=True, use_list=True,
        max_str_len=limit, max_bin_len=limit, max_ext_len=limit, max_array_len=limit, max_map_len=limit,
    )  # fmt: skip


def check_decode(data: bytes) -> None:
    """What decode_payload gives of ``data``: msgpack's own reading when it is within the bounds,
    else an error; an error wherever msgpack itself refuses the data."""
    try:
        want = _unbounded(data)
    except Exception:  # noqa: BLE001 -- bad msgpack: whatever msgpack raises
        with pytest.raises(Exception):  # noqa: B017
            decode_payload(data)
        return
    if _within_bounds(want, len(data)):
        got = decode_payload(data)
        # msgpack tells 1, 1.0 and True apart where == does not.
        assert msgpack.packb(got) == msgpack.packb(want)
    else:
        with pytest.raises(ValueError):
            decode_payload(data)


def _bounded(size: int) -> bytes:
    """msgpack of a str, an array and a map of ``size`` items: each at a bound, or one past it."""
    return msgpack.packb(["x" * size, list(range(size)), {str(i): 0 for i in range(size)}])


@settings(max_examples=examples(600), deadline=None)
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
@example(data=msgpack.packb(msgpack.ExtType(1, b"x")))
@example(data=msgpack.packb({1: 2}))
@example(data=b"")
def test_decode_payload_is_msgpacks_reading_within_the_bounds(data):
    check_decode(data)


@given(size=st.sampled_from([62, 63, 64, 65, 66, MAX_MODELS - 1, MAX_MODELS, MAX_MODELS + 1]), pad=st.integers(0, 20000))
def test_the_bounds_around_each_limit(size, pad):
    data = _bounded(size) + b"\xc0" * pad  # trailing bytes: an error, after the bounds were applied
    past = size > min(MAX_MAP_PAIRS, MAX_MODELS)
    if not past and not pad:
        assert decode_payload(data)[0] == "x" * size
        return
    with pytest.raises(ValueError) as raised:
        decode_payload(data)
    # Within the bounds only the trailing bytes are wrong; past a bound, the bound is what is said.
    assert ("exceeds" in str(raised.value)) == past, (size, raised.value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("é" * MAX_STR_CHARS, True),  # 2 bytes a character: within the byte bound
        ("😀" * MAX_STR_CHARS, True),  # 4 bytes a character: the byte bound exactly
        ("😀" * MAX_STR_CHARS + "x", False),
        (list(range(MAX_MODELS)), True),
        (list(range(MAX_MODELS + 1)), False),
        ({str(i): 0 for i in range(MAX_MAP_PAIRS)}, True),
        ({str(i): 0 for i in range(MAX_MAP_PAIRS + 1)}, False),
        (b"", True),  # bin and ext: a bound of 0 bytes
        (b"x", False),
        (msgpack.ExtType(1, b""), True),
        (msgpack.ExtType(1, b"x"), False),
    ],
    ids=[
        "str-2-byte", "str-at-bound", "str-past", "array-at", "array-past", "map-at", "map-past",
        "bin-empty", "bin", "ext-empty", "ext",
    ],  # fmt: skip
)
def test_each_bound_at_and_past_it(value, ok):
    data = msgpack.packb(value, use_bin_type=True)
    if ok:
        assert msgpack.packb(decode_payload(data)) == msgpack.packb(value)
    else:
        with pytest.raises(ValueError):
            decode_payload(data)


def test_a_length_claimed_beyond_the_data_is_refused():
    """A header claiming more items or bytes than the data holds is an error, never a read past it
    (a 5-byte array of 2**31 items costs nothing)."""
    for header in (b"\xdd\x7f\xff\xff\xff", b"\xdf\x7f\xff\xff\xff", b"\xdb\x7f\xff\xff\xff"):
        with pytest.raises(ValueError):
            decode_payload(header)
