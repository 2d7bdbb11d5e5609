"""`dsh-sidecar mcp ... --add-to-dsh [PROFILE]`: add this MCP server to a DSH profile and exit.

DSH (0.1.0-rc.8) connects MCP servers through its `@deepseek-ai/dsh-mcp-client` plugin, one row per
server, inserted in the profile's user patch file `$DSH_HOME/profiles/PROFILE/cordis.patch.yml`
(sidecar/sources/dsh_home.py). That file is a YAML list of patches, and a fresh one holds `[]`: a
row appended after it makes the file invalid YAML and `dsh web` die with a YAMLException. So the
row is not appended blindly: `[]` is replaced, a block list (`- ...` lines) is added to, a block
this command wrote before is replaced, and anything else is refused with what to do.

The row runs this very dsh-sidecar with the options given here (never the token: the row passes
DSH_SIDECAR_TOKEN on from DSH's environment, which DSH otherwise scrubs). Only text is edited, so
the user's comments, rows and `!!js` values stay as they are (there is no YAML library here).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sidecar.cli.args import UsageError, fail, mcp_parser
from sidecar.common.exit_codes import EXIT_DSH_PROFILE, EXIT_OK
from sidecar.sources import dsh_home

ROW_ID = "mcp-gpu"
SERVER_NAME = "gpu"  # DSH names the tools mcp__gpu__list_jobs, mcp__gpu__gpu_status, ...
MCP_CLIENT = "@deepseek-ai/dsh-mcp-client"
TOKEN_ENV = "DSH_SIDECAR_TOKEN"
BEGIN = "# dsh-sidecar mcp --add-to-dsh:"
END = "# end of dsh-sidecar mcp --add-to-dsh"

# The options of `dsh-sidecar mcp` the row passes on to the server DSH starts, by flag and dest. Not
# here: --token (the row passes the variable instead) and --add-to-dsh itself; test_cli checks that
# every other option of the parser is here.
FORWARDED = (
    ("--url", "url"),
    ("--pid", "pid"),
    ("--interval", "interval"),
    ("--history", "history"),
    ("--kubelet-cgroup-root", "kubelet_cgroup_root"),
    ("--path.procfs", "path_procfs"),
    ("--path.sysfs", "path_sysfs"),
    ("--runs-db", "runs_db"),
    ("--no-runs", "no_runs"),  # a switch: the flag alone
)
# Defaults read from the environment: DSH scrubs every DSH_* variable from a server's environment,
# so these are passed whenever set, even when they equal the default.
FROM_ENVIRONMENT = {"kubelet_cgroup_root", "runs_db"}

_EMPTY_LIST = re.compile(r"^\[\]\s*(#.*)?$")
_BLOCK_ITEM = re.compile(r"^-(\s|$)")
_OUR_ID = re.compile(rf"^\s*(-\s+)?id:\s*(['\"]?){re.escape(ROW_ID)}\2\s*(#.*)?$")


class PatchError(Exception):
    """The file holds what this command cannot add a row to: the message says what to do."""


def server_command(program: str, executable: str) -> list[str]:
    """How DSH starts this dsh-sidecar: its absolute path, or `python -m sidecar.cli` when it was
    started that way (DSH's PATH may not have the user's virtual environment)."""
    if Path(program).name == "dsh-sidecar":
        return [os.path.abspath(program)]
    return [executable, "-m", "sidecar.cli"]


def server_args(args: argparse.Namespace) -> list[str]:
    """`mcp` and the options given that differ from their defaults (see FORWARDED)."""
    defaults = mcp_parser()
    out = ["mcp"]
    for flag, dest in FORWARDED:
        value = getattr(args, dest)
        if value is None or (dest not in FROM_ENVIRONMENT and value == defaults.get_default(dest)):
            continue
        out += [flag] if value is True else [flag, str(value)]
    return out


def row_block(argv: Sequence[str], with_token: bool) -> str:
    """The patch entry that inserts the row, between the marker lines that let a later run find it."""
    quoted = [json.dumps(a, ensure_ascii=False) for a in argv]  # a JSON string is a YAML scalar
    lines = [
        f'{BEGIN} the MCP server "{SERVER_NAME}"; running that command again replaces this block',
        "- insert:",
        f"    - id: {ROW_ID}",
        f"      name: '{MCP_CLIENT}'",
        "      config:",
        f"        serverName: {SERVER_NAME}",
        "        transport: stdio",
        f"        command: {quoted[0]}",
        f"        args: [{', '.join(quoted[1:])}]",
    ]
    if with_token:
        # DSH removes *TOKEN* variables from a server's environment: pass the sidecar's on
        lines += ["        env:", f"          {TOKEN_ENV}: !!js process.env.{TOKEN_ENV} ?? ''"]
    return "\n".join([*lines, END, ""])


def with_row(text: str | None, block: str) -> tuple[str, bool]:
    """`text` with `block` in it: (the new text, whether an earlier block of ours was replaced)."""
    lines = (text or "").splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(BEGIN)), None)
    replaced = begin is not None
    if begin is not None:
        end = next((i for i in range(begin, len(lines)) if lines[i].strip() == END), None)
        if end is None:
            raise PatchError(
                f"it has the line '{BEGIN} ...' but not '{END}' after it: remove that block, then run this again"
            )
        lines = lines[:begin] + lines[end + 1 :]
    significant = [
        (i, line) for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")
    ]
    if any(_OUR_ID.match(line) for _, line in significant):
        raise PatchError(
            f"it already has a row '{ROW_ID}' that this command did not write: remove it, then run this again"
        )
    if len(significant) == 1 and _EMPTY_LIST.match(significant[0][1]):
        del lines[significant[0][0]]  # DSH's fresh file: an empty flow list, which a block list replaces
    elif significant and not _BLOCK_ITEM.match(significant[0][1]):
        raise PatchError(
            f"it holds {significant[0][1].strip()[:60]!r} where a list of '- ...' entries (or []) was expected: "
            "add the row by hand (docs/mcp.md, section DSH)"
        )
    kept = "\n".join(lines).rstrip("\n")
    return (kept + "\n" if kept else "") + block, replaced


def add_to_dsh(
    args: argparse.Namespace,
    env: Mapping[str, str] = os.environ,
    program: str = sys.argv[0],
    executable: str = sys.executable,
) -> int:
    """Write the row into the profile's patch file and say what was done (stdout) or why not (stderr)."""
    profile = args.add_to_dsh
    if not dsh_home.valid_profile(profile):
        raise UsageError(f"--add-to-dsh {profile!r} is not a DSH profile name (one path segment, e.g. web)")
    path = dsh_home.patch_path(dsh_home.dsh_home(env), profile)
    argv = [*server_command(program, executable), *server_args(args)]
    try:
        text, replaced = with_row(dsh_home.read_patch(path), row_block(argv, with_token=bool(args.token)))
        dsh_home.write_patch(path, text)
    except PatchError as exc:
        return fail(EXIT_DSH_PROFILE, f"cannot add the MCP server to {path}: {exc}")
    except dsh_home.DshHomeError as exc:
        return fail(EXIT_DSH_PROFILE, str(exc))
    from sidecar.serve.mcp_schemas import OUTPUT_SCHEMAS  # the tools `dsh-sidecar mcp` serves

    tools = ", ".join(f"mcp__{SERVER_NAME}__{t}" for t in OUTPUT_SCHEMAS)
    print(
        f"dsh-sidecar: {'replaced' if replaced else 'added'} the MCP server '{SERVER_NAME}' (row {ROW_ID}) in {path}:"
    )
    print(f"  {' '.join(argv)}")
    print(f"  DSH's agent gets {tools}; restart `dsh web` (or wait a few seconds for its reload).")
    print(f"  Check: dsh --profile {profile} --dump-config | grep -A8 'id: {ROW_ID}'")
    if args.token:
        print(f"  The token is not written there: start dsh with {TOKEN_ENV} set, the row passes it on.")
    return EXIT_OK
