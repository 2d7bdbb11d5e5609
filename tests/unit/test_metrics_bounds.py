"""What bounds /metrics' series, series by series: processes folded by role and rank (no pid),
model names clipped, per-job caps on what a process chooses (roles, ranks, model names), and the
jobs cap (the oldest live jobs, shared out among users). The churn over a real sidecar is
tests/stress/test_metrics_cardinality.py."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from sidecar.documents import bounds
from sidecar.serve.metrics import JOB_INFO_LABELS, make_metrics, series_bound


def _proc(pid: int, role: str, rank: int | None, **over: Any) -> dict[str, Any]:
    return {
        "pid": pid,
        "role": role,
        "rank": rank,
        "local_rank": rank,
        "world_size": 2,
        "gpu": [],
        "models": [],
        **over,
    }


NOW_S = 100.0  # the poll's time: jobs that started at 1-40 s have run long enough for series


def _doc(job: str, processes: list[dict], start_s: float = 1.0, name: str = "python") -> dict[str, Any]:
    return {
        "job_id": job,
        "time_unix_s": NOW_S,
        "target": {"pid": int(job.split("-")[0]), "alive": True, "name": name, "create_time_unix_s": start_s},
        "status": "GPU",
        "warnings": [],
        "processes": processes,
        "gpus": [],
    }


class _Poller:
    poll_count = 0
    poll_durations_s: list[float] = []
    poll_errors: dict[str, int] = {}

    def __init__(self, docs: list[dict[str, Any]], jobs: list[dict[str, Any]] | None = None):
        self.docs = [{**d, "jobs": jobs} for d in docs]

    def snapshot(self):
        return self.docs[0], 5.0

    def documents(self):
        return self.docs


def _samples(poller: _Poller, max_jobs: int = bounds.MAX_METRIC_JOBS, **options: Any) -> list[tuple[str, dict, float]]:
    text = make_metrics(poller, max_jobs=max_jobs, **options)()[0].decode()
    return [
        (s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples
    ]


def test_processes_of_one_role_and_rank_are_one_series_without_pids():
    def worker(pid: int, mib: float, wait: float) -> dict:
        return _proc(
            pid,
            "dataloader-worker",
            0,
            gpu=[{"index": 0, "mem_used_mib": mib, "sm_util_pct": 10}],
            step_breakdown={"data_wait_fraction": wait},
        )

    procs = [
        _proc(10, "rank", 0, models=[{"name": "Net", "device": "cuda:0", "forward_calls": 5}]),
        _proc(11, "rank", 0, models=[{"name": "Net", "device": "cpu", "forward_calls": 7}]),
        worker(12, 100, 0.2),
        worker(13, 300, 0.6),
    ]
    samples = _samples(_Poller([_doc("10-1", procs)], [{"id": "10-1", "uid": 1000, "user": "ann"}]))
    assert not [lbl for _, lbl, _ in samples if "pid" in lbl]
    by = {n: [(lbl, v) for m, lbl, v in samples if m == n] for n, _, _ in samples}
    ((mem_lbl, mem),) = by["dsh_process_gpu_memory_used_bytes"]
    assert mem == 400 * 2**20 and mem_lbl == {
        "job_id": "10-1",
        "role": "dataloader-worker",
        "gpu": "0",
        "rank": "0",
    }
    assert [v for _, v in by["dsh_process_gpu_sm_utilization_percent"]] == [20]
    ((_, wait),) = [(lbl, v) for lbl, v in by["dsh_process_step_fraction"] if lbl["phase"] == "data_wait"]
    assert wait == 0.4  # the mean of the two workers' shares: a share stays 0-1
    assert [v for _, v in by["dsh_model_forward_calls_total"]] == [12]
    assert [lbl["device"] for lbl, _ in by["dsh_model_info"]] == ["cuda:0"]  # one per (model, rank)
    assert len(by["dsh_rank_info"]) == 1
    no_placement = dict.fromkeys(JOB_INFO_LABELS[4:], "")  # no distributed run, no pod: empty labels
    assert by["dsh_job_info"] == [
        ({"job_id": "10-1", "root_pid": "10", "user": "ann", "process": "python", **no_placement}, 1.0)
    ]


def test_a_distributed_run_is_described_once_per_job_and_keyed_by_job_id_and_rank_elsewhere():
    """A node of a 64-rank run in a pod: its placement labels are on one dsh_job_info series; every
    other per-job series has the same keys as without them, within the same bound."""
    gpus = 8
    procs = [
        _proc(100 + r, "rank", 8 + r, gpu=[{"index": r, "mem_used_mib": 10, "sm_util_pct": 5}], world_size=64)
        for r in range(gpus)
    ]
    procs += [_proc(200 + r, "dataloader-worker", 8 + r) for r in range(gpus)]
    doc = _doc("10-1", procs)
    doc["distributed"] = {
        "job_key": "exp-42", "job_key_source": "torchelastic", "world_size": 64, "node_rank": 1,
        "restart_count": 0, "hostname": "trainer-1", "ranks": list(range(8, 16)), "uid": 1000,
    }
    doc["pod"] = {"namespace": "research", "pod": "trainer-1", "uid": "u", "container": "pytorch", "source": "kubelet"}
    plain = _samples(_Poller([_doc("10-1", procs)]))
    samples = _samples(_Poller([doc]))
    (info,) = [lbl for n, lbl, _ in samples if n == "dsh_job_info"]
    assert info == {
        "job_id": "10-1", "root_pid": "10", "user": "", "process": "python",
        "job_key": "exp-42", "job_key_source": "torchelastic", "world_size": "64", "node_rank": "1",
        "hostname": "trainer-1", "namespace": "research", "pod": "trainer-1", "container": "pytorch",
        "uid": "1000",
        "pod_source": "kubelet", "slurm_job": "",
    }
    placement = set(JOB_INFO_LABELS[4:]) - {"world_size"}  # dsh_rank_info has it too (one per rank)
    assert not [(n, lbl) for n, lbl, _ in samples if n != "dsh_job_info" and placement & set(lbl)]
    assert len(samples) == len(plain) <= series_bound(gpus, 1)


def test_what_a_process_chooses_is_capped_per_job():
    long_name = "M" * 500
    procs = [
        _proc(100 + i, f"role{i}", i, gpu=[{"index": 0, "mem_used_mib": 1, "sm_util_pct": 1}])
        for i in range(40)
    ]
    procs.append(
        _proc(
            99,
            "main",
            None,
            models=[{"name": long_name, "forward_calls": 1}, {"name": long_name, "forward_calls": 2}]
            + [{"name": f"m{i}", "forward_calls": 1} for i in range(40)],
        )
    )
    procs[0]["role"] = "main"
    procs[0]["rank"] = None  # the models' process shares its (role, rank) with an exported one
    samples = _samples(_Poller([_doc("10-1", procs)]))
    keys = {(lbl["role"], lbl["rank"]) for n, lbl, _ in samples if n == "dsh_process_gpu_memory_used_bytes"}
    assert len(keys) == bounds.MAX_METRIC_PROCESS_KEYS
    models = [lbl["model"] for n, lbl, _ in samples if n == "dsh_model_forward_calls_total"]
    assert len(models) == bounds.MAX_METRIC_MODELS
    assert all(len(m) <= bounds.MAX_LABEL_CHARS for m in models)
    # The name registered twice keeps its own series, clipped to leave room for "#2".
    assert models[1].endswith("#2") and models[0] != models[1] and models[0][:10] == models[1][:10]


def test_the_oldest_live_jobs_are_exported_shared_out_among_users():
    # ann has three old jobs, bob one new job; the cap is 2: ann's oldest and bob's.
    docs = [
        _doc("30-1", [], start_s=30.0),
        _doc("10-1", [], start_s=10.0),
        _doc("20-1", [], start_s=20.0),
        _doc("40-1", [], start_s=40.0),
    ]
    jobs = [{"id": j, "uid": 1000, "user": "ann"} for j in ("10-1", "20-1", "30-1")]
    jobs.append({"id": "40-1", "uid": 1001, "user": "bob"})
    samples = _samples(_Poller(docs, jobs), max_jobs=2)
    exported = {lbl["job_id"] for n, lbl, _ in samples if "job_id" in lbl}
    assert exported == {"10-1", "40-1"}
    assert [v for n, _, v in samples if n == "dsh_jobs_omitted"] == [2]


def test_each_ranks_collective_wait_is_one_series_of_job_and_rank():
    waits = [
        {"rank": r, "pid": 10 + r, "steps": 40, "collective_wait_fraction": 0.0 if r == 3 else 0.2}
        for r in range(bounds.MAX_METRIC_PROCESS_KEYS + 4)  # a job claiming more ranks than the cap
    ]
    doc = {**_doc("7-1", [_proc(10 + r, "rank", r) for r in range(4)]), "rank_waits": waits}
    got = [(labels, v) for name, labels, v in _samples(_Poller([doc])) if name == "dsh_rank_collective_wait_fraction"]
    assert len(got) == bounds.MAX_METRIC_PROCESS_KEYS
    assert all(set(labels) == {"job_id", "rank"} for labels, _ in got)
    assert {labels["rank"]: v for labels, v in got}["3"] == 0.0
    assert {labels["rank"]: v for labels, v in got}["0"] == 0.2
    assert not any(name == "dsh_rank_collective_wait_fraction" for name, _, _ in _samples(_Poller([_doc("8-1", [])])))


def test_each_ranks_backward_is_exported_alone_on_its_node_too():
    """A node with one rank of a multi-node job has no collective wait of its own to say (no other
    rank here), but its backward share is what a query across nodes compares."""
    lone = _proc(10, "rank", 5, step_breakdown={"backward_fraction": 0.25})
    worker = _proc(11, "dataloader-worker", None, step_breakdown={"backward_fraction": 0.9})
    got = [(labels, v) for name, labels, v in _samples(_Poller([_doc("7-1", [lone, worker])])) if name == "dsh_rank_backward_fraction"]
    assert got == [({"job_id": "7-1", "rank": "5"}, 0.25)]


def test_a_job_gets_series_once_it_has_run_the_minimum_age():
    """A stream of short jobs adds no series: a job younger than --metrics-min-job-age has none yet
    (nor is it counted as omitted), and gets them once it is old enough."""
    young = _doc("50-1", [_proc(50, "rank", 0)], start_s=NOW_S - bounds.METRICS_MIN_JOB_AGE_S + 1)
    old = _doc("10-1", [_proc(10, "rank", 0)], start_s=1.0)
    jobs = [{"id": "50-1", "uid": 1000, "user": "ann"}, {"id": "10-1", "uid": 1000, "user": "ann"}]
    samples = _samples(_Poller([young, old], jobs))
    assert {lbl.get("job_id") for _, lbl, _ in samples if "job_id" in lbl} == {"10-1"}
    assert [v for n, _, v in samples if n == "dsh_jobs_omitted"] == [0]
    samples = _samples(_Poller([young, old], jobs), min_job_age_s=0)
    assert {lbl.get("job_id") for _, lbl, _ in samples if "job_id" in lbl} == {"10-1", "50-1"}


def test_per_user_aggregates_have_no_job_id_and_do_not_grow_with_jobs():
    def gpu_proc(pid: int, mib: float) -> dict:
        return _proc(pid, "rank", 0, gpu=[{"index": 0, "mem_used_mib": mib, "sm_util_pct": 10}],
                     models=[{"name": "Net", "device": "cuda:0", "forward_calls": 5}])

    def run(n_jobs: int) -> list[tuple[str, dict, float]]:
        docs = [_doc(f"{10 + i}-1", [gpu_proc(10 + i, 100)], start_s=1.0 + i) for i in range(n_jobs)]
        jobs = [{"id": f"{10 + i}-1", "uid": 1000 + i % 2, "user": "ann" if i % 2 == 0 else "bob"} for i in range(n_jobs)]
        return _samples(_Poller(docs, jobs), per_user=True)

    few, many = run(2), run(40)
    assert not [lbl for _, lbl, _ in many if "job_id" in lbl]
    assert {(n, tuple(sorted(lbl.items()))) for n, lbl, _ in few} == {
        (n, tuple(sorted(lbl.items()))) for n, lbl, _ in many
    }  # the same series for 2 jobs as for 40
    names = {n for n, _, _ in many}
    assert "dsh_job_info" not in names and "dsh_model_forward_calls_total" not in names
    mem = {lbl["user"]: v for n, lbl, v in many if n == "dsh_process_gpu_memory_used_bytes"}
    assert mem == {"ann": 20 * 100 * 1048576, "bob": 20 * 100 * 1048576}
    gpu_jobs = {lbl["user"]: v for n, lbl, v in many if n == "dsh_status" and lbl["status"] == "GPU"}
    assert gpu_jobs == {"ann": 20, "bob": 20}  # the user's jobs with that verdict


def test_every_metric_the_cluster_view_queries_is_one_the_exporter_writes():
    """The cluster view reads back through Prometheus what every node's sidecar exports: each name
    its queries use must be a family a scrape holds (both take it from sidecar/common/metric_names)."""
    import re

    from sidecar.sources.prometheus_queries import CLUSTER_QUERIES

    gpu0 = {"index": 0, "uuid": "GPU-0", "name": "H100", "util_pct": 50, "mem_used_mib": 10, "mem_total_mib": 80,
            "sm_clock_mhz": 1980, "sm_activity_fraction": 0.5, "clock_event_reasons": []}
    rank = _proc(10, "rank", 0, gpu=[{"index": 0, "mem_used_mib": 10, "sm_util_pct": 5}],
                 models=[{"name": "Net", "device": "cuda:0", "forward_calls": 5}],
                 step_breakdown={"forward_fraction": 0.5, "backward_fraction": 0.3, "steps": 40})
    doc = {**_doc("10-1", [rank]), "gpus": [gpu0]}
    exported = {n for n, _, _ in _samples(_Poller([doc], [{"id": "10-1", "uid": 0, "user": "root"}]))}
    queried = {m for promql in CLUSTER_QUERIES.values() for m in re.findall(r"\bdsh_\w+", promql)}
    assert queried and queried <= exported, sorted(queried - exported)
