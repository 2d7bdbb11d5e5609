"""Where the ledger file is by default: one file per user, in the user's XDG state folder
(`$XDG_STATE_HOME/dsh-gpu-dashboard/runs.sqlite3`, `~/.local/state` when unset), root's under
/var/lib."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sidecar.sources.ledger.bounds import APP_FOLDER, LEDGER_FILE, ROOT_FOLDER, XDG_STATE_DEFAULT

XDG_STATE_HOME = "XDG_STATE_HOME"


def default_ledger_path(env: Mapping[str, str], uid: int, home: str) -> Path:
    """The ledger of the user `uid` whose home is `home`, as `env` places it. XDG's rule: a value
    that is empty or not absolute is ignored (the default then)."""
    if uid == 0:
        return Path(ROOT_FOLDER) / LEDGER_FILE
    state = env.get(XDG_STATE_HOME, "")
    base = Path(state) if os.path.isabs(state) else Path(home) / XDG_STATE_DEFAULT
    return base / APP_FOLDER / LEDGER_FILE


def ledger_exists(path: Path) -> bool:
    """Whether a ledger file (or anything) is at `path`: a reader that finds none has no runs to
    show, and opening one would make it."""
    return os.path.lexists(path)
