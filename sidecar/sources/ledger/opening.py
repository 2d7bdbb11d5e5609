"""Opening the ledger's file safely on a shared host, where another user may have made the folder
or the file first, or left a symbolic link where the file should be.

The folder is made 0700 when missing; a folder or a file (the database and SQLite's -wal, -shm and
-journal beside it) that another user owns, that group or others may write, or that is a link (the
file) is refused with `LedgerAccessError`, whose message names the path, its owner and what to do:
never used as it is. Once the folder is known to be the user's own and writable by nobody else, no
one else can swap what is in it between these checks and SQLite's open (root excepted), which is why
the checks are by path (lstat) and SQLite then opens the path.

A file opened through its path must never be closed by this process while SQLite has it open (a
close drops every POSIX lock the process holds on it): the database file is opened here only when
it is made (O_EXCL), before any connection exists; an existing file is only lstat'ed.
"""

from __future__ import annotations

import os
import pwd
import stat
import time
from pathlib import Path

SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
FOLDER_MODE = 0o700
FILE_MODE = 0o600


class LedgerError(Exception):
    """The ledger cannot be used as asked: the message says which file, why, and what to do."""


class LedgerAccessError(LedgerError):
    """The folder or a file is not safely the user's own, or cannot be written."""


class LedgerVersionError(LedgerError):
    """The file is a newer ledger than this code knows, or not a ledger at all."""


