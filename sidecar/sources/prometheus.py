"""The Prometheus HTTP API as a source: instant queries (`GET /api/v1/query`), bounded.

`dsh-sidecar cluster` and the cluster route read what every node's sidecar exported through the
Prometheus that scrapes them: Prometheus is the aggregator, this module only asks it, through the
one HTTP door (sidecar/sources/http_get.py: a Prometheus on this machine is asked only when its
port is served by us, root or a --prometheus-user; no redirect is followed).

A Prometheus may be taken over or hostile, so every answer is bounded before it is parsed:
MAX_REPLY_BYTES read as it streams, then MAX_JSON_STRINGS, MAX_JSON_CONTAINERS and MAX_JSON_ITEMS
counted on the raw bytes (a cheap scan that bounds what parsing can allocate: a few MiB of tiny
samples would otherwise cost hundreds of MiB of objects), nesting bounded by the parser, at most
MAX_SAMPLES per query and MAX_LABELS_PER_SAMPLE labels per sample. One deadline covers every query
of a view (`query_all`): a Prometheus that answers slowly, or a byte at a time, costs one timeout,
not one per query. Anything else (no answer, not JSON, `"status": "error"`, a result that is not a
vector) is a PrometheusError whose message says what to check.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from sidecar.common.http_answer import HttpAnswer, HttpError
from sidecar.sources import http_get

# A fleet of 100 nodes x 8 GPUs answers each of the cluster view's queries in well under 1 MiB.
MAX_REPLY_BYTES = 4 * 1048576
MAX_JSON_STRINGS = 200_000  # counted as '"' / 2 (escaped quotes count too: an over-count, safe)
MAX_JSON_CONTAINERS = 50_000  # '{' and '['
MAX_JSON_ITEMS = 400_000  # ','
MAX_SAMPLES = 20_000  # per query: 100 nodes x 8 ranks x 4 step phases is 3,200
MAX_LABELS_PER_SAMPLE = 64  # a dsh_ series has at most 20; a sample with more is skipped
MAX_LABEL_VALUE_CHARS = 256  # a process chooses its model names; a node, its host name


class PrometheusError(Exception):
    """Prometheus did not answer a query with a vector: the message says why and what to check."""


class Sample(NamedTuple):
    labels: dict[str, str]
    value: float


class Answers(NamedTuple):
    """Every query of a view, by name, and whose process served them (None: another host)."""

    results: dict[str, list[Sample]]
    server_uid: int | None


def check_url(url: str) -> str:
    """The base URL without a trailing slash, or ValueError: http(s), a host, no query."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"not a Prometheus URL: {url!r} (e.g. http://prometheus:9090)")
    return url.rstrip("/")


class PrometheusApi:
    """Instant queries against one Prometheus, optionally with a bearer token (a Prometheus behind
    an authenticating proxy). `timeout_s` bounds one query, and every query of a `query_all`."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        bearer_token: str | None = None,
        trusted_uids: frozenset[int] = frozenset(),
        get: Callable[..., HttpAnswer] = http_get.get,
    ):
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self._trusted_uids = trusted_uids
        self._get_answer = get
        self._headers = {"Accept": "application/json", "User-Agent": "dsh-sidecar"}
        if bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"

    def query(self, promql: str, at_unix_s: float | None = None) -> list[Sample]:
        return self._query(promql, at_unix_s, time.monotonic() + self.timeout_s)[0]

    def query_all(self, queries: Mapping[str, str], at_unix_s: float) -> Answers:
        """Every query at one instant, within one `timeout_s` for all of them."""
        deadline = time.monotonic() + self.timeout_s
        results: dict[str, list[Sample]] = {}
        server_uid = None
        for name, promql in queries.items():
            if time.monotonic() >= deadline:
                raise PrometheusError(
                    f"Prometheus at {self.url} answered {len(results)} of the view's {len(queries)} "
                    f"queries within {self.timeout_s:g} s: is it overloaded? (--timeout sets the time)"
                )
            results[name], server_uid = self._query(promql, at_unix_s, deadline)
        return Answers(results, server_uid)

    def _query(self, promql: str, at_unix_s: float | None, deadline: float) -> tuple[list[Sample], int | None]:
        params = {"query": promql}
        if at_unix_s is not None:
            params["time"] = f"{at_unix_s:.3f}"
        answer = self._fetch("/api/v1/query?" + urllib.parse.urlencode(params), deadline)
        body = _parse(answer, self.url)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(data, dict):
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusError(f"Prometheus refused {promql!r}: {str(error)[:300] or 'no reason given'}")
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PrometheusError(
                f"Prometheus answered {promql!r} with a {str(data.get('resultType'))[:40]!r}, not a vector"
            )
        if len(data["result"]) > MAX_SAMPLES:
            raise PrometheusError(
                f"Prometheus answered {promql!r} with over {MAX_SAMPLES} samples: narrow it with --job"
            )
        return [s for s in map(_sample, data["result"]) if s is not None], answer.server_uid

    def _fetch(self, path: str, deadline: float) -> HttpAnswer:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise HttpError("timeout", "no time left")
            answer = self._get_answer(
                self.url + path,
                timeout_s=left,
                max_body_bytes=MAX_REPLY_BYTES,
                headers=self._headers,
                trusted_uids=self._trusted_uids,
            )
        except HttpError as exc:
            raise PrometheusError(_transport_error(self.url, exc, self.timeout_s)) from None
        if answer.status != 200 and not answer.body.lstrip().startswith(b"{"):
            # Prometheus explains a 400/422 in its JSON body; anything else is not Prometheus
            raise PrometheusError(f"{self.url} answered HTTP {answer.status}: is it Prometheus?")
        return answer


def _transport_error(url: str, exc: HttpError, timeout_s: float) -> str:
    if exc.kind == "peer":
        return (
            f"refused to ask Prometheus at {url}: {exc}. Another user may have taken its port; if "
            "Prometheus runs as its own user, name it with --prometheus-user"
        )
    if exc.kind == "redirect":
        return f"Prometheus at {url} redirects to {exc.location!r}, which is never followed: give its own address"
    if exc.kind == "too-large":
        return f"Prometheus's reply is over {MAX_REPLY_BYTES} bytes: narrow it with --job"
    if exc.kind == "timeout":
        return f"Prometheus at {url} did not answer within {timeout_s:g} s: is it overloaded? (--timeout sets the time)"
    return (
        f"no answer from Prometheus at {url} ({exc}): is it running, and is the URL its web address "
        "(--web.listen-address)?"
    )


def _parse(answer: HttpAnswer, url: str) -> Any:
    raw = answer.body
    counts = (raw.count(b'"') // 2, raw.count(b"{") + raw.count(b"["), raw.count(b","))
    limits = (MAX_JSON_STRINGS, MAX_JSON_CONTAINERS, MAX_JSON_ITEMS)
    if any(n > limit for n, limit in zip(counts, limits)):
        raise PrometheusError(
            f"Prometheus's reply holds more strings, objects or items than a cluster view reads "
            f"({counts[0]} strings, {counts[1]} objects and arrays, {counts[2]} items): narrow it with --job"
        )
    try:
        return http_get.parse_json(raw)
    except ValueError as exc:
        raise PrometheusError(f"{url} did not answer JSON ({exc}): is it Prometheus's web address?") from None


def _sample(item: Any) -> Sample | None:
    """One vector element as a Sample; None for what is not one (skipped, never trusted)."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        return None
    value = item.get("value")
    if not isinstance(value, list) or len(value) != 2 or len(item["metric"]) > MAX_LABELS_PER_SAMPLE:
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
