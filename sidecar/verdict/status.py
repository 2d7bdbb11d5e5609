"""The status (GPU, CPU, MIXED, UNKNOWN) and its message, and `decide`, the verdict's entry point."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from operator import attrgetter

from probe_wire.records import RuntimeRecord
from sidecar.common.catalogue import Param, Ref, ref
from sidecar.verdict.facts import (
    ACCELERATOR_TYPES,
    GPU_DEVICE_TYPES,
    SEVERITY_ORDER,
    Facts,
    Finding,
    ModelFacts,
    ProcessFacts,
    Verdict,
    all_models,
    cpu_only_build,
    gpu_by_index,
    is_xpu_build,
    model_gpu_index,
    pct,
)
from sidecar.verdict.memory_growth import rule_memory_growth
from sidecar.verdict.rules import (
    RULES,
    cuda_unavailable_reason,
    probe_present,
    rule_idle_gpu,
    rule_no_probe,
)
from sidecar.verdict.stragglers import rule_straggler_rank

# What `from sidecar.verdict import ...` gives (sidecar/verdict/__init__.py).
__all__ = ["StatusMessage", "candidate_warnings", "decide", "primary_model_gpu_index"]
__all__ += [
    "AGE_RULES",
    "RECENT_RULES",
    "VerdictMemo",
    "cuda_availability",
    "runs_not_recorded",
    "status_and_message",
]


@dataclass(frozen=True)
class StatusMessage:
    status: str  # GPU | CPU | MIXED | UNKNOWN
    message: Ref
    model_device: str | None
    input_device: str | None
    model_gpu_index: int | None  # GpuFacts.index of the GPU the (first) model is on


# The GPU message, by whether the GPU's name and its utilisation are known.
GPU_MESSAGES = {
    (False, False): "message.gpu",
    (True, False): "message.gpu.named",
    (False, True): "message.gpu.busy",
    (True, True): "message.gpu.named.busy",
}


def primary_model_gpu_index(f: Facts) -> int | None:
    """GpuFacts.index of the GPU the first model with a device is on (None when it is on no GPU
    the sidecar reads: neither `cuda` nor `xpu`, or one that cannot be told)."""
    first = next(((p, m) for p, m in all_models(f) if m.types), None)
    return _cuda_gpu_index(f, *first) if first else None


def _cuda_gpu_index(f: Facts, p: ProcessFacts, m: ModelFacts) -> int | None:
    return None if m.types.isdisjoint(GPU_DEVICE_TYPES) else model_gpu_index(f, p, m)


def status_and_message(f: Facts) -> StatusMessage:
    models = all_models(f)
    input_device = next((m.input_device for _, m in models if m.input_device), None)
    typed = [(p, m) for p, m in models if m.types]
    if typed:
        return _model_status(f, typed, input_device)
    model_device = models[0][1].device if models else None
    gpu_procs = [p for p in f.processes if p.uses_gpu]
    if gpu_procs:
        message = ref("message.gpu-unregistered", pids=", ".join(f"{p.pid}" for p in gpu_procs[:4]))
        gpu_index = next((g.index for p in gpu_procs for g in p.gpu), None)
        return StatusMessage("GPU", message, None, input_device, gpu_index)
    if not f.target_alive and not f.processes:
        return StatusMessage("UNKNOWN", ref("message.exited-unknown", pid=f.target_pid), None, None, None)
    message = ref("message.not-enough", missing=_missing_evidence(f, bool(models)))
    return StatusMessage("UNKNOWN", message, model_device, input_device, None)


def _model_status(
    f: Facts, typed: list[tuple[ProcessFacts, ModelFacts]], input_device: str | None
) -> StatusMessage:
    """The status when some model has a device."""
    types = set().union(*(m.types for _, m in typed))
    names = ", ".join(sorted({m.name for _, m in typed}))
    first_p, first_m = typed[0]  # the first model with a device (primary_model_gpu_index's)
    model_device = first_m.device
    gpu_index = _cuda_gpu_index(f, first_p, first_m)
    if len(types) > 1:  # a model of several types makes their union several too
        devs = ", ".join(sorted({d for _, m in typed for d in (m.devices or (m.device,)) if d}))
        message = ref("message.mixed", model=names, devices=devs)
        return StatusMessage("MIXED", message, model_device, input_device, gpu_index)
    (kind,) = types
    if kind in ACCELERATOR_TYPES:
        g = gpu_by_index(f, gpu_index)
        params: dict[str, Param] = {"model": names, "device": model_device or ""}
        if g and g.name:
            params["gpu"] = g.name
        if g and g.util is not None:
            params["util"] = pct(g.util)
        message = Ref(GPU_MESSAGES["gpu" in params, "util" in params], params)
        return StatusMessage("GPU", message, model_device, input_device, gpu_index)
    if kind == "cpu":
        message = ref("message.cpu", model=names, reason=_cpu_reason(f, [p for p, _ in typed]))
        return StatusMessage("CPU", message, model_device, input_device, None)
    message = ref("message.no-compute", model=names, kind=kind)
    return StatusMessage("UNKNOWN", message, model_device, input_device, None)


def _missing_evidence(f: Facts, has_models: bool) -> Ref:
    """Why the status is UNKNOWN when no model has a device."""
    if any(p.has_probe for p in f.processes):
        if has_models:
            return ref("reason.missing.no-parameters")
        collected = sorted({n for p in f.processes for n in p.collected_models})
        if collected:
            return ref("reason.missing.collected", model=", ".join(collected))
        return ref("reason.missing.no-model")
    if probe_present(f):
        return ref("reason.missing.probe-unreadable")
    return ref("reason.missing.no-probe" if f.nvml_ok else "reason.missing.no-probe-nvml")


def _cpu_reason(f: Facts, procs: list[ProcessFacts]) -> Ref:
    rt = next((p.runtime for p in procs if p.runtime is not None), None)
    if rt is None:
        return ref("reason.cpu.no-accelerator")
    if cpu_only_build(rt):
        return ref("reason.cpu.cpu-build", torch=str(rt.torch))
    if rt.cuda_build is None and rt.hip_build is None and is_xpu_build(rt):  # torch for Intel GPUs
        return ref("reason.cpu.not-moved" if rt.xpu_available else "reason.cpu.no-accelerator")
    if rt.cuda_available is False:
        reason, _ = cuda_unavailable_reason(f, rt)
        return ref("reason.cpu.cuda-unavailable", reason=reason)
    if rt.cuda_available is True:
        return ref("reason.cpu.not-moved")
    return ref("reason.cpu.no-accelerator")


def cuda_availability(rt: RuntimeRecord | None) -> Ref | None:
    """Whether CUDA is available to the job's torch, as the one text --once, the page and the plugin
    show (the document's runtime ``cuda_ref``); None where no probe told of a torch. Unknown is said
    as such: the probe answers only what it can learn without initialising CUDA (probe/facts.py), and
    until the script itself asks or uses CUDA that may be nothing."""
    if rt is None or not rt.torch:
        return None
    if rt.cuda_available is True:
        return ref("summary.cudaYes", n=rt.device_count if rt.device_count is not None else "—")
    if rt.cuda_available is False:
        return ref("summary.cudaNo")
    return ref("summary.cudaUnknown")


def candidate_warnings(f: Facts) -> list[Finding]:
    return [w for rule in RULES for w in rule(f)]


# The rules that read Facts.recent (the history window, new at every poll), and those that read
# Facts.target_age_s (the job's age, new at every poll too): asked at every poll. Every other rule,
# and the status and message, depend only on the rest of the facts (tests/unit/test_verdict_memo.py
# holds them to that with facts whose `recent` and `target_age_s` cannot be read).
RECENT_RULES = frozenset({rule_idle_gpu, rule_memory_growth, rule_straggler_rank})
AGE_RULES = frozenset({rule_no_probe})
_EVERY_POLL = RECENT_RULES | AGE_RULES
# The facts a memoised verdict is keyed on: every field but those two (a field added later is in it:
# one new at every poll would make each poll a miss, as target_age_s did for every rule).
_KEY_FIELDS = attrgetter(*(f.name for f in fields(Facts) if f.name not in ("recent", "target_age_s")))


class VerdictMemo:
    """What `decide` made of the last poll's facts, for a poller to hand to the next poll's: when
    the facts other than the recent window and the job's age are equal to last poll's (most polls
    of a steady job: nothing republished, the same GPU readings), the status and the findings of the
    rules that read neither are the same, and only RECENT_RULES and AGE_RULES are asked again.
    Equal, not identical: the facts are made afresh each poll, but their unchanged parts are the
    very same objects, so the comparison is mostly identity checks (tuple comparison tries `is`
    first)."""

    __slots__ = ("findings", "key", "status")

    def __init__(self) -> None:
        self.key: tuple[object, ...] | None = None  # the facts' fields but `recent`, in order
        self.status: StatusMessage | None = None
        # per rule of RULES, in order: its findings, or None for a rule asked at every poll
        self.findings: tuple[tuple[Finding, ...] | None, ...] = ()


def _status_and_findings(f: Facts, memo: VerdictMemo | None) -> tuple[StatusMessage, list[Finding]]:
    if memo is None:
        return status_and_message(f), candidate_warnings(f)
    key = _KEY_FIELDS(f)
    if memo.key is None or memo.key != key:
        memo.key = None  # a rule that raises leaves no half-made entry
        memo.status = status_and_message(f)
        memo.findings = tuple(None if rule in _EVERY_POLL else tuple(rule(f)) for rule in RULES)
        memo.key = key
    assert memo.status is not None
    found = [w for rule, kept in zip(RULES, memo.findings) for w in (rule(f) if kept is None else kept)]
    return memo.status, found


def decide(f: Facts, memo: VerdictMemo | None = None) -> Verdict:
    """The verdict of `f`; `memo` (the caller's, kept between its polls) spares re-deriving what
    did not change since the last call with the same memo (VerdictMemo)."""
    sm, found = _status_and_findings(f, memo)
    message = sm.message
    if not f.target_alive and f.processes:
        message = ref("message.exited", pid=f.target_pid, message=message)
    warnings = tuple(sorted(found, key=lambda w: SEVERITY_ORDER[w.severity]))
    return Verdict(sm.status, message, warnings, sm.model_device, sm.input_device, sm.model_gpu_index)


def runs_not_recorded(verdict: Verdict, reason: str) -> Verdict:
    """``verdict`` with runs-not-recorded: the runs ledger failed its last write (a full disk), with
    the reason. Not a fact of the job: the poller adds it to the settled verdict while the fault
    lasts, so hysteresis has nothing to hold and a recorded run's timeline never carries it."""
    found = Finding(
        "runs-not-recorded",
        "info",
        ref("warning.runs-not-recorded", reason=reason),
        ref("hint.runs-not-recorded"),
    )
    return replace(verdict, warnings=(*verdict.warnings, found))
