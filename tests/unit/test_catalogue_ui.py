"""The catalogue and the contract against the page's and the plugin's UI modules: every id that any
of them names exists (test_catalogue.py scans format.js, app.js and the plugin; this scans every
module of sidecar/static/{page,shared}/), every clock event reason of the contract has its badge text, the reasons
the strip styles as problems are the verdict's throttle reasons, and the GPM fields the efficiency
strip lists are the contract's."""

from __future__ import annotations

import re
from pathlib import Path

from sidecar.common.catalogue import load
from sidecar.common.nvml_names import CLOCK_EVENT_REASONS
from sidecar.documents import contract
from sidecar.verdict.efficiency import THROTTLE_REASONS

REPO = Path(__file__).resolve().parents[1].parent
STATIC = REPO / "sidecar" / "static"
SHARED = STATIC / "shared"
# t(lang, 'key'), tr('key'), tr(lang, 'key'), and catalogue keys as values: label: 'eff.x', ('eff.x', ...)
JS_ID = re.compile(r"""\b(?:t|tr)\(\s*(?:[\w.]+\s*,\s*)?['"]([^'"]+)['"]""")
KEY_LITERAL = re.compile(r"""['"]((?:eff|chart)\.[A-Za-z0-9_.]+)['"]""")


def _sources() -> list[Path]:
    plugin = REPO / "dsh_plugin" / "src" / "client"
    return [p for p in sorted(STATIC.glob("*/*.js")) if p.name != "contract.js"] + sorted(plugin.glob("*.js*"))


def test_every_id_the_ui_modules_name_exists():
    en = load("en")
    ids: set[str] = set()
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        ids |= set(JS_ID.findall(text)) | set(KEY_LITERAL.findall(text))
    ids = {i for i in ids if not i.endswith(".")}  # prefixes of dynamic ids (`clock-reason.${name}`)
    assert "eff.seg.data" in ids and "chart.cpuSeries" in ids, "the scan is broken"
    assert not ids - set(en), f"ids missing from the catalogue: {sorted(ids - set(en))}"


def test_every_clock_event_reason_has_a_badge_text_in_both_languages():
    for lang in ("en", "zh"):
        cat = load(lang)
        for _, name in CLOCK_EVENT_REASONS:
            assert cat.get(f"clock-reason.{name}"), (lang, name)


def test_the_strips_problem_reasons_are_the_verdicts_throttle_reasons():
    text = (SHARED / "efficiency.js").read_text(encoding="utf-8")
    listed = re.search(r"PROBLEM_REASONS = \[(.*)\];", text).group(1)
    assert set(re.findall(r"'(\w+)'", listed)) == set(THROTTLE_REASONS)


def test_the_strip_lists_the_contracts_gpm_fields_and_charts_every_history_chart():
    gpu = contract.object_types()["Gpu"].fields
    text = (SHARED / "efficiency.js").read_text(encoding="utf-8")
    named = set(re.findall(r"""(?:key|tx|rx): '([a-z_]+_(?:fraction|bytes_per_s))'""", text))
    gpm = {k for k in gpu if k.endswith("_fraction") or k.endswith("_bytes_per_s")}
    assert named == gpm, sorted(named ^ gpm)
    html = (STATIC / "page" / "index.html").read_text(encoding="utf-8")
    data = (SHARED / "history_data.js").read_text(encoding="utf-8")
    charts = re.findall(r"'(\w+)'", re.search(r"GPU_CHARTS = \[(.*)\]", data).group(1))
    charts += re.findall(r"'(\w+)'", re.search(r"JOB_CHARTS = \[(.*)\]", data).group(1))
    for name in charts:
        assert f'data-testid="chart-{name}"' in html, name
        assert f"chart.{name}" in load("en"), name


def test_the_flagged_data_wait_is_the_verdicts_data_starved_threshold():
    from sidecar.verdict.facts import Rules

    text = (SHARED / "view_model.js").read_text(encoding="utf-8")
    value = float(re.search(r"DATA_WAIT_HIGH_FRACTION = ([\d.]+);", text).group(1))
    assert value == Rules().data_wait_starved
