"""The one catalogue of words: sidecar/static/shared/i18n/{en,zh}.json, shared by the sidecar, the page and
the DSH plugin (format.js renders the same files the same way).

A text is a reference, `Ref(id, params)`: a catalogue key and the values of its `{name}`
placeholders. A value is a string or a number, already display-ready and the same in every language
("42%", "1234, 1235", "cuda:0"), or itself a `Ref` for words that differ per language. The verdict
returns references only; they are rendered here, for the document's English strings, the CLI and
`doctor`, and in the browser for the user's language.

Rendering never throws and never uses str.format (params come from processes): an unknown id
renders as the id, a missing param leaves its `{name}` in place (tests catch both).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Union

LANGS = ("en", "zh")
CATALOGUE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static", "shared", "i18n")
MAX_DEPTH = 4  # references inside references, at most this deep
PLACEHOLDER = re.compile(r"\{(\w+)\}")

Param = Union[str, int, float, "Ref"]


@dataclass(frozen=True)
class Ref:
    """A text to show: catalogue key `id` with the values of its placeholders."""

    id: str
    params: Mapping[str, Param] = field(default_factory=dict)

    def as_dict(self, clip_text: Callable[[str], str] | None = None) -> dict[str, Any]:
        """{"id", "params"}, nested references as dicts; `clip_text` (if given) clips string params."""
        params: dict[str, object] = {}
        for name, value in self.params.items():
            if isinstance(value, Ref):
                params[name] = value.as_dict(clip_text)
            elif isinstance(value, str) and clip_text is not None:
                params[name] = clip_text(value)
            else:
                params[name] = value
        return {"id": self.id, "params": params}


def ref(id: str, **params: Param) -> Ref:
    return Ref(id, params)


@cache
def load(lang: str) -> dict[str, str]:
    """The catalogue of `lang` ("en" or "zh"; anything else is "en")."""
    name = lang if lang in LANGS else "en"
    with open(os.path.join(CATALOGUE_DIR, f"{name}.json"), encoding="utf-8") as fh:
        catalogue: dict[str, str] = json.load(fh)  # our own file; tests/unit/test_catalogue.py checks its shape
        return catalogue


def _as_ref(value: Any) -> tuple[str, Mapping[str, Any]] | None:
    if isinstance(value, Ref):
        return value.id, value.params
    if isinstance(value, Mapping) and isinstance(value.get("id"), str):
        params = value.get("params")
        return value["id"], params if isinstance(params, Mapping) else {}
    return None


def render(text: Ref | Mapping[str, Any] | None, lang: str = "en", _depth: int = 0) -> str:
    """A reference (a `Ref` or its dict) as text in `lang`; en where `lang` lacks the key."""
    pair = _as_ref(text)
    if pair is None:
        return "" if text is None else str(text)
    key, params = pair
    template = load(lang).get(key)
    if template is None:
        template = load("en").get(key, key)

    def fill(m: re.Match[str]) -> str:
        if m.group(1) not in params:
            return m.group(0)
        value = params[m.group(1)]
        if _as_ref(value) is not None:
            return render(value, lang, _depth + 1) if _depth < MAX_DEPTH else m.group(0)
        if value is None or isinstance(value, bool | dict | list):
            return m.group(0)
        return str(value)

    return PLACEHOLDER.sub(fill, template)


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))
