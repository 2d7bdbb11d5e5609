"""What the DSH tests with a sidecar the plugin starts itself share: training jobs whose model stays on
the CPU, the simulated driver they run beside, and the plugin's started sidecar as /api/config
reports it. The DSH itself comes from tests/helpers/dsh_env.py, its page from tests/helpers/dsh_page.py.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

from tests.fakenvml import FakeNvml, gpu, make_fake_sysfs
from tests.helpers.dashboard_stack import model, sysfs_cards
from tests.helpers.dsh_env import DshWeb, get_json
from tests.helpers.dsh_page import API
from tests.helpers.harness import FakeJob, cuda_runtime, wait_for

# The dsh-sidecar of the Python running the tests (pip install -e .): what the plugin is told to start.
SIDECAR_BIN = Path(sys.executable).parent / "dsh-sidecar"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, read and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_model_job(
    directory: Path, cwd: Path, env: dict[str, str] | None = None, run: dict[str, object] | None = None
) -> FakeJob:
    """A training job whose model stays on the CPU of a GPU machine (`run`: its distributed identity,
    e.g. test_dsh_autostart's RANK_0_OF_RUN_7). Detached (its parent is init): discovery groups a job
    under its topmost probed ancestor, which must not be the test process."""
    spec = {
        "payload": {
            "role": "main",
            "script": "train.py",
            "runtime": cuda_runtime([gpu(0)["uuid"]]),
            "models": [model("net", "cpu", input_device="cpu")],
            **(run or {}),
        }
    }
    return FakeJob(directory, {"main": spec}, env=env, cwd=cwd, detach=True)


def simulated_gpu_env(base: Path, lib_dir: Path) -> tuple[FakeNvml, dict[str, str], list[str]]:
    """The simulated driver, the environment it adds, and the sidecar's arguments that make it read
    a fake /sys with one NVIDIA card (not the machine's)."""
    nvml = FakeNvml(lib_dir=lib_dir, scenario_path=base / "scenario.txt")
    sysfs = make_fake_sysfs(base / "sys", sysfs_cards(1))
    full = nvml.env()
    # only what the simulated driver adds: DSH's own environment (HOME, DSH_HOME, PATH) stays
    keys = ("LD_LIBRARY_PATH", "FAKE_NVML_SCENARIO", "PYTHONPATH")
    return nvml, {k: full[k] for k in keys if k in full}, ["--path.sysfs", str(sysfs)]


def managed_sidecar(web: DshWeb) -> dict[str, Any]:
    """The sidecar the plugin started, as its /api/config says ({} when it started none)."""
    code, cfg = get_json(web.url, f"{API}/config")
    assert code == 200, cfg
    sidecar: dict[str, Any] = cfg["sidecar"] or {}
    return sidecar


def wait_running(web: DshWeb, timeout_s: float = 40.0, not_pid: int | None = None) -> dict[str, Any]:
    """Wait until the plugin's sidecar runs (another pid than `not_pid`); its /api/config entry."""

    def running() -> dict[str, Any] | None:
        s = managed_sidecar(web)
        return s if s.get("state") == "running" and s.get("pid") and s["pid"] != not_pid else None

    found: dict[str, Any] = wait_for(
        running, timeout_s, 0.2, f"the plugin's sidecar to run (now: {managed_sidecar(web)})"
    )
    return found
