"""A real Prometheus scrapes a real sidecar, configured by deploy/prometheus.yml and
deploy/dsh-alerts.yml, and its HTTP API returns the series with the status document's values.

Prometheus is the Debian package (`apt-get install prometheus`; scripts/test.sh installs it). The
test starts its own server on a free loopback port with a temporary storage directory; the shipped
configuration is used as is except for its two /etc paths and its intervals."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

from tests.fakenvml import gpu, scenarios
from tests.helpers.grafana_dashboard import dashboard_expressions, substitute_variables
from tests.helpers.harness import METRICS_AT_ONCE, REPO, FakeJob, Sidecar, codes, cuda_runtime, wait_for
from tests.helpers.metrics_expected import DOC_FAMILIES, expected_from_document, sample_set
from tests.helpers.prometheus import NEEDS_PROMETHEUS, Prometheus, shipped_config

PROMTOOL = shutil.which("promtool")
pytestmark = NEEDS_PROMETHEUS

TOKEN = "prom-s3cret"
UUIDS = [gpu(0)["uuid"], gpu(1)["uuid"]]
TARGET_LABELS = ("instance", "job", "node")
COUNTER = "dsh_model_forward_calls_total"


def rank(r: int) -> dict:
    return {
        "payload": {
            "role": "rank",
            "rank": r,
            "local_rank": r,
            "world_size": 2,
            "dist_backend": "nccl",
            "runtime": cuda_runtime(UUIDS),
            "steps": {
                "window_s": 10.0,
                "steps": 50,
                "step_s": 0.2,
                "data_wait_fraction": 0.25,
                "forward_fraction": 0.25,
                "optimizer_fraction": 0.125,
                "other_fraction": 0.375,
            },
            # Both ranks on cuda:0: rank-shared-gpu, and rank 1 is a rank-device-mismatch.
            "models": [
                {
                    "name": "Net",
                    "class": "Net",
                    "params": 10,
                    "device": "cuda:0",
                    "devices": ["cuda:0"],
                    "input_device": "cuda:0",
                }
            ],
        }
    }


def test_prometheus_scrapes_the_sidecar(tmp_path, fake_nvml):
    specs = {"launcher": {"probe": False, "children": ["rank0", "rank1"]}, "rank0": rank(0), "rank1": rank(1)}
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        r0, r1 = job.pids["rank0"], job.pids["rank1"]
        fake_nvml.write(
            {
                "gpus": [
                    # A Hopper held down by heat (the throttled warning; GPM for the efficiency panels).
                    scenarios.throttled_gpu(
                        None,
                        0,
                        util_gpu=83,
                        memory_used_mib=9000,
                        processes=[
                            {"pid": r0, "used_mib": 4400, "sm_util": 41},
                            {"pid": r1, "used_mib": 4500, "sm_util": 42},
                        ],
                    ),
                    gpu(1, memory_used_mib=0),
                ]
            }
        )
        args = [
            "--pid",
            str(job.pid),
            "--port",
            "0",
            *METRICS_AT_ONCE,
            "--interval",
            "0.5",
            "--job-name",
            "train-a",
            "--token",
            TOKEN,
        ]
        with Sidecar(args, env=fake_nvml.env(), token=TOKEN) as sc:
            sc.wait_status(
                lambda d: (
                    {"rank-shared-gpu", "rank-device-mismatch"} <= codes(d)
                    and all(
                        p["gpu"] and p["gpu"][0]["sm_util_pct"] for p in d["processes"] if p["role"] == "rank"
                    )
                ),
                what="both ranks on GPU 0",
            )
            sidecar_port = int(sc.url.rsplit(":", 1)[1])
            config = shipped_config(tmp_path, [(sidecar_port, None)], TOKEN)
            if PROMTOOL:
                check = subprocess.run(
                    [PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=60
                )
                assert check.returncode == 0, check.stdout + check.stderr
            prom = Prometheus(config, tmp_path)
            try:
                # The target is up: the token in the configuration is accepted.
                up = wait_for(
                    lambda: prom.query('up{job="dsh"} == 1'), 20, 0.5, "the sidecar target to be up"
                )
                ((labels, _),) = up
                assert labels["instance"] == f"127.0.0.1:{sidecar_port}" and labels["node"] == "127.0.0.1"

                # Every job series, value for value, equals the status document; forward-call counters
                # (which advance every poll) are the same series, at most the document's value.
                names = "|".join(sorted(DOC_FAMILIES))
                stable = DOC_FAMILIES - {COUNTER}

                def matches():
                    doc = sc.status()
                    got = []
                    for metric, value in prom.query(f'{{__name__=~"{names}", job="dsh"}}'):
                        labels = {k: v for k, v in metric.items() if k not in (*TARGET_LABELS, "__name__")}
                        got.append((metric["__name__"], labels, value))
                    # Prometheus stores an empty label as no label (dsh_job_info's user with --pid).
                    expected = {
                        (n, tuple((k, v) for k, v in lbl if v != ""), v)
                        for n, lbl, v in expected_from_document(doc, "train-a")
                    }
                    want = {x for x in expected if x[0] in stable}
                    have = sample_set(got, stable)
                    want_calls = {lbl: v for n, lbl, v in expected if n == COUNTER}
                    have_calls = {lbl: v for n, lbl, v in sample_set(got, {COUNTER})}
                    last_diff[:] = [sorted(want - have), sorted(have - want), want_calls, have_calls]
                    calls_ok = set(want_calls) == set(have_calls) and all(
                        0 < v <= want_calls[lbl] for lbl, v in have_calls.items()
                    )
                    return (want, doc) if have == want and calls_ok else None

                last_diff: list = []
                try:
                    want, doc = wait_for(matches, 20, 0.5, "Prometheus to hold the status document's values")
                except AssertionError as exc:
                    targets = [
                        (t["health"], t["lastError"], t["lastScrapeDuration"])
                        for t in prom.api("targets")["activeTargets"]
                    ]
                    raise AssertionError(
                        f"{exc}; only in the document, only in Prometheus: {last_diff}; targets: {targets}"
                    ) from None
                assert (
                    "dsh_gpu_utilization_percent",
                    (
                        ("gpu", "0"),
                        ("job_name", "train-a"),
                        ("name", "NVIDIA H100 80GB HBM3"),
                        ("uuid", UUIDS[0]),
                        ("vendor", "nvidia"),
                    ),
                    83.0,
                ) in want
                assert doc["status"] == "GPU"

                # Every dsh_ series carries the job name; Prometheus added instance, job and node.
                assert prom.query('{__name__=~"dsh_.+", job="dsh", job_name!="train-a"}') == []
                assert (
                    prom.query('count({__name__=~"dsh_.+", job="dsh", instance!="", node="127.0.0.1"})')[0][1]
                    > 20
                )

                # Counters and the histogram behave as such in PromQL.
                # The fake ranks count 20 forward calls a second; once 5 s of scrapes are in, the rate says so.
                def rates():
                    r = prom.query('rate(dsh_model_forward_calls_total{job_name="train-a"}[5s])')
                    return r if len(r) == 2 and all(12 < v < 30 for _, v in r) else None

                assert {m["rank"] for m, _ in wait_for(rates, 20, 0.5, "forward call rates near 20/s")} == {
                    "0",
                    "1",
                }
                ((_, p99),) = wait_for(
                    lambda: prom.query(
                        "histogram_quantile(0.99, rate(dsh_sidecar_poll_duration_seconds_bucket[10s]))"
                    ),
                    20,
                    0.5,
                    "the poll duration histogram",
                )
                assert math.isfinite(p99) and 0 < p99 <= 5
                ((_, age),) = prom.query("time() - dsh_sidecar_last_poll_timestamp_seconds")
                assert -2 < age < 10
                ((_, gpu_status),) = prom.query('dsh_status{status="GPU"}')
                assert gpu_status == 1

                # The alert rules evaluate on these series: the rank layout alert is pending (its `for`
                # is a minute), the others are healthy and quiet.
                pending = wait_for(
                    lambda: prom.query('ALERTS{alertname="DshRankGpuLayout"}'),
                    20,
                    0.5,
                    "the rank layout alert",
                )
                assert {(m["code"], m["alertstate"], m["job_name"]) for m, _ in pending} == {
                    ("rank-shared-gpu", "pending", "train-a"),
                    ("rank-device-mismatch", "pending", "train-a"),
                }
                groups = prom.api("rules")["groups"]
                rules = [r for g in groups for r in g["rules"]]
                # dsh-alerts.yml's 8 and dsh-accounting.yml's 5 (its minute a second here)
                assert len(rules) == 13 and all(r["health"] == "ok" for r in rules), rules
                firing_or_pending = {m["alertname"] for m, _ in prom.query("ALERTS")}
                assert firing_or_pending == {"DshRankGpuLayout", "DshGpuThrottled"}

                # Every query of the Grafana dashboard runs on these series and returns data.
                dashboard = json.loads((REPO / "deploy" / "grafana" / "dsh-dashboard.json").read_text())
                for where, expr in dashboard_expressions(dashboard):
                    result = prom.query(substitute_variables(expr))
                    assert result, f"{where}: no data for {expr!r}"
                (status_panel,) = [p for p in dashboard["panels"] if p["title"] == "Status per node and job"]
                ((labels, code),) = prom.query(substitute_variables(status_panel["targets"][0]["expr"]))
                assert code == 1 and labels == {
                    "instance": f"127.0.0.1:{sidecar_port}",
                    "job_name": "train-a",
                }
                (ranks_panel,) = [p for p in dashboard["panels"] if p["title"] == "Ranks"]
                for t in ranks_panel["targets"]:
                    ranks = {m["rank"] for m, _ in prom.query(substitute_variables(t["expr"]))}
                    assert ranks == {"0", "1"}, (t["refId"], ranks)
            finally:
                prom.stop()
            assert prom.proc.returncode == 0, prom.log.read_text()[-3000:]
