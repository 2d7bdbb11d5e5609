"""One discovery sidecar per node feeds Prometheus (deploy/): on a node that runs no job right now,
its GPUs are still exported, so Grafana's GPU panels and the temperature and throttling alerts do
not go blank between jobs (found by a new-user review: no dsh_gpu_* series at all without a job)."""

from __future__ import annotations

from tests.fakenvml import gpu


def test_a_node_without_jobs_still_exports_its_gpus(fake_nvml, tmp_path):
    # A GPU process that is no job of this machine's (no such pid here): counted as another's.
    fake_nvml.write(
        {
            "gpus": [
                gpu(0, util_gpu=37, memory_used_mib=100, processes=[{"pid": 4_000_000, "used_mib": 100}]),
                gpu(1, util_gpu=0),
            ]
        }
    )
    out = fake_nvml.run(
        f"""
        import json
        from sidecar.poll.discovery import JobsPoller
        from sidecar.serve.metrics import make_metrics
        p = JobsPoller(shm_dir={str(tmp_path)!r}, system_gpus_fn=list)  # an empty /dev/shm: no probe
        p.poll_once()
        gpus = p.gpus_document()
        text = make_metrics(p)()[0].decode()
        p.stop()
        print(json.dumps({{"jobs": p.jobs_document()["jobs"], "gpus": gpus, "text": text}}))
        """
    )
    assert out["jobs"] == []
    lines = out["text"].splitlines()
    util = sorted(line for line in lines if line.startswith("dsh_gpu_utilization_percent{"))
    assert len(util) == 2 and util[0].endswith(" 37.0") and 'gpu="0"' in util[0], util
    assert any(line.startswith("dsh_gpu_memory_total_bytes{") for line in lines)
    assert not any("job_id=" in line for line in lines)  # no job, no per-job series
    (g0, g1) = out["gpus"]["gpus"]
    assert g0["other_process_count"] == 1 and g1["other_process_count"] == 0 and g0["framework_index"] is None
