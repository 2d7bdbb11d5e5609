"""deploy/dsh-accounting.yml, the fleet's half of `dsh-sidecar report`, without a running Prometheus:
`promtool check rules` accepts it, its record names and metrics are the ones the code reads and the
sidecar writes (one definition each: prometheus_queries.py, metric_names.py), its minute is one
minute everywhere, and `promtool test rules` evaluates it on series written here: a GPU held with no
work fires DshGpuHeldIdle after its 30 minutes (by job and user), a busy one never does, and the
records hold the GPU-seconds and joules of each minute. The answers of the report's queries become
the usages the accounting sums (fleet_usage); a Prometheus without the rules is told to load them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sidecar.common import metric_names as names
from sidecar.common.http_answer import HttpAnswer
from sidecar.documents.contract_report import MAX_ROW_NAMES
from sidecar.sources.prometheus import PrometheusApi, PrometheusError, Sample
from sidecar.sources.prometheus_queries import (
    ACCOUNTING_LOOK_BACK,
    ACCOUNTING_RULES,
    BUSY_RULE,
    ENERGY_RULE,
    HELD_RULE,
    JOB_INFO_RULE,
    accounting_queries,
    fleet_usage,
    read_fleet_usage,
)
from sidecar.verdict.accounting import MAX_NAMES, account

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "dsh-accounting.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")


def _groups() -> dict[str, dict]:
    return {g["name"]: g for g in yaml.safe_load(RULES.read_text())["groups"]}


def test_the_rules_are_the_ones_the_report_reads_and_their_minute_is_one_minute():
    groups = _groups()
    records = groups["dsh-accounting"]
    assert records["interval"] == "1m"
    assert {r["record"] for r in records["rules"]} == set(ACCOUNTING_RULES)
    for rule in records["rules"]:
        ranges = re.findall(r"\[([^\]]+)\]", rule["expr"])
        assert set(ranges) <= {"1m"}, rule
        assert rule["record"].endswith("1m")
        for metric in re.findall(r"\b(dsh_[a-z_]+)\b", rule["expr"]):
            assert metric in vars(names).values(), f"{metric} is not a metric the sidecar writes"
    seconds = [r for r in records["rules"] if r["record"] in (HELD_RULE, BUSY_RULE)]
    assert all(r["expr"].endswith(") * 60") for r in seconds)
    (alert,) = groups["dsh-gpu-held-idle"]["rules"]
    assert alert["alert"] == "DshGpuHeldIdle" and alert["for"] == "30m"
    assert names.JOB_GPU_HELD in alert["expr"] and names.JOB_GPU_BUSY in alert["expr"]
    assert MAX_NAMES == MAX_ROW_NAMES


@needs_promtool
def test_promtool_checks_the_rules():
    r = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "5 rules found" in r.stdout, r.stdout + r.stderr


TARGET = 'instance="n1:8765", job="dsh", node="n1"'
GPU0 = 'gpu="0", uuid="GPU-a", name="NVIDIA H100 80GB HBM3"'
GPU1 = 'gpu="1", uuid="GPU-b", name="NVIDIA H100 80GB HBM3"'
JOB = 'job_id="41-7"'


def _series(metric: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{metric}{{{TARGET}, {labels}}}", "values": values}


def _unit_test(tmp_path: Path) -> Path:
    """An hour of one job holding GPU 0 with no work and GPU 1 busy, scraped every minute."""
    rules = tmp_path / "dsh-accounting.yml"
    shutil.copy(RULES, rules)
    info = f'{JOB}, root_pid="41", user="alice", uid="1001", process="python", namespace="ml", pod="trainer-0"'
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    _series(names.JOB_GPU_HELD, f"{JOB}, {GPU0}", "1x60"),
                    _series(names.JOB_GPU_BUSY, f"{JOB}, {GPU0}", "0x60"),
                    _series(names.JOB_GPU_HELD, f"{JOB}, {GPU1}", "1x60"),
                    _series(names.JOB_GPU_BUSY, f"{JOB}, {GPU1}", "1x60"),
                    _series(names.GPU_POWER, GPU0, "70x60"),
                    _series(names.GPU_POWER, GPU1, "300x60"),
                    _series(names.JOB_INFO, info, "1x60"),
                ],
                "alert_rule_test": [
                    {"eval_time": "29m", "alertname": "DshGpuHeldIdle", "exp_alerts": []},
                    {
                        "eval_time": "32m",
                        "alertname": "DshGpuHeldIdle",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning", "instance": "n1:8765", "job": "dsh", "node": "n1",
                                    "job_id": "41-7", "gpu": "0", "uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3",
                                    "user": "alice", "uid": "1001", "namespace": "ml", "pod": "trainer-0",
                                },
                                "exp_annotations": {
                                    "summary": "n1:8765: GPU 0 held with no work by job 41-7 of alice (uid 1001)",
                                    "description": "The job's processes hold memory on the GPU and it has done no work "
                                    "for 30 minutes: end the job or free the GPU (`dsh-sidecar report --by job` "
                                    "lists the GPU-hours held idle).",
                                },
                            }
                        ],
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": f"{HELD_RULE}",
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": f"{HELD_RULE}{{{TARGET}, {JOB}, {GPU0}}}", "value": 60},
                            {"labels": f"{HELD_RULE}{{{TARGET}, {JOB}, {GPU1}}}", "value": 60},
                        ],
                    },
                    {
                        "expr": f"sum by (gpu) ({BUSY_RULE})",
                        "eval_time": "10m",
                        "exp_samples": [{"labels": '{gpu="0"}', "value": 0}, {"labels": '{gpu="1"}', "value": 60}],
                    },
                    {
                        "expr": f"sum by (gpu) ({ENERGY_RULE})",
                        "eval_time": "10m",
                        "exp_samples": [{"labels": '{gpu="0"}', "value": 4200}, {"labels": '{gpu="1"}', "value": 18000}],
                    },
                    {
                        # the report's own query: ten minutes held are 600 GPU-seconds per GPU
                        "expr": f"sum by (gpu) ({accounting_queries(600)['held']})",
                        "eval_time": "20m",
                        "exp_samples": [{"labels": '{gpu="0"}', "value": 600}, {"labels": '{gpu="1"}', "value": 600}],
                    },
                    {
                        "expr": f"count({JOB_INFO_RULE}{{user=\"alice\"}})",
                        "eval_time": "10m",
                        "exp_samples": [{"labels": "{}", "value": 1}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "accounting.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return path


@needs_promtool
def test_the_rules_evaluate_held_idle_gpus_and_their_seconds(tmp_path):
    r = subprocess.run([PROMTOOL, "test", "rules", str(_unit_test(tmp_path))], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def _sample(value: float, **labels: str) -> Sample:
    return Sample({"instance": "n1:8765", "job": "dsh", "node": "n1", **labels}, value)


def test_the_fleet_answers_become_usages_by_job_and_gpu():
    gpu0 = {"job_id": "41-7", "gpu": "0", "uuid": "GPU-a", "name": "H100"}
    gpu1 = {"job_id": "41-7", "gpu": "1", "uuid": "GPU-b", "name": "H100"}
    answers = {
        "held": [_sample(3600.0, **gpu0), _sample(1800.0, **gpu1), _sample(float("nan"), **{**gpu1, "job_id": "x"})],
        "held_minutes": [_sample(60, **gpu0), _sample(30, **gpu1)],
        "busy": [_sample(600.0, **gpu0), _sample(2400.0, **gpu1)],  # over held: a rule's edges
        "energy": [_sample(3.6e6, **gpu0)],
        "energy_minutes": [_sample(30, **gpu0)],
        "info": [_sample(1, job_id="41-7", user="", uid="1001", namespace="ml", pod="trainer-0", slurm_job="77")],
    }
    usages = {u.gpu: u for u in fleet_usage(answers)}
    assert set(usages) == {"n1/0", "n1/1"}
    a, b = usages["n1/0"], usages["n1/1"]
    assert (a.job, a.user, a.uid, a.pod, a.slurm_job, a.gpu_model) == ("n1/41-7", None, 1001, "ml/trainer-0", "77", "H100")
    assert (a.gpu_held_s, a.gpu_busy_s, a.energy_j, a.energy_held_s) == (3600.0, 600.0, 3.6e6, 1800.0)
    assert (b.gpu_busy_s, b.energy_j, b.energy_held_s) == (1800.0, None, 0.0)  # busy never over held; no energy
    report = account(usages.values(), "user", 0.0, 3600.0)
    (row,) = report.rows
    assert row.key == "uid 1001" and row.runs == 1 and row.pods == ("ml/trainer-0",)
    assert row.gpu_held_h == 1.5 and row.gpu_idle_held_h == pytest.approx(1.5 - 2400 / 3600)
    assert row.energy_kwh == 1.0 and row.energy_known_fraction == pytest.approx(1800 / 5400)
    by_gpu = account(usages.values(), "gpu", 0.0, 3600.0)
    assert [r.key for r in by_gpu.rows] == ["n1/0", "n1/1"]  # GPU 0 held the longest with no work


def _prometheus(answer: Callable[[str], list[dict]]) -> PrometheusApi:
    """A PrometheusApi whose every query is answered by `answer(promql)` (a vector)."""

    def get(url: str, **_: object) -> HttpAnswer:
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["query"][0]
        body = {"status": "success", "data": {"resultType": "vector", "result": answer(promql)}}
        return HttpAnswer(200, "application/json", json.dumps(body).encode())

    return PrometheusApi("http://prometheus.invalid:9090", get=get)


def test_a_prometheus_without_the_rules_is_told_to_load_them_and_an_idle_window_is_empty():
    asked: list[str] = []

    def nothing(promql: str) -> list[dict]:
        asked.append(promql)
        return []

    with pytest.raises(PrometheusError, match="load deploy/dsh-accounting.yml"):
        read_fleet_usage(_prometheus(nothing), 0.0, 3600.0)
    assert asked[0] == f"sum_over_time({HELD_RULE}[3599999ms])" and ACCOUNTING_LOOK_BACK in asked[-1]

    def loaded_but_idle(promql: str) -> list[dict]:
        return [{"metric": {}, "value": [0, "12"]}] if promql.startswith("count(last_over_time") else []

    assert read_fleet_usage(_prometheus(loaded_but_idle), 0.0, 3600.0) == ()
