"""One DRM client's usage stats: the text of ``/proc/<pid>/fdinfo/<fd>`` for a DRM fd, parsed.

The format is the kernel's (``Documentation/gpu/drm-usage-stats.rst``, printed by
``drivers/gpu/drm/drm_file.c``): one ``key: value`` a line, split on the first colon and stripped
(amdgpu writes a space before the tab). Keys read: ``drm-driver``, ``drm-pdev``, ``drm-client-id``,
``drm-client-name``, ``drm-engine-<e>`` (busy ns), ``drm-engine-capacity-<e>``, ``drm-cycles-<e>``,
``drm-total-cycles-<e>``, ``drm-maxfreq-<e>``, ``drm-{total,shared,resident,purgeable,active}-<r>``
and the deprecated ``drm-memory-<r>`` (an alias of resident: never added to it), sizes in bytes
(a bare number), KiB or MiB. amdgpu's 5.14-5.18 format has other names (``pdev``, ``vram mem: N kB``,
``gfx0: 12.3%``, no ``drm-driver``): read too, as driver ``amdgpu``. ``pasid`` (amdgpu, both
formats) names the client's GPU address space, one per open: the identity when there is no client id.

``parse_fdinfo(data)`` takes the bytes as read and never raises: a malformed line is skipped, an
over-long key or value too, and what is not a DRM client (no driver, no old amdgpu key) is None.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import NamedTuple

MAX_FDINFO_BYTES = 16 * 1024  # an amdgpu fdinfo with every region is ~1.5 KiB; xe's ~1 KiB
MAX_LINES = 512
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 128  # a client name is at most 64 (DRM_CLIENT_NAME_MAX_LEN); numbers are shorter
MAX_NAME_CHARS = 64
MAX_ENGINES = 32  # per client: amdgpu has 8 engine kinds, xe 6 classes
MAX_REGIONS = 32
_MIB = 1024 * 1024

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")  # a driver, engine or region name
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_COUNT = re.compile(r"[0-9]{1,20}")
_SIZE = re.compile(r"([0-9]{1,20})(?:\s*(KiB|MiB|GiB|kB))?")
_SIZE_UNITS = {None: 1, "KiB": 1024, "kB": 1024, "MiB": _MIB, "GiB": 1024 * _MIB}
_FREQ = re.compile(r"([0-9]{1,20})\s*(Hz|KHz|kHz|MHz|GHz)")
_FREQ_UNITS = {"Hz": 1, "KHz": 1000, "kHz": 1000, "MHz": 1000_000, "GHz": 1000_000_000}
_NS = re.compile(r"([0-9]{1,20})\s*ns")
_PERCENT = re.compile(r"([0-9]{1,3}(?:\.[0-9]{1,6})?)\s*%")
# amdgpu 5.14-5.18: per-ring percentages ("gfx0", "compute1", "dec0", "enc0", "jpeg0", ...).
_OLD_RING = re.compile(r"(gfx|compute|dma|sdma|dec|enc|jpeg|vcn)[0-9]{1,3}")
_OLD_MEMORY = {"vram mem": "vram", "gtt mem": "gtt", "cpu mem": "cpu"}
_MEMORY_KINDS = ("total", "shared", "resident", "purgeable", "active")


class EngineCounters(NamedTuple):
    """One engine's cumulative counters as the kernel printed them (None: key absent)."""

    name: str  # "gfx", "render", "rcs", "compute", ...; amdgpu's old format: the ring ("gfx0")
    busy_ns: int | None = None  # drm-engine-<e>
    cycles: int | None = None  # drm-cycles-<e>
    total_cycles: int | None = None  # drm-total-cycles-<e>: the GPU timestamp at the cycles' rate
    maxfreq_hz: int | None = None  # drm-maxfreq-<e>: the cycles' rate when no total-cycles
    capacity: int = 1  # drm-engine-capacity-<e>: identical engines of the class (absent: 1)
    busy_pct: float | None = None  # amdgpu 5.14-5.18: the driver's own average, no counter


class RegionMemory(NamedTuple):
    """One memory region's figures in MiB (None: not printed by this driver)."""

    name: str  # "vram", "gtt", "cpu" (amdgpu), "system0", "local0" (i915), "vram0", "system" (xe)
    total_mib: float | None = None
    shared_mib: float | None = None
    resident_mib: float | None = None  # or the deprecated drm-memory-<r> when no drm-resident-<r>
    purgeable_mib: float | None = None
    active_mib: float | None = None

    @property
    def used_mib(self) -> float | None:
        """Resident when printed (what occupies the region now), else total."""
        return self.resident_mib if self.resident_mib is not None else self.total_mib