def owner_name(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def prepare(path: Path, uid: int) -> None:
    """Makes the folder (0700) and the file (0600) where missing, and checks both and any side file
    SQLite left: raises LedgerAccessError where one is not safely `uid`'s."""
    folder = path.parent
    _make_folder(folder)
    _check_parent(folder.parent, uid)
    _check_folder(folder, uid)
    _make_file(path, uid)
    for suffix in SIDE_SUFFIXES:
        side = Path(f"{path}{suffix}")
        try:
            st = os.lstat(side)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise LedgerAccessError(f"cannot look at {side}: {exc.strerror or exc}") from None
        _check_file(side, st, uid)


def _make_folder(folder: Path) -> None:
    try:
        os.lstat(folder)
        return
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise LedgerAccessError(f"cannot look at the ledger's folder {folder}: {exc.strerror or exc}") from None
    try:
        os.makedirs(folder.parent, mode=FOLDER_MODE, exist_ok=True)  # XDG: state folders are 0700
        os.mkdir(folder, FOLDER_MODE)
        os.chmod(folder, FOLDER_MODE)  # whatever the umask
    except FileExistsError:
        pass  # another sidecar made it first: checked next like any other
    except OSError as exc:
        raise LedgerAccessError(
            f"cannot make the ledger's folder {folder}: {exc.strerror or exc}; make it (mkdir -m 700) "
            "or choose another ledger path"
        ) from None


def _check_parent(parent: Path, uid: int) -> None:
    """Whoever may rename entries of the folder above could swap the ledger's folder between these
    checks and SQLite's open: it must be the user's or root's, and a folder anyone may write must be
    sticky (/tmp: entries only their owners rename). A group-writable one is let be: a user's private
    group (umask 002) is common, and making it so needs its owner."""
    try:
        st = os.stat(parent)
    except OSError as exc:
        raise LedgerAccessError(f"cannot look at {parent}: {exc.strerror or exc}") from None
    if st.st_uid not in (uid, 0):
        raise LedgerAccessError(
            f"the folder {parent}, which holds the ledger's folder, is owned by {owner_name(st.st_uid)}, not by "
            f"you ({owner_name(uid)}) or root: its owner could swap the ledger for another. Choose a ledger "
            "path under a folder of your own"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002 and not mode & stat.S_ISVTX:
        raise LedgerAccessError(
            f"the folder {parent}, which holds the ledger's folder, is writable by anyone and not sticky "
            f"(mode {mode:04o}): anyone could swap the ledger for another. Run `chmod o-w {parent}` "
            "(or `chmod +t`), or choose another ledger path"
        )


def _check_folder(folder: Path, uid: int) -> None:
    """The folder (a link to it only when the link is the user's or root's) must be a folder the
    user owns, that group and others cannot write, that the user can write."""
    try:
        link = os.lstat(folder)
        st = os.stat(folder)
        vfs = os.statvfs(folder)
    except OSError as exc:
        raise LedgerAccessError(f"cannot look at the ledger's folder {folder}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0):
        raise LedgerAccessError(
            f"the ledger's folder {folder} is a symbolic link owned by {owner_name(link.st_uid)}, not by "
            f"you ({owner_name(uid)}): it could be pointed anywhere. Remove it, or choose another ledger path"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise LedgerAccessError(f"the ledger's folder {folder} is not a folder: remove it or choose another path")
    if st.st_uid != uid:
        raise LedgerAccessError(
            f"the ledger's folder {folder} is owned by {owner_name(st.st_uid)}, not by you "
            f"({owner_name(uid)}): another user made it, so what it holds cannot be trusted. "
            "Remove it (or have its owner remove it), or choose another ledger path"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise LedgerAccessError(
            f"the ledger's folder {folder} is writable by group or others (mode {mode:04o}): another user "
            f"could replace the ledger in it. Run `chmod go-w {folder}` (700 is best), or choose another path"
        )
    if not mode & stat.S_IWUSR or vfs.f_flag & os.ST_RDONLY:
        why = "on a read-only file system" if vfs.f_flag & os.ST_RDONLY else f"not writable (mode {mode:04o})"
        raise LedgerAccessError(
            f"the ledger's folder {folder} is {why}: SQLite makes its -wal and -shm files beside the "
            f"ledger. Make it writable (chmod u+w {folder}), or choose another ledger path"
        )


def _make_file(path: Path, uid: int) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        except FileExistsError:
            st = os.lstat(path)  # another sidecar made it first: checked like any other
        except OSError as exc:
            raise LedgerAccessError(f"cannot make the ledger {path}: {exc.strerror or exc}") from None
        else:
            try:
                os.fchmod(fd, FILE_MODE)  # whatever the umask
            finally:
                os.close(fd)
            return
    except OSError as exc:
        raise LedgerAccessError(f"cannot look at the ledger {path}: {exc.strerror or exc}") from None
    _check_file(path, st, uid)


def _check_file(path: Path, st: os.stat_result, uid: int) -> None:
    """An existing file: a regular file (not a link) of the user's, that group and others cannot
    write. One that group or others may only read is made 0600 (it is the user's own)."""
    if stat.S_ISLNK(st.st_mode):
        raise LedgerAccessError(
            f"{path} is a symbolic link (owned by {owner_name(st.st_uid)}): the ledger never follows a link "
            "to its files. Remove the link, or point the ledger at the real file's path"
        )
    if not stat.S_ISREG(st.st_mode):
        raise LedgerAccessError(f"{path} is not a regular file: remove it, or choose another ledger path")
    if st.st_uid != uid:
        raise LedgerAccessError(
            f"{path} is owned by {owner_name(st.st_uid)}, not by you ({owner_name(uid)}): the ledger never "
            "uses another user's file. Remove it (or have its owner remove it), or choose another ledger path"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise LedgerAccessError(
            f"{path} is writable by group or others (mode {mode:04o}): another user could have changed it. "
            f"If you trust what it holds run `chmod 600 {path}`, else remove it"
        )
    if mode & FILE_MODE != FILE_MODE:
        raise LedgerAccessError(
            f"{path} is not readable and writable by you (mode {mode:04o}): run `chmod 600 {path}`, "
            "or choose another ledger path"
        )
    if mode & 0o077:
        try:
            os.chmod(path, FILE_MODE)
        except OSError as exc:
            raise LedgerAccessError(f"cannot make {path} private (chmod 600): {exc.strerror or exc}") from None


def move_aside(path: Path, why: str, now_unix_s: float | None = None) -> str:
    """Renames a damaged ledger and its side files together (the -wal holds commits: never one
    without the other) to `<name>.corrupt-<UTC stamp>`; returns the notice to print."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now_unix_s is None else now_unix_s))
    moved = Path(f"{path}.corrupt-{stamp}")
    for suffix in ("", *SIDE_SUFFIXES):
        try:
            os.replace(f"{path}{suffix}", f"{moved}{suffix}")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise LedgerAccessError(
                f"the ledger {path} is damaged ({why}) and cannot be moved aside: {exc.strerror or exc}. "
                "Move or remove it yourself"
            ) from None
    return (
        f"the ledger {path} was damaged ({why}): it was moved aside to {moved} and a new ledger started "
        "(the runs recorded before are in the moved file)"
    )
