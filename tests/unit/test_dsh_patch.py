"""`dsh-sidecar mcp --add-to-dsh` (sidecar/cli/dsh_patch.py): the row's text and where it goes in a
DSH profile's patch file, for every shape of that file, without DSH (tests/integration/
test_mcp_dsh_profile.py runs DSH on what it writes)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from sidecar.cli import dsh_patch
from sidecar.cli.args import UsageError, mcp_parser
from sidecar.cli.dsh_patch import BEGIN, END, PatchError, row_block, server_args, server_command, with_row
from sidecar.common.exit_codes import EXIT_DSH_PROFILE, EXIT_OK
from sidecar.sources import dsh_home

# What DSH 0.1.0-rc.8 writes in a profile's patch file on its first use.
FRESH = """# Your patch layer for this dsh profile, applied after every bundle layer:
# a top-level YAML array of loader patch entries (id-targeted config
# overrides, disables, and insert lists; `!!js` expressions allowed).
[]
"""
PLUGIN_ROW = "- id: dsh-gpu-dashboard\n  config:\n    sidecarUrl: http://127.0.0.1:8799\n"
BLOCK = row_block(["/venv/bin/dsh-sidecar", "mcp", "--url", "http://127.0.0.1:8765"], with_token=False)


def entries(text: str) -> list[str]:
    """The lines that are not blank and not comments."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_row_block() -> None:
    block = row_block(["/v/bin/dsh-sidecar", "mcp", "--url", 'http://h:1/"x"'], with_token=True)
    lines = block.splitlines()
    assert lines[0].startswith(BEGIN) and lines[-1] == END and block.endswith("\n")
    assert lines[1:5] == [
        "- insert:",
        "    - id: mcp-gpu",
        "      name: '@deepseek-ai/dsh-mcp-client'",
        "      config:",
    ]
    # JSON strings are YAML double-quoted scalars: a quote in an argument stays one string
    assert '        command: "/v/bin/dsh-sidecar"' in lines
    assert '        args: ["mcp", "--url", "http://h:1/\\"x\\""]' in lines
    assert "          DSH_SIDECAR_TOKEN: !!js process.env.DSH_SIDECAR_TOKEN ?? ''" in lines
    assert "env:" not in BLOCK  # no token given: no environment


@pytest.mark.parametrize("before", [None, "", FRESH, "[]", "[]  # empty\n", "# only a comment\n"])
def test_a_fresh_or_empty_file_becomes_the_block(before: str | None) -> None:
    text, replaced = with_row(before, BLOCK)
    assert not replaced
    assert entries(text) == entries(BLOCK)  # the `[]` is gone: a block list replaces it
    assert text.endswith(BLOCK)
    if before:  # the user's (and DSH's) comments stay
        assert all(ln in text.splitlines() for ln in before.splitlines() if ln.startswith("#"))


def test_a_block_list_keeps_its_rows_and_gets_the_block_after_them() -> None:
    before = FRESH.replace("[]\n", "") + PLUGIN_ROW.rstrip("\n")  # no newline at the end
    text, replaced = with_row(before, BLOCK)
    assert not replaced and text == before + "\n" + BLOCK


def test_a_second_run_replaces_the_first_block_in_place_of_adding_one() -> None:
    first, _ = with_row(FRESH.replace("[]\n", "") + PLUGIN_ROW, BLOCK)
    other = row_block(["/venv/bin/dsh-sidecar", "mcp", "--pid", "42"], with_token=True)
    text, replaced = with_row(first + "- id: later\n  disabled: true\n", other)
    assert replaced
    assert text.count("- id: mcp-gpu") == 1 and "--pid" in text and "8765" not in text
    assert PLUGIN_ROW in text and "- id: later\n  disabled: true\n" in text


@pytest.mark.parametrize(
    ("before", "says"),
    [
        ("[{id: x, disabled: true}]\n", "where a list of '- ...' entries"),
        ("[]\n- id: x\n", "where a list of '- ...' entries"),
        ("id: x\n", "where a list of '- ...' entries"),
        ("  - id: x\n", "where a list of '- ...' entries"),
        ("- insert:\n    - id: mcp-gpu\n      name: x\n", "a row 'mcp-gpu' that this command did not write"),
        ("- id: 'mcp-gpu'\n", "a row 'mcp-gpu' that this command did not write"),
        (f"{BEGIN} ...\n- insert: []\n", f"but not '{END}'"),
    ],
)
def test_what_it_cannot_add_to_is_refused_with_what_to_do(before: str, says: str) -> None:
    with pytest.raises(PatchError, match=says.replace("[", r"\[").replace("(", r"\(")):
        with_row(before, BLOCK)


