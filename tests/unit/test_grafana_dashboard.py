"""deploy/grafana/dsh-dashboard.json: valid JSON, a well-formed dashboard, and every query names
metrics (and labels) the sidecar exports. The exported names come from the collector itself, fed a
status document that exercises every family; the PromQL goes through Prometheus's own parser
(`promtool check rules`) where promtool is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.serve.metrics import GPU_EFFICIENCY_GAUGES, make_metrics
from tests.helpers.grafana_dashboard import (
    dashboard_expressions,
    dashboard_panels,
    substitute_variables,
)

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dsh-dashboard.json"
# Labels Prometheus adds: `instance` and `job` from the target, `node` from deploy/prometheus.yml.
TARGET_LABELS = {"instance", "job", "node"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__all"}
PROMQL_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}


class _Poller:
    def __init__(self, doc):
        self.doc = doc
        self.poll_count = 1
        self.poll_durations_s = [0.003]
        self.poll_errors = {}

    def snapshot(self):
        return self.doc, self.doc["time_unix_s"]


def _full_document() -> dict[str, Any]:
    return {
        "time_unix_s": 1.0,
        "status": "GPU",
        "warnings": [{"code": "rank-shared-gpu", "severity": "warning"}],
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-x",
                "name": "A100",
                "util_pct": 5,
                "mem_used_mib": 1,
                "mem_total_mib": 2,
                "clock_event_reasons": ["hw_slowdown"],
                **{key: 1 for _, _, key, _ in GPU_EFFICIENCY_GAUGES},
            }
        ],
        "processes": [
            {
                "pid": 10,
                "role": "rank",
                "rank": 0,
                "local_rank": 0,
                "world_size": 2,
                "gpu": [{"index": 0, "mem_used_mib": 1, "sm_util_pct": 3}],
                "models": [{"name": "Net", "device": "cuda:0", "forward_calls": 4}],
                "step_breakdown": {"data_wait_fraction": 0.5, "forward_fraction": 0.5},
            }
        ],
    }


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Sample name -> label names, as the sidecar exports them (job_name on: --job-name)."""
    body, _ = make_metrics(_Poller(_full_document()), job_name="j")()
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _selectors(promql: str) -> list[tuple[str, list[str]]]:
    """(metric name, label names in its matchers) for every vector selector of an expression."""
    s = re.sub(r'"(?:\\.|[^"\\])*"', '""', promql)  # string literals
    s = re.sub(r"\[[^\]]*\]", "", s)  # range and subquery brackets
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    out = []
    for m in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?(\s*\()?", s):
        name, matchers, call = m.group(1), m.group(2), m.group(3)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue  # a function call or a keyword
        labels = re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers or "")
        out.append((name, labels))
    return out


def test_dashboard_is_a_well_formed_grafana_dashboard(dashboard):
    assert dashboard["title"] and dashboard["uid"] == "dsh-gpu-dashboard"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    panels = list(dashboard_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), (p["title"], t["refId"])
    # No two panels overlap on the grid.
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_every_variable_used_is_defined(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]} | GRAFANA_BUILTINS
    text = json.dumps(dashboard)
    used = set(re.findall(r"\$\{?(\w+)", text))
    assert used <= defined, sorted(used - defined)


def test_every_query_names_metrics_and_labels_the_sidecar_exports(dashboard, exported):
    seen = set()
    for where, expr in dashboard_expressions(dashboard):
        selectors = _selectors(expr)
        assert selectors, f"{where}: no metric in {expr!r}"
        for name, labels in selectors:
            assert name in exported, f"{where}: {name} is not exported by the sidecar ({expr!r})"
            unknown = set(labels) - exported[name] - TARGET_LABELS
            assert not unknown, f"{where}: {name} has no label {sorted(unknown)}"
            seen.add(name)
    # The views the issue asks for: status per node and job, per-GPU utilisation and memory, the
    # per-rank table, warnings.
    assert {
        "dsh_status",
        "dsh_gpu_utilization_percent",
        "dsh_gpu_memory_used_bytes",
        "dsh_gpu_memory_total_bytes",
        "dsh_rank_info",
        "dsh_process_gpu_memory_used_bytes",
        "dsh_model_info",
        "dsh_warning_active",
    } <= seen


