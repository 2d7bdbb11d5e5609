"""Fixtures shared by every test layer.

The simulated NVIDIA driver's fixtures live with the driver (tests/fakenvml/fixtures.py).
"""

import os

import pytest

from tests.fakenvml.fixtures import *  # noqa: F401,F403  (pytest fixtures)


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