class DrmFdinfo(NamedTuple):
    """What one DRM fd's fdinfo says about its client."""

    driver: str  # "amdgpu", "i915", "xe", ...
    pdev: str | None  # PCI address "0000:08:00.0", lower case; None off PCI or when absent
    client_id: int | None  # drm-client-id: one per open of the device (struct drm_file)
    pasid: int | None  # amdgpu's address space id: one per open too
    client_name: str | None  # drm-client-name, control and format characters removed, clipped
    engines: tuple[EngineCounters, ...]
    regions: tuple[RegionMemory, ...]
    old_amdgpu: bool = False  # the 5.14-5.18 key names


def _sized(value: str) -> float | None:
    m = _SIZE.fullmatch(value)
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)] / _MIB if m else None


def _count(value: str) -> int | None:
    return int(value) if _COUNT.fullmatch(value) else None


@functools.lru_cache(maxsize=256)  # a pure function of names that repeat ("python3", "Xorg")
def _clean_name(value: str) -> str | None:
    """A name a process chose, as data: no control or format character (escapes, bidi overrides,
    line breaks), at most MAX_NAME_CHARS. The kernel itself refuses non-printing names (6.13+
    ``drm_set_client_name``); this holds for any /proc we are pointed at."""
    kept = "".join(ch for ch in value if ch == " " or unicodedata.category(ch)[0] not in "CZ")
    return kept[:MAX_NAME_CHARS] or None


# What one line does to the client being read: (sets old_amdgpu, target, name, field, number, text).
# A pure function of the line (_line_op), so a line read before is not parsed again (_LINE_OPS).
_Op = tuple[bool, int, str, str, "int | float | None", str]
_SCALAR, _ENGINE, _REGION = 1, 2, 3
_SKIP: _Op = (False, 0, "", "", None, "")
_OLD_FLAG: _Op = (True, 0, "", "", None, "")  # an old amdgpu key whose value is unreadable
# Fields that change at nearly every read: their lines are never kept in _LINE_OPS.
_COUNTER_FIELDS = frozenset({"busy_ns", "cycles", "total_cycles", "busy_pct"})
MAX_LINE_OPS = 8192  # lines kept (cleared when full): ~5 a client, 1,024 processes of 1 client fit
_LINE_OPS: dict[str, _Op] = {}
_KEPT_LINE_CHARS = MAX_KEY_CHARS + MAX_VALUE_CHARS + 8


def _engine_op(name: str, field: str, value: int | float | None, old: bool = False) -> _Op:
    if value is None or not _NAME.fullmatch(name):
        return _OLD_FLAG if old else _SKIP
    return (old, _ENGINE, name, field, value, "")


def _region_op(name: str, kind: str, mib: float | None, old: bool = False) -> _Op:
    if mib is None or not _NAME.fullmatch(name):
        return _OLD_FLAG if old else _SKIP
    return (old, _REGION, name, kind, mib, "")


def _standard_op(key: str, value: str) -> _Op:
    """A ``drm-<key>`` line's op."""
    if key in ("driver", "pdev", "client-id", "client-name"):
        return (False, _SCALAR, key, "", None, value)
    if key.startswith("engine-capacity-"):
        capacity = _count(value)
        return _engine_op(key[16:], "capacity", capacity if capacity else None)  # 0 is forbidden
    if key.startswith("engine-"):
        m = _NS.fullmatch(value)
        return _engine_op(key[7:], "busy_ns", int(m.group(1)) if m else None)
    if key.startswith("total-cycles-"):
        return _engine_op(key[13:], "total_cycles", _count(value))
    if key.startswith("cycles-"):
        return _engine_op(key[7:], "cycles", _count(value))
    if key.startswith("maxfreq-"):
        f = _FREQ.fullmatch(value)
        return _engine_op(key[8:], "maxfreq_hz", int(f.group(1)) * _FREQ_UNITS[f.group(2)] if f else None)
    if key.startswith("memory-"):  # deprecated alias of resident
        return _region_op(key[7:], "memory", _sized(value))
    kind, _, region = key.partition("-")
    return _region_op(region, kind, _sized(value)) if kind in _MEMORY_KINDS else _SKIP


