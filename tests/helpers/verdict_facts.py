"""Builders of the verdict's facts as the verdict tests write them: runtimes, a GPU, OS graphics
cards, a model, a process, a poll's facts, the recent samples of an idle GPU; `en` and `zh` render a
catalogue text; `settled_facts` gives what a poller shows over a few polls.
"""

from __future__ import annotations

from dataclasses import replace

from probe_wire.records import DeviceRecord, RuntimeRecord
from sidecar.common.catalogue import render
from sidecar.verdict import (
    Facts,
    GpuFacts,
    HysteresisState,
    ModelFacts,
    ProcessFacts,
    RecentSample,
    SystemGpuFacts,
    Verdict,
    decide,
    settle,
)

CPU_RT = RuntimeRecord(torch="2.13.0+cpu", cuda_build=None, cuda_available=False, device_count=0)
CUDA_RT = RuntimeRecord(
    torch="2.5.1+cu124",
    cuda_build="12.4",
    cuda_available=True,
    device_count=1,
    devices=(DeviceRecord(0, "NVIDIA H200", "GPU-aaaa"),),
)
TWO_GPU_RT = replace(CUDA_RT, device_count=2)
# An XPU build on one Intel GPU: torch.xpu sees it, torch.cuda nothing.
XPU_RT = RuntimeRecord(
    torch="2.7.0+xpu",
    xpu_build="20250101",
    cuda_available=False,
    device_count=0,  # torch.cuda's: an XPU build has no CUDA
    xpu_available=True,
    xpu_device_count=1,
)
H200 = GpuFacts(
    0, uuid="GPU-aaaa", name="NVIDIA H200", pci_bus_id="00000000:01:00.0", util=80.0, mem_used_mib=1000
)
NVIDIA_CARD = SystemGpuFacts("NVIDIA", "NVIDIA GPU", "0000:01:00.0", "nvidia", 0)
INTEL_CARD = SystemGpuFacts(
    "Intel", "Intel integrated graphics", "0000:00:02.0", "i915", None, integrated=True
)


def en(text):
    return render(text, "en")


def zh(text):
    return render(text, "zh")


def model(device, *, devices=None, inp=None, calls=10, name="Net", wait=None, batches=None):
    """``wait`` over the loader's last ``batches`` batches."""
    devs = devices if devices is not None else ((device,) if device not in ("mixed", "no-parameters") else ())
    return ModelFacts(name, device, tuple(devs), 1000, inp, calls, 5.0, wait, data_wait_batches=batches)


def proc(pid=100, *, runtime=CUDA_RT, models=(), gpu=(), role="main", is_target=True, **kw):
    return ProcessFacts(
        pid=pid,
        role=role,
        runtime=runtime,
        models=tuple(models),
        gpu=tuple(gpu),
        is_target=is_target,
        probe_state="ok" if runtime else "missing",
        **kw,
    )


def facts(*procs, gpus=(H200,), nvml_ok=True, system=(), **kw):
    return Facts(
        target_pid=procs[0].pid if procs else 100,
        processes=tuple(procs),
        gpus=tuple(gpus),
        nvml_ok=nvml_ok,
        driver="550.54" if nvml_ok else None,
        cuda_driver="12.4" if nvml_ok else None,
        nvml_error=None if nvml_ok else "NVML library not found",
        system_gpus=tuple(system),
        **kw,
    )


def idle_recent(util, calls_start=0, calls_end=100, span_s=12.0, n=9, steps=None):
    return tuple(
        RecentSample(
            1000.0 + i * span_s / (n - 1),
            util,
            500.0,
            calls_start + (calls_end - calls_start) * i // (n - 1),
            util,
            None if steps is None else steps[0] + (steps[1] - steps[0]) * i // (n - 1),
        )
        for i in range(n)
    )


def stepped(device="cuda:0", **kw):
    """A LightningModule as ProbeCallback reports it: steps counted, its own forward never called."""
    return replace(model(device, calls=0), train_steps=625, step_rate_hz=20.0, step_source="lightning", **kw)


def settled_facts(polls: list[Facts]) -> list[Verdict]:
    """settle() over the verdicts of `polls`, each given its poll's facts, as the poller does."""
    state, out = HysteresisState(), []
    for f in polls:
        shown, state = settle(state, decide(f), f.rules, {p.pid for p in f.processes}, f)
        out.append(shown)
    return out
