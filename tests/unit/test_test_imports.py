"""Tests import no other test module: what several tests share lives in tests/helpers/ (functions,
constants, the processes they start) or in a conftest.py (fixtures), never in a test file or a
conftest another file imports. A test file then stays free to change without breaking another, and
pytest never imports a test module twice under two names.

Every Python file under tests/ may import, of the tests package, only tests.helpers.* and
tests.fakenvml.*: by `import`, by `from ... import` (relative imports resolved), and by a module name
handed to importlib.import_module or pytest.importorskip.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
ALLOWED = ("tests.helpers", "tests.fakenvml")
# Calls whose first argument, a string, names a module they import.
_IMPORTING_CALLS = {"import_module", "importorskip", "__import__"}


def _module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(text: str, path: Path) -> list[tuple[int, str]]:
    """(line, module) of every module the source `text` of the file at `path` imports, relative
    imports made absolute; for `from package import name` both the package and `package.name` (a
    name may be a submodule)."""
    tree = ast.parse(text, filename=str(path))
    package = _module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            first = node.args[0] if node.args else None
            if name in _IMPORTING_CALLS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((node.lineno, first.value))
    return found


def forbidden_imports(path: Path, text: str | None = None) -> list[str]:
    """`path:line imports module` for each tests.* module the file imports outside ALLOWED."""
    out = []
    for line, module in imported_modules(path.read_text() if text is None else text, path):
        if module != "tests" and not module.startswith("tests."):
            continue
        if module == "tests" or any(module == a or module.startswith(a + ".") for a in ALLOWED):
            continue  # `from tests import helpers` names the package itself, then the allowed module
        out.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    return out


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts)


def test_the_checker_sees_each_way_of_importing():
    here = TESTS / "unit" / "test_imaginary.py"  # never written: the text below is parsed as its
    text = "\n".join(
        [
            "import tests.unit.test_verdict",
            "from tests.integration.test_cli import cli",
            "from tests.stress import jobs",
            "from . import test_server",
            "from .test_server import StaticSource",
            "from ..browser.conftest import wait_js",
            "import pytest",
            "env = pytest.importorskip('tests.browser.dsh_env')",
            "import importlib",
            "m = importlib.import_module('tests.unit.test_verdict')",
            "from tests.helpers.harness import REPO",
            "from tests.fakenvml import gpu",
            "from tests import helpers",
            "import sidecar.verdict",
        ]
    )
    got = [line.split(" imports ")[1] for line in forbidden_imports(here, text)]
    assert got == [
        "tests.unit.test_verdict",
        "tests.integration.test_cli",
        "tests.integration.test_cli.cli",
        "tests.stress",
        "tests.stress.jobs",
        "tests.unit",
        "tests.unit.test_server",
        "tests.unit.test_server",
        "tests.unit.test_server.StaticSource",
        "tests.browser.conftest",
        "tests.browser.conftest.wait_js",
        "tests.browser.dsh_env",
        "tests.unit.test_verdict",
    ]


def test_tests_import_only_helpers_and_the_fake_driver():
    files = python_files()
    assert len([p for p in files if p.name.startswith("test_")]) > 50  # the walk found the suite
    bad = [line for path in files for line in forbidden_imports(path)]
    assert not bad, "move what is shared into tests/helpers/ (fixtures: a conftest.py):\n" + "\n".join(bad)
