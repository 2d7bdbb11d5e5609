"""sidecar/documents/bounds.py: clipping strings and command lines; the DSH proxy's cap is the same number."""

from __future__ import annotations

import re

from sidecar.documents import bounds
from sidecar.documents.bounds import ELLIPSIS, clip, clip_args, clip_opt
from tests.helpers.harness import REPO


def test_clip_keeps_short_strings_and_marks_cut_ones():
    assert clip("resnet18") == "resnet18"
    assert clip("x" * bounds.MAX_TEXT_CHARS) == "x" * bounds.MAX_TEXT_CHARS
    cut = clip("\U0001f600" * 4000)
    assert len(cut) == bounds.MAX_TEXT_CHARS and cut.endswith(ELLIPSIS)
    assert clip("abcdef", 4) == "abc" + ELLIPSIS
    assert clip_opt(7) is None and clip_opt(None) is None and clip_opt("a") == "a"


def test_clip_args_bounds_count_length_and_total_and_says_what_was_cut():
    assert clip_args(["python", "train.py", "--lr", "0.1"]) == ["python", "train.py", "--lr", "0.1"]
    many = clip_args([str(i) for i in range(100)])
    assert (
        len(many) == bounds.MAX_CMDLINE_ARGS + 1
        and many[-1] == f"{ELLIPSIS} {100 - bounds.MAX_CMDLINE_ARGS} more"
    )
    long = clip_args(["y" * 10_000] * 10)
    assert all(len(a) <= bounds.MAX_TEXT_CHARS for a in long)
    assert sum(len(a) for a in long[:-1]) <= bounds.MAX_CMDLINE_CHARS and long[-1].endswith("more")


def test_the_dsh_proxy_caps_at_the_same_number():
    source = (REPO / "dsh_plugin" / "host" / "core.js").read_text()
    m = re.search(r"export const MAX_BODY_BYTES = ([\d\s*]+)\n", source)
    assert m, "MAX_BODY_BYTES is not defined in dsh_plugin/host/core.js"
    value = 1
    for factor in m.group(1).split("*"):
        value *= int(factor)
    assert value == bounds.PROXY_MAX_BODY_BYTES
    assert bounds.PROXY_MAX_BODY_BYTES > bounds.MAX_STATUS_BYTES


def test_json_text_escapes_every_steering_character_the_interpreter_knows():
    """The set in bounds is written out (a scan of every code point at import would cost the sidecar
    0.3 s to start): it must hold every Cc, Cf, Zl, Zp and Cs character beyond ASCII of this
    Python's Unicode, and nothing a reader needs raw (letters, CJK, emoji)."""
    import json as json_module
    import sys
    import unicodedata

    from sidecar.documents.bounds import json_text

    steering = [
        chr(c)
        for c in range(0x7F, sys.maxunicode + 1)
        if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
    ]
    text = "".join(steering)
    out = json_text({"k" + text: text})
    assert out.isascii(), [hex(ord(ch)) for ch in out if not ch.isascii()][:20]
    # lone surrogates side by side read back as pairs (JSON's own rule), so they go back one at a time
    plain = "".join(ch for ch in steering if unicodedata.category(ch) != "Cs")
    assert json_module.loads(json_text({"k" + plain: plain})) == {"k" + plain: plain}
    assert json_module.loads(json_text("a\ud800b")) == "a\ud800b"
    kept = "名前 é ñ 😀 Ω"
    assert json_text(kept) == f'"{kept}"'
