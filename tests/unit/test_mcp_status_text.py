"""gpu_status's answer line (the first thing the agent reads) matches the verdict for devices other
than a plain cuda:N or cpu: a parameter-free model, a model split over devices, a MIXED job."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.mcp_server import gpu_status


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
