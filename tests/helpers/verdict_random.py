"""Random verdict inputs from a seeded random.Random, for the verdict's property tests
(tests/unit/test_verdict_windows.py, tests/unit/test_verdict_properties.py): recent-sample
sequences (times in order, out of order: a clock stepped back, equal, with gaps in the memory
figures, spans shorter and longer than the rules' windows, now and then a NaN or infinite time),
rules, and whole facts made with the verdict tests' builders (tests/helpers/verdict_facts.py);
`next_poll` gives the facts of the poll after some facts, their figures moved and some evidence gone.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from probe_wire.records import RuntimeRecord
from sidecar.sources.nvml import GPM_FIRST_SAMPLE, GPM_UNSUPPORTED
from sidecar.verdict import (
    Facts,
    GpuFacts,
    LoaderSettings,
    MathSettings,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    Rules,
    StepBreakdown,
    memory_growth,
)
from sidecar.verdict.stragglers import straggler_candidate
from tests.helpers.verdict_facts import (
    CPU_RT,
    CUDA_RT,
    H200,
    INTEL_CARD,
    NVIDIA_CARD,
    TWO_GPU_RT,
    XPU_RT,
    model,
    proc,
)
from tests.helpers.verdict_tables import CASES, EFFICIENCY_CASES

RANDOM_FACTS = 600


def random_times(rng: random.Random, n: int) -> list[float]:
    t = rng.choice([0.0, 1000.0, 1.7e9])
    step = rng.choice([0.05, 0.5, 1.5, 1.5, 3.0, 10.0, 30.0])
    times = []
    for _ in range(n):
        times.append(t)
        t += rng.choice([step, step, step, step * rng.random(), 0.0, step * 3])
    shape = rng.random()
    if shape < 0.15 and n > 1:  # the clock stepped back once
        at = rng.randrange(1, n)
        back = rng.choice([step, 30.0, 200.0, 1e6])
        times = times[:at] + [x - back for x in times[at:]]
    elif shape < 0.2:
        rng.shuffle(times)
    elif shape < 0.25 and n:  # a few equal times
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(n)
            times[i] = times[max(0, i - 1)]
        times.sort()
    elif shape < 0.27 and n:
        times[rng.randrange(n)] = rng.choice([math.nan, math.inf, -math.inf])
    return times


def random_mem(rng: random.Random, n: int) -> list[float | None]:
    kind = rng.choice(["flat", "grow", "grow", "saw", "noise", "none", "late"])
    base = rng.choice([0.0, 0.5, 100.0, 1000.0, 30000.0])
    rate = rng.choice([1.0, 5.0, 60.0, 300.0])
    out: list[float | None] = []
    for i in range(n):
        if kind == "flat":
            v = base
        elif kind == "grow":
            v = base + rate * i + (rng.choice([0, 0, 0, -rate * 2]) if rng.random() < 0.2 else 0)
        elif kind == "saw":
            v = base + (3000.0 if i % 2 else 0.0)
        elif kind == "noise":
            v = base + rng.uniform(-500, 2000)
        elif kind == "late":
            v = None if i < n // 2 else base + rate * i
        else:
            v = None
        if v is not None and rng.random() < 0.08:
            v = None
        out.append(v)
    if n and rng.random() < 0.1:
        out[-1] = None
    return out


def random_samples(rng: random.Random) -> tuple[RecentSample, ...]:
    n = rng.choice([0, 1, 2, 3, 4, 5, 8, 13, 40, 81, 82, 120, 200])
    times, mem = random_times(rng, n), random_mem(rng, n)
    util = rng.choice([None, 0.0, 2.0, 50.0])
    calls, steps = 0, rng.choice([None, 0])
    out = []
    for t, m in zip(times, mem):
        calls += rng.choice([0, 1, 8])
        if steps is not None:
            steps += rng.choice([0, 1])
        sm = util if rng.random() > 0.05 else rng.choice([None, 80.0])
        out.append(RecentSample(t, sm, m, calls, rng.choice([util, None, 1.0]), steps))
    return tuple(out)


def random_rules(rng: random.Random) -> Rules:
    if rng.random() < 0.4:
        return Rules()
    return replace(
        Rules(),
        idle_window_s=rng.choice([-1.0, 0.0, 1.0, 10.0, 10.0, 30.0, 200.0, math.inf]),
        idle_util_pct=rng.choice([5.0, 60.0]),
        growth_window_s=rng.choice([-1.0, 0.0, 10.0, 60.0, 120.0, 120.0, 1000.0, math.inf]),
        growth_min_span_s=rng.choice([0.0, 5.0, 60.0, 60.0, 200.0]),
        growth_min_mib=rng.choice([0.0, 256.0, 256.0, 5000.0]),
        growth_min_fraction=rng.choice([0.0, 0.1, 0.1, 2.0]),
        growth_monotonic_fraction=rng.choice([0.0, 0.8, 0.8, 1.0]),
    )


def random_cases(seed: int) -> list[tuple[tuple[RecentSample, ...], Rules]]:
    rng = random.Random(seed)
    return [(random_samples(rng), random_rules(rng)) for _ in range(100)]


def random_gpu(rng: random.Random, index: int) -> GpuFacts:
    pick = rng.choice
    gen_max, width_max = pick([None, 4, 5]), pick([None, 16])
    return replace(
        H200,
        index=index,
        uuid=pick([f"GPU-{index:04x}aaaa", None, "GPU-aaaa"]),
        name=pick(["NVIDIA H200", None]),
        util=pick([None, 0.0, 3.0, 50.0, 80.0, 97.0]),
        mem_used_mib=pick([None, 0.0, 1000.0]),
        lost=rng.random() < 0.05,
        field_errors=pick(
            [(), (), (("tensor_activity_fraction", GPM_FIRST_SAMPLE),), (("utilization", GPM_UNSUPPORTED),)]
        ),
        compute_capability=pick([None, "6.1", "7.0", "8.0", "9.0", "9.0", "x"]),
        sm_clock_mhz=pick([None, 900, 1980]),
        sm_clock_max_mhz=pick([None, 1980]),
        clock_event_reasons=pick(
            [
                None,
                (),
                ("gpu_idle",),
                ("sw_power_cap",),
                ("hw_thermal_slowdown",),
                ("gpu_idle", "hw_slowdown"),
                ("sw_power_cap", "hw_power_brake_slowdown"),
                ("sw_thermal_slowdown",),
            ]
        ),
        power_w=pick([None, 300.0]),
        power_limit_w=pick([None, 700.0]),
        temperature_c=pick([None, 91.0]),
        pcie_link_gen=pick([None, 1, 4, 5]),
        pcie_link_gen_max=gen_max,
        pcie_link_width=pick([None, 4, 16]),
        pcie_link_width_max=width_max,
        sm_activity_fraction=pick([None, None, 0.1, 0.7]),
        sm_occupancy_fraction=pick([None, None, 0.05, 0.5]),
        tensor_activity_fraction=pick([None, None, 0.0, 0.01, 0.3]),
        pcie_tx_bytes_per_s=pick([None, None, 1e3, 1e9]),
        pcie_rx_bytes_per_s=pick([None, 1e8]),
        mig_mode=pick([None, False, False, True]),
    )


DEVICES = [
    "cpu",
    "cuda:0",
    "cuda:0",
    "cuda:1",
    "cuda:2",
    "mixed",
    "no-parameters",
    "mps:0",
    "xpu:0",
    "xpu:1",
    "cuda:x",
    "cuda",
    None,
]
RUNTIMES = [
    None,
    CPU_RT,
    CUDA_RT,
    CUDA_RT,
    TWO_GPU_RT,
    replace(CUDA_RT, cuda_available=False),
    replace(TWO_GPU_RT, devices=(), cuda_visible_devices="1,0"),
    replace(TWO_GPU_RT, devices=(), cuda_visible_devices="GPU-0001"),
    replace(CUDA_RT, cuda_visible_devices=""),
    RuntimeRecord(torch="2.5.1+cu124", cuda_build="12.8", cuda_available=False, device_count=0),
    XPU_RT,
    replace(XPU_RT, xpu_device_count=2),
]


def random_model(rng: random.Random, i: int):
    pick = rng.choice
    device = pick(DEVICES)
    devices = None
    if device == "mixed":
        devices = pick([("cpu", "cuda:0"), ("cuda:0", "cuda:1"), ("cpu", "xpu:0"), ()])
    elif rng.random() < 0.1:  # a payload whose device and devices disagree
        devices = pick([("cpu",), ("cuda:1",), ("cuda:0", "cuda:0"), ("mps:0", "cuda:0")])
    inp = pick([None, None, "cpu", "cuda:0", "cuda:1", "xpu:0", "meta"])
    calls = pick([0, 10, 500])
    name = pick(["Net", "Net", "Head", f"M{i}"])
    # The loader's wait over its window: 4 batches are too few to say.
    wait, batches = pick([(None, None), (0.1, 64), (0.6, 4), (0.95, 64)])
    m = model(device, devices=devices, inp=inp, calls=calls, name=name, wait=wait, batches=batches)
    return replace(
        m,
        train_steps=pick([None, None, 0, 625]),
        shared_memory=pick([None, False, True]),
        param_dtypes=pick([(), ("float32",), ("float32",), ("bfloat16",), ("float32", "float16")]),
        autocast=pick([None, "off", "off", "bfloat16"]),
        loader_settings=pick([None, LoaderSettings(2, False, None, 32)]),
    )


def random_process(rng: random.Random, i: int, gpu_count: int):
    pick = rng.choice
    role = pick(["main", "rank", "rank", "dataloader-worker", None]) if i else pick(["main", "rank"])
    rows = [
        ProcGpu(rng.randrange(max(gpu_count, 1) + 1), pick([None, 0.0, 900.0]), pick([None, 0, 3, 70]))
        for _ in range(pick([0, 0, 1, 1, 2]))
    ]
    return proc(
        100 + i,
        runtime=pick(RUNTIMES),
        models=[random_model(rng, i) for _ in range(pick([0, 0, 1, 1, 1, 2, 3]))],
        gpu=rows,
        role=role,
        is_target=i == 0 and rng.random() > 0.05,
        ppid=pick([None, 100, 101]) if i else None,
        local_rank=pick([None, 0, 1, i]),
        mp_child=pick([False, True]),
        mp_helper=rng.random() < 0.1,
        probe_unreadable=rng.random() < 0.05,
        probe_error=pick([None, "bad header"]),
        publish_failure=pick([None] * 9 + ["too large"]),
        cuda_memory_mib=pick([None, 0.0, 512.0]),
        collected_models=pick([(), ("Old",)]),
        steps=pick([None, StepBreakdown(10.0, pick([2, 20]), 0.5, pick([None, 0.2, 0.7]), 0.1)]),
        math=pick(
            [
                None,
                MathSettings(False, True, "highest"),
                MathSettings(True, None, "high"),
                MathSettings(None, False, None),
            ]
        ),
        syncs_per_step=pick([None, None, 2.0, 40.0]),
    )


def random_facts(seed: int) -> Facts:
    rng = random.Random(seed)
    pick = rng.choice
    gpu_count = pick([0, 1, 1, 2, 4])
    gpus = [random_gpu(rng, i) for i in range(gpu_count)]
    if gpus and rng.random() < 0.1:
        gpus.append(random_gpu(rng, 0))  # a repeated index
    # Intel GPUs after NVML's (an iGPU, an Arc card), the OS's whether NVML answers or not: where
    # `xpu:N` is (of one, xpu:0; of several, none: the probe gives no PCI address for it).
    intel = tuple(
        GpuFacts(i, name="Intel GPU", pci_bus_id=f"0000:{i + 3:02x}:00.0", vendor="intel", driver="xe")
        for i in range(gpu_count, gpu_count + pick([0, 0, 0, 1, 2]))
    )
    processes = [random_process(rng, i, gpu_count) for i in range(pick([0, 1, 1, 2, 3, 5, 8]))]
    nvml_ok = rng.random() > 0.15
    recent = random_samples(rng)
    if rng.random() < 0.3:  # an idle GPU while the job works, a few polls long
        recent = tuple(
            RecentSample(
                1000.0 + 1.5 * i, pick([0.0, 1.0]), 500.0 + pick([0, 300]) * i, 10 * i, 0.0, pick([None, i])
            )
            for i in range(pick([3, 9, 82]))
        )
    return Facts(
        target_pid=processes[0].pid if processes else 100,
        target_alive=rng.random() > 0.1,
        processes=tuple(processes),
        nvml_ok=nvml_ok,
        nvml_error=None if nvml_ok else pick([None, "NVML library not found"]),
        driver="550.54" if nvml_ok else None,
        cuda_driver=pick(["12.4", "12.2", None]) if nvml_ok else None,
        gpus=(tuple(gpus) if nvml_ok else ()) + intel,
        system_gpus=tuple(
            pick([(), (), (NVIDIA_CARD,), (NVIDIA_CARD, INTEL_CARD), (NVIDIA_CARD, NVIDIA_CARD)])
        ),
        pid_namespace_suspect=rng.random() < 0.05,
        stopped=pick([(), (), ((100, 3.0),), ((101, 7.5), (102, 1.0))]),
        recent=recent,
        rules=random_rules(rng),
        target_age_s=pick([None, 2.0, 600.0, -5.0]),  # a job still importing; a clock not the job's
    )


def all_facts() -> list[tuple[str, Facts]]:
    """The verdict tables' facts and RANDOM_FACTS random ones, each with its name."""
    cases = [(f"table: {c[0]}", c[1]) for c in CASES]
    cases += [(f"efficiency: {c[0]}", c[1]) for c in EFFICIENCY_CASES]
    cases += [(f"random {seed}", random_facts(seed)) for seed in range(RANDOM_FACTS)]
    return cases


