"""The verdict's thresholds (``Rules``): what each rule compares its facts with, in one place. Apart
from verdict/facts.py (which re-exports it), where the facts' types are."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Rules"]


@dataclass(frozen=True)
class Rules:
    idle_util_pct: float = 5.0
    # A held idle-gpu goes once its GPU is this busy: a bit above idle_util_pct, so that a GPU whose
    # stray kernels reach about 5 % now and then does not flap (hysteresis.settle).
    idle_util_released_pct: float = 8.0
    idle_window_s: float = 10.0
    data_wait_starved: float = 0.5  # data wait over step time: data-starved, and idle-gpu's hint
    # A held data-starved (hysteresis.settle) goes as soon as the wait falls under this.
    data_wait_released: float = 0.4
    growth_window_s: float = 120.0
    growth_min_span_s: float = 60.0
    growth_min_mib: float = 256.0
    growth_min_fraction: float = 0.10
    # A held memory-growth goes when the window's growth falls under these, a bit under the two
    # above, so that a window that grew about 256 MiB does not flap as it slides (hysteresis.settle).
    growth_released_mib: float = 192.0
    growth_released_fraction: float = 0.075
    growth_monotonic_fraction: float = 0.8
    hysteresis_off_polls: int = 3
    # A job younger than this without a probe may be importing still (torch alone takes seconds):
    # no-probe says "waiting for the probe" (info), not "add two lines", until then.
    probe_grace_s: float = 15.0
    # Efficiency
    pcie_busy_bytes_per_s: float = 64.0 * 1048576  # GPM's PCIe rates above this: the job moves data
    hollow_util_pct: float = 80.0  # NVML says busy ...
    hollow_sm_activity: float = 0.25  # ... while GPM says few SMs work
    hollow_sm_occupancy: float = 0.10  # ... or few warps are resident
    # ... and the job's own processes make at least this share of NVML's utilisation (per-process
    # samples): on a shared GPU, another user's small kernels are not the job's to fix.
    hollow_own_share: float = 0.5
    # A held hollow-utilisation goes when NVML's utilisation falls under, or GPM's SM activity or
    # occupancy rises to, these: a bit past each threshold above, so that a GPU whose figures hover
    # about one of them does not flap (hysteresis.settle).
    hollow_util_released_pct: float = 75.0
    hollow_sm_activity_released: float = 0.30
    hollow_sm_occupancy_released: float = 0.12
    tensor_idle_fraction: float = 0.02  # tensor activity "about 0"
    tensor_core_min_cc: float = 7.0  # Volta: the first GPUs with tensor cores
    host_syncs_per_step: float = 8.0  # more synchronisations per step than a logging loop needs
    host_syncs_released: float = 6.0  # a held host-syncs goes under this (hysteresis.settle)
    # A window with fewer steps (the breakdown's) or whole batches (the loader's) says nothing yet.
    data_starved_min_steps: int = 5
    # data-starved's hint: fewer DataLoader workers than this are worth raising; more, and the
    # per-batch work is what to look at. prefetch_factor at or under torch's default (2) is worth raising.
    loader_workers_enough: int = 4
    loader_prefetch_default: int = 2
    # straggler-rank: every rank's window holds this many steps, the others wait this share of each
    # step more than the straggler, at consecutive polls this far apart (sidecar/verdict/stragglers.py)
    straggler_min_steps: int = 30
    straggler_wait_fraction: float = 0.10
    # A held straggler-rank goes when the others wait less than this for it: a bit under the share
    # above, so that a straggler that costs the others about 10 % of each step does not flap.
    straggler_wait_released: float = 0.07
    straggler_confirm_s: float = 2.0
    # Comparing two runs (compare.py; its docstring says why these values). A figure's noise band is
    # this many standard errors of the difference of the two runs' means ...
    compare_noise_k: float = 3.0
    # ... and never under this share of the larger of the two values.
    compare_noise_floor: float = 0.02
    # Steady minutes (after the warm-up) each run needs before a figure is judged at all.
    compare_min_minutes: int = 3
    # A part of the step that explains less of the step time's difference is not named as a cause.
    compare_min_cause_share: float = 0.10
    # The slower run's mean SM clock this much under the faster's: clocks (or throttled) named.
    compare_clock_drop: float = 0.05
    # The slower run makes this many more host syncs per step: host-syncs named.
    compare_syncs_more_per_step: float = 2.0
    # This many more processes (on average) on the slower run's GPUs beside its own: gpu-shared named.
    compare_gpu_processes_more: float = 0.5
