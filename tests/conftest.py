"""Fixtures shared by every test layer.

The simulated NVIDIA driver's fixtures live with the driver (tests/fakenvml/fixtures.py).
"""

import os
import sys

import pytest

# Every status and history document built in this test session, in this process or in any sidecar
# it starts (they inherit the environment), is validated against sidecar/documents/contract.py: a document
# that breaks schema 2 fails the poll that built it.
os.environ["DSH_CONTRACT_CHECK"] = "1"

from tests.fakenvml.fixtures import *  # noqa: F403 -- pytest fixtures
from tests.helpers import hypothesis_profiles
from tests.helpers.browser_fixtures import *  # noqa: F403 -- pytest fixtures: pages, chromium
from tests.helpers.dispatch_order import ALONE_IDS_ENV, slow_first, write_alone_ids
from tests.helpers.harness import temporary_runs_ledger

# The runs ledger of every sidecar a test starts: a temporary file of this session's.
temporary_runs_ledger()

# Before any test module is imported: their @settings inherit from the profile loaded here.
HYPOTHESIS_PROFILE = hypothesis_profiles.load()


# Test files whose sidecars discover jobs machine-wide (no --pid), or that plant, list, fill or sweep
# segments across all of /dev/shm: two of them at once in one namespace see each other's jobs and
# segments. scripts/test.sh runs them on isolated workers (scripts/isolated_worker.sh), or in its
# serial phase where namespaces are not available.
MACHINE_WIDE_FILES = frozenset(
    {
        "tests/browser/test_dsh_autostart.py",
        "tests/browser/test_jobs_page.py",
        "tests/integration/test_discovery.py",
        "tests/integration/test_job_key_owners.py",
        "tests/integration/test_jobs_snapshot.py",
        "tests/integration/test_mcp.py",
        "tests/integration/test_metrics_idle_node.py",
        "tests/integration/test_peer_access.py",
        "tests/integration/test_probe_start_sweep.py",
        "tests/integration/test_programs.py",
        "tests/stress/test_churn_rss.py",
        "tests/stress/test_container_segments.py",
        "tests/stress/test_discovery_floods.py",
        "tests/stress/test_metrics_cardinality.py",
        "tests/stress/test_shm_full.py",
        "tests/stress/test_squatting.py",
        "tests/unit/test_jobs_listing.py",
        "tests/unit/test_jobs_planted_segments.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        path = item.path.relative_to(root).as_posix()
        if path in MACHINE_WIDE_FILES:
            item.add_marker(pytest.mark.machine_wide)
        # For --dist loadgroup: a file's tests on one worker, in file order, with its module
        # fixtures (as --dist loadfile), unless they name a finer group (test_programs.py: one per
        # program). scripts/test.sh still uses loadfile: a loadgroup check split a file.
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(path))
    slow_first(items)
    # scripts/test.sh's second phase runs the tests the first phase names here (dispatch_order.py).
    write_alone_ids(items, os.environ.get(ALONE_IDS_ENV))


def pytest_report_header(config):
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (HYPOTHESIS_PROFILE=thorough for the full counts)"


@pytest.fixture(scope="module", autouse=True)
def no_probe_left_running():
    """A test module that ran the probe inside the test process stops it when it ends: a worker left
    publishing would be the probed ancestor of every job later tests start as its children
    (tests/helpers/in_process_probe.py)."""
    yield
    if "probe._state" in sys.modules:  # never imports the probe into a process that did not
        from tests.helpers.in_process_probe import in_process_probe_running, stop_in_process_probe

        if in_process_probe_running():
            stop_in_process_probe()


@pytest.fixture
def live_pid():
    """A live process that runs no probe: its pid is ours to write segments under."""
    import subprocess

    import probe_wire

    proc = subprocess.Popen(["sleep", "120"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        probe_wire.remove_segment(proc.pid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With DSH_REQUIRE_ALL=1 (scripts/test.sh sets it), a skipped browser, DSH or Prometheus test is a
    failure: a missing Chromium, Prometheus or DSH install must not let CI pass without its tests."""
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and os.environ.get("DSH_REQUIRE_ALL") == "1"
        and any(marker in item.keywords for marker in ("browser", "dsh", "prometheus"))
        and not hasattr(report, "wasxfail")
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, but DSH_REQUIRE_ALL=1 requires this test to run: {reason}"


@pytest.fixture
def gloo_world_of_one(tmp_path, monkeypatch):
    """torch.distributed initialised in this process as rank 0 of 1 (gloo, file store); torn down after."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()
