"""Redaction of secret-looking command-line values, applied wherever a cmdline is shown or exported.

A flag or key is secret by its *words* (split on `-`, `_`, `.`): one of SECRET_WORDS, followed by
nothing or by `id` (`--wandb-key`, `--hf_token`, `--access-key-id`, `WANDB_API_KEY=`), so that
`--max-tokens 512`, `--tokenizer gpt2` and `--keep-checkpoints` stay as they are. Values shaped
like well-known credentials (AWS key ids, Hugging Face, GitHub, OpenAI, Slack tokens), HTTP
`Authorization`/`Cookie` headers, `Bearer X` and `user:password@` in URLs are redacted wherever
they appear. The table of real command lines in tests/unit/test_redact.py holds both directions.
"""

from __future__ import annotations

import re

REDACTED = "***"

SECRET_WORDS = frozenset(
    {
        "token",
        "key",
        "apikey",
        "secret",
        "password",
        "passwd",
        "pass",
        "pwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "pat",
    }
)
_TRAILING_OK = frozenset({"id"})  # `--access-key-id AKIA...`: an id that names a secret
# Short flags whose value is a password: `-p PASS` (sshpass, mysql, many scripts); `-p 8080` and
# `-p 8080:80` are ports and stay.
_SHORT_SECRET_FLAGS = frozenset({"-p"})
_PORT_LIKE = re.compile(r"^\d{1,5}(:\d{1,5})?$")
_WORDS = re.compile(r"[-_.]+")
_FLAG = re.compile(r"^--?(?P<name>[A-Za-z][\w.-]*)$")
# key=value anywhere in an argument (env-style assignments, URLs' query strings, ...).
_ASSIGN = re.compile(r"(?P<key>[A-Za-z_][\w.-]*)=(?P<value>[^\s&;,]+)")
# user:password@host in URLs.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@", re.I)
# An HTTP header that carries a credential: `Authorization: Bearer X`, `Cookie: a=b`, `X-Api-Key: K`.
_SECRET_HEADER = re.compile(
    r"^(?P<name>\s*(proxy-)?authorization|\s*cookie|\s*x-[\w-]*(token|key|secret|auth)[\w-]*)\s*:\s*\S.*$",
    re.I | re.S,
)
_BEARER = re.compile(r"\b(?P<scheme>bearer|basic)\s+(?P<value>[^\s'\"]+)", re.I)
_SCHEMES = frozenset({"bearer", "basic"})
_TOKEN_SHAPES = re.compile(
    r"\b(?:(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style
    r"|xox[abprs]-[A-Za-z0-9-]{10,})\b"  # Slack
)


def is_secret_name(name: str) -> bool:
    """True for a flag or key name (without dashes) that names a secret, by its words."""
    words = [w for w in _WORDS.split(name.lower()) if w]
    for i, word in enumerate(words):
        if word in SECRET_WORDS and set(words[i + 1 :]) <= _TRAILING_OK:
            return True
    return False


def _secret_flag(arg: str) -> bool:
    m = _FLAG.match(arg)
    return m is not None and is_secret_name(m.group("name"))


def _redact_value_shapes(arg: str) -> str:
    """Redact what is secret inside one argument, wherever it sits."""
    if _SECRET_HEADER.match(arg):
        return f"{arg.split(':', 1)[0]}: {REDACTED}"
    arg = _ASSIGN.sub(
        lambda m: f"{m.group('key')}={REDACTED}" if is_secret_name(m.group("key")) else m.group(0), arg
    )
    arg = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", arg)
    arg = _BEARER.sub(lambda m: f"{m.group('scheme')} {REDACTED}", arg)
    return _TOKEN_SHAPES.sub(REDACTED, arg)


def redact_args(args: list[str]) -> list[str]:
    """Return a copy of argv with secret values replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            hide_next = False
            if not (arg.startswith("-") and len(arg) > 1):  # a flag after a valueless `--no-auth`
                out.append(REDACTED)
                continue
        if arg.startswith("-") and "=" in arg:
            flag, _, _value = arg.partition("=")
            if _secret_flag(flag):
                out.append(f"{flag}={REDACTED}")
                continue
        elif _secret_flag(arg) or arg.lower() in _SCHEMES:
            out.append(arg)
            hide_next = True
            continue
        elif arg in _SHORT_SECRET_FLAGS:
            out.append(arg)
            hide_next = True
            continue
        out.append(_redact_value_shapes(arg))
    return _unhide_ports(args, out)


def _unhide_ports(args: list[str], out: list[str]) -> list[str]:
    """`-p 8080` is a port, not a password: give it back."""
    for i, arg in enumerate(args[:-1]):
        if arg in _SHORT_SECRET_FLAGS and out[i + 1] == REDACTED and _PORT_LIKE.match(args[i + 1]):
            out[i + 1] = args[i + 1]
    return out


def redact_text(text: str) -> str:
    """Redact a command line given as one string (split on whitespace, rejoined)."""
    return " ".join(redact_args(text.split()))
