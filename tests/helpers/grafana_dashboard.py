"""deploy/grafana/dsh-dashboard.json read as Grafana reads it: its panels, their queries, and the
PromQL Grafana sends once its variables are replaced.
"""

from __future__ import annotations

import re
from typing import Any


def dashboard_panels(dash: dict[str, Any]):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", ())  # panels inside a collapsed row


def dashboard_queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL or Grafana variable query) for every query of the dashboard."""
    out = []
    for p in dashboard_panels(dash):
        for t in p.get("targets", ()):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable {v['name']}", q))
    return out


def substitute_variables(expr: str) -> str:
    """What Grafana sends: variables replaced by a value of their kind."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def dashboard_expressions(dash) -> list[tuple[str, str]]:
    """(where, PromQL) with label_values(...) variable queries reduced to their selector."""
    out = []
    for where, q in dashboard_queries(dash):
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q)
        out.append((where, m.group(1) if m else q))
    return out
