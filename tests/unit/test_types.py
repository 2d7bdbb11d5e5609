"""The type checker: mypy, as pyproject.toml's [tool.mypy] configures it (strict, Python 3.10, every
package the project installs), finds no error. And that configuration is the one that checks: it
reads every module of those packages (the generated ones through their generated stubs), and a
planted untyped function fails it.

mypy runs in a child process from the repository root (its `files` are relative to it), with its
cache in the test's temporary folder: a cold run, never one read back from an earlier tree's cache.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: mypy's own dependency there
    import tomli as tomllib
from mypy.config_parser import parse_config_file
from mypy.options import Options

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "pyproject.toml"
MYPY_TIMEOUT_S = 300  # a cold run takes about 10 s on 2 cores (torch and the frameworks are not followed)


def _mypy(tmp_path: Path, *targets: str) -> tuple[int, str]:
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(CONFIG), "--cache-dir", str(tmp_path / "mypy_cache"),
         "--no-error-summary" if targets else "--error-summary", *targets],
        cwd=REPO, capture_output=True, text=True, timeout=MYPY_TIMEOUT_S,
    )
    return r.returncode, r.stdout + r.stderr


def _options() -> Options:
    options = Options()
    parse_config_file(options, lambda: None, str(CONFIG), stdout=sys.stderr, stderr=sys.stderr)
    return options


def _expected_sources(options: Options) -> tuple[list[str], list[str]]:
    """(the modules the configuration checks, the .py files its `exclude` leaves out), as paths from
    the root. A module with a .pyi stub beside it is checked once, in its stub (generated code's)."""
    checked, excluded = [], []
    for package in options.files or []:
        root = REPO / package
        stubs = {p.with_suffix("") for p in root.rglob("*.pyi")}
        checked += [p.relative_to(REPO).as_posix() for p in root.rglob("*.pyi")]
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if any(re.search(p, rel) for p in options.exclude):
                excluded.append(rel)
            elif path.with_suffix("") not in stubs:
                checked.append(rel)
    return sorted(checked), excluded


@pytest.mark.slow
def test_the_packages_type_check(tmp_path):
    code, out = _mypy(tmp_path)
    assert code == 0, f"mypy (pyproject.toml's [tool.mypy]) found errors:\n{out[-20000:]}"
    checked, _ = _expected_sources(_options())
    m = re.search(r"Success: no issues found in (\d+) source files", out)
    assert m, out[-4000:]
    assert int(m.group(1)) == len(checked), (m.group(0), len(checked))


def test_the_configuration_covers_the_packages_and_excludes_only_generated_code():
    options = _options()
    assert options.python_version == (3, 10)
    # Every package the project installs (pyproject's setuptools include), each a whole.
    with open(CONFIG, "rb") as fh:
        include = tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(options.files or []) == sorted(p for p in include if "." not in p)
    # No module of ours is exempt from the check: an override may only say how to read a library.
    assert not any(o.get("ignore_errors") for o in options.per_module_options.values()), options.per_module_options
    checked, excluded = _expected_sources(options)
    assert len(checked) > 100, checked  # the packages themselves, not a folder the pattern missed
    assert excluded, "the generated kubelet modules are excluded by name"
    for rel in excluded:
        assert "DO NOT EDIT" in (REPO / rel).read_text()[:500], f"{rel} is excluded but not generated code"
        assert (REPO / rel).with_suffix(".pyi").is_file(), f"{rel} is excluded without a stub to type it"


def test_a_planted_untyped_function_fails_the_check(tmp_path):
    """The configuration's strict and python_version apply (parse_config_file alone only notes strict)."""
    planted = tmp_path / "planted.py"
    # Untyped under strict; and typing.Self is 3.11's, which python_version 3.10 must refuse.
    planted.write_text("from typing import Self\n\n\ndef double(x):\n    return x * 2\n")
    code, out = _mypy(tmp_path, str(planted))
    assert code == 1, out
    assert "[no-untyped-def]" in out, out
    assert 'Module "typing" has no attribute "Self"' in out, out
