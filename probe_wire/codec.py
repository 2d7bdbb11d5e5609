"""msgpack both ways: the writer's encoding (trimmed to fit its segment) and the reader's bounded decoding."""

from __future__ import annotations

import errno

import msgpack

from probe_wire.header import SegmentError
from probe_wire.schema import MAX_MODELS, MAX_STR_CHARS

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["decode_payload", "encode_payload"]

_MAX_STR_BYTES = MAX_STR_CHARS * 4  # UTF-8 takes at most 4 bytes a character
_MAX_MAP_PAIRS = 64  # the payload's own map is the biggest the schema has


def _pack(payload: dict[str, Any]) -> bytes:
    try:
        return msgpack.packb(payload, use_bin_type=True)
    except UnicodeEncodeError:
        # A str that is not Unicode text (a Latin-1 path or environment value decoded with
        # surrogateescape, a lone surrogate in an event name): "?" for what UTF-8 cannot carry,
        # rather than a publish that fails for good.
        return msgpack.packb(payload, use_bin_type=True, unicode_errors="replace")


def encode_payload(payload: dict[str, Any], capacity_bytes: int) -> tuple[bytes, bool]:
    """msgpack ``payload`` into at most ``capacity_bytes``: (bytes, trimmed).

    Too big a payload loses, in this order, its oldest events, its oldest errors and its last models
    until it fits, and says so with ``trimmed``; only a payload whose fixed part alone is too big
    raises SegmentError. ``payload`` itself is not modified.
    """
    data = _pack(payload)
    if len(data) <= capacity_bytes:
        return data, bool(payload.get("trimmed"))
    p = dict(payload)
    p["trimmed"] = True
    for key, keep_newest in (("events", True), ("errors", True), ("models", False)):
        items = list(p.get(key) or [])
        while items:
            data = _pack(p)
            if len(data) <= capacity_bytes:
                return data, True
            # Halving keeps the number of re-packs logarithmic in the list's length.
            drop = max(1, len(items) // 2)
            items = items[drop:] if keep_newest else items[:-drop]
            p[key] = items
    data = _pack(p)
    if len(data) <= capacity_bytes:
        return data, True
    raise SegmentError(
        errno.EMSGSIZE, f"payload needs {len(data)} bytes even trimmed; segment holds {capacity_bytes}"
    )


def decode_payload(data: bytes) -> Any:
    """Unpack untrusted msgpack ``data`` within bounds set by its size and the schema's limits (no
    bin, no ext); raises whatever msgpack raises on bad input."""
    n = len(data)
    # Each bound is min(n, limit), written out: three calls of min cost more than the rest of the
    # call does for an empty map (a follower decodes every new publish).
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        max_str_len=n if n < _MAX_STR_BYTES else _MAX_STR_BYTES,
        max_bin_len=0,
        max_ext_len=0,
        max_array_len=n if n < MAX_MODELS else MAX_MODELS,
        max_map_len=n if n < _MAX_MAP_PAIRS else _MAX_MAP_PAIRS,
    )