def _line_op(line: str) -> _Op:
    """What one line says: split on the first colon and stripped; a line without a colon, or with a
    key or value over its bound, says nothing."""
    key, sep, value = line.partition(":")
    key, value = key.strip(), value.strip()
    if not sep or not key or len(key) > MAX_KEY_CHARS or len(value) > MAX_VALUE_CHARS:
        return _SKIP
    if key.startswith("drm-"):
        return _standard_op(key[4:], value)
    if key in ("pdev", "pasid"):
        return (False, _SCALAR, key, "", None, value)
    if key in _OLD_MEMORY:
        return _region_op(_OLD_MEMORY[key], "resident", _sized(value), old=True)
    if _OLD_RING.fullmatch(key) and (m := _PERCENT.fullmatch(value)):
        return _engine_op(key, "busy_pct", float(m.group(1)), old=True)
    return _SKIP


class _Builder:
    """Collects one fdinfo's keys; engines and regions capped at MAX_ENGINES and MAX_REGIONS. A
    scalar keeps its first value, an engine's or region's field its last."""

    def __init__(self) -> None:
        self.scalars: dict[str, str] = {}
        self.engines: dict[str, dict[str, int | float]] = {}
        self.regions: dict[str, dict[str, int | float]] = {}
        self.old_amdgpu = False

    def add(self, lines: list[str]) -> None:
        ops, scalars, engines, regions = _LINE_OPS, self.scalars, self.engines, self.regions
        for line in lines:
            op = ops.get(line)
            if op is None:
                op = _line_op(line)
                if len(line) <= _KEPT_LINE_CHARS and op[3] not in _COUNTER_FIELDS:
                    if len(ops) >= MAX_LINE_OPS:
                        ops.clear()
                    ops[line] = op
            old, target, name, field, number, text = op
            if old:
                self.old_amdgpu = True
            if target == _SCALAR:
                scalars.setdefault(name, text)
                continue
            if target == _ENGINE:
                kept = engines
                cap = MAX_ENGINES
            elif target == _REGION:
                kept, cap = regions, MAX_REGIONS
            else:
                continue
            fields = kept.get(name)
            if fields is None:
                if len(kept) >= cap:
                    continue
                fields = kept[name] = {}
            assert number is not None  # an engine's or region's op always carries its value
            fields[field] = number

    def build(self) -> DrmFdinfo | None:
        driver = self.scalars.get("driver")
        if driver is None and self.old_amdgpu:
            driver = "amdgpu"
        if driver is None or not _NAME.fullmatch(driver):
            return None
        pdev = self.scalars.get("pdev", "").lower()
        name = self.scalars.get("client-name")
        return DrmFdinfo(
            driver=driver,
            pdev=pdev if _PCI_ADDRESS.fullmatch(pdev) else None,
            client_id=_count(self.scalars.get("client-id", "")),
            pasid=_count(self.scalars.get("pasid", "")),
            client_name=_clean_name(name) if name is not None else None,
            engines=tuple(_engine(n, f) for n, f in sorted(self.engines.items())),
            regions=tuple(_region(n, f) for n, f in sorted(self.regions.items())),
            old_amdgpu=self.old_amdgpu,
        )


def _whole(v: int | float | None) -> int | None:
    return int(v) if v is not None else None


def _engine(name: str, f: dict[str, int | float]) -> EngineCounters:
    get = f.get
    pct = get("busy_pct")
    return EngineCounters(
        name=name,
        busy_ns=_whole(get("busy_ns")),
        cycles=_whole(get("cycles")),
        total_cycles=_whole(get("total_cycles")),
        maxfreq_hz=_whole(get("maxfreq_hz")),
        capacity=_whole(get("capacity")) or 1,
        busy_pct=float(pct) if pct is not None else None,
    )


def _region(name: str, f: dict[str, int | float]) -> RegionMemory:
    resident = f.get("resident", f.get("memory"))  # the alias only when resident is absent
    return RegionMemory(
        name=name,
        total_mib=f.get("total"),
        shared_mib=f.get("shared"),
        resident_mib=resident,
        purgeable_mib=f.get("purgeable"),
        active_mib=f.get("active"),
    )


def parse_fdinfo(data: bytes) -> DrmFdinfo | None:
    """The DRM client in one fdinfo's bytes (at most MAX_FDINFO_BYTES of them are looked at; a
    line cut by that bound is dropped), or None when it is not a DRM client's."""
    if len(data) > MAX_FDINFO_BYTES:
        data = data[:MAX_FDINFO_BYTES].rpartition(b"\n")[0]
    builder = _Builder()
    builder.add(data.decode("utf-8", errors="replace").split("\n")[:MAX_LINES])
    return builder.build()


