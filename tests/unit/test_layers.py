"""The import contracts of pyproject.toml's [tool.importlinter] hold (the sidecar's layers, drawn in
docs/design.md, and what each package must never import), and each contract fails on the import it
forbids: a copy of the packages with one wrong import added breaks that contract."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from importlinter.api import read_configuration

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hostfs", "probe", "probe_wire", "sidecar")
# lint-imports, as its console script runs it; no cache: a copy's graph must never be read from one.
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"]


def _contracts() -> dict[str, str]:
    """Contract id -> name, from pyproject.toml."""
    config = read_configuration(str(REPO / "pyproject.toml"))
    return {c["id"]: c["name"] for c in config["contracts_options"]}


def _lint(root: Path) -> tuple[int, str, dict[str, str]]:
    """Runs lint-imports in `root`: its exit status, its output and each contract's KEPT/BROKEN."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(root), COLUMNS="1000")  # one line per contract in the report
    r = subprocess.run(
        [*LINT, "--no-cache", str(root / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )
    out = r.stdout + r.stderr
    verdicts = {}
    for cid, name in _contracts().items():
        m = re.search(re.escape(name) + r"\s+(KEPT|BROKEN)", out)
        verdicts[cid] = m.group(1) if m else "absent"
    return r.returncode, out, verdicts


def test_the_import_contracts_hold():
    code, out, verdicts = _lint(REPO)
    assert code == 0, out[-4000:]
    assert set(verdicts.values()) == {"KEPT"}, (verdicts, out[-4000:])


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "static"))
    return root


WRONG_IMPORTS = [
    # (module file, the line added, the contract it breaks)
    ("sidecar/verdict/rules.py", "import sidecar.poll.poller", "sidecar-layers"),
    ("sidecar/common/memo.py", "from sidecar.verdict import facts", "sidecar-layers"),
    ("sidecar/sources/proctree.py", "from sidecar.documents import bounds", "sidecar-layers"),
    ("sidecar/poll/discovery.py", "from sidecar.serve import metrics", "sidecar-layers"),
    ("sidecar/layerless.py", "X = 1", "sidecar-layers"),  # a module outside every layer
    ("sidecar/documents/document.py", "from sidecar.sources import proctree", "facts-not-sources"),
    ("sidecar/verdict/facts.py", "from sidecar.sources.sysfs import list_system_gpus", "facts-not-sources"),
    ("sidecar/serve/server.py", "from sidecar.poll.poller import Poller", "serve-through-interfaces"),
    ("sidecar/poll/placement.py", "from probe_wire.codec import decode_payload", "payloads-through-sources"),
    ("sidecar/sources/sysfs.py", "import probe", "sidecar-without-probe-and-torch"),
    ("sidecar/common/catalogue.py", "import torch", "sidecar-without-probe-and-torch"),
    ("probe_wire/names.py", "from sidecar.documents import bounds", "wire-stands-alone"),
    ("hostfs/procid.py", "from probe_wire import names", "hostfs-stands-alone"),
    ("hostfs/paths.py", "import sidecar.common.memo", "hostfs-stands-alone"),
    ("sidecar/poll/finder.py", "from hostfs.procid import leader_real_uid", "only-sources-read-the-os"),
    ("sidecar/cli/doctor.py", "from probe_wire.names import list_segment_files", "only-sources-read-the-os"),
    ("sidecar/poll/discovery.py", "from probe_wire.cleanup import sweep_dead_segments", "only-sources-read-the-os"),
    ("sidecar/serve/server.py", "from hostfs.paths import HOST", "only-sources-read-the-os"),
]


@pytest.mark.parametrize("module,line,contract", WRONG_IMPORTS, ids=[f"{c}:{m}" for m, _, c in WRONG_IMPORTS])
def test_a_wrong_import_breaks_its_contract(tmp_path, module, line, contract):
    root = _copy(tmp_path)
    path = root / module
    text = path.read_text() if path.exists() else ""
    # At the end of the module, inside a function: a lazy import counts as much as a top-level one.
    path.write_text(text + f"\n\ndef _wrong():\n    {line}\n")
    code, out, verdicts = _lint(root)
    assert code != 0, out[-4000:]
    # Others may break too: forbidden contracts follow chains (serve -> documents -> sources).
    assert verdicts[contract] == "BROKEN", (verdicts, out[-4000:])
