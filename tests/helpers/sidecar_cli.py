"""`python -m sidecar.cli ARGS` run to its end, as a user runs it, in the tests' environment."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.harness import REPO, python_env


def cli(*args: str, env=None, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", *args],
        capture_output=True,
        text=True,
        env=python_env(base=env),
        cwd=REPO,
        timeout=timeout_s,
    )
