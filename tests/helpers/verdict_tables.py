"""The verdict's tables: facts in, the status and warning codes they must give (CASES, the verdict's
own rules) and the warning codes the efficiency rules must and must not give (EFFICIENCY_CASES).
tests/unit/test_verdict.py and tests/unit/test_verdict_efficiency.py hold decide() to them; the
message catalogue's and the verdict's property tests (tests/unit/test_verdict_properties.py) read
them as the set of facts that reach every rule.
"""

from __future__ import annotations

from dataclasses import replace

from sidecar.sources.nvml import GPM_FIRST_SAMPLE, GPM_UNSUPPORTED
from sidecar.verdict import (
    LoaderSettings,
    MathSettings,
    ProcGpu,
    RecentSample,
    StepBreakdown,
)
from tests.helpers.verdict_facts import (
    CPU_RT,
    CUDA_RT,
    H200,
    INTEL_CARD,
    NVIDIA_CARD,
    TWO_GPU_RT,
    facts,
    idle_recent,
    model,
    proc,
    stepped,
)


def ranks(backward_fractions, data_wait_fractions, confirmed=True):
    """A job of CPU ranks with these step breakdowns (40 steps each); with ``confirmed``, the polls
    2.5 s apart that named the rank that waits least."""
    procs = [proc(1, runtime=CPU_RT, role="main")]
    for r, (backward, wait) in enumerate(zip(backward_fractions, data_wait_fractions)):
        breakdown = StepBreakdown(10.0, 40, 0.25, wait, 0.1, 0.05, 1.0 - wait - 0.15, backward)
        procs.append(proc(10 + r, runtime=CPU_RT, role="rank", rank=r, is_target=False, models=[model("cpu")], steps=breakdown))
    least = backward_fractions.index(min(backward_fractions))
    recent = tuple(RecentSample(t, None, None, 0, None, None, (least, "data-wait")) for t in (100.0, 102.5))
    return facts(*procs, recent=recent if confirmed else ())