# A counter's number in a line read again: what the parse's own patterns accept (_NS, _COUNT, _PERCENT).
_INT_NUMBER = re.compile(rb"[0-9]{1,20}")
_PERCENT_NUMBER = re.compile(rb"[0-9]{1,3}(?:\.[0-9]{1,6})?")
_NUMBER_DIGITS = 20  # the longest number either accepts (a value's room for it: MAX_VALUE_CHARS)
_BUSY_PCT_FIELD = EngineCounters._fields.index("busy_pct")


class ParsedFdinfo(NamedTuple):
    """One read of a client's fdinfo: its bytes, what they say (parse_fdinfo), and where its engine
    counters' numbers are: ``segments`` are the bytes between them, ``slots`` each number's engine,
    field and pattern. No slots where the next read must be parsed whole."""

    data: bytes
    info: DrmFdinfo | None
    segments: tuple[bytes, ...] = ()
    # (the engine's place in info.engines or -1, the counter's in EngineCounters, its number's pattern)
    slots: tuple[tuple[int, int, re.Pattern[bytes]], ...] = ()


def parse_fdinfo_again(last: ParsedFdinfo | None, data: bytes) -> ParsedFdinfo:
    """``parse_fdinfo(data)``, knowing the client's previous read: the same bytes give the same
    parse; bytes that differ from it only in the numbers of engine counters (a busy client's, at
    every poll) take the new numbers into the previous parse. Anything else is parsed whole. Equal
    to parse_fdinfo's result whatever the two reads hold (tests/unit/test_drm_fdinfo_again.py)."""
    if last is not None:
        if data == last.data:
            return last
        if last.slots and len(data) <= MAX_FDINFO_BYTES:
            info = _counters_moved(last, data)
            if info is not None:
                return ParsedFdinfo(data, info, last.segments, last.slots)
    info = parse_fdinfo(data)
    if info is None or not info.engines or len(data) > MAX_FDINFO_BYTES:
        return ParsedFdinfo(data, info)
    return _with_slots(data, info)


def _with_slots(data: bytes, info: DrmFdinfo) -> ParsedFdinfo:
    """The read with its counters' places (none when its lines are past MAX_LINES, or a counter's
    value could outgrow MAX_VALUE_CHARS with a longer number)."""
    raw_lines = data.split(b"\n")
    text_lines = data.decode("utf-8", errors="replace").split("\n")
    if len(raw_lines) > MAX_LINES or len(raw_lines) != len(text_lines):
        return ParsedFdinfo(data, info)
    segments: list[bytes] = []
    slots: list[tuple[int, int, re.Pattern[bytes]]] = []
    engine_at = {e.name: i for i, e in enumerate(info.engines)}
    start = at = 0  # the current segment's start; the current line's
    for raw, text in zip(raw_lines, text_lines, strict=True):
        op = _LINE_OPS.get(text) or _line_op(text)
        if op[1] == _ENGINE and op[3] in _COUNTER_FIELDS:
            key, _, rest = raw.partition(b":")
            value = rest.strip()
            pattern = _PERCENT_NUMBER if op[3] == "busy_pct" else _INT_NUMBER
            number_at = at + len(key) + 1 + (len(rest) - len(rest.lstrip()))
            m = pattern.match(data, number_at)
            if m is None or len(value) - (m.end() - number_at) + _NUMBER_DIGITS > MAX_VALUE_CHARS:
                return ParsedFdinfo(data, info)
            segments.append(data[start:number_at])
            slots.append((engine_at.get(op[2], -1), EngineCounters._fields.index(op[3]), pattern))
            start = m.end()
        at += len(raw) + 1
    segments.append(data[start:])
    return ParsedFdinfo(data, info, tuple(segments), tuple(slots))


def _counters_moved(last: ParsedFdinfo, data: bytes) -> DrmFdinfo | None:
    """The previous parse with the new numbers, when ``data`` is the previous bytes with other
    numbers in the counters' places; None otherwise (parse whole)."""
    info = last.info
    assert info is not None  # slots are kept only with a parse
    segments, at = last.segments, 0
    engines = list(info.engines)
    for segment, (engine, field, pattern) in zip(segments, last.slots, strict=False):
        if not data.startswith(segment, at):
            return None
        m = pattern.match(data, at + len(segment))
        if m is None:
            return None
        at = m.end()
        if engine >= 0:  # else dropped by MAX_ENGINES, as in the whole parse
            values = list(engines[engine])
            values[field] = float(m.group()) if field == _BUSY_PCT_FIELD else int(m.group())
            engines[engine] = EngineCounters._make(values)
    if len(data) - at != len(segments[-1]) or not data.endswith(segments[-1]):
        return None
    return info._replace(engines=tuple(engines))
