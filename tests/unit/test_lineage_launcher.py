"""A launcher installed as a console script (pip's `torchrun`, `accelerate`, `deepspeed`) runs through
its #! line, so /proc/PID/cmdline reads `python3 /venv/bin/torchrun ...`: it is still a launcher, or
discovery splits a torchrun job into one job per rank."""

from __future__ import annotations

import pytest

from sidecar.sources.lineage import is_launcher


@pytest.mark.parametrize(
    "argv",
    [
        ("/venv/bin/python3", "/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"),
        ("/usr/bin/python3", "-u", "/venv/bin/torchrun", "train.py"),
        ("/venv/bin/python", "/venv/bin/accelerate", "launch", "train.py"),
        ("/venv/bin/python3.11", "/venv/bin/deepspeed", "train.py"),
        ("torchrun", "--nproc_per_node", "2", "train.py"),
        ("/venv/bin/python", "-m", "torch.distributed.run", "train.py"),
    ],
)
def test_console_script_launchers_are_launchers(argv: tuple[str, ...]) -> None:
    assert is_launcher(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ("/venv/bin/python", "train.py"),
        ("/venv/bin/python", "-u", "train.py", "torchrun"),
        ("/venv/bin/python", "-c", "import torchrun"),
        ("/venv/bin/python", "-m", "http.server"),
    ],
)
def test_scripts_are_not_launchers(argv: tuple[str, ...]) -> None:
    assert not is_launcher(argv)