CASES = [
    # id, facts, status, codes that must be present, codes that must be absent
    (
        "cpu model, cpu-only torch, NVIDIA GPU present",
        facts(proc(runtime=CPU_RT, models=[model("cpu")])),
        "CPU",
        {"cpu-build"},
        {"model-on-cpu"},
    ),
    (
        "cpu model on a cpu-only machine: no cpu-build nag",
        facts(proc(runtime=CPU_RT, models=[model("cpu")]), gpus=(), nvml_ok=False),
        "CPU",
        {"nvml-unavailable"},
        {"cpu-build", "model-on-cpu"},
    ),
    (
        "model on cuda:0",
        facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 70)])),
        "GPU",
        set(),
        {"model-on-cpu", "input-mismatch", "no-probe"},
    ),
    (
        "gpu usable, model left on cpu",
        facts(proc(models=[model("cpu")])),
        "CPU",
        {"model-on-cpu"},
        {"cpu-build"},
    ),
    (
        "inputs left on the cpu",
        facts(proc(models=[model("cuda:0", inp="cpu")], gpu=[ProcGpu(0, 900, 70)])),
        "GPU",
        {"input-mismatch"},
        set(),
    ),
    (
        "parameters on two devices",
        facts(proc(models=[model("mixed", devices=("cpu", "cuda:0"))])),
        "MIXED",
        {"mixed-devices"},
        set(),
    ),
    (
        "two models on two device types",
        facts(proc(models=[model("cpu", name="A"), model("cuda:0", name="B")])),
        "MIXED",
        {"mixed-devices"},
        set(),
    ),
    ("no probe, no gpu work", facts(proc(runtime=None)), "UNKNOWN", {"no-probe"}, set()),
    (
        "no probe but a child does gpu work",
        facts(
            proc(runtime=None),
            proc(101, runtime=None, is_target=False, role=None, gpu=[ProcGpu(0, 2000, 50)]),
        ),
        "GPU",
        {"no-probe", "unregistered-gpu-process", "gpu-work-in-child"},
        set(),
    ),
    ("probe without a model", facts(proc()), "UNKNOWN", set(), {"no-probe"}),
    ("no-parameter model", facts(proc(models=[model("no-parameters")])), "UNKNOWN", {"no-parameters"}, set()),
    (
        "registered, then compiled inside a parent: its calls are not counted, and the verdict says why",
        facts(
            proc(
                models=[replace(model("cuda:0", calls=0), forward_rate_hz=0.0, compiled_uncounted=True)],
                gpu=[ProcGpu(0, 900, 70)],
            )
        ),
        "GPU",
        {"registered-before-compile"},
        set(),
    ),
    (
        "dataloader worker holds cuda memory",
        facts(
            proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 70)]),
            proc(101, role="dataloader-worker", is_target=False, gpu=[ProcGpu(0, 300, 0)]),
        ),
        "GPU",
        {"worker-cuda"},
        {"unregistered-gpu-process"},
    ),
    (
        "launcher with a training child on the gpu",
        facts(
            proc(runtime=None, role=None),
            proc(101, is_target=False, models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 60)]),
        ),
        "GPU",
        {"gpu-work-in-child"},
        {"unregistered-gpu-process"},
    ),
    (
        "iGPU + dGPU laptop",
        facts(proc(models=[model("cuda:0")]), system=(INTEL_CARD, NVIDIA_CARD)),
        "GPU",
        {"device-count-mismatch"},
        set(),
    ),
    (
        "only the dGPU: no mismatch",
        facts(proc(models=[model("cuda:0")]), system=(NVIDIA_CARD,)),
        "GPU",
        set(),
        {"device-count-mismatch"},
    ),
    (
        "cuda build hidden by CUDA_VISIBLE_DEVICES",
        facts(
            proc(
                runtime=replace(CUDA_RT, cuda_available=False, device_count=0, cuda_visible_devices=""),
                models=[model("cpu")],
            )
        ),
        "CPU",
        {"cuda-unavailable"},
        {"model-on-cpu"},
    ),
    (
        "driver older than torch's cuda",
        replace(
            facts(
                proc(
                    runtime=replace(CUDA_RT, cuda_available=False, cuda_build="12.8"), models=[model("cpu")]
                )
            ),
            cuda_driver="12.2",
        ),
        "CPU",
        {"cuda-unavailable"},
        set(),
    ),
    (
        "target exited",
        replace(facts(proc(models=[model("cuda:0")])), target_alive=False),
        "GPU",
        {"target-exited"},
        set(),
    ),
    (
        "pid namespace",
        facts(proc(models=[model("cuda:0")]), pid_namespace_suspect=True),
        "GPU",
        {"pid-namespace"},
        set(),
    ),
    (
        "unreadable probe",
        facts(proc(runtime=None, probe_unreadable=True, probe_error="bad magic")),
        "UNKNOWN",
        {"probe-unreadable"},
        set(),
    ),
    (
        "probe cannot publish",
        facts(proc(runtime=None, publish_failure="SegmentError: payload needs 9000 bytes")),
        "UNKNOWN",
        {"probe-error"},
        set(),
    ),
    (
        "idle gpu while forward calls continue",
        facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 0)]), recent=idle_recent(1.0)),
        "GPU",
        {"idle-gpu"},
        set(),
    ),
    (
        "busy gpu is not idle",
        facts(proc(models=[model("cuda:0")]), recent=idle_recent(60.0)),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "idle but no forward calls: paused, not starved",
        facts(proc(models=[model("cuda:0")]), recent=idle_recent(0.0, 50, 50)),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "idle for too short a time",
        facts(proc(models=[model("cuda:0")]), recent=idle_recent(0.0, span_s=4.0)),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "idle gpu while training steps continue, the module's own forward never called (Lightning)",
        facts(
            proc(models=[stepped()], gpu=[ProcGpu(0, 900, 0)]),
            recent=idle_recent(1.0, 34, 34, steps=(0, 625)),
        ),
        "GPU",
        {"idle-gpu"},
        set(),
    ),
    (
        "idle, forward calls move but no training step does: evaluating, not starved",
        facts(proc(models=[stepped()]), recent=idle_recent(0.0, 0, 100, steps=(625, 625))),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "hogwild: a shared model and spawned children without the probe",
        facts(
            proc(runtime=CPU_RT, models=[replace(model("cpu", name="hog", calls=0), shared_memory=True)]),
            proc(201, runtime=None, role=None, is_target=False, ppid=100),
            proc(202, runtime=None, role=None, is_target=False, ppid=100, mp_helper=True),
            gpus=(),
            nvml_ok=False,
        ),
        "CPU",
        {"shared-model-unprobed-child"},
        set(),
    ),
    (
        "hogwild under fork: the children run the probe and count their calls",
        facts(
            proc(runtime=CPU_RT, models=[replace(model("cpu", name="hog"), shared_memory=True)]),
            proc(
                201,
                runtime=CPU_RT,
                role="child",
                is_target=False,
                ppid=100,
                models=[model("cpu", name="hog")],
            ),
            gpus=(),
            nvml_ok=False,
        ),
        "CPU",
        set(),
        {"shared-model-unprobed-child"},
    ),
    (
        "a model not in shared memory: its children are none of its business",
        facts(
            proc(runtime=CPU_RT, models=[model("cpu")]),
            proc(201, runtime=None, role=None, is_target=False, ppid=100),
            gpus=(),
            nvml_ok=False,
        ),
        "CPU",
        set(),
        {"shared-model-unprobed-child"},
    ),
    (
        "two ranks on one gpu",
        facts(
            proc(runtime=None, role=None),
            proc(
                101, role="rank", is_target=False, local_rank=0, models=[model("cuda:0")], runtime=TWO_GPU_RT
            ),
            proc(
                102, role="rank", is_target=False, local_rank=1, models=[model("cuda:0")], runtime=TWO_GPU_RT
            ),
        ),
        "GPU",
        {"rank-shared-gpu", "rank-device-mismatch"},
        set(),
    ),
    (
        "a stopped job (kill -STOP): its last figures are not a healthy job",
        facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 70)]), stopped=((100, 12.0),)),
        "GPU",
        {"job-stopped"},
        set(),
    ),
    (
        "a stopped job that has exited since: only target-exited",
        facts(proc(models=[model("cuda:0")]), stopped=((100, 12.0),), target_alive=False),
        "GPU",
        {"target-exited"},
        {"job-stopped"},
    ),
    (
        "rank 1 makes the others wait in the all-reduce: it waits on its data",
        ranks([0.6, 0.3, 0.6], [0.1, 0.4, 0.1]),
        "CPU",
        {"straggler-rank"},
        set(),
    ),
    (
        "ranks alike",
        ranks([0.4, 0.41, 0.4], [0.1, 0.1, 0.1]),
        "CPU",
        set(),
        {"straggler-rank"},
    ),
    (
        "a slow rank seen at one poll only",
        ranks([0.6, 0.3, 0.6], [0.1, 0.4, 0.1], confirmed=False),
        "CPU",
        set(),
        {"straggler-rank"},
    ),
]
HOPPER = replace(H200, compute_capability="9.0", sm_clock_mhz=1980, sm_clock_max_mhz=1980)
ON_GPU = [ProcGpu(0, 900, 70)]
FP32_OFF = MathSettings(allow_tf32_matmul=False, cudnn_allow_tf32=True, float32_matmul_precision="highest")


