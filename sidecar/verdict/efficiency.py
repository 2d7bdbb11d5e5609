"""The efficiency rules: the job is on the GPU, but is it using it well, and if not, why.

Each rule reads the driver's clocks, PCIe link and GPM activity of the GPUs the job uses, and the
probe's step breakdown, precision settings and sync counts, and yields a `Finding` whose message and
hint are catalogue references (`warning.CODE`, `hint.CODE[.VARIANT]`), like every rule in rules.py.
Thresholds live in `Rules` (thresholds.py), nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.common.catalogue import Ref, ref
from sidecar.common.nvml_names import GPM_FIRST_SAMPLE
from sidecar.verdict.facts import (
    ACCELERATOR_TYPES,
    VENDOR_AMD,
    VENDOR_NVIDIA,
    Facts,
    Finding,
    GpuFacts,
    LoaderSettings,
    ProcessFacts,
    all_models,
    gpu_by_index,
    model_gpu_index,
    pct,
    plist,
)

__all__ = ["EFFICIENCY_RULES", "THROTTLE_REASONS", "data_wait"]

# Clock event reasons that mean the hardware is braking the job, most telling first. Not
# sw_power_cap: it holds clocks at the board's power limit under any full load, which is the GPU
# working as designed; not gpu_idle, applications_clocks_setting, sync_boost or display settings.
THROTTLE_REASONS = ("hw_power_brake_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_slowdown")
_THROTTLE_HINT = {
    "hw_power_brake_slowdown": "hint.throttled.power-brake",
    "hw_thermal_slowdown": "hint.throttled.thermal",
    "sw_thermal_slowdown": "hint.throttled.thermal",
    "hw_slowdown": "hint.throttled.slowdown",
}


def _pids_on(f: Facts, index: int) -> list[int]:
    return sorted({p.pid for p in f.processes for g in p.gpu if g.index == index})


def _gpu_working(f: Facts, g: GpuFacts) -> bool:
    """The GPU runs work now, so a slowed clock costs the job time: NVML utilisation, else GPM SM
    activity, at or above the idle threshold. Neither known (MIG has no device utilisation): the
    driver's own gpu_idle reason decides."""
    if g.util is not None:
        return g.util >= f.rules.idle_util_pct
    if g.sm_activity_fraction is not None:
        return g.sm_activity_fraction * 100 >= f.rules.idle_util_pct
    return "gpu_idle" not in (g.clock_event_reasons or ())


def _mhz(v: int | None) -> str:
    return "?" if v is None else f"{v} MHz"


def rule_throttled(f: Facts) -> Iterable[Finding]:
    if not f.target_alive:
        return
    for g in f.job_gpus:
        if not g.clock_event_reasons:
            continue  # most polls: no reason at all
        active = set(g.clock_event_reasons)
        reason = next((r for r in THROTTLE_REASONS if r in active), None)
        if reason is None or not _gpu_working(f, g):
            continue  # a slowdown flagged on an idle GPU costs the job nothing
        # "SM clock" is NVIDIA's word: an Intel GPU's reasons come with its GT clock
        message = ref(
            "warning.throttled" if g.vendor == VENDOR_NVIDIA else "warning.throttled.gpu-clock",
            gpu=g.index,
            reason=ref(f"clock-reason.{reason}"),
            clock=_mhz(g.sm_clock_mhz),
            max=_mhz(g.sm_clock_max_mhz),
            temp="?" if g.temperature_c is None else f"{g.temperature_c:.0f} °C",
            power="?" if g.power_w is None else f"{g.power_w:.0f} W",
            limit="?" if g.power_limit_w is None else f"{g.power_limit_w:.0f} W",
        )
        # NVML's hints name nvidia-smi; an Intel GPU's reasons (named as NVML's) are its driver's files,
        # an AMD GPU's amdsmi's violation flags (sidecar/sources/amdsmi_source.py), which amd-smi shows.
        hint = ref(_THROTTLE_HINT[reason], gpu=g.index)
        if g.vendor == VENDOR_AMD:
            hint = ref("hint.throttled.amd", gpu=g.index, pci=g.pci_bus_id or "?")
        elif g.vendor != VENDOR_NVIDIA:
            hint = ref("hint.throttled.driver", gpu=g.index, pci=g.pci_bus_id or "?")
        yield Finding("throttled", "warning", message, hint, tuple(_pids_on(f, g.index)))
        return  # one GPU named; the page shows every GPU's reasons as badges


def _link_text(gen: int | None, width: int | None) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _moves_data(f: Facts, g: GpuFacts) -> bool:
    """The job moves data over the link now: by GPM's PCIe rates where the GPU has them, else by the
    GPU being busy. An idle GPU drops its link to Gen1 to save power; that is not a fault."""
    rates = [r for r in (g.pcie_tx_bytes_per_s, g.pcie_rx_bytes_per_s) if r is not None]
    if rates:
        return sum(rates) >= f.rules.pcie_busy_bytes_per_s
    return g.util is not None and g.util >= f.rules.idle_util_pct


