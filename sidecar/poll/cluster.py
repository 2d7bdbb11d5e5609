"""The cluster view's one read: every query of the cluster view asked of Prometheus at one instant
(sidecar/sources/prometheus_queries.py), then the document built from the answers
(sidecar/documents/cluster.py)."""

from __future__ import annotations

import time
from typing import Any

from sidecar.documents.cluster import build_cluster
from sidecar.sources.prometheus import PrometheusApi
from sidecar.sources.prometheus_queries import read_cluster_answers


def read_cluster(
    api: PrometheusApi, job: str | None = None, now_unix_s: float | None = None
) -> dict[str, Any]:
    """The cluster document as Prometheus has it at `now_unix_s` (default: now). Every query is
    evaluated at the same instant, so a node cannot be counted up by one and missing by another.
    Raises PrometheusError (sidecar/sources/prometheus.py) when Prometheus does not answer every
    query within the api's timeout."""
    at = time.time() if now_unix_s is None else now_unix_s
    answers, server_uid = read_cluster_answers(api, at)  # one deadline for all of them
    return build_cluster(answers, now_unix_s=at, prometheus=api.url, prometheus_uid=server_uid, job=job)
