"""The warning codes: one group and summary each (sidecar/verdict/codes.py), the same codes as the
rules yield and the catalogue words, and the README's table generated from them.

Regenerate the README's table: python -m sidecar.verdict.codes_docs --write
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sidecar.common.catalogue import CATALOGUE_DIR
from sidecar.verdict import codes_docs
from sidecar.verdict.codes import ACTIONS, CODES

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_table_is_generated_from_the_codes_and_the_rules():
    """Fails when README.md's table differs from sidecar/verdict/codes.py and the rules' severities."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert codes_docs.BEGIN in text and codes_docs.END in text, (
        "README.md has no generated table of warning codes"
    )
    assert codes_docs.with_table(text) == text, (
        "README.md's warning codes differ from sidecar/verdict/codes.py: run python -m sidecar.verdict.codes_docs --write"
    )
    block = text[text.index(codes_docs.BEGIN) : text.index(codes_docs.END)]
    for code in CODES:
        assert f"| `{code}` |" in block


def test_every_code_the_rules_yield_is_declared_once_with_its_words():
    yielded = codes_docs.severities()
    assert set(yielded) == set(CODES), set(yielded) ^ set(CODES)
    for code, severities in yielded.items():
        assert severities and severities <= {"error", "warning", "info"}, (code, severities)
    keys = json.loads(Path(CATALOGUE_DIR, "en.json").read_text(encoding="utf-8"))
    in_catalogue = {k.split(".")[1] for k in keys if k.startswith("warning.")}
    assert in_catalogue == set(CODES), in_catalogue ^ set(CODES)
    for code in CODES:
        assert any(k == f"hint.{code}" or k.startswith(f"hint.{code}.") for k in keys), f"{code} has no hint"


def test_every_code_is_in_one_group_and_says_when_it_fires():
    groups = [key for key, _ in ACTIONS]
    assert len(set(groups)) == len(groups)
    for code, c in CODES.items():
        assert c.action in groups, (code, c.action)
        assert c.summary.strip() and "\n" not in c.summary and "|" not in c.summary, code
    for key in groups:
        assert any(c.action == key for c in CODES.values()), f"group {key} is empty"


def test_the_severities_follow_a_helper_that_passes_them_on(tmp_path, monkeypatch):
    """The reader of the rules resolves a code given to a helper and a severity set in the helper."""
    (tmp_path / "r.py").write_text(
        "def finding(code, severity, m, h, pids=()): ...\n"
        "def _two(code, m): return finding(code, 'warning' if m else 'info', m, None)\n"
        "def _pass(code, severity, m): return finding(code, severity, m, None)\n"
        "def rule(f):\n"
        "    yield _two('a-code', f)\n"
        "    yield _pass('b-code', 'error', f)\n"
        "    yield finding('c-code', 'error' if f else 'warning', f, None)\n"
        "    yield finding(f.code, 'info', f, None)  # not a literal code: not read\n"
    )
    monkeypatch.setattr(codes_docs, "VERDICT_DIR", str(tmp_path))
    assert codes_docs.severities() == {
        "a-code": {"warning", "info"},
        "b-code": {"error"},
        "c-code": {"error", "warning"},
    }


def test_the_check_command_passes_on_the_committed_readme():
    r = subprocess.run(
        [sys.executable, "-m", "sidecar.verdict.codes_docs", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
