"""`GET /metrics`: the exposition parses with prometheus_client's own parser, carries every metric of
the contract (docs/metrics.md), and its values are those of the status document of the same poll.

The end-to-end tests run the real sidecar on a fake job tree with the simulated driver; the
in-process tests drive the collector with a stand-in poller to pin what only it decides: the
histogram, repeated label sets, an absent document, the job_name label."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar import __version__
from sidecar.serve.metrics import GPU_EFFICIENCY_GAUGES, POLL_BUCKETS_S, SidecarCollector, make_metrics
from tests.fakenvml import gpu
from tests.helpers.harness import API, METRICS_AT_ONCE, FakeJob, Sidecar, codes, cuda_runtime, wait_for
from tests.helpers.metrics_expected import (
    MIB,
    expected_from_document,
    sample_set,
)

REPO = Path(__file__).resolve().parents[2]
UUIDS = [gpu(0)["uuid"], gpu(1)["uuid"]]
TOKEN = "metrics-s3cret"

# The contract: metric (sample) name -> label names, without job_name.
CONTRACT = {
    "dsh_gpu_utilization_percent": {"gpu", "uuid", "name", "vendor"},
    "dsh_gpu_memory_used_bytes": {"gpu", "uuid", "name", "vendor"},
    "dsh_gpu_memory_total_bytes": {"gpu", "uuid", "name", "vendor"},
    "dsh_process_gpu_memory_used_bytes": {"job_id", "role", "gpu", "rank"},
    "dsh_process_gpu_sm_utilization_percent": {"job_id", "role", "gpu", "rank"},
    "dsh_model_info": {"job_id", "model", "device", "rank"},
    "dsh_model_forward_calls_total": {"job_id", "model", "rank"},
    "dsh_rank_info": {"job_id", "rank", "local_rank", "world_size"},
    "dsh_job_info": {
        "job_id", "root_pid", "user", "process",
        "job_key", "job_key_source", "world_size", "node_rank", "hostname", "namespace", "pod", "container", "uid",
        "pod_source", "slurm_job",
    },
    "dsh_jobs_omitted": set(),
    "dsh_job_gpu_held": {"job_id", "gpu", "uuid", "name", "vendor"},
    "dsh_job_gpu_busy": {"job_id", "gpu", "uuid", "name", "vendor"},
    "dsh_status": {"job_id", "status"},
    "dsh_warning_active": {"job_id", "code", "severity"},
    "dsh_sidecar_poll_duration_seconds_bucket": {"le"},
    "dsh_sidecar_poll_duration_seconds_sum": set(),
    "dsh_sidecar_poll_duration_seconds_count": set(),
    "dsh_sidecar_poll_errors_total": {"source"},
    "dsh_sidecar_info": {"version"},
    "dsh_sidecar_last_poll_timestamp_seconds": set(),
}


def parse(text: str | bytes) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as (name, labels, value), through prometheus_client's parser."""
    if isinstance(text, bytes):
        text = text.decode()
    return [
        (s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples
    ]


def same_poll(sc: Sidecar, attempts: int = 20) -> tuple[list, dict]:
    """A /metrics scrape and the status document of the same poll, matched by the poll's time:
    the scrape before and after the document must both name the document's `time`."""
    for _ in range(attempts):
        code, before = sc.get("/metrics")
        assert code == 200, before
        doc = sc.status()
        code, after = sc.get("/metrics")
        assert code == 200, after
        a, b = parse(before), parse(after)
        stamps = {v for n, _, v in a + b if n == "dsh_sidecar_last_poll_timestamp_seconds"}
        if stamps == {doc["time_unix_s"]}:
            return a, doc
    raise AssertionError(f"no scrape matched a status document's poll in {attempts} attempts")


# ---------------------------------------------------------------------------------------------
# End to end: the real sidecar on a fake two-rank job tree, two simulated GPUs
# ---------------------------------------------------------------------------------------------
def rank_spec(rank: int, device: str, *, model: str = "Net", **extra) -> dict:
    return {
        "payload": {
            "role": "rank",
            "rank": rank,
            "local_rank": rank,
            "world_size": 2,
            "dist_backend": "nccl",
            "runtime": cuda_runtime(UUIDS),
            "models": [
                {
                    "name": model,
                    "class": model,
                    "params": 1000,
                    "device": device,
                    "devices": [device],
                    "input_device": device,
                }
            ],
        },
        **extra,
    }


USED_BYTES = 12_345_678_848  # 11773.7568359375 MiB; MiB-rounded it was exported as 12,344,885,248
TOTAL_BYTES = 85_899_345_920 + 4096 * 3


@pytest.mark.slow
def test_exposition_matches_the_status_document_of_the_same_poll(tmp_path, fake_nvml):
    specs = {
        "launcher": {"probe": False, "children": ["rank0", "rank1"]},
        "rank0": rank_spec(0, "cuda:0", children=["worker"]),
        "rank1": rank_spec(1, "cuda:1", model='Odd "name"\\x'),
        "worker": {
            "payload": {
                "role": "dataloader-worker",
                "worker_id": 0,
                "rank": 0,
                "runtime": cuda_runtime(UUIDS),
            }
        },
    }
    with FakeJob(tmp_path / "job", specs, root="launcher") as job:
        r0, r1 = job.pids["rank0"], job.pids["rank1"]
        fake_nvml.write(
            {
                "gpus": [
                    gpu(
                        0,
                        util_gpu=71,
                        memory_used_mib=5000,
                        processes=[
                            {"pid": r0, "used_mib": 4800, "sm_util": 70},
                            {"pid": job.pids["worker"], "used_mib": 150, "sm_util": 0},
                        ],
                    ),
                    # NVML cannot read this one's utilisation: the series is left out, not 0.
                    # Bytes that are no whole MiB: the metrics must carry the driver's exact bytes.
                    gpu(
                        1,
                        memory_used_bytes=USED_BYTES,
                        memory_total_bytes=TOTAL_BYTES,
                        not_supported=["utilization"],
                        processes=[{"pid": r1, "used_mib": 2900, "sm_util": 40}],
                    ),
                ]
            }
        )
        env = fake_nvml.env()
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
        with Sidecar(args, env=env, token=TOKEN) as sc:
            sc.wait_status(
                lambda d: (
                    len(d["processes"]) == 4
                    and all(
                        p["gpu"] and p["gpu"][0]["sm_util_pct"] for p in d["processes"] if p["role"] == "rank"
                    )
                    and "worker-cuda" in codes(d)
                ),
                what="the whole tree on two GPUs",
            )
            samples, doc = same_poll(sc)

            # Every metric of the contract, each with its label names (+ job_name on every sample).
            names = {n for n, _, _ in samples}
            assert names >= set(CONTRACT), sorted(set(CONTRACT) - names)
            for n, lbl, _ in samples:
                if n in CONTRACT:
                    assert set(lbl) == CONTRACT[n] | {"job_name"}, (n, lbl)
                assert lbl["job_name"] == "train-a", (n, lbl)

            # The values are the document's, series for series.
            got, want = sample_set(samples), expected_from_document(doc, "train-a")
            assert got == want, {"missing": want - got, "extra": got - want}

            # Spot checks against the scenario itself, so a shared misreading cannot pass.
            by = {(n, lbl.get("gpu"), lbl.get("role"), lbl.get("status")): v for n, lbl, v in samples}
            assert by[("dsh_gpu_utilization_percent", "0", None, None)] == 71
            assert ("dsh_gpu_utilization_percent", "1", None, None) not in by
            assert by[("dsh_gpu_memory_used_bytes", "1", None, None)] == USED_BYTES
            assert by[("dsh_gpu_memory_total_bytes", "1", None, None)] == TOTAL_BYTES
            assert doc["gpus"][1]["mem_used_mib"] * MIB == USED_BYTES  # the document's MiB are exact too
            assert by[("dsh_gpu_memory_total_bytes", "0", None, None)] == 81920 * MIB
            assert by[("dsh_process_gpu_memory_used_bytes", "0", "rank", None)] == 4800 * MIB
            assert by[("dsh_process_gpu_sm_utilization_percent", "1", "rank", None)] == 40
            assert by[("dsh_status", None, None, "GPU")] == 1 and by[("dsh_status", None, None, "CPU")] == 0
            ranks = sorted(
                (lbl["rank"], lbl["local_rank"], lbl["world_size"]) for n, lbl, _ in samples if n == "dsh_rank_info"
            )
            assert ranks == [("0", "0", "2"), ("1", "1", "2")]
            # No series names a pid but dsh_job_info, one per job: its root's.
            assert not [lbl for _, lbl, _ in samples if "pid" in lbl]
            (job_info,) = [lbl for n, lbl, _ in samples if n == "dsh_job_info"]
            assert job_info["root_pid"] == str(job.pid) and job_info["job_id"] == doc["job_id"]
            worker = [
                lbl
                for n, lbl, _ in samples
                if n == "dsh_process_gpu_memory_used_bytes" and lbl["role"] == "dataloader-worker"
            ]
            assert worker == [
                {
                    "job_id": doc["job_id"],
                    "role": "dataloader-worker",
                    "gpu": "0",
                    "rank": "0",
                    "job_name": "train-a",
                }
            ]
            models = {
                lbl["rank"]: (lbl["model"], lbl["device"]) for n, lbl, _ in samples if n == "dsh_model_info"
            }
            assert models == {"0": ("Net", "cuda:0"), "1": ('Odd "name"\\x', "cuda:1")}
            warnings = {(lbl["code"], lbl["severity"]) for n, lbl, _ in samples if n == "dsh_warning_active"}
            assert "worker-cuda" in {c for c, _ in warnings}
            assert warnings == {(w["code"], w["severity"]) for w in doc["warnings"]}
            (info,) = [lbl for n, lbl, _ in samples if n == "dsh_sidecar_info"]
            assert info["version"] == __version__

            # Counters only go up; forward calls advance with the job.
            calls = {lbl["rank"]: v for n, lbl, v in samples if n == "dsh_model_forward_calls_total"}

            def advanced():
                s = parse(sc.get("/metrics")[1])
                now = {lbl["rank"]: v for n, lbl, v in s if n == "dsh_model_forward_calls_total"}
                return s if all(now[rank] > v for rank, v in calls.items()) else None

            later = wait_for(advanced, 10, what="forward calls to advance")
            polls = [v for n, _, v in later if n == "dsh_sidecar_poll_duration_seconds_count"]
            first_polls = [v for n, _, v in samples if n == "dsh_sidecar_poll_duration_seconds_count"]
            assert polls[0] > first_polls[0] >= 1

            # The token rule of the HTTP routes covers /metrics.
            sc.token = None
            code, body = sc.get("/metrics")
            assert code == 401 and "token" in body["error"]
            sc.token = "wrong"
            assert sc.get("/metrics")[0] == 401
            sc.token = TOKEN


@pytest.mark.slow
def test_driver_down_counts_nvml_errors_and_exports_no_gpu_series(tmp_path, fake_nvml):
    # No scenario written: the simulated driver answers nvmlInit with DRIVER_NOT_LOADED.
    spec = rank_spec(0, "cuda:0")
    with FakeJob(tmp_path / "job", {"main": spec}) as job:
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.3"], env=fake_nvml.env()) as sc:
            sc.wait_status(lambda d: "nvml-unavailable" in codes(d), what="nvml-unavailable")

            def nvml_errors():
                s = parse(sc.get("/metrics")[1])
                (v,) = [
                    v for n, lbl, v in s if n == "dsh_sidecar_poll_errors_total" and lbl["source"] == "nvml"
                ]
                return s if v >= 2 else None

            samples = wait_for(nvml_errors, 10, what="NVML errors counted")
            names = {n for n, _, _ in samples}
            assert not names & {
                "dsh_gpu_utilization_percent",
                "dsh_gpu_memory_used_bytes",
                "dsh_process_gpu_memory_used_bytes",
            }
            assert all("job_name" not in lbl for _, lbl, _ in samples)  # no --job-name, no label
            errors = {lbl["source"]: v for n, lbl, v in samples if n == "dsh_sidecar_poll_errors_total"}
            assert set(errors) >= {"proctree", "probe", "nvml", "sysfs", "poll"} and errors["proctree"] == 0
            active = {lbl["code"] for n, lbl, _ in samples if n == "dsh_warning_active"}
            assert "nvml-unavailable" in active
            # Without a token /metrics is open, like the other routes.
            assert sc.get(f"{API}/status")[0] == 200


# ---------------------------------------------------------------------------------------------
# The collector alone, with a stand-in poller
# ---------------------------------------------------------------------------------------------
class StandInPoller:
    """What the collector reads from sidecar.poll.poller.Poller, settable by the test."""

    def __init__(self, doc: dict | None = None):
        self._lock = threading.Lock()
        self.latest = doc
        self.poll_count = 0
        self.poll_durations_s: list[float] = []
        self.poll_errors: dict[str, int] = {}

    def snapshot(self):
        with self._lock:
            return self.latest, (self.latest or {}).get("time_unix_s")

    def polled(self, *durations: float) -> None:
        with self._lock:
            for d in durations:
                self.poll_count += 1
                self.poll_durations_s.append(d)
                del self.poll_durations_s[:-1000]


def document(**over) -> dict:
    doc = {
        "time_unix_s": 1700000000.25,
        "status": "MIXED",
        "warnings": [{"code": "mixed-devices", "severity": "warning"}],
        "gpus": [
            {"index": 0, "uuid": None, "name": None, "util_pct": 0, "mem_used_mib": 0.5, "mem_total_mib": 1024}
        ],
        "processes": [
            {
                "pid": 7,
                "role": "main",
                "rank": None,
                "local_rank": None,
                "world_size": None,
                "gpu": [{"index": 0, "mem_used_mib": None, "sm_util_pct": None}],
                "models": [
                    {"name": "Net", "device": "cuda:0", "forward_calls": 5},
                    {"name": "Net", "device": "cpu", "forward_calls": 9},
                    {"name": "Net", "device": "cpu", "forward_calls": 1},
                ],
            }
        ],
    }
    doc.update(over)
    return doc


def scrape(poller, job_name=None):
    body, content_type = make_metrics(poller, job_name=job_name)()
    assert content_type.startswith("text/plain; version=0.0.4")
    return parse(body)


def histogram(samples) -> tuple[list[tuple[str, float]], float, float]:
    buckets = [(lbl["le"], v) for n, lbl, v in samples if n == "dsh_sidecar_poll_duration_seconds_bucket"]
    (count,) = [v for n, _, v in samples if n == "dsh_sidecar_poll_duration_seconds_count"]
    (total,) = [v for n, _, v in samples if n == "dsh_sidecar_poll_duration_seconds_sum"]
    return buckets, count, total


def test_poll_histogram_is_cumulative_and_scrapes_do_not_consume_it():
    poller = StandInPoller(document())
    render = make_metrics(poller)
    poller.polled(0.0004, 0.003, 0.003, 0.2, 7.0)
    buckets, count, total = histogram(parse(render()[0]))
    les = [le for le, _ in buckets]
    assert les == [*(str(float(b)) for b in POLL_BUCKETS_S), "+Inf"]
    cum = dict(buckets)
    assert (cum["0.0005"], cum["0.002"], cum["0.005"], cum["0.1"], cum["0.25"], cum["5.0"], cum["+Inf"]) == (
        1,
        1,
        3,
        3,
        4,
        4,
        5,
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert count == 5 and total == pytest.approx(7.2064)
    # A second collector (another registry) sees every poll too: nothing is drained.
    assert histogram(scrape(poller))[1] == 5
    assert len(poller.poll_durations_s) == 5
    # Only new polls are added; a scrape without new polls changes nothing.
    assert histogram(parse(render()[0]))[1] == 5
    poller.polled(0.001)
    buckets, count, _ = histogram(parse(render()[0]))
    assert count == 5 + 1 and dict(buckets)["0.001"] == 2
    # More polls than the poller keeps between two scrapes: the kept ones are counted.
    poller.polled(*([0.01] * 1500))
    assert histogram(parse(render()[0]))[1] == 6 + 1000


def test_concurrent_scrapes_count_each_poll_once():
    poller = StandInPoller(document())
    render = make_metrics(poller)

    def poll():
        for _ in range(600):
            poller.polled(0.002)
            time.sleep(0.0002)

    def scrapes():
        for _ in range(30):
            render()

    t = threading.Thread(target=poll)
    t.start()
    scrapers = [threading.Thread(target=scrapes) for _ in range(4)]
    for s in scrapers:
        s.start()
    for s in scrapers:
        s.join()
    t.join()
    buckets, count, total = histogram(parse(render()[0]))
    assert count == poller.poll_count == 600 and dict(buckets)["0.002"] == 600
    assert total == pytest.approx(1.2)


def test_repeated_model_names_none_values_and_job_name():
    poller = StandInPoller(document())
    poller.poll_errors = {"nvml": 3, "custom": 1}
    samples = scrape(poller, job_name="job-b")
    assert all(lbl.get("job_name") == "job-b" for _, lbl, _ in samples)
    models = sorted((lbl["model"], lbl["device"]) for n, lbl, _ in samples if n == "dsh_model_info")
    assert models == [("Net", "cuda:0"), ("Net#2", "cpu"), ("Net#3", "cpu")]
    calls = {lbl["model"]: v for n, lbl, v in samples if n == "dsh_model_forward_calls_total"}
    assert calls == {"Net": 5, "Net#2": 9, "Net#3": 1}
    (g,) = [lbl for n, lbl, _ in samples if n == "dsh_gpu_memory_total_bytes"]
    assert g == {"gpu": "0", "uuid": "", "name": "", "vendor": "", "job_name": "job-b"}
    assert [v for n, _, v in samples if n == "dsh_gpu_memory_used_bytes"] == [0.5 * MIB]
    assert [v for n, _, v in samples if n == "dsh_gpu_utilization_percent"] == [0]  # 0 is a value
    assert not [n for n, _, _ in samples if n.startswith("dsh_process_gpu_")]  # None: no series
    assert [lbl for n, lbl, _ in samples if n == "dsh_rank_info"] == []
    errors = {lbl["source"]: v for n, lbl, v in samples if n == "dsh_sidecar_poll_errors_total"}
    assert errors == {"proctree": 0, "probe": 0, "nvml": 3, "sysfs": 0, "poll": 0, "custom": 1}
    status = {lbl["status"]: v for n, lbl, v in samples if n == "dsh_status"}
    assert status == {"GPU": 0, "CPU": 0, "MIXED": 1, "UNKNOWN": 0}
    (stamp,) = [v for n, _, v in samples if n == "dsh_sidecar_last_poll_timestamp_seconds"]
    assert stamp == 1700000000.25
    # An empty job name is no job name.
    assert all("job_name" not in lbl for _, lbl, _ in scrape(poller, job_name=""))


def test_a_repeated_warning_or_process_gpu_is_one_series():
    doc = document(warnings=[{"code": "idle-gpu", "severity": "warning"}] * 2)
    doc["processes"][0]["gpu"] = [{"index": 0, "mem_used_mib": 10, "sm_util_pct": 1}] * 2
    samples = scrape(StandInPoller(doc))
    assert [lbl["code"] for n, lbl, _ in samples if n == "dsh_warning_active"] == ["idle-gpu"]
    assert len([1 for n, _, _ in samples if n == "dsh_process_gpu_memory_used_bytes"]) == 1


def test_before_the_first_poll_only_the_sidecar_itself():
    samples = scrape(StandInPoller(None))
    names = {n for n, _, _ in samples}
    assert names == {
        "dsh_sidecar_info",
        "dsh_sidecar_poll_duration_seconds_bucket",
        "dsh_sidecar_poll_duration_seconds_sum",
        "dsh_sidecar_poll_duration_seconds_count",
        "dsh_sidecar_poll_errors_total",
    }


def test_the_collector_never_polls():
    class Tripwire(StandInPoller):
        def poll_once(self):  # pragma: no cover - the assertion is that this never runs
            raise AssertionError("a scrape triggered a poll")

    p = Tripwire(document())
    SidecarCollector(p)  # registering describes nothing and reads nothing
    for _ in range(3):
        scrape(p)


def test_docs_list_every_exported_metric():
    text = (REPO / "docs" / "metrics.md").read_text()
    documented = {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"`(dsh_[a-z_]+)", text)}
    proc = dict(
        document()["processes"][0],
        role="rank",
        rank=0,
        gpu=[{"index": 0, "mem_used_mib": 1, "sm_util_pct": 2}],
        step_breakdown={"steps": 40, "data_wait_fraction": 0.5, "forward_fraction": 0.2, "backward_fraction": 0.1},
    )
    gpu = dict(document()["gpus"][0], clock_event_reasons=[], **{key: 1 for _, _, key, _ in GPU_EFFICIENCY_GAUGES})
    waits = [{"rank": 0, "pid": 7, "collective_wait_fraction": 0.2}]
    exported = {n for n, _, _ in scrape(StandInPoller(document(processes=[proc], gpus=[gpu], rank_waits=waits)))}
    families = {re.sub(r"_(bucket|sum|count)$", "", n) if "poll_duration" in n else n for n in exported}
    assert families <= documented, sorted(families - documented)
    assert documented <= families, sorted(documented - families)


def test_efficiency_series_carry_the_documents_values_and_never_invent_a_zero():
    gpu = dict(
        document()["gpus"][0],
        sm_clock_mhz=1410,
        power_w=312.5,
        power_limit_w=700.0,
        temperature_c=83.0,
        pcie_link_gen=1,
        pcie_link_width=4,
        sm_activity_fraction=0.12,
        sm_occupancy_fraction=None,  # GPM unsupported: no series, not 0
        tensor_activity_fraction=None,
        dram_activity_fraction=None,
        clock_event_reasons=["sw_power_cap", "hw_thermal_slowdown"],
    )
    proc = dict(document()["processes"][0], step_breakdown={"data_wait_fraction": 0.625, "optimizer_fraction": None})
    samples = scrape(StandInPoller(document(gpus=[gpu], processes=[proc])))
    by_name = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    assert [v for _, v in by_name["dsh_gpu_sm_clock_hz"]] == [1.41e9]
    assert [v for _, v in by_name["dsh_gpu_power_watts"]] == [312.5]
    assert [v for _, v in by_name["dsh_gpu_temperature_celsius"]] == [83.0]
    assert [v for _, v in by_name["dsh_gpu_pcie_link_generation"]] == [1.0]
    assert [v for _, v in by_name["dsh_gpu_sm_activity_ratio"]] == [0.12]
    assert "dsh_gpu_sm_occupancy_ratio" not in by_name and "dsh_gpu_tensor_activity_ratio" not in by_name
    active = {lbl["reason"]: v for lbl, v in by_name["dsh_gpu_clock_event_active"]}
    assert active["hw_thermal_slowdown"] == 1 and active["sw_power_cap"] == 1 and active["hw_slowdown"] == 0
    assert len(active) == 11
    phases = {lbl["phase"]: v for lbl, v in by_name["dsh_process_step_fraction"]}
    assert phases == {"data_wait": 0.625}
    # A driver that cannot say why clocks are held (null) exports no reason series at all.
    gpu["clock_event_reasons"] = None
    assert not [n for n, _, _ in scrape(StandInPoller(document(gpus=[gpu]))) if n == "dsh_gpu_clock_event_active"]