def rule_pcie_degraded(f: Facts) -> Iterable[Finding]:
    for g in f.job_gpus:
        gen, gen_max, width, width_max = (
            g.pcie_link_gen,
            g.pcie_link_gen_max,
            g.pcie_link_width,
            g.pcie_link_width_max,
        )
        if gen is None or gen_max is None or width is None or width_max is None:
            continue
        if gen >= gen_max and width >= width_max:
            continue
        if not _moves_data(f, g):
            continue
        message = ref(
            "warning.pcie-degraded",
            gpu=g.index,
            link=_link_text(gen, width),
            max=_link_text(gen_max, width_max),
        )
        yield Finding(
            "pcie-degraded",
            "warning",
            message,
            ref("hint.pcie-degraded", gpu=g.index),
            tuple(_pids_on(f, g.index)),
        )
        return


def _job_sm_util(f: Facts, index: int) -> float | None:
    """The SM utilisation of the job's own processes on GPU ``index`` (NVML's per-process samples),
    summed; None when NVML gave none."""
    known = [u.sm_util for p in f.processes for u in p.gpu if u.index == index and u.sm_util is not None]
    return sum(known) if known else None


def rule_hollow_utilisation(f: Facts) -> Iterable[Finding]:
    r = f.rules
    for g in f.job_gpus:
        if g.util is None or g.util < r.hollow_util_pct:
            continue
        sm, occ = g.sm_activity_fraction, g.sm_occupancy_fraction
        low_sm = sm is not None and sm < r.hollow_sm_activity
        # Few resident warps on SMs that are all busy is how large GEMM and attention kernels run
        # (one big CTA per SM): low occupancy says "hollow" only when SM activity does not say otherwise.
        low_occ = occ is not None and occ < r.hollow_sm_occupancy and sm is None
        if not (low_sm or low_occ):
            continue
        own = _job_sm_util(f, g.index)  # after GPM's figures, which rule most GPUs out for less
        if own is not None and own < r.hollow_own_share * g.util:
            # The GPU is busy, but not with the job: another user's process on a shared GPU. Its
            # tiny kernels are not the job's to fix (GPM's activity is the whole GPU's).
            continue
        message = ref(
            "warning.hollow-utilisation",
            gpu=g.index,
            util=pct(g.util),
            sm=pct(None if sm is None else sm * 100),
            occupancy=pct(None if occ is None else occ * 100),
        )
        yield Finding(
            "hollow-utilisation",
            "warning",
            message,
            ref("hint.hollow-utilisation"),
            tuple(_pids_on(f, g.index)),
        )
        return


def _gpm_not_yet(g: GpuFacts) -> bool:
    return dict(g.field_errors).get("tensor_activity_fraction") == GPM_FIRST_SAMPLE


def _tf32_on(p: ProcessFacts) -> bool | None:
    m = p.math
    if m is None:
        return None
    if m.allow_tf32_matmul or m.float32_matmul_precision in ("high", "medium"):
        return True
    if m.allow_tf32_matmul is False:
        return False
    return None


def _has_tensor_cores(g: GpuFacts, min_cc: float) -> bool:
    try:
        return g.compute_capability is not None and float(g.compute_capability) >= min_cc
    except ValueError:
        return False


def rule_no_tensor_cores(f: Facts) -> Iterable[Finding]:
    r = f.rules
    hits = []
    for p, m in all_models(f):
        if m.autocast != "off" or m.forward_calls == 0:
            continue  # autocast or not known, or no forward: first, as they rule most models out
        g = gpu_by_index(f, model_gpu_index(f, p, m))
        if g is None or not _has_tensor_cores(g, r.tensor_core_min_cc):
            continue
        if set(m.param_dtypes) != {"float32"} or _tf32_on(p) is not False:
            continue  # half precision somewhere, TF32, or not known: tensor cores can work
        if g.tensor_activity_fraction is not None and g.tensor_activity_fraction >= r.tensor_idle_fraction:
            continue  # something on this GPU keeps them busy all the same
        if g.tensor_activity_fraction is None and _gpm_not_yet(g):
            continue  # a GPM GPU's first poll (or `--once`): its tensor activity is not known yet
        hits.append((p, m, g))
    if hits:
        p, m, g = hits[0]
        message = ref("warning.no-tensor-cores", model=m.name, gpu=g.index, cc=g.compute_capability or "?")
        yield Finding(
            "no-tensor-cores",
            "warning",
            message,
            # cuDNN's TF32 is on by default: only a process that turned it off is told to turn it on.
            ref(
                "hint.no-tensor-cores.cudnn-off"
                if p.math and p.math.cudnn_allow_tf32 is False
                else "hint.no-tensor-cores"
            ),
            tuple(sorted({h[0].pid for h in hits})),
        )


def rule_host_syncs(f: Facts) -> Iterable[Finding]:
    hits = [
        p
        for p in f.processes
        if p.syncs_per_step is not None and p.syncs_per_step >= f.rules.host_syncs_per_step
    ]
    if hits:
        worst = max(hits, key=lambda p: p.syncs_per_step or 0.0)
        message = ref(
            "warning.host-syncs", pids=plist(p.pid for p in hits), syncs=f"{worst.syncs_per_step:.0f}"
        )
        yield Finding("host-syncs", "warning", message, ref("hint.host-syncs"), tuple(p.pid for p in hits))


