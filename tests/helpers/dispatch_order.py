"""The order in which scripts/test.sh hands test files to its workers."""

from __future__ import annotations

from typing import Any


def slow_first(items: list[Any]) -> None:
    """Files that hold a `slow` test first, each file's tests still together and in order.

    scripts/test.sh hands files to its workers in this order (--dist loadfile
    --no-loadscope-reorder): the longest work goes out first and the many short files fill the end,
    so no worker is left running a 30 s file while the others wait. (pytest-xdist's own order,
    files with the most tests first, sent the one-test process-heavy files last.)"""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    first_seen: dict[Any, int] = {}
    for item in items:
        first_seen.setdefault(item.path, len(first_seen))
    items.sort(key=lambda item: (item.path not in slow_files, first_seen[item.path]))
