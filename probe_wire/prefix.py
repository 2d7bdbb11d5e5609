"""A payload's static prefix: what a follower decodes and validates once per process.

A probe writes its payload in the schema's order, and the keys it sets once (schema.PREFIX_KEYS:
identity, role, runtime: about two thirds of a payload's bytes) come first, so two payloads of one
process begin with the same bytes while those facts stand. A follower keeps those bytes with their
validated values; a payload that begins with them has only the rest of its map decoded and
validated. The result is the very payload decode_payload and validate_payload would give: the
prefix's bytes are the same, msgpack decodes a map's pairs one after the other, and the rest is
checked by the same generated code (schema.validate_rest). Anything unexpected (other bytes, a key
of the prefix again in the rest, a rest that does not decode or validate) falls back to the whole
payload, which also names what is wrong.
"""

from __future__ import annotations

import msgpack

from probe_wire.codec import decode_payload
from probe_wire.schema import PREFIX_KEYS, validate_rest

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MAX_PREFIX_BYTES", "Prefix", "PrefixSlot", "decode_with_prefix", "find_prefix"]

# The longest prefix kept. A follower keeps one per process, besides its last read, whether it keeps
# the file open or not; a process controls these bytes too (keys of runtime that no reader knows are
# dropped by the validation, not by the prefix: megabytes of them). A probe's own, on 256 devices
# with 1000-character paths, is about 24 KiB.
MAX_PREFIX_BYTES = 64 * 1024


class Prefix:
    """The leading bytes of a payload (its map header and the pairs of PREFIX_KEYS), their
    validated values, and the map header of the pairs that follow them."""

    __slots__ = ("clean", "data", "rest_header")

    def __init__(self, data: bytes, clean: dict[str, Any], rest_header: bytes):
        self.data = data
        self.clean = clean
        self.rest_header = rest_header


class PrefixSlot:
    """Where a follower keeps one process's prefix between reads (None: not known)."""

    __slots__ = ("prefix",)

    def __init__(self) -> None:
        self.prefix: Prefix | None = None


def _map_header(pairs: int) -> bytes:
    if pairs < 16:
        return bytes((0x80 | pairs,))
    return b"\xde" + pairs.to_bytes(2, "big")  # map 16 (a payload map has at most 64 pairs)


def find_prefix(data: bytes, decoded: Any, clean: dict[str, Any]) -> Prefix | None:
    """The prefix of a payload that decoded (``decoded``) and validated (``clean``) whole, when it
    begins with every key of PREFIX_KEYS once and has no key twice; else None."""
    if not isinstance(decoded, dict):
        return None
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(data))
    unpacker.feed(data)
    pairs = unpacker.read_map_header()
    if len(decoded) != pairs:
        return None  # a key twice: the whole decode kept its last value, the prefix would not
    seen: set[str] = set()
    end = unpacker.tell()
    for _ in range(pairs):
        key = unpacker.unpack()
        if key not in PREFIX_KEYS:
            break
        seen.add(key)
        unpacker.skip()
        end = unpacker.tell()
    if seen != PREFIX_KEYS or end > MAX_PREFIX_BYTES:
        return None
    kept = {k: v for k, v in clean.items() if k in PREFIX_KEYS}
    return Prefix(data[:end], kept, _map_header(pairs - len(PREFIX_KEYS)))


def decode_with_prefix(prefix: Prefix, data: bytes) -> dict[str, Any] | None:
    """The validated payload of ``data`` when it begins with ``prefix``'s bytes and the rest
    decodes and validates; else None (decode and validate the whole payload)."""
    if not data.startswith(prefix.data):
        return None
    try:
        rest = decode_payload(prefix.rest_header + data[len(prefix.data) :])
    except Exception:  # noqa: BLE001 -- msgpack raises several types; the whole decode says which
        return None
    if not isinstance(rest, dict) or not PREFIX_KEYS.isdisjoint(rest):
        return None
    clean = validate_rest(rest)
    if clean is None:
        return None
    return {**prefix.clean, **clean}