def fp32(**kw):
    return replace(model("cuda:0"), param_dtypes=("float32",), autocast="off", **kw)


def job(*, gpu=HOPPER, models=None, gpu_use=ON_GPU, **proc_kw):
    return facts(proc(models=models or [model("cuda:0")], gpu=gpu_use, **proc_kw), gpus=(gpu,))


def steps(wait, n=20):
    return StepBreakdown(window_s=10.0, steps=n, step_s=0.5, data_wait_fraction=wait, forward_fraction=0.1)


EFFICIENCY_CASES = [
    # id, facts, codes that must be present, codes that must be absent
    (
        "thermal slowdown while the job runs",
        job(
            gpu=replace(
                HOPPER, clock_event_reasons=("hw_thermal_slowdown",), sm_clock_mhz=900, temperature_c=91.0
            )
        ),
        {"throttled"},
        set(),
    ),
    (
        "power brake",
        job(gpu=replace(HOPPER, clock_event_reasons=("sw_power_cap", "hw_power_brake_slowdown"))),
        {"throttled"},
        set(),
    ),
    (
        "the software power cap alone is a GPU at full load, not a fault",
        job(gpu=replace(HOPPER, clock_event_reasons=("sw_power_cap",))),
        set(),
        {"throttled"},
    ),
    (
        "a slowdown flagged while the GPU is idle costs the job nothing",
        job(gpu=replace(HOPPER, util=0.0, clock_event_reasons=("gpu_idle", "hw_slowdown"))),
        set(),
        {"throttled"},
    ),
    (
        "no utilisation known (MIG) and the driver says idle: not named",
        job(gpu=replace(HOPPER, util=None, clock_event_reasons=("gpu_idle", "hw_thermal_slowdown"))),
        set(),
        {"throttled"},
    ),
    (
        "no utilisation known (MIG) but GPM says the SMs work: named",
        job(gpu=replace(HOPPER, util=None, sm_activity_fraction=0.7, clock_event_reasons=("hw_slowdown",))),
        {"throttled"},
        set(),
    ),
    (
        "no utilisation known at all and no idle reason: named",
        job(gpu=replace(HOPPER, util=None, clock_event_reasons=("hw_power_brake_slowdown",))),
        {"throttled"},
        set(),
    ),
    (
        "idle clocks are not throttling",
        job(gpu=replace(HOPPER, clock_event_reasons=("gpu_idle",))),
        set(),
        {"throttled"},
    ),
    (
        "x4 Gen1 link of a x16 Gen4 card while the GPU works",
        job(
            gpu=replace(
                HOPPER, pcie_link_gen=1, pcie_link_gen_max=4, pcie_link_width=4, pcie_link_width_max=16
            )
        ),
        {"pcie-degraded"},
        set(),
    ),
    (
        "an idle GPU drops its link to Gen1 to save power: not degraded",
        job(
            gpu=replace(
                HOPPER,
                util=0.0,
                pcie_link_gen=1,
                pcie_link_gen_max=5,
                pcie_link_width=16,
                pcie_link_width_max=16,
            )
        ),
        set(),
        {"pcie-degraded"},
    ),
    (
        "GPM says no data moves over a narrow link: not reported",
        job(
            gpu=replace(
                HOPPER,
                pcie_link_gen=4,
                pcie_link_gen_max=5,
                pcie_link_width=16,
                pcie_link_width_max=16,
                pcie_tx_bytes_per_s=1000.0,
                pcie_rx_bytes_per_s=2000.0,
            )
        ),
        set(),
        {"pcie-degraded"},
    ),
    (
        "busy-but-hollow: 95 % utilisation, 10 % SM activity",
        job(gpu=replace(HOPPER, util=95.0, sm_activity_fraction=0.10, sm_occupancy_fraction=0.30)),
        {"hollow-utilisation"},
        set(),
    ),
    (
        "busy-but-hollow, but the job's own processes barely use the GPU: another user's kernels",
        job(
            gpu=replace(HOPPER, util=95.0, sm_activity_fraction=0.10, sm_occupancy_fraction=0.05),
            gpu_use=[ProcGpu(0, 900, 1)],
        ),
        set(),
        {"hollow-utilisation"},
    ),
    (
        "busy and full: GPM agrees with NVML",
        job(gpu=replace(HOPPER, util=95.0, sm_activity_fraction=0.90, sm_occupancy_fraction=0.45)),
        set(),
        {"hollow-utilisation"},
    ),
    (
        "every SM busy with few resident warps (large GEMM or attention kernels): not hollow",
        job(gpu=replace(HOPPER, util=97.0, sm_activity_fraction=0.92, sm_occupancy_fraction=0.08)),
        set(),
        {"hollow-utilisation"},
    ),
    (
        "no GPM (before Hopper): nothing to say about hollowness",
        job(gpu=replace(H200, util=99.0)),
        set(),
        {"hollow-utilisation"},
    ),
    (
        "fp32, no autocast, TF32 off, tensor cores idle",
        job(models=[fp32()], math=FP32_OFF, gpu=replace(HOPPER, tensor_activity_fraction=0.0)),
        {"no-tensor-cores"},
        set(),
    ),
    (
        "bf16 parameters use tensor cores",
        job(models=[replace(fp32(), param_dtypes=("bfloat16",))], math=FP32_OFF),
        set(),
        {"no-tensor-cores"},
    ),
    (
        "autocast on",
        job(models=[replace(fp32(), autocast="bfloat16")], math=FP32_OFF),
        set(),
        {"no-tensor-cores"},
    ),
    (
        "TF32 allowed through the matmul precision",
        job(models=[fp32()], math=replace(FP32_OFF, float32_matmul_precision="high")),
        set(),
        {"no-tensor-cores"},
    ),
    (
        "a GPU without tensor cores (Pascal)",
        job(models=[fp32()], math=FP32_OFF, gpu=replace(HOPPER, compute_capability="6.1")),
        set(),
        {"no-tensor-cores"},
    ),
    (
        "GPM sees tensor cores busy all the same",
        job(models=[fp32()], math=FP32_OFF, gpu=replace(HOPPER, tensor_activity_fraction=0.6)),
        set(),
        {"no-tensor-cores"},
    ),
    (
        "a GPM GPU's first poll (and --once): tensor activity not known yet, not idle",
        job(
            models=[fp32()],
            math=FP32_OFF,
            gpu=replace(
                HOPPER,
                tensor_activity_fraction=None,
                field_errors=(("tensor_activity_fraction", GPM_FIRST_SAMPLE),),
            ),
        ),
        set(),
        {"no-tensor-cores"},
    ),
    (
        "no GPM at all (before Hopper): the settings alone say it",
        job(
            models=[fp32()],
            math=FP32_OFF,
            gpu=replace(
                HOPPER,
                compute_capability="8.0",
                tensor_activity_fraction=None,
                field_errors=(("tensor_activity_fraction", GPM_UNSUPPORTED),),
            ),
        ),
        {"no-tensor-cores"},
        set(),
    ),
    (
        "many host syncs per step",
        job(syncs_per_step=40.0),
        {"host-syncs"},
        set(),
    ),
    (
        "one .item() per step for logging is fine",
        job(syncs_per_step=1.0),
        set(),
        {"host-syncs"},
    ),
    (
        "the step waits for data most of the time",
        job(
            steps=steps(0.7),
            models=[replace(model("cuda:0"), loader_settings=LoaderSettings(0, False, False, 32))],
        ),
        {"data-starved"},
        set(),
    ),
    (
        "too few steps in the window to say",
        job(steps=steps(0.9, n=2)),
        set(),
        {"data-starved"},
    ),
    (
        "slow steps: four 2.5 s steps in the window, the loader's last 64 batches waited 99 %",
        job(
            steps=StepBreakdown(
                window_s=10.0, steps=4, step_s=2.5, data_wait_fraction=0.99, forward_fraction=0.001
            ),
            models=[model("cuda:0", wait=0.99, batches=64)],
        ),
        {"data-starved"},
        set(),
    ),
    (
        "a slow start: 3 steps, the loader's 4 batches waited 95 % (the workers' start)",
        job(
            steps=StepBreakdown(window_s=0.3, steps=3, step_s=0.1, data_wait_fraction=0.02),
            models=[model("cuda:0", wait=0.95, batches=4)],
        ),
        set(),
        {"data-starved"},
    ),
    (
        "a slow start: no step boundary yet, the loader's first batch waited for it all",
        job(models=[model("cuda:0", wait=1.0, batches=1)]),
        set(),
        {"data-starved"},
    ),
    (
        "the breakdown's 17 steps at 1.8 % over the loader's 18 batches at 95 % (an old probe's)",
        job(steps=steps(0.018, n=17), models=[model("cuda:0", wait=0.95, batches=18)]),
        set(),
        {"data-starved"},
    ),
    (
        "a fed loop",
        job(steps=steps(0.05)),
        set(),
        {"data-starved"},
    ),
    (
        "MIG: per-process utilisation does not exist",
        job(gpu=replace(HOPPER, util=None, mig_mode=True)),
        {"mig-no-process-util"},
        set(),
    ),
]