def data_wait(f: Facts, p: ProcessFacts) -> float | None:
    """The process's data-wait share of step time: from its step breakdown, else its models' loader
    timing; None until one of them covers `data_starved_min_steps` steps. The one evidence of a data
    wait: data-starved's, and idle-gpu's hint's.

    A window with too few steps falls back to the loader timing (its last 64 batches) rather than
    saying nothing: the more a loop starves, the longer its steps, and a loop of 2.5 s steps that
    waits 99 % of them has only four in the breakdown's ~10 s window. The loader's window must hold
    as many batches: over its first few, one slow start (workers that take seconds to start) read
    as a loop that waits 95 % of each step."""
    least = f.rules.data_starved_min_steps
    if p.steps is not None and p.steps.steps >= least:
        return p.steps.data_wait_fraction
    waits = [
        m.data_wait_fraction
        for m in p.models
        if m.data_wait_fraction is not None and m.forward_calls > 0 and (m.data_wait_batches or 0) >= least
    ]
    return max(waits) if waits else None


def _loader_hint(f: Facts, s: LoaderSettings, on_accelerator: bool) -> Ref:
    """data-starved's hint for a loader whose settings are known: each setting that would help and is
    not already there, a sentence of its own ("" in its place otherwise); with all of them there, the
    per-batch work itself."""
    r = f.rules
    workers = s.num_workers is not None and s.num_workers < r.loader_workers_enough
    pin = on_accelerator and s.pin_memory is not True
    persistent = s.persistent_workers is not True
    # Known only from a probe that reads it, and only with workers (torch's None without them).
    prefetch = s.prefetch_factor is not None and s.prefetch_factor <= r.loader_prefetch_default
    shown = {
        "num_workers": "?" if s.num_workers is None else s.num_workers,
        "pin_memory": "?" if s.pin_memory is None else str(s.pin_memory),
        "persistent_workers": "?" if s.persistent_workers is None else str(s.persistent_workers),
        "prefetch_factor": "?" if s.prefetch_factor is None else s.prefetch_factor,
    }
    if not on_accelerator:
        del shown["pin_memory"]
    if not (workers or pin or persistent or prefetch):
        return Ref("hint.data-starved.all-set" if on_accelerator else "hint.data-starved.all-set.cpu", shown)
    raise_workers = "hint.data-starved.do.workers" if on_accelerator else "hint.data-starved.do.workers.cpu"
    advice = {
        "workers": ref(raise_workers) if workers else "",
        "persistent": ref("hint.data-starved.do.persistent") if persistent else "",
        "prefetch": ref("hint.data-starved.do.prefetch", prefetch_factor=s.prefetch_factor)
        if prefetch and s.prefetch_factor is not None  # `prefetch` implies it; mypy does not see that
        else "",
    }
    if on_accelerator:
        advice["pin"] = ref("hint.data-starved.do.pin") if pin else ""
    return Ref(
        "hint.data-starved.settings" if on_accelerator else "hint.data-starved.settings.cpu",
        {**shown, **advice},
    )


def rule_data_starved(f: Facts) -> Iterable[Finding]:
    hits = [
        (p, w)
        for p in f.processes
        # Neither a step breakdown nor a model: no data wait (a DataLoader worker, a helper).
        if (p.steps is not None or p.models)
        and (w := data_wait(f, p)) is not None
        and w >= f.rules.data_wait_starved
    ]
    if not hits:
        return
    p, wait = max(hits, key=lambda h: h[1])
    message = ref("warning.data-starved", pids=plist(h[0].pid for h in hits), wait=f"{wait:.0%}")
    settings = next((m.loader_settings for m in p.models if m.loader_settings is not None), None)
    # pin_memory only speeds copies to an accelerator (torch warns when it is set without one).
    models = p.models or tuple(m for _, m in all_models(f))  # a process that only counts steps: the job's
    on_accelerator = any(set(m.types) & set(ACCELERATOR_TYPES) for m in models)
    if settings is None:
        hint = ref("hint.data-starved" if on_accelerator else "hint.data-starved.cpu")
    else:
        hint = _loader_hint(f, settings, on_accelerator)
    yield Finding("data-starved", "warning", message, hint, tuple(h[0].pid for h in hits))


def rule_mig_no_process_util(f: Facts) -> Iterable[Finding]:
    for g in f.job_gpus:
        if g.mig_mode:
            message = ref("warning.mig-no-process-util", gpu=g.index)
            yield Finding(
                "mig-no-process-util",
                "info",
                message,
                ref("hint.mig-no-process-util"),
                tuple(_pids_on(f, g.index)),
            )
            return


EFFICIENCY_RULES = (
    rule_throttled,
    rule_pcie_degraded,
    rule_hollow_utilisation,
    rule_no_tensor_cores,
    rule_data_starved,
    rule_host_syncs,
    rule_mig_no_process_util,
)