# Factors a figure of one poll is multiplied by at the next: most land it a little under, or well
# under, the thresholds the tables' and random facts cross (a data wait of 0.6 or 0.7, 20 or 40
# syncs a step, 80 to 97 % utilisation).
_DRIFT = (1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.175, 0.1)


def next_poll(f: Facts, seed: int) -> Facts:
    """The facts of the poll after `f`: its data waits, syncs, GPUs' utilisation, SM activity and
    occupancy moved (mostly toward or past a threshold), the ranks' backward drawn together, now and
    then evidence gone (a throttle reason, a degraded link, a window's steps or batches, a process,
    the job), and one sample more in its history."""
    rng = random.Random(seed)
    ranked = [
        p.steps.backward_fraction for p in f.processes if p.steps and p.steps.backward_fraction is not None
    ]
    pull = rng.choice([1.0, 0.3, 0.25, 0.1])  # the ranks' backward beyond the least: what they wait
    processes = [_next_process(p, rng, min(ranked, default=0.0), pull) for p in f.processes]
    if len(processes) > 1 and rng.random() < 0.1:
        del processes[rng.randrange(1, len(processes))]  # a process gone since
    gpus = tuple(
        replace(
            g,
            util=None if g.util is None else g.util * rng.choice(_DRIFT),
            sm_activity_fraction=rng.choice([g.sm_activity_fraction, 0.27, 0.5]),
            sm_occupancy_fraction=rng.choice([g.sm_occupancy_fraction, 0.11, 0.5]),
            clock_event_reasons=rng.choice([g.clock_event_reasons, ()]),
            pcie_link_gen=rng.choice([g.pcie_link_gen, g.pcie_link_gen_max]),
            pcie_link_width=rng.choice([g.pcie_link_width, g.pcie_link_width_max]),
        )
        for g in f.gpus
    )
    alive = f.target_alive and rng.random() > 0.1
    now = replace(f, processes=tuple(processes), gpus=gpus, target_alive=alive)
    return now.with_recent(_next_recent(now, f.recent, rng))


