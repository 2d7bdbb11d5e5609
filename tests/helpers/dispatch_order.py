"""The order in which scripts/test.sh hands test files to its workers, and the tests its second
phase runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
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


# scripts/test.sh's second phase runs the `alone` tests: the first phase names them in this file, so
# that the second collects those few test files, not all of them (each of its four workers would
# import every test module, torch and the MCP SDK with them: about 5 CPU-s a worker).
ALONE_IDS_ENV = "DSH_ALONE_IDS_FILE"


def write_alone_ids(items: Sequence[Any], target: str | None) -> None:
    """The node id of every collected test marked `alone`, one a line, to `target` (None: nothing).
    Each xdist worker collects the same tests and writes the same lines; os.replace makes each
    write whole."""
    if not target:
        return
    ids = "".join(f"{item.nodeid}\n" for item in items if item.get_closest_marker("alone") is not None)
    tmp = f"{target}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(ids)
    os.replace(tmp, target)
