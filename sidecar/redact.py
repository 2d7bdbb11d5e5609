"""Redaction of secret-looking command-line values, applied wherever a cmdline is shown or exported."""

from __future__ import annotations

import re

REDACTED = "***"

# Flags whose *next* argument (or `=value`) is a secret.
_SECRET_FLAG = re.compile(
    r"^--?[\w.-]*(token|api[-_]?key|apikey|secret|passw(or)?d|passwd|credential|auth|private[-_]?key)[\w.-]*$",
    re.IGNORECASE,
)
# key=value pairs anywhere in an argument (env-style assignments, URLs' query strings, ...).
_SECRET_ASSIGN = re.compile(
    r"(?P<key>[\w.-]*(token|api[-_]?key|apikey|secret|passw(or)?d|passwd|credential|private[-_]?key)[\w.-]*)"
    r"=(?P<value>[^\s&;,]+)",
    re.IGNORECASE,
)
# user:password@host in URLs.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@", re.I)


def redact_args(args: list[str]) -> list[str]:
    """Return a copy of argv with secret values replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            flag, _, _value = arg.partition("=")
            if _SECRET_FLAG.match(flag):
                out.append(f"{flag}={REDACTED}")
                continue
        elif _SECRET_FLAG.match(arg):
            out.append(arg)
            hide_next = True
            continue
        arg = _SECRET_ASSIGN.sub(lambda m: f"{m.group('key')}={REDACTED}", arg)
        arg = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", arg)
        out.append(arg)
    return out


def redact_text(text: str) -> str:
    """Redact a command line given as one string (split on whitespace, rejoined)."""
    return " ".join(redact_args(text.split()))
