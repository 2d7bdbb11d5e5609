"""Why a part of the step changed between two runs (compare.py's causes): the reasons the two runs'
setups and steady minutes show, each with the two values it rests on, the baseline's and the run's.

A reason is named for a part only where it can act on that part: the DataLoader settings on the
data wait; a throttled GPU or lower clocks, another GPU model, another precision, more processes
on the GPU on the GPU phases (forward, backward, optimizer); host syncs on those and on `other` (a
sync stalls the host where it is made); the driver on those too; torch on every part; all of them on
`whole-step` (without a breakdown nothing says where the time went). A reason with a direction
(clocks, throttling, processes, syncs) is named only when it is against the slower run; a changed
setting (loader, GPU model, precision, versions) whichever way it went, as it can make either run
the faster. Each reason is named only where both runs know the fact: an unknown is not a change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.common.catalogue import Ref, ref
from sidecar.common.runs import RunSetup
from sidecar.verdict.efficiency import THROTTLE_REASONS
from sidecar.verdict.facts import Rules

__all__ = [
    "PHASES",
    "PHASE_BACKWARD",
    "PHASE_DATA_WAIT",
    "PHASE_FORWARD",
    "PHASE_OPTIMIZER",
    "PHASE_OTHER",
    "PHASE_WHOLE_STEP",
    "REASONS",
    "REASON_CLOCKS",
    "REASON_DRIVER_VERSION",
    "REASON_GPU_MODEL",
    "REASON_GPU_SHARED",
    "REASON_HOST_SYNCS",
    "REASON_LOADER_SETTINGS",
    "REASON_PRECISION",
    "REASON_THROTTLED",
    "REASON_TORCH_VERSION",
    "Reason",
    "Side",
    "reasons_for",
]

# The parts of a step (the probe's step breakdown), and the part no breakdown covers.
PHASE_DATA_WAIT = "data-wait"
PHASE_FORWARD = "forward"
PHASE_BACKWARD = "backward"
PHASE_OPTIMIZER = "optimizer"
PHASE_OTHER = "other"
PHASE_WHOLE_STEP = "whole-step"
PHASES = (PHASE_DATA_WAIT, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_OTHER, PHASE_WHOLE_STEP)

REASON_THROTTLED = "throttled"  # clocks lower, with a hardware clock-event reason (THROTTLE_REASONS)
REASON_CLOCKS = "clocks"  # clocks lower without one
REASON_GPU_MODEL = "gpu-model"
REASON_PRECISION = "precision"
REASON_GPU_SHARED = "gpu-shared"  # more processes on the GPU beside the job's own
REASON_HOST_SYNCS = "host-syncs"
REASON_LOADER_SETTINGS = "loader-settings"
REASON_TORCH_VERSION = "torch-version"
REASON_DRIVER_VERSION = "driver-version"
# Most specific first: the order a cause lists its reasons in.
REASONS = (
    REASON_THROTTLED,
    REASON_CLOCKS,
    REASON_GPU_MODEL,
    REASON_PRECISION,
    REASON_GPU_SHARED,
    REASON_HOST_SYNCS,
    REASON_LOADER_SETTINGS,
    REASON_TORCH_VERSION,
    REASON_DRIVER_VERSION,
)

_GPU_PHASES = frozenset({PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_WHOLE_STEP})
_UNKNOWN = "?"


@dataclass(frozen=True, slots=True)
class Side:
    """What one run shows of itself for the reasons: its setup and its steady minutes' means."""

    setup: RunSetup
    sm_clock_mhz: float | None = None
    clock_reasons: frozenset[str] = frozenset()  # every clock-event reason of its steady minutes
    syncs_per_step: float | None = None
    gpu_processes: float | None = None  # processes on its GPUs, its own and others


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a part changed: the fact, the baseline's and the run's value of it (display-ready, the
    same in every language)."""

    code: str  # REASON_*
    baseline: str
    run: str
    detail: str | None  # throttled: the NVML clock-event reason (nvml_names.CLOCK_EVENT_REASONS)
    text: Ref


_Detector = Callable[[Side, Side, bool, Rules], Reason | None]


def _mhz(value: float | None) -> str:
    return _UNKNOWN if value is None else f"{value:.0f} MHz"


def _clocks(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    """The slower run's clocks lower: throttled where it shows a hardware reason the faster does
    not (named also where a run's clocks are unknown), else clocks."""
    slow, fast = (run, base) if slower_is_run else (base, run)
    reason = next(
        (r for r in THROTTLE_REASONS if r in slow.clock_reasons and r not in fast.clock_reasons), None
    )
    known = slow.sm_clock_mhz is not None and fast.sm_clock_mhz is not None
    lower = (
        slow.sm_clock_mhz is not None
        and fast.sm_clock_mhz is not None
        and slow.sm_clock_mhz < fast.sm_clock_mhz * (1 - rules.compare_clock_drop)
    )
    b, r = _mhz(base.sm_clock_mhz), _mhz(run.sm_clock_mhz)
    if reason is not None and (lower or not known):
        text = ref("compare.reason.throttled", baseline=b, run=r, reason=ref(f"clock-reason.{reason}"))
        return Reason(REASON_THROTTLED, b, r, reason, text)
    if lower:
        return Reason(REASON_CLOCKS, b, r, None, ref("compare.reason.clocks", baseline=b, run=r))
    return None


def _models(models: tuple[str, ...]) -> str | None:
    """'NVIDIA A100-SXM4-80GB', or '8 × NVIDIA H100 80GB HBM3' for eight alike."""
    if not models:
        return None
    return ", ".join(name if n == 1 else f"{n} × {name}" for name, n in sorted(Counter(models).items()))


def _loader(setup: RunSetup) -> dict[str, str]:
    return dict(setup.loader)


def _changed(code: str, text_id: str, base: str | None, run: str | None) -> Reason | None:
    if base is None or run is None or base == run:
        return None
    return Reason(code, base, run, None, ref(text_id, baseline=base, run=run))


def _gpu_model(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    return _changed(
        REASON_GPU_MODEL,
        "compare.reason.gpu-model",
        _models(base.setup.gpu_models),
        _models(run.setup.gpu_models),
    )


def _precision(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    return _changed(REASON_PRECISION, "compare.reason.precision", base.setup.precision, run.setup.precision)


def _torch(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    return _changed(
        REASON_TORCH_VERSION,
        "compare.reason.torch-version",
        base.setup.torch_version,
        run.setup.torch_version,
    )


def _driver(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    return _changed(
        REASON_DRIVER_VERSION,
        "compare.reason.driver-version",
        base.setup.driver_version,
        run.setup.driver_version,
    )


def _loader_settings(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    """The DataLoader settings that differ, 'num_workers=4' → 'num_workers=0'."""
    b, r = _loader(base.setup), _loader(run.setup)
    if not b or not r:
        return None  # a run whose loader was never seen: unknown, not changed
    names = sorted(name for name in b.keys() | r.keys() if b.get(name) != r.get(name))
    if not names:
        return None
    before = ", ".join(f"{name}={b.get(name, _UNKNOWN)}" for name in names)
    after = ", ".join(f"{name}={r.get(name, _UNKNOWN)}" for name in names)
    return _changed(REASON_LOADER_SETTINGS, "compare.reason.loader-settings", before, after)


def _count(value: float | None) -> str:
    return _UNKNOWN if value is None else f"{value:.1f}".removesuffix(".0")


def _others(side: Side) -> float | None:
    """Processes on the run's GPUs that are not its own (all of them where its own count is unknown)."""
    if side.gpu_processes is None:
        return None
    own = side.setup.processes
    return side.gpu_processes if own is None else max(0.0, side.gpu_processes - own)


def _gpu_shared(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    slow, fast = (run, base) if slower_is_run else (base, run)
    slow_others, fast_others = _others(slow), _others(fast)
    if (
        slow_others is None
        or fast_others is None
        or slow_others < fast_others + rules.compare_gpu_processes_more
    ):
        return None
    b, r = _count(base.gpu_processes), _count(run.gpu_processes)
    return Reason(REASON_GPU_SHARED, b, r, None, ref("compare.reason.gpu-shared", baseline=b, run=r))


def _host_syncs(base: Side, run: Side, slower_is_run: bool, rules: Rules) -> Reason | None:
    slow, fast = (run, base) if slower_is_run else (base, run)
    if (
        slow.syncs_per_step is None
        or fast.syncs_per_step is None
        or slow.syncs_per_step < fast.syncs_per_step + rules.compare_syncs_more_per_step
    ):
        return None
    b, r = _count(base.syncs_per_step), _count(run.syncs_per_step)
    return Reason(REASON_HOST_SYNCS, b, r, None, ref("compare.reason.host-syncs", baseline=b, run=r))


# Each detector with the parts its reason can act on, in REASONS' order (_clocks gives throttled or clocks).
_DETECTORS: tuple[tuple[_Detector, frozenset[str]], ...] = (
    (_clocks, _GPU_PHASES),
    (_gpu_model, _GPU_PHASES),
    (_precision, _GPU_PHASES),
    (_gpu_shared, _GPU_PHASES),
    (_host_syncs, _GPU_PHASES | {PHASE_OTHER}),
    (_loader_settings, frozenset({PHASE_DATA_WAIT, PHASE_WHOLE_STEP})),
    (_torch, frozenset(PHASES)),
    (_driver, _GPU_PHASES | {PHASE_OTHER}),
)


def reasons_for(part: str, base: Side, run: Side, *, slower_is_run: bool, rules: Rules) -> tuple[Reason, ...]:
    """The reasons the two runs show for `part`'s change, most specific first; `slower_is_run`: the
    run judged is the slower of the two in this part."""
    found = (detect(base, run, slower_is_run, rules) for detect, parts in _DETECTORS if part in parts)
    return tuple(reason for reason in found if reason is not None)
