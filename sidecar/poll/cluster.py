"""The cluster view's one read: every query of the cluster document asked of Prometheus at one
instant, then the document built from the answers (sidecar/documents/cluster.py)."""

from __future__ import annotations

import time
from typing import Any

from sidecar.documents.cluster import QUERIES, build_cluster
from sidecar.sources.prometheus import PrometheusApi


def read_cluster(
    api: PrometheusApi, job: str | None = None, now_unix_s: float | None = None
) -> dict[str, Any]:
    """The cluster document as Prometheus has it at `now_unix_s` (default: now). Every query is
    evaluated at the same instant, so a node cannot be counted up by one and missing by another.
    Raises PrometheusError (sidecar/sources/prometheus.py) when Prometheus does not answer."""
    at = time.time() if now_unix_s is None else now_unix_s
    results = {name: api.query(promql, at_unix_s=at) for name, promql in QUERIES.items()}
    return build_cluster(results, now_unix_s=at, prometheus=api.url, job=job)
