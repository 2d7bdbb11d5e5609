"""Discovery keeps an exited job listed for --history seconds (an hour in deploy/'s systemd unit); its
last verdict must not keep being exported, or DshModelOnCpu / DshJobError fire for a finished job."""

from __future__ import annotations

from typing import Any

from sidecar.serve.metrics import make_metrics


def _doc(job: str, alive: bool) -> dict[str, Any]:
    return {
        "job_id": job,
        "time_unix_s": 1.0,
        "target": {"pid": int(job.split("-")[0]), "alive": alive},
        "status": "CPU",
        "warnings": [{"code": "cpu-build", "severity": "error"}],
        "processes": [],
        "gpus": [],
    }


class _Discovery:
    poll_count = 1
    poll_durations_s: list[float] = []
    poll_errors: dict[str, int] = {}

    def snapshot(self) -> tuple[dict[str, Any], float]:
        return _doc("20-2", True), 1.0

    def documents(self) -> list[dict[str, Any]]:
        return [_doc("20-2", True), _doc("10-1", False)]


def test_an_exited_job_has_no_verdict_series_in_discovery() -> None:
    text = make_metrics(_Discovery())()[0].decode()
    assert 'dsh_status{job_id="20-2",status="CPU"} 1.0' in text
    assert 'dsh_warning_active{code="cpu-build",job_id="20-2",severity="error"} 1.0' in text
    assert 'job_id="10-1"' not in text, text