def parse(*argv: str) -> argparse.Namespace:
    return mcp_parser().parse_args([*argv, "--add-to-dsh"])


def test_the_server_gets_the_options_given_and_never_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSH_KUBELET_CGROUP_ROOT", raising=False)
    monkeypatch.delenv("DSH_RUNS_DB", raising=False)
    assert server_args(parse("--url", "http://127.0.0.1:8765")) == ["mcp", "--url", "http://127.0.0.1:8765"]
    assert server_args(parse("--pid", "42", "--interval", "1.5", "--history", "60", "--token", "t")) == [
        "mcp",
        "--pid",
        "42",
        "--history",
        "60.0",
    ]
    assert server_args(parse("--path.procfs", "/host/proc")) == ["mcp", "--path.procfs", "/host/proc"]
    assert server_args(parse("--no-runs")) == ["mcp", "--no-runs"]
    # a default from a DSH_* variable goes on argv: DSH scrubs those from a server's environment
    monkeypatch.setenv("DSH_KUBELET_CGROUP_ROOT", "/kubepods")
    assert server_args(parse()) == ["mcp", "--kubelet-cgroup-root", "/kubepods"]
    monkeypatch.setenv("DSH_RUNS_DB", "/data/runs.sqlite3")  # the ledger list_runs reads, the same way
    assert server_args(parse())[-2:] == ["--runs-db", "/data/runs.sqlite3"]


def test_every_option_of_mcp_is_forwarded_or_deliberately_not() -> None:
    dests = {a.dest for a in mcp_parser()._actions if a.option_strings} - {"help"}
    assert dests == {dest for _, dest in dsh_patch.FORWARDED} | {"token", "add_to_dsh"}
    flags = {a.dest: a.option_strings[0] for a in mcp_parser()._actions if a.option_strings}
    assert all(flags[dest] == flag for flag, dest in dsh_patch.FORWARDED)


def test_the_command_is_this_dsh_sidecar() -> None:
    assert server_command("venv/bin/dsh-sidecar", "/usr/bin/python3") == [
        os.path.abspath("venv/bin/dsh-sidecar")
    ]
    assert server_command("/src/sidecar/cli/__main__.py", "/v/bin/python") == [
        "/v/bin/python",
        "-m",
        "sidecar.cli",
    ]


def test_add_to_dsh_writes_the_profile_and_exits_6_when_it_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"DSH_HOME": str(tmp_path / "dsh")}
    args = parse("--url", "http://127.0.0.1:8765")
    args.token = args.runs_db = (
        None  # nothing more to forward (the tests' $DSH_RUNS_DB is --runs-db's default)
    )
    path = tmp_path / "dsh" / "profiles" / "web" / "cordis.patch.yml"
    assert dsh_patch.add_to_dsh(args, env, program="/v/bin/dsh-sidecar") == EXIT_OK  # no profile yet: made
    assert path.read_text() == row_block(
        ["/v/bin/dsh-sidecar", "mcp", "--url", "http://127.0.0.1:8765"], False
    )
    assert f"added the MCP server 'gpu' (row mcp-gpu) in {path}" in capsys.readouterr().out
    path.write_text("[{id: x}]\n")
    assert dsh_patch.add_to_dsh(args, env, program="/v/bin/dsh-sidecar") == EXIT_DSH_PROFILE
    err = capsys.readouterr().err
    assert (
        err.startswith(f"dsh-sidecar: error: cannot add the MCP server to {path}: it holds")
        and err.count("\n") == 1
    )
    assert path.read_text() == "[{id: x}]\n"
    args.add_to_dsh = "../web"
    with pytest.raises(UsageError, match="not a DSH profile name"):
        dsh_patch.add_to_dsh(args, env)


def test_dsh_home_is_resolved_as_dsh_resolves_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert dsh_home.dsh_home({}) == tmp_path / ".dsh"
    assert dsh_home.dsh_home({"DSH_HOME": "  "}) == tmp_path / ".dsh"  # blank: unset
    assert dsh_home.dsh_home({"DSH_HOME": "~/elsewhere"}) == tmp_path / "elsewhere"
    assert [dsh_home.valid_profile(n) for n in ("web", "tui", "", "..", "a/b", "node_modules")] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]


def test_the_file_is_replaced_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "profiles" / "web" / "cordis.patch.yml"
    assert dsh_home.read_patch(path) is None
    dsh_home.write_patch(path, "[]\n")
    os.chmod(path, 0o600)
    dsh_home.write_patch(path, "- id: x\n")
    assert path.read_text() == "- id: x\n" and (path.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["cordis.patch.yml"]  # no temporary left
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(dsh_home.DshHomeError, match="not UTF-8"):
        dsh_home.read_patch(path)
