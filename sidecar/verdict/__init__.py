"""The verdict: facts in, verdict out. Pure: no I/O, no clock, no globals.

`decide(facts)` answers "where does this job's compute go" with a status (GPU, CPU, MIXED,
UNKNOWN), a message, and the warnings (`Finding`s) whose conditions hold in this poll. Messages and
hints are references into the one catalogue (sidecar/catalogue.py, static/i18n/*.json), never text:
the document renders them in English, the page and the plugin in the user's language. Each warning
is one rule in `RULES` (rules.py); tests drive them with tables of facts. Hysteresis (so no warning
flaps between two polls) is a separate pure step, `settle` (settle.py), that carries a small state
from one poll to the next.

    facts.py   the facts, the value types (Finding, Verdict) and device helpers
    rules.py   the rules
    status.py  status and message, decide()
    settle.py  hysteresis
"""

from sidecar.verdict.facts import (
    ACCELERATOR_TYPES,
    NVIDIA_VENDOR,
    SEVERITY_ORDER,
    STATUSES,
    Facts,
    Finding,
    GpuFacts,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    Rules,
    SystemGpuFacts,
    Verdict,
    device_type,
    map_cuda_index,
    model_nvml_index,
)
from sidecar.verdict.rules import RULES, MemoryGrowth, Rule, cuda_unavailable_reason, memory_growth
from sidecar.verdict.settle import HysteresisState, settle
from sidecar.verdict.status import (
    StatusMessage,
    candidate_warnings,
    decide,
    primary_model_gpu_index,
    status_and_message,
)

__all__ = [
    "ACCELERATOR_TYPES",
    "NVIDIA_VENDOR",
    "RULES",
    "SEVERITY_ORDER",
    "STATUSES",
    "Facts",
    "Finding",
    "GpuFacts",
    "HysteresisState",
    "MemoryGrowth",
    "ModelFacts",
    "ProcGpu",
    "ProcessFacts",
    "RecentSample",
    "Rule",
    "Rules",
    "StatusMessage",
    "SystemGpuFacts",
    "Verdict",
    "candidate_warnings",
    "cuda_unavailable_reason",
    "decide",
    "device_type",
    "map_cuda_index",
    "memory_growth",
    "model_nvml_index",
    "primary_model_gpu_index",
    "settle",
    "status_and_message",
]