def _next_process(p: ProcessFacts, rng: random.Random, least_backward: float, pull: float) -> ProcessFacts:
    steps = p.steps
    if steps is not None:
        wait, backward = steps.data_wait_fraction, steps.backward_fraction
        steps = replace(
            steps,
            steps=rng.choice([steps.steps, steps.steps, 2]),
            data_wait_fraction=None if wait is None else wait * rng.choice(_DRIFT),
            backward_fraction=None
            if backward is None
            else least_backward + (backward - least_backward) * pull,
        )
    models = tuple(
        replace(
            m,
            data_wait_fraction=None
            if m.data_wait_fraction is None
            else m.data_wait_fraction * rng.choice(_DRIFT),
            data_wait_batches=rng.choice([m.data_wait_batches, m.data_wait_batches, 2]),
        )
        for m in p.models
    )
    syncs = p.syncs_per_step
    return replace(
        p, steps=steps, models=models, syncs_per_step=None if syncs is None else syncs * rng.choice(_DRIFT)
    )


def _next_recent(
    now: Facts, recent: tuple[RecentSample, ...], rng: random.Random
) -> tuple[RecentSample, ...]:
    """The history `recent` and the sample of the poll of `now` 1.5 s after its last: the GPU as
    idle, a little busier or busy; the job's memory as much over the window's first as before, a
    little less, or far less; the straggler of `now`, as the poller's history names it."""
    if not recent or not math.isfinite(recent[-1].time):
        return recent
    last = recent[-1]
    util = rng.choice([last.tree_sm_util, 6.0, 30.0])
    mem = last.tree_gpu_mem_mib
    grown = memory_growth(recent, now.rules)
    if grown is not None:
        mem = grown.first_mib + (grown.last_mib - grown.first_mib) * rng.choice([1.1, 0.85, 0.8, 0.3])
    steps = None if last.train_steps is None else last.train_steps + rng.choice([0, 1])
    calls = last.forward_calls + rng.choice([0, 10, 10])
    slow = straggler_candidate(now)
    straggler = None if slow is None else (slow.rank, slow.cause)
    sample = RecentSample(last.time + 1.5, util, mem, calls, util, steps, straggler)
    return (*recent[rng.choice([0, 1]) :], sample)
