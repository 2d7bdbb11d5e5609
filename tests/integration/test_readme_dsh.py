"""The README's "Inside DSH" commands, run as written (the first two lines: install, add the plugin).

DSH is installed by scripts/install_dsh.sh in its default folder (CI installs it first; skipped when
it cannot be installed here). `dsh web` itself is exercised by tests/browser/test_dsh_*.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.helpers.harness import REPO

pytestmark = [pytest.mark.dsh]


def readme_dsh_block() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Inside DSH", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's DSH section has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_dsh_commands_work_as_written(tmp_path):
    lines = readme_dsh_block()
    web = [i for i, line in enumerate(lines) if re.search(r"^\S*dsh\S* web\b", line.replace("\"$DSH\"", "dsh"))]
    # `dsh web` serves until stopped: everything before it
    script = "set -e\n" + "\n".join(lines[: web[0]] if web else lines) + '\necho "DSH=$DSH"\n'
    env = {**os.environ, "DSH_HOME": str(tmp_path / "dsh-home"), "CI": "true"}
    r = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0 and "install_dsh: error" in r.stderr and "npm" in r.stderr:
        pytest.skip(f"DSH cannot be installed here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, (r.stdout, r.stderr)
    pkg = json.loads((tmp_path / "dsh-home" / "profiles" / "web" / "package.json").read_text())
    assert "dsh-gpu-dashboard" in pkg["dsh"]["profile"]["bundles"], pkg
