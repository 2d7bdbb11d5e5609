"""Fixtures of the stress tests: a zygote that forks probe writers on command, the simulated
driver's environment for a real sidecar, and a check that every test leaves no segment of its own
processes behind."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakenvml import make_fake_sysfs
from tests.helpers.zygote import Zygote


@pytest.fixture
def no_probe_here() -> None:
    """This test process runs no probe while the test runs: earlier tests in it may have started
    one (in-process framework tests), and discovery would then group the zygote's jobs under it,
    their topmost probed ancestor, instead of each on its own."""
    from probe_wire import has_live_segment

    if has_live_segment(os.getpid()):
        from probe._state import PROBE

        PROBE.shutdown()


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return make_fake_sysfs(
        tmp_path / "sys", [{"pci": "0000:10:00.0", "vendor": "0x10de", "driver": "nvidia"}]
    )


@pytest.fixture
def sysfs_args(sysfs: Path) -> list[str]:
    """A sidecar's arguments that make it read the fake /sys (`sysfs`), not the machine's."""
    return ["--path.sysfs", str(sysfs)]


@pytest.fixture
def sidecar_env(fake_nvml):
    return fake_nvml.env({"DSH_SIDECAR_RULES": json.dumps({"idle_window_s": 2.0})})


