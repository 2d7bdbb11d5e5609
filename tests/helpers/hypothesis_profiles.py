"""Hypothesis profiles for the suite, chosen by the environment variable HYPOTHESIS_PROFILE.

    ci        (default) a test that writes its count runs at most CI_MAX_EXAMPLES examples (one that
              writes none runs Hypothesis's own 100), derandomized: the same examples on every run,
              so a CI failure reproduces and a green run is not luck.
    thorough  each test runs the count written beside it (`examples(n)` returns n): the full search,
              on demand (`HYPOTHESIS_PROFILE=thorough ./scripts/test.sh tests/unit`), randomized.

Tests write `@settings(max_examples=examples(n), ...)`: an explicit max_examples wins over any
profile in Hypothesis, so the cap has to be applied where the count is written.
"""

from __future__ import annotations

import os

from hypothesis import settings

CI_MAX_EXAMPLES = 150
PROFILES = ("ci", "thorough")


def profile_name() -> str:
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r}: expected one of {', '.join(PROFILES)}")
    return name


def examples(n: int) -> int:
    """The example count a test written for `n` runs under the chosen profile."""
    return n if profile_name() == "thorough" else min(n, CI_MAX_EXAMPLES)


def load() -> str:
    """Register both profiles and load the chosen one. Runs from tests/conftest.py, before any test
    module is imported: a test's @settings inherits from the profile loaded when it is decorated."""
    # database=None under ci: derandomized runs replay nothing from a local example database, so the
    # examples run are the same on every machine.
    settings.register_profile(
        "ci", max_examples=100, deadline=None, derandomize=True, database=None
    )
    settings.register_profile("thorough", deadline=None)
    name = profile_name()
    settings.load_profile(name)
    return name
