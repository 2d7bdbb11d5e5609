"""The one catalogue (sidecar/static/shared/i18n/{en,zh}.json): both languages have every key with the same
placeholders, every id that the sidecar, the page and the plugin name exists, and every verdict the
rule tables produce renders with no placeholder left unfilled."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecar.common import catalogue
from sidecar.common.catalogue import Ref, load, placeholders, ref, render
from sidecar.verdict import RULES, decide
from tests.helpers.verdict_tables import CASES

REPO = Path(__file__).resolve().parents[2]
# Families of ids only the verdict (Python) uses; the page and the plugin render them from refs.
# compare: the comparison of two runs (sidecar/verdict/compare.py, compare_reasons.py); watch: what a
# watcher is told (sidecar/verdict/watch.py, sidecar/documents/watch.py).
VERDICT_FAMILIES = ("message", "warning", "hint", "reason", "word", "devices", "compare", "watch")
VERDICT_ID = re.compile(r"""["']((?:""" + "|".join(VERDICT_FAMILIES) + r""")\.[a-z0-9.-]+)["']""")
# t(lang, 'key', ...), tr(lang, 'key', ...), tr('key', ...) and data-i18n="key" in the page and the plugin.
JS_ID = re.compile(r"""\b(?:t|tr)\(\s*(?:[\w.]+\s*,\s*)?['"]([^'"]+)['"]""")
HTML_ID = re.compile(r"""data-i18n(?:-title)?="([^"]+)\"""")
UNFILLED = re.compile(r"\{\w+\}")


def _python_sources() -> list[Path]:
    return sorted((REPO / "sidecar").rglob("*.py"))


def _js_sources() -> list[Path]:
    static = REPO / "sidecar" / "static"
    plugin = REPO / "dsh_plugin" / "src" / "client"
    return [static / "shared" / "format.js", static / "page" / "app.js", *sorted(plugin.glob("*.js*"))]


def test_zh_has_exactly_the_keys_and_placeholders_of_en():
    en, zh = load("en"), load("zh")
    assert sorted(zh) == sorted(en)
    for key, text in en.items():
        assert isinstance(text, str) and isinstance(zh[key], str), key
        assert placeholders(zh[key]) == placeholders(text), key


def test_every_id_the_python_sources_name_exists_and_every_verdict_id_is_named():
    en = load("en")
    named = {m.group(1) for p in _python_sources() for m in VERDICT_ID.finditer(p.read_text())}
    assert named, "no verdict ids found: the scan is broken"
    assert not named - set(en), f"ids missing from the catalogue: {sorted(named - set(en))}"
    family = {k for k in en if k.split(".", 1)[0] in VERDICT_FAMILIES}
    assert not family - named, f"catalogue entries nothing uses: {sorted(family - named)}"


def test_every_warning_code_has_a_message():
    files = ("rules.py", "memory_growth.py", "efficiency.py", "stragglers.py", "device_count.py")
    rules = "".join((REPO / "sidecar" / "verdict" / f).read_text() for f in files)
    codes = set(re.findall(r"""(?:finding|Finding|_about_models|_probe_trouble)\(\s*"([a-z-]+)\"""", rules))
    assert len(codes) == len(RULES)
    for code in codes:
        assert f"warning.{code}" in load("en"), code
        assert any(k == f"hint.{code}" or k.startswith(f"hint.{code}.") for k in load("en")), code


def test_every_id_the_page_and_the_plugin_name_exists():
    en = load("en")
    ids = {m.group(1) for p in _js_sources() for m in JS_ID.finditer(p.read_text())}
    ids |= set(HTML_ID.findall((REPO / "sidecar" / "static" / "page" / "index.html").read_text()))
    assert len(ids) > 50, "the scan found too few ids: is it broken?"
    assert not ids - set(en), f"ids missing from the catalogue: {sorted(ids - set(en))}"


def _refs(text: Ref | None):
    """A reference and every reference inside it."""
    if text is None:
        return
    yield text
    for value in text.params.values():
        if isinstance(value, Ref):
            yield from _refs(value)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_verdict_of_the_tables_renders_completely(case, lang):
    v = decide(case[1])
    texts = [v.message, *(w.message for w in v.warnings), *(w.hint for w in v.warnings)]
    for text in texts:
        for r in _refs(text):
            assert r.id in load("en"), r.id
            assert placeholders(load("en")[r.id]) <= set(r.params), (r.id, r.params)
        rendered = render(text, lang)
        assert rendered and not UNFILLED.search(rendered), rendered


def test_render_never_throws_and_never_formats():
    assert render(ref("no.such.id")) == "no.such.id"
    assert render(ref("message.exited", pid=3)) == "Process 3 has exited. Last known: {message}"
    # A param is inserted as it is: braces or format specs in it are not expanded again.
    assert render(ref("message.exited", pid="{message}", message="{0.__class__}")) == (
        "Process {message} has exited. Last known: {0.__class__}"
    )
    assert render({"id": "message.exited", "params": {"pid": None, "message": {"x": 1}}}) == (
        "Process {pid} has exited. Last known: {message}"
    )
    assert render({"id": 5}) == "{'id': 5}" and render(None) == ""
    deep = ref("word.unknown")
    for _ in range(20):
        deep = ref("message.exited", pid=1, message=deep)
    assert render(deep).count("Process 1") == catalogue.MAX_DEPTH + 1
    assert render(ref("message.gpu", model="Net", device="cuda:0"), "fr") == "Model Net runs on cuda:0."
    assert render(ref("message.gpu", model="Net", device="cuda:0"), "zh") == "模型 Net 运行在 cuda:0 上。"
