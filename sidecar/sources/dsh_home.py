"""A DSH (DeepSeek Harness) profile's user patch file, `$DSH_HOME/profiles/PROFILE/cordis.patch.yml`:
where it is (as DSH 0.1.0-rc.8's dsh-home-paths resolves it), its text, and writing it whole.

`dsh-sidecar mcp --add-to-dsh` (sidecar/cli/dsh_patch.py) adds its MCP server there; what the text
means is its business, reading and replacing the file is this module's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

DSH_HOME_ENV = "DSH_HOME"
PATCH_FILE = "cordis.patch.yml"
# A user's patch file is a few rows; a bigger one is not one DSH wrote or a person keeps.
MAX_PATCH_BYTES = 1 << 20


class DshHomeError(Exception):
    """The patch file cannot be read or written: the message says which file and why."""


def dsh_home(env: Mapping[str, str]) -> Path:
    """$DSH_HOME (blank counts as unset, `~` is the user's home), else ~/.dsh: as DSH resolves it."""
    given = env.get(DSH_HOME_ENV, "")
    return Path(os.path.expanduser(given if given.strip() else "~/.dsh")).resolve()


def valid_profile(name: str) -> bool:
    """DSH's own rule for a profile's name (dsh-app-boot): one path segment, not node_modules."""
    return name not in ("", ".", "..", "node_modules") and "/" not in name and "\\" not in name


def patch_path(home: Path, profile: str) -> Path:
    return home / "profiles" / profile / PATCH_FILE


def read_patch(path: Path) -> str | None:
    """The file's text; None when there is none yet (DSH writes `[]` there on a profile's first use)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PATCH_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DshHomeError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PATCH_BYTES:
        raise DshHomeError(f"{path} is over {MAX_PATCH_BYTES} bytes: not a patch file to add a row to")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DshHomeError(f"{path} is not UTF-8 text") from None


def write_patch(path: Path, text: str) -> None:
    """Replace the file whole: a temporary file beside it renamed over it, so DSH's watcher (it
    hot-reloads the file) never reads half of it. The folder is made when the profile has none yet;
    an existing file keeps its permissions."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise DshHomeError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
