"""Which CUDA build of torch to suggest: the one table of the CUDA wheel indexes PyTorch publishes
for each torch minor version, and the choice of the index that runs on a driver.

A suggestion keeps the user's torch version (`pip install torch==X.Y.Z --index-url .../cuNNN`): an
index without that version would make pip install an older torch (there is no cu124 wheel of torch
2.13, and `pip install torch --index-url .../cu124` installs 2.6). The index is the newest whose
CUDA the driver supports (NVML's cuda_driver: the highest CUDA the driver runs), so the wheel runs
on it without relying on CUDA's minor version compatibility. The catalogue's commands add
`--force-reinstall`: pip takes an installed "2.13.0+cpu" as satisfying "torch==2.13.0".
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

__all__ = ["CUDA_WHEELS", "NoWheel", "WheelChoice", "WheelIndex", "cuda_tag", "cuda_wheel"]

# torch minor -> the CUDA versions of its wheel indexes (https://download.pytorch.org/whl/cuNNN).
# Source: pytorch/pytorch RELEASE.md, "Release Compatibility Matrix" (its stable and experimental
# CUDA columns; both are published as indexes), which agrees with the pip commands of
# https://pytorch.org/get-started/previous-versions for 2.4 to 2.9 (e.g. 2.6: cu118, cu124, cu126;
# 2.9: cu126, cu128, cu130). 2.13 (the release installed in this project's tests) lists CUDA 12.6 and
# 13.0 stable, 13.2 experimental. A torch minor not in the table (older than 2.0, newer than 2.13, or
# a development build) gets no index at all: which CUDA versions a future release drops cannot be
# told (2.9 dropped 2.8's cu129, 2.12 dropped cu128), and a guessed index without the user's version
# is exactly the downgrade this table prevents; the hint points to pytorch.org's selector instead.
CUDA_WHEELS: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {
    (2, 0): ((11, 7), (11, 8)),
    (2, 1): ((11, 8), (12, 1)),
    (2, 2): ((11, 8), (12, 1)),
    (2, 3): ((11, 8), (12, 1)),
    (2, 4): ((11, 8), (12, 1), (12, 4)),
    (2, 5): ((11, 8), (12, 1), (12, 4)),
    (2, 6): ((11, 8), (12, 4), (12, 6)),
    (2, 7): ((11, 8), (12, 6), (12, 8)),
    (2, 8): ((12, 6), (12, 8), (12, 9)),
    (2, 9): ((12, 6), (12, 8), (13, 0)),
    (2, 10): ((12, 6), (12, 8), (13, 0)),
    (2, 11): ((12, 6), (12, 8), (13, 0)),
    (2, 12): ((12, 6), (13, 0), (13, 2)),
    (2, 13): ((12, 6), (13, 0), (13, 2)),
}

# A release's version, less a local label ("2.13.0+cpu" -> "2.13.0"); a dev or rc build is not one.
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\+[\w.]+)?")


class WheelIndex(NamedTuple):
    """`kind`: "index" (`tag` runs on the driver, or the driver is unknown and `tag` is the oldest
    CUDA), or "driver-old" (every index of this torch needs a newer driver; `tag` the oldest).
    `torch` is the version to pin."""

    kind: Literal["index", "driver-old"]
    torch: str
    tag: str


class NoWheel(NamedTuple):
    """A torch this table does not know ("unknown"): no index. `torch` is the version to pin."""

    kind: Literal["unknown"]
    torch: str
    tag: None


# One of the two, told apart by `kind` (a type checker narrows on it).
WheelChoice = WheelIndex | NoWheel


def cuda_tag(cuda: tuple[int, int]) -> str:
    return f"cu{cuda[0]}{cuda[1]}"


def _major_minor(v: str | None) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)*", str(v).strip()) if v else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def cuda_wheel(torch_version: str | None, driver_cuda: str | None) -> WheelChoice:
    """The CUDA wheel of `torch_version` to suggest on a driver that supports `driver_cuda` ("12.8",
    None when unknown)."""
    m = _RELEASE.fullmatch(str(torch_version or "").strip())
    if m is None:
        return NoWheel("unknown", str(torch_version or "?"), None)
    pin = f"{m.group(1)}.{m.group(2)}.{m.group(3)}"
    indexes = CUDA_WHEELS.get((int(m.group(1)), int(m.group(2))))
    if not indexes:
        return NoWheel("unknown", pin, None)
    driver = _major_minor(driver_cuda)
    if driver is None:
        return WheelIndex("index", pin, cuda_tag(indexes[0]))  # the oldest CUDA runs on the most drivers
    runs = [c for c in indexes if c <= driver]
    if runs:
        return WheelIndex("index", pin, cuda_tag(runs[-1]))
    return WheelIndex("driver-old", pin, cuda_tag(indexes[0]))
