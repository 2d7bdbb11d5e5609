"""Parsing a client's fdinfo again (sidecar/sources/drm/fdinfo.py ``parse_fdinfo_again``): a busy
client's fdinfo changes only in its engine counters between two polls, and only those lines are
parsed again. Whatever the two reads hold (counters moved, memory changed, keys printed twice, lines
added or removed, malformed values, keys that differ only in Unicode whitespace, bytes past the
bounds), the result is parse_fdinfo's on the new bytes."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.sources.drm.fdinfo import (
    MAX_FDINFO_BYTES,
    ParsedFdinfo,
    parse_fdinfo,
    parse_fdinfo_again,
)
from tests.helpers.drm_samples import AMDGPU, AMDGPU_OLD, I915, MAXFREQ, XE
from tests.helpers.hypothesis_profiles import examples

SAMPLES = [AMDGPU, AMDGPU_OLD, I915, XE, MAXFREQ]
# What a line may become: a counter moved on, a value malformed, a key with trailing Unicode
# whitespace (str.strip removes it, bytes.strip does not), the line twice, or gone.
_COUNTER = re.compile(r"drm-(engine|cycles|total-cycles)-|(gfx|compute)[0-9]:")
_MUTATIONS = ("grow", "grow", "grow", "malformed", "nel-key", "twice", "drop", "memory", "same")


def _mutate(line: str, how: str, by: int) -> list[str]:
    key, sep, value = line.partition(":")
    if not sep:
        return [line]
    number = "".join(ch for ch in value if ch.isdigit())
    if how == "grow" and number:
        return [line.replace(number, str(int(number) + by), 1)]
    if how == "malformed":
        return [f"{key}:\tabc ns"]
    if how == "nel-key":  # the same key to the parser, another to bytes.strip
        return [line, f"{key}\u0085:{value.replace(number, str(by), 1) if number else value}"]
    if how == "twice":
        return [line, line.replace(number, str(int(number) + by), 1) if number else line]
    if how == "drop":
        return []
    if how == "memory" and "vram" in key and number:
        return [line.replace(number, str(int(number) * 2 + by), 1)]
    return [line]


@st.composite
def reads(draw: st.DrawFn) -> list[bytes]:
    """A client's fdinfo read three times, each read a mutation of the one before."""
    text = draw(st.sampled_from(SAMPLES))
    out = [text.encode()]
    for _ in range(2):
        lines = text.split("\n")
        new: list[str] = []
        if draw(st.booleans()):  # a busy client: some of its counters moved on, nothing else
            for line in lines:
                grow = _COUNTER.match(line) and draw(st.booleans())
                new.extend(_mutate(line, "grow", draw(st.integers(1, 10**9))) if grow else [line])
        else:
            changed = draw(st.lists(st.integers(0, len(lines) - 1), max_size=4))
            for i, line in enumerate(lines):
                how = draw(st.sampled_from(_MUTATIONS)) if i in changed else "same"
                new.extend(_mutate(line, how, draw(st.integers(1, 10**9))))
        text = "\n".join(new)
        out.append(text.encode())
    return out


@settings(max_examples=examples(400), deadline=None)
@given(reads())
def test_parsing_again_gives_what_a_whole_parse_gives(texts: list[bytes]) -> None:
    last: ParsedFdinfo | None = None
    for data in texts:
        last = parse_fdinfo_again(last, data)
        assert last.info == parse_fdinfo(data)


def test_only_the_counters_moved_keeps_the_rest_of_the_parse() -> None:
    first = parse_fdinfo_again(None, AMDGPU.encode())
    assert first.slots and first.info is not None
    moved = parse_fdinfo_again(first, AMDGPU.replace("107322799", "207322799").encode())
    assert moved.info is not None and moved.info.engines[0].busy_ns == 207322799
    assert moved.info.regions is first.info.regions  # taken over, not parsed again
    assert parse_fdinfo_again(moved, moved.data) is moved  # the same bytes: the same parse


def test_a_number_past_what_the_parse_accepts_is_parsed_whole() -> None:
    first = parse_fdinfo_again(None, XE.encode())
    assert first.slots
    longer = parse_fdinfo_again(first, XE.replace("28257900", "1" * 21).encode())
    assert longer.info == parse_fdinfo(XE.replace("28257900", "1" * 21).encode())
    assert longer.info is not None and "rcs" not in {e.name for e in longer.info.engines if e.cycles}
    old = parse_fdinfo_again(None, AMDGPU_OLD.encode())
    assert old.slots and old.info is not None
    for pct in ("7.5", "100", "12.1234567", "5.", "1000"):
        again = parse_fdinfo_again(old, AMDGPU_OLD.replace("12.5", pct).encode())
        assert again.info == parse_fdinfo(AMDGPU_OLD.replace("12.5", pct).encode()), pct


def test_a_key_printed_twice_keeps_the_last_value_as_a_whole_parse_does() -> None:
    twice = (AMDGPU + "drm-engine-gfx:\t5 ns\n").encode()
    # The second of two gfx lines wins in a whole parse; moving the first changes nothing.
    again = parse_fdinfo_again(parse_fdinfo_again(None, twice), twice.replace(b"107322799", b"1"))
    assert again.info is not None and again.info.engines[0].busy_ns == 5
    # The same key to the parser, not to bytes.strip (a trailing NEL).
    nel = (AMDGPU + "drm-engine-gfx\u0085:\t5 ns\n").encode()
    again = parse_fdinfo_again(parse_fdinfo_again(None, nel), nel.replace(b"107322799", b"1"))
    assert again.info is not None and again.info.engines[0].busy_ns == 5
    assert parse_fdinfo_again(None, (AMDGPU + "x" * MAX_FDINFO_BYTES).encode()).slots == ()
