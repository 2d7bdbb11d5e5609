"""The Prometheus HTTP API as a source: instant queries (`GET /api/v1/query`), bounded.

`dsh-sidecar cluster` reads what every node's sidecar exported through the Prometheus that scrapes
them: Prometheus is the aggregator, this module only asks it. A reply is read up to MAX_REPLY_BYTES
and within `timeout_s`; anything else (no answer, not JSON, `"status": "error"`, a result that is not
a vector) is a PrometheusError whose message says what to check.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, NamedTuple

MAX_REPLY_BYTES = 16 * 1048576  # a fleet of 100 nodes x 8 GPUs x every dsh_ series is ~2 MiB
MAX_LABEL_VALUE_CHARS = 256  # a process chooses its model names; a node, its host name


class PrometheusError(Exception):
    """Prometheus did not answer a query with a vector: the message says why and what to check."""


class Sample(NamedTuple):
    labels: dict[str, str]
    value: float


def check_url(url: str) -> str:
    """The base URL without a trailing slash, or ValueError: http(s), a host, no query."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"not a Prometheus URL: {url!r} (e.g. http://prometheus:9090)")
    return url.rstrip("/")


class PrometheusApi:
    """Instant queries against one Prometheus, optionally with a bearer token (a Prometheus behind
    an authenticating proxy)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, bearer_token: str | None = None):
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"

    def query(self, promql: str, at_unix_s: float | None = None) -> list[Sample]:
        params = {"query": promql}
        if at_unix_s is not None:
            params["time"] = f"{at_unix_s:.3f}"
        body = self._get("/api/v1/query?" + urllib.parse.urlencode(params))
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(data, dict):
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusError(f"Prometheus refused {promql!r}: {str(error)[:300] or 'no reason given'}")
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PrometheusError(
                f"Prometheus answered {promql!r} with a {data.get('resultType')!r}, not a vector"
            )
        return [s for s in map(_sample, data["result"]) if s is not None]

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                raw = reply.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raw = exc.read(MAX_REPLY_BYTES + 1)  # Prometheus explains a 400/422 in the JSON body
            if not raw.lstrip().startswith(b"{"):
                raise PrometheusError(f"{self.url} answered HTTP {exc.code}: is it Prometheus?") from None
        except (OSError, ValueError) as exc:
            raise PrometheusError(
                f"no answer from Prometheus at {self.url} ({exc}): is it running, and is the URL its "
                "web address (--web.listen-address)?"
            ) from None
        if len(raw) > MAX_REPLY_BYTES:
            raise PrometheusError(f"Prometheus's reply is over {MAX_REPLY_BYTES} bytes: narrow it with --job")
        try:
            return json.loads(raw)
        except ValueError:
            raise PrometheusError(
                f"{self.url} did not answer JSON: is it Prometheus's web address?"
            ) from None


def _sample(item: Any) -> Sample | None:
    """One vector element as a Sample; None for what is not one (skipped, never trusted)."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        return None
    value = item.get("value")
    if not isinstance(value, list) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    labels = {
        str(k)[:MAX_LABEL_VALUE_CHARS]: str(v)[:MAX_LABEL_VALUE_CHARS]
        for k, v in item["metric"].items()
        if isinstance(v, str)
    }
    return Sample(labels, number if math.isfinite(number) else math.nan)
