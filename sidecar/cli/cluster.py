"""`dsh-sidecar cluster`: the cluster document (sidecar/documents/cluster.py) as a table or JSON.

Exit codes: sidecar/common/exit_codes.py (EXIT_PROBLEMS when the view has a warning).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from functools import partial
from typing import Any

from sidecar.cli.args import UsageError, fail, host_paths, prometheus_trusted_uids
from sidecar.common.exit_codes import EXIT_OK, EXIT_PROBLEMS, EXIT_PROMETHEUS, EXIT_USAGE
from sidecar.documents.bounds import one_line_all
from sidecar.poll.cluster import read_cluster
from sidecar.serve.cluster import ClusterCache, ClusterError
from sidecar.sources import http_get
from sidecar.sources.prometheus import PrometheusApi, PrometheusError


def run_cluster(args: argparse.Namespace) -> int:
    if not args.prometheus:
        return fail(
            EXIT_USAGE, "give Prometheus's address: --prometheus http://HOST:9090 (or $DSH_PROMETHEUS_URL)"
        )
    try:
        api = prometheus_api(args, args.timeout)
    except (ValueError, UsageError) as exc:
        return fail(EXIT_USAGE, str(exc))
    try:
        doc = read_cluster(api, job=args.job)
    except PrometheusError as exc:
        return fail(EXIT_PROMETHEUS, str(exc))
    if args.json:
        json.dump(doc, sys.stdout, indent=1, ensure_ascii=True)
        print()
    else:
        sys.stdout.write(cluster_text(one_line_all(doc)))  # labels are any node's text: no escapes
    warned = doc["warnings"] or any(j["warnings"] for j in doc["jobs"])
    return EXIT_PROBLEMS if warned else EXIT_OK


def cluster_cache(args: argparse.Namespace, timeout_s: float = 5.0) -> ClusterCache | None:
    """The serve options' --prometheus as the server's cluster reader (sidecar/serve/cluster.py);
    None without one (the route then says how to turn it on). The URL was checked with the options.
    One view's queries take at most `timeout_s` in all: the route's request waits no longer."""
    if not args.prometheus:
        return None
    api = prometheus_api(args, timeout_s)

    def read(job: str | None) -> dict[str, Any]:
        try:
            return read_cluster(api, job=job)
        except PrometheusError as exc:
            raise ClusterError(str(exc)) from None

    return ClusterCache(read)


def prometheus_api(args: argparse.Namespace, timeout_s: float) -> PrometheusApi:
    """--prometheus's API; a Prometheus on this machine is asked once the socket tables of
    --path.procfs say who serves it (sources/http_get.py)."""
    get = partial(http_get.get, host=host_paths(args))
    return PrometheusApi(
        args.prometheus, timeout_s=timeout_s, trusted_uids=prometheus_trusted_uids(args), get=get
    )


def _cell(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.0f}%"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _node_lines(doc: dict[str, Any]) -> list[str]:
    # "SM clock" is NVIDIA's word: an AMD or Intel GPU's clock is its GPU clock
    others = any(g.get("vendor") in ("amd", "intel") for n in doc["nodes"] for g in n["gpus"])
    clock = "GPU clock" if others else "SM clock"
    rows = [["node", "state", "gpu", "util", "memory MiB", clock, "SM active", "slowed by"]]
    for n in doc["nodes"]:
        state = "ok" if n["reporting"] else f"MISSING ({n['why']})"
        if not n["gpus"]:
            rows.append([n["node"], state, "-", "", "", "", "", ""])
        for i, g in enumerate(n["gpus"]):
            memory = f"{_cell(g['mem_used_mib'], '{:.0f}')}/{_cell(g['mem_total_mib'], '{:.0f}')}"
            rows.append(
                [
                    n["node"] if i == 0 else "",
                    state if i == 0 else "",
                    _cell(g["index"]),
                    _cell(g["util_pct"], "{:.0f}%"),
                    memory,
                    _cell(g["sm_clock_mhz"], "{:.0f} MHz"),
                    _pct(g["sm_activity_fraction"]),
                    ",".join(g["clock_events"]) or "-",
                ]
            )
    return _table(rows)


def _job_lines(job: dict[str, Any], shared_key: bool = False) -> list[str]:
    """``shared_key``: another job shown has the same key (another owner's): its uid tells them apart."""
    size = _cell(job["world_size"])
    owner = f" (uid {_cell(job['uid'])})" if shared_key else ""
    lines = [
        f"job {job['job_key']}{owner}: {job['status'] or '?'}, {len(job['ranks'])} of {size} ranks on "
        f"{len(job['nodes'])} node(s): {', '.join(job['nodes'])}"
    ]
    if job["ranks"]:
        rows = [
            ["rank", "node", "local", "gpu", "fwd/s", "data wait", "forward", "optimizer", "other", "waits"]
        ]
        for r in job["ranks"]:
            rows.append(
                [
                    str(r["rank"]),
                    r["node"],
                    _cell(r["local_rank"]),
                    ",".join(map(str, r["gpus"])) or "-",
                    _cell(r["forward_rate_per_s"], "{:.1f}"),
                    _pct(r["data_wait_fraction"]),
                    _pct(r["forward_fraction"]),
                    _pct(r["optimizer_fraction"]),
                    _pct(r["other_fraction"]),
                    _pct(r["collective_wait_fraction"]),
                ]
            )
        lines += ["  " + line for line in _table(rows)]
    lines += _warning_lines(job["warnings"])
    return lines


def _warning_lines(warnings: list[dict[str, Any]]) -> list[str]:
    out = []
    for w in warnings:
        out.append(f"  {w['severity']}: {w['code']}: {w['message']}")
        if w.get("hint"):
            out.append(f"    hint: {w['hint']}")
    return out


def cluster_text(doc: dict[str, Any]) -> str:
    lines = [f"cluster from {doc['prometheus']}: {len(doc['nodes'])} node(s), {len(doc['jobs'])} job(s)"]
    if doc["nodes"]:
        lines += _node_lines(doc)
    else:
        lines.append("no node has reported: does Prometheus scrape the sidecars (deploy/prometheus.yml)?")
    lines += _warning_lines(doc["warnings"])
    keys = Counter(job["job_key"] for job in doc["jobs"])
    for job in doc["jobs"]:
        lines += ["", *_job_lines(job, keys[job["job_key"]] > 1)]
    if doc["undistributed_jobs"]:  # one line for them all: a row each buried the distributed ones
        lines += [
            "",
            f"{doc['undistributed_jobs']} job(s) of one process or one rank on one node are not listed",
        ]
    if doc["job"] and not doc["jobs"]:
        lines.append(f"no job {doc['job']} in the last 10 minutes")
    return "\n".join(lines) + "\n"