def test_the_query_checker_catches_mistakes(exported):
    """The checker itself: a typo in a metric or a label, and a function, are told apart."""
    assert _selectors('rate(dsh_model_forward_calls_total{rank!="", x="a{b}"}[5m]) > bool 0') == [
        ("dsh_model_forward_calls_total", ["rank", "x"])
    ]
    assert _selectors("sum by (gpu) (dsh_gpu_utilisation_percent) offset 5m") == [
        ("dsh_gpu_utilisation_percent", [])
    ]
    assert "dsh_gpu_utilisation_percent" not in exported
    assert _selectors("time() - max(dsh_sidecar_last_poll_timestamp_seconds)") == [
        ("dsh_sidecar_last_poll_timestamp_seconds", [])
    ]
    assert _selectors("1e3 * dsh_status") == [("dsh_status", [])]


def test_the_per_rank_table_joins_what_it_shows(dashboard):
    (table,) = [p for p in dashboard_panels(dashboard) if p["title"] == "Ranks"]
    assert table["type"] == "table" and {"merge", "organize"} <= {t["id"] for t in table["transformations"]}
    for t in table["targets"]:
        assert t["format"] == "table" and t["instant"] is True
        # Every query keeps the join keys, so merge can line the rows up by job and rank.
        by = re.search(r"\bby \(([^)]*)\)", t["expr"]).group(1)
        assert {"instance", "job_name", "job_id", "rank"} <= {x.strip() for x in by.split(",")}, t["expr"]


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed"
)
def test_every_query_parses_as_promql(dashboard, tmp_path):
    """Each panel query, with Grafana's variables filled in, through Prometheus's own parser."""
    rules = []
    for i, (where, expr) in enumerate(dashboard_expressions(dashboard)):
        rules.append(
            {
                "record": f"dsh_dashboard_query_{i}",
                "expr": substitute_variables(expr),
                "labels": {"where": where},
            }
        )
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout


# A metric's unit suffix -> the Grafana units that display it truthfully.
_SUFFIX_UNITS = {
    "_watts": {"watt"},
    "_celsius": {"celsius"},
    "_hz": {"hertz"},
    "_ratio": {"percentunit"},
    "_bytes": {"bytes", "decbytes"},
    "_seconds": {"s"},
}


def test_every_series_of_a_time_series_is_shown_in_its_metrics_unit(dashboard):
    """A panel that mixes units (power in W, temperature in °C) overrides the unit per query, so no
    temperature is read as watts."""
    checked = 0
    for p in dashboard_panels(dashboard):
        if p.get("type") != "timeseries":
            continue
        fc = p.get("fieldConfig", {})
        default = fc.get("defaults", {}).get("unit")
        by_ref = {
            o["matcher"]["options"]: prop["value"]
            for o in fc.get("overrides", [])
            if o["matcher"]["id"] == "byFrameRefID"
            for prop in o["properties"]
            if prop["id"] == "unit"
        }
        for t in p["targets"]:
            expr = t["expr"]
            if "/" in expr or "histogram_quantile" in expr or "rate(" in expr:
                continue  # a derived figure: its unit is the panel's business
            names = set(re.findall(r"\b(dsh_\w+)\s*\{", expr))
            for name in names:
                for suffix, units in _SUFFIX_UNITS.items():
                    if name.endswith(suffix):
                        unit = by_ref.get(t["refId"], default)
                        assert unit in units, f"{p['title']!r} {t['refId']}: {name} shown as {unit!r}"
                        checked += 1
    assert checked >= 5
