"""gpu_status's answer line (the first thing the agent reads) matches the verdict for devices other
than a plain cuda:N or cpu: a parameter-free model, a model split over devices, a MIXED job."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.serve.mcp_server import gpu_status


class _Backend:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def status(self, job: str | None) -> dict[str, Any]:
        return self.doc


def _doc(
    status: str, message: str, model_device: str | None, input_device: str | None = "cpu"
) -> dict[str, Any]:
    return {
        "job_id": "10-20",
        "target": {"pid": 10, "alive": True},
        "status": status,
        "message": message,
        "model_device": model_device,
        "input_device": input_device,
        "model_gpu_index": None,
        "warnings": [],
        "gpus": [],
        "processes": [],
        "processes_omitted": 0,
    }


@pytest.mark.parametrize(
    ("status", "device", "answer", "on_gpu"),
    [
        ("UNKNOWN", "no-parameters", "Unknown:", None),
        ("MIXED", "mixed", "Partly:", None),
        ("MIXED", "cpu", "Partly:", False),  # two models, the first on the CPU, another on cuda:0
        ("MIXED", "cuda:0", "Partly:", True),  # two models, the first on cuda:0, another on the CPU
        ("CPU", "cpu", "No: the model is on cpu", False),
        ("GPU", "cuda:0", "Yes: the model is on cuda:0", True),
    ],
)
def test_answer_line_agrees_with_the_verdict(
    status: str, device: str, answer: str, on_gpu: bool | None
) -> None:
    out, text = gpu_status(_Backend(_doc(status, "verdict", device)), {})
    assert text.splitlines()[0].startswith(answer), text
    assert out["model_on_gpu"] is on_gpu
    assert "on no-parameters" not in text and "on mixed" not in text


class _HistoryBackend:
    def __init__(self, processes: list[dict[str, Any]]) -> None:
        self.processes = processes

    def history(self, job: str | None, since: float | None) -> dict[str, Any]:
        import time

        now = time.time()
        gpu = {"index": 0, "util_pct": 80, "mem_used_mib": 3000}
        samples = [{"time_unix_s": now - i, "gpus": [gpu], "processes": self.processes} for i in (2, 1, 0)]
        return {"job_id": "10-20", "interval_s": 1.0, "samples": samples, "events": [], "events_omitted": 0}


def test_history_of_a_job_without_gpu_work_does_not_pass_other_processes_use_as_its_own() -> None:
    """Discovery: a CPU job's history still carries every GPU's figures (another job's 80 %); the text
    must not read as this job's GPU use."""
    from sidecar.serve.mcp_server import gpu_history

    _, text = gpu_history(_HistoryBackend([]), {"seconds": 60})
    assert "No process of this job used a GPU" in text, text
    _, text = gpu_history(
        _HistoryBackend([{"pid": 10, "gpu_mem_mib": 2048, "sm_util_pct": 70}]), {"seconds": 60}
    )
    assert "No process of this job" not in text and "Whole-GPU figures" in text, text
