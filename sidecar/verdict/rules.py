"""The rules: each yields the findings whose condition holds now, as codes, severities, pids and
references into the catalogue (sidecar/static/shared/i18n/*.json: `warning.CODE`, `hint.CODE[.VARIANT]`).
Params are display-ready and the same in every language; words that differ per language are
references themselves."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from probe_wire.records import RuntimeRecord
from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS
from sidecar.common.catalogue import Ref, ref
from sidecar.verdict.device_count import rule_device_count_mismatch
from sidecar.verdict.efficiency import EFFICIENCY_RULES, data_wait
from sidecar.verdict.facts import (
    AMD_VENDOR,
    GPU_DEVICE_TYPES,
    INTEL_VENDOR,
    NVIDIA_VENDOR,
    VENDOR_AMD,
    VENDOR_INTEL,
    VENDOR_NVIDIA,
    Facts,
    Finding,
    ModelHits,
    ProcessFacts,
    RecentSample,
    all_models,
    amd_in_system,
    cpu_only_build,
    device_index,
    device_type,
    hint_device_type,
    model_gpu_index,
    nvidia_in_system,
    plist,
    runtimes,
    samples_in_order,
    version_tuple,
)
from sidecar.verdict.memory_growth import MemoryGrowth, memory_growth, rule_memory_growth
from sidecar.verdict.stragglers import STRAGGLER_RULES
from sidecar.verdict.vendors import (
    cpu_build_gpu,
    rocm_build_hint,
    rocm_unavailable_reason,
    runtime_vendor,
    xpu_build_hint,
)
from sidecar.verdict.wheels import CUDA_WHEELS, cuda_wheel

# What `from sidecar.verdict import ...` gives (sidecar/verdict/__init__.py).
__all__ = ["RULES", "MemoryGrowth", "Rule", "cpu_build_hint", "cuda_unavailable_reason", "memory_growth"]
__all__ += ["probe_present"]


Rule = Callable[[Facts], Iterable[Finding]]


def finding(code: str, severity: str, message: Ref, hint: Ref | None, pids: Iterable[int] = ()) -> Finding:
    return Finding(code, severity, message, hint, tuple(pids))


def _names(models: Iterable[Any]) -> str:
    return ", ".join(sorted({m.name for m in models}))


def _about_models(code: str, severity: str, message_id: str, hint_id: str, hits: ModelHits) -> Finding:
    """A finding that names the models of `hits` ((process, model) pairs) and their processes."""
    names = _names(m for _, m in hits)
    return finding(
        code, severity, ref(message_id, model=names), ref(hint_id), sorted({p.pid for p, _ in hits})
    )


def rule_target_exited(f: Facts) -> Iterable[Finding]:
    if not f.target_alive:
        yield finding(
            "target-exited",
            "info",
            ref("warning.target-exited", pid=f.target_pid),
            ref("hint.target-exited"),
            (f.target_pid,),
        )


def rule_job_stopped(f: Facts) -> Iterable[Finding]:
    """A stopped process (SIGSTOP, Ctrl-Z: state T) does nothing, yet its probe's figures stay at
    their last values, which read as a healthy job. The time is since the sidecar saw it stopped."""
    if not f.target_alive or not f.stopped:
        return
    pids = tuple(pid for pid, _ in f.stopped)
    params = {"pids": plist(pids[:5]), "seconds": f"{max(s for _, s in f.stopped):.0f}"}
    if f.target_pid in pids:
        message = Ref("warning.job-stopped", params)
    else:
        message = Ref("warning.job-stopped.some", {**params, "count": len(pids)})
    yield finding("job-stopped", "warning", message, ref("hint.job-stopped", pid=pids[0]), pids)


def rule_nvml_unavailable(f: Facts) -> Iterable[Finding]:
    """NVML (NVIDIA's driver library) does not answer: a warning where the OS lists an NVIDIA GPU,
    else information: expected on a CPU-only machine, and on one whose only GPUs are AMD's or Intel's,
    which the sidecar reads from the kernel instead (there the verdict does not rest on the probe
    alone, and the machine is no CPU-only one: the texts say so)."""
    if f.nvml_ok:
        return
    nvidia_hw = any(s.vendor == NVIDIA_VENDOR for s in f.system_gpus)
    reason = f.nvml_error or ref("word.unknown-error")
    others = list(dict.fromkeys(s.vendor for s in f.system_gpus if s.vendor in (AMD_VENDOR, INTEL_VENDOR)))
    if not nvidia_hw and others:
        message = ref("warning.nvml-unavailable.vendor-gpus", reason=reason)
        hint = ref("hint.nvml-unavailable.vendor-gpus", vendors=", ".join(others))
    else:
        message = ref("warning.nvml-unavailable", reason=reason)
        hint = ref("hint.nvml-unavailable" if nvidia_hw else "hint.nvml-unavailable.no-nvidia")
    yield finding("nvml-unavailable", "warning" if nvidia_hw else "info", message, hint)


# Segment states of a process that runs the probe although its facts cannot be read (another
# user's private segment, a bad or stuck one, one being created): "no probe" would be false there.
PROBE_PRESENT_STATES = frozenset({"foreign-owner", "corrupt", "busy", "initialising"})


def probe_present(f: Facts) -> bool:
    """Some process of the job runs the probe, read or not."""
    return any(p.has_probe or p.probe_state in PROBE_PRESENT_STATES for p in f.processes)


def rule_no_probe(f: Facts) -> Iterable[Finding]:
    if not f.target_alive or probe_present(f):
        return
    age_s, grace_s = f.target_age_s, f.rules.probe_grace_s
    if age_s is not None and 0.0 <= age_s < grace_s:  # (a negative age: another clock than the job's)
        message = ref("warning.no-probe.waiting", seconds=f"{age_s:.0f}")
        yield finding("no-probe", "info", message, ref("hint.no-probe.waiting", grace=f"{grace_s:.0f}"))
        return
    yield finding("no-probe", "warning", ref("warning.no-probe"), ref("hint.no-probe"))


def rule_probe_unreadable(f: Facts) -> Iterable[Finding]:
    bad = [p for p in f.processes if p.probe_unreadable]
    if bad:
        hint = _unreadable_hint({p.probe_state for p in bad})
        why = lambda p: p.probe_error or p.probe_state  # noqa: E731
        yield _probe_trouble("probe-unreadable", "warning.probe-unreadable", bad, why, hint)


def _unreadable_hint(states: set[str]) -> Ref:
    """The fix for why it cannot be read: a planted file (whoever reads), a reader without the
    permission (never root: root opens every file), or a bad file."""
    if "owner-mismatch" in states:
        return ref("hint.probe-unreadable.owner-mismatch")
    if "foreign-owner" in states:
        return ref("hint.probe-unreadable.foreign-owner")
    return ref("hint.probe-unreadable")


def rule_probe_error(f: Facts) -> Iterable[Finding]:
    bad = [p for p in f.processes if p.publish_failure]
    if bad:
        why = lambda p: p.publish_failure  # noqa: E731
        yield _probe_trouble("probe-error", "warning.probe-error", bad, why, ref("hint.probe-error"))


def _probe_trouble(
    code: str, message_id: str, bad: list[ProcessFacts], why: Callable[[ProcessFacts], str], hint: Ref
) -> Finding:
    """A warning about processes whose probe is not heard: how many, and why for the first three."""
    reasons = "; ".join(f"{p.pid}: {why(p)}" for p in bad[:3])
    return finding(
        code, "warning", ref(message_id, count=len(bad), reasons=reasons), hint, (p.pid for p in bad)
    )


def _cudas(torch_version: str) -> str:
    """The CUDA versions of the wheels of the torch `torch_version` (a release the table has)."""
    major, minor = (int(x) for x in torch_version.split(".")[:2])
    return ", ".join(f"{c[0]}.{c[1]}" for c in CUDA_WHEELS[major, minor])


def _without_workers(procs: list[ProcessFacts]) -> list[ProcessFacts]:
    """The processes to name for what a job's torch is (its build, whether it has CUDA): DataLoader
    workers share their trainer's torch, so they are named only when nothing else has it."""
    return [p for p in procs if p.role != "dataloader-worker"] or procs


def cpu_build_hint(torch_version: str | None, cuda_driver: str | None) -> Ref:
    """How to replace a CPU-only torch with the CUDA build of the same version that runs on the
    driver (sidecar/verdict/wheels.py); never an index that lacks that version."""
    w = cuda_wheel(torch_version, cuda_driver)
    if w.kind == "unknown":
        return ref("hint.cpu-build.unknown", torch=w.torch)
    if w.kind == "driver-old" and cuda_driver:  # said of a known driver only: cuda_driver is there
        return ref(
            "hint.cpu-build.driver-old", torch=w.torch, tag=w.tag, cuda=cuda_driver, cudas=_cudas(w.torch)
        )
    if cuda_driver:
        return ref("hint.cpu-build.driver", torch=w.torch, tag=w.tag, cuda=cuda_driver)
    return ref("hint.cpu-build", torch=w.torch, tag=w.tag)


def rule_cpu_build(f: Facts) -> Iterable[Finding]:
    gpu = cpu_build_gpu(f)
    if gpu is None:
        return
    pids = [p.pid for p in _without_workers([p for p, rt in runtimes(f) if cpu_only_build(rt)])]
    if pids:
        torch_v = str(next(rt.torch for p, rt in runtimes(f) if p.pid == pids[0]))
        if gpu == "amd":
            message, hint = ref("warning.cpu-build.amd", torch=torch_v), rocm_build_hint(torch_v)
        elif gpu == "intel":
            message, hint = ref("warning.cpu-build.intel", torch=torch_v), xpu_build_hint(torch_v)
        else:
            message, hint = ref("warning.cpu-build", torch=torch_v), cpu_build_hint(torch_v, f.cuda_driver)
        yield finding("cpu-build", "error", message, hint, pids)


def _driver_old_hint(torch_version: str | None, cuda_driver: str, build: str) -> Ref:
    """A driver older than torch's CUDA: the same torch built for a CUDA the driver supports, when
    PyTorch publishes one, else a newer driver."""
    w = cuda_wheel(torch_version, cuda_driver)
    if w.kind == "index":
        return ref("hint.cuda-unavailable.driver-old", torch=w.torch, tag=w.tag)
    return ref("hint.cuda-unavailable.driver-old.upgrade", build=build)


def cuda_unavailable_reason(f: Facts, rt: RuntimeRecord) -> tuple[Ref, Ref]:
    """(reason, hint) for a CUDA build of torch that cannot use CUDA, or a ROCm build that cannot
    use its AMD GPU (sidecar/verdict/rocm.py)."""
    if rt.hip_build is not None:
        return rocm_unavailable_reason(f, rt)
    visible = rt.cuda_visible_devices
    if visible is not None and str(visible).strip() in ("", "-1", "none", "NoDevFiles"):
        return ref("reason.cuda.hidden", value=repr(visible)), ref("hint.cuda-unavailable.hidden")
    if not nvidia_in_system(f):
        return ref("reason.cuda.no-nvidia"), ref("hint.cuda-unavailable.no-nvidia")
    if rt.cuda_driver_loadable is False and f.nvml_ok:
        # NVML (nvidia-smi) answers without libcuda.so.1; CUDA cannot. Before the driver's age: with
        # no library, no CUDA version of torch would run either.
        return (
            ref("reason.cuda.no-driver-library", count=len(f.gpus)),
            ref("hint.cuda-unavailable.no-driver-library"),
        )
    build, drv = version_tuple(rt.cuda_build), version_tuple(f.cuda_driver)
    if build and drv and drv < build:
        return (
            ref("reason.cuda.driver-old", driver=str(f.cuda_driver), build=str(rt.cuda_build)),
            _driver_old_hint(rt.torch, str(f.cuda_driver), str(rt.cuda_build)),
        )
    if not f.nvml_ok:
        return (
            ref("reason.cuda.driver-unusable", error=f.nvml_error or ref("word.unknown")),
            ref("hint.cuda-unavailable.driver-unusable"),
        )
    return ref("reason.cuda.init-failed"), ref("hint.cuda-unavailable")


def rule_cuda_unavailable(f: Facts) -> Iterable[Finding]:
    hits = _without_workers(
        [p for p, rt in runtimes(f) if (rt.cuda_build or rt.hip_build) and rt.cuda_available is False]
    )
    if hits and hits[0].runtime is not None:
        rt = hits[0].runtime
        reason, hint = cuda_unavailable_reason(f, rt)
        has_gpu = amd_in_system(f) if rt.hip_build is not None else nvidia_in_system(f)
        yield finding(
            "cuda-unavailable",
            "error" if has_gpu else "warning",
            ref("warning.cuda-unavailable", reason=reason),
            hint,
            (p.pid for p in hits),
        )


def _usable_gpu(rt: RuntimeRecord | None) -> str | None:
    """The torch device type of the GPU a process's torch can use: "cuda" (NVIDIA's, or a ROCm
    build's AMD GPU), "xpu" (an XPU build's Intel GPU); None: none, or not known."""
    if rt is None:
        return None
    if rt.cuda_available is True:
        return "cuda"
    return "xpu" if rt.xpu_available is True else None


def rule_model_on_cpu(f: Facts) -> Iterable[Finding]:
    hits = [
        (p, m, device)
        for p, m in all_models(f)
        if m.types == {"cpu"} and (device := _usable_gpu(p.runtime)) is not None
    ]
    if hits:
        yield finding(
            "model-on-cpu",
            "error",
            ref("warning.model-on-cpu", model=_names(m for _, m, _ in hits)),
            ref("hint.model-on-cpu", device=hits[0][2]),
            sorted({p.pid for p, *_ in hits}),
        )


def rule_input_mismatch(f: Facts) -> Iterable[Finding]:
    hits = [
        (p, m, m.device, m.input_device)
        for p, m in all_models(f)
        if m.input_device
        and m.device
        and m.device not in (DEVICE_MIXED, DEVICE_NO_PARAMETERS)
        and m.input_device != m.device
        and device_type(m.input_device) != "meta"
    ]
    if hits:
        _, m, device, input_device = hits[0]
        yield finding(
            "input-mismatch",
            "error",
            ref("warning.input-mismatch", model=m.name, device=device, input=input_device),
            ref("hint.input-mismatch", device=device),
            sorted({p.pid for p, *_ in hits}),
        )


def rule_mixed_devices(f: Facts) -> Iterable[Finding]:
    models = all_models(f)
    split = [(p, m) for p, m in models if len(m.types) > 1]
    types = set().union(*(m.types for _, m in models)) if models else set()
    if split:
        _, m = split[0]
        yield finding(
            "mixed-devices",
            "warning",
            ref("warning.mixed-devices", model=m.name, devices=", ".join(m.devices)),
            ref("hint.mixed-devices"),
            sorted({p.pid for p, _ in split}),
        )
    elif len(types) > 1:
        yield finding(
            "mixed-devices",
            "warning",
            ref("warning.mixed-devices.types", types=", ".join(sorted(types))),
            ref("hint.mixed-devices.types"),
            sorted({p.pid for p, _ in models}),
        )


def rule_no_parameters(f: Facts) -> Iterable[Finding]:
    hits = [(p, m) for p, m in all_models(f) if m.device == DEVICE_NO_PARAMETERS]
    if hits:
        yield _about_models("no-parameters", "info", "warning.no-parameters", "hint.no-parameters", hits)


def rule_registered_before_compile(f: Facts) -> Iterable[Finding]:
    # Without this warning a compiled model reads "0/s" while it trains, the reason only on its stderr.
    hits = [(p, m) for p, m in all_models(f) if m.compiled_uncounted]
    if hits:
        yield _about_models(
            "registered-before-compile",
            "warning",
            "warning.registered-before-compile",
            "hint.registered-before-compile",
            hits,
        )


# worker-cuda's words by whose context the workers' memory is (_worker_backend): the context, and
# the device whole batches go to (a ROCm build's is `cuda` too).
_WORKER_CONTEXTS = {
    "cuda": ("word.context.cuda", "cuda"),
    "rocm": ("word.context.rocm", "cuda"),
    "xpu": ("word.context.xpu", "xpu"),
    "gpu": ("word.context.gpu", "cuda"),
}


def _worker_backend(f: Facts, hits: list[ProcessFacts]) -> str:
    """Whose context the workers' GPU memory is: the job's torch says (the workers' own, else the
    job's first): CUDA, ROCm's HIP, XPU's Level Zero. A CPU-only build's (or no probe's): CUDA's on
    an NVIDIA GPU or from the probe's allocator figures, a GPU context of no runtime of torch's on an
    AMD or Intel GPU (a library the worker ran opened it)."""
    rt = next((p.runtime for p in hits if p.runtime is not None), None)
    if rt is None:
        rt = next((r for _, r in runtimes(f)), None)
    if rt is not None and not cpu_only_build(rt):
        return {VENDOR_AMD: "rocm", VENDOR_INTEL: "xpu"}.get(runtime_vendor(rt), "cuda")
    vendors = {g.vendor for p in hits for g in p.gpu if g.in_use}
    return "gpu" if vendors and VENDOR_NVIDIA not in vendors else "cuda"


def rule_worker_cuda(f: Facts) -> Iterable[Finding]:
    hits = [
        p
        for p in f.processes
        if p.role == "dataloader-worker" and (p.gpu_mem_mib > 0 or (p.cuda_memory_mib or 0) > 0)
    ]
    if hits:
        context, device = _WORKER_CONTEXTS[_worker_backend(f, hits)]
        yield finding(
            "worker-cuda",
            "warning",
            ref("warning.worker-cuda", pids=plist(p.pid for p in hits), context=ref(context)),
            ref("hint.worker-cuda", device=device),
            (p.pid for p in hits),
        )


def rule_gpu_work_in_child(f: Facts) -> Iterable[Finding]:
    target = next((p for p in f.processes if p.is_target), None)
    if target is None or target.uses_gpu:
        return
    kids = [p for p in f.processes if not p.is_target and p.uses_gpu]
    if kids:
        where = ", ".join(f"{p.pid} ({p.role or p.name})" for p in kids[:4])
        yield finding(
            "gpu-work-in-child",
            "info",
            ref("warning.gpu-work-in-child", pid=target.pid, processes=where),
            ref("hint.gpu-work-in-child"),
            (p.pid for p in kids),
        )


def rule_unregistered_gpu_process(f: Facts) -> Iterable[Finding]:
    hits = [p for p in f.processes if p.uses_gpu and not p.has_probe]
    if not hits:
        return
    # Spawned DataLoader workers or pool children: they never run the script's register() line.
    mp = all(p.mp_child for p in hits)
    yield finding(
        "unregistered-gpu-process",
        "warning",
        ref("warning.unregistered-gpu-process", pids=plist(p.pid for p in hits)),
        ref("hint.unregistered-gpu-process.mp-child" if mp else "hint.unregistered-gpu-process"),
        (p.pid for p in hits),
    )


def rule_shared_model_unprobed_child(f: Facts) -> Iterable[Finding]:
    """A model in shared memory (``share_memory()``: hogwild) and child processes without the probe:
    whatever those children compute with it is not counted anywhere. Forked children inherit the
    probe and count their own calls; spawned and forkserver ones start without it."""
    owners: dict[int | None, ProcessFacts] = {
        p.pid: p for p, m in all_models(f) if m.shared_memory
    }  # by ppid
    if not owners:
        return
    kids = [
        p
        for p in f.processes
        if p.ppid in owners and not p.has_probe and not p.mp_helper and p.probe_state == "missing"
    ]
    if not kids:
        return
    owner = owners[kids[0].ppid]
    yield finding(
        "shared-model-unprobed-child",
        "info",
        ref(
            "warning.shared-model-unprobed-child",
            model=_names(m for m in owner.models if m.shared_memory),
            pid=owner.pid,
            pids=plist(p.pid for p in kids),
        ),
        ref("hint.shared-model-unprobed-child"),
        (p.pid for p in kids),
    )


def rule_pid_namespace(f: Facts) -> Iterable[Finding]:
    if f.pid_namespace_suspect:
        yield finding("pid-namespace", "warning", ref("warning.pid-namespace"), ref("hint.pid-namespace"))


_time = attrgetter("time")


def _idle_window(f: Facts) -> list[RecentSample] | None:
    """The recent samples covering the idle window (and the one before it), or None when history is
    too short."""
    recent = f.recent
    if not recent:
        return None
    window_s = f.rules.idle_window_s
    now = recent[-1].time
    cutoff = now - window_s
    if not samples_in_order(recent) or cutoff != cutoff:  # or a NaN cutoff: the plain scan
        return _idle_window_scan(recent, cutoff, now, window_s)
    start = bisect_left(recent, cutoff, key=_time)  # the first sample of the window (times >= cutoff)
    if start:
        return list(recent[start - 1 :])
    return None if now - recent[0].time < window_s else list(recent)


def _idle_window_scan(
    recent: Sequence[RecentSample], cutoff: float, now: float, window_s: float
) -> list[RecentSample] | None:
    """_idle_window of samples in any order: each sample at or after the cutoff, and the last one
    before it."""
    window = [s for s in recent if s.time >= cutoff]
    older = [s for s in recent if s.time < cutoff]
    if not window and not older:
        return None  # a NaN time compares false both ways: no window can be measured
    if not older and (now - window[0].time) < window_s:
        return None
    if older:
        window = [older[-1], *window]
    return window


def _still_working(window: list[RecentSample]) -> bool:
    """Training went on over the window: by its trainer's steps where a callback counts them (the
    registered module's forward may never be called), else by forward calls."""
    first, last = window[0], window[-1]
    if first.train_steps is not None and last.train_steps is not None:
        return last.train_steps > first.train_steps
    return last.forward_calls > first.forward_calls


def rule_idle_gpu(f: Facts) -> Iterable[Finding]:
    """A model on a GPU (`cuda` or `xpu`) whose GPU stays under the idle threshold over the window
    while steps go on. A sample's figure is the job's own utilisation (tree_sm_util: NVML's SM %, an
    AMD or Intel GPU's busiest DRM engine), else the device busy % of the model's GPU. On an Intel
    GPU (`xpu`) the first is the one there is: its drivers print no device busy figure. It needs no
    answer to which Intel GPU `xpu:N` is (the probe gives no PCI address for it, so of several it
    cannot be told): the job's rows on every GPU it opened are summed, and a sum under the threshold
    is each GPU under it. An AMD or Intel row whose utilisation is unknown (a first reading, no
    engine counters, ROCm's compute) leaves the sum unknown (poll/samples.py), and an unknown
    sample leaves the window unjudged: nothing is said before there is evidence."""
    on_gpu = [(p, m) for p, m in all_models(f) if not m.types.isdisjoint(GPU_DEVICE_TYPES)]
    if not on_gpu:
        return
    window = _idle_window(f)
    if not window or len(window) < 2:
        return
    utils = [s.tree_sm_util if s.tree_sm_util is not None else s.model_gpu_util for s in window]
    if None in utils or max(u for u in utils if u is not None) >= f.rules.idle_util_pct:
        return
    if not _still_working(window):
        return  # no steps (or forward calls): the job is paused or evaluating elsewhere, not starved
    # The data wait as data-starved measures it, over as many steps or whole batches: over a loader's
    # first few, the workers' start reads as a loop that waits for each batch.
    waits = [w for p in {p.pid: p for p, _ in on_gpu}.values() if (w := data_wait(f, p)) is not None]
    if waits and max(waits) >= f.rules.data_wait_starved:
        hint = ref("hint.idle-gpu.data-wait", wait=f"{max(waits):.0%}")
    else:
        hint = ref("hint.idle-gpu")
    work = ref("word.training-steps" if window[-1].train_steps is not None else "word.forward-calls")
    message = ref(
        "warning.idle-gpu",
        threshold=f"{f.rules.idle_util_pct:.0f}%",
        seconds=f"{window[-1].time - window[0].time:.0f}",
        work=work,
    )
    yield finding("idle-gpu", "warning", message, hint, sorted({p.pid for p, _ in on_gpu}))


def _rank_gpus(f: Facts) -> dict[int, set[int]]:
    """GPU indices each rank process uses (by its models, else by the memory it holds on each).
    Not by its memory on Intel GPUs where the machine has several: an XPU build's Level Zero opens
    every Intel GPU it lists, and may hold memory on each, so its rows do not say which one it
    computes on (nor does the probe: it gives no PCI address for `xpu:N`). Such a rank says nothing
    rather than seem to share a GPU with the others."""
    several_intel = sum(1 for g in f.gpus if g.vendor == VENDOR_INTEL) > 1
    out: dict[int, set[int]] = {}
    for p in f.processes:
        if p.role != "rank":
            continue
        idx = {i for m in p.models if (i := model_gpu_index(f, p, m)) is not None}
        if not idx:
            idx = {
                g.index
                for g in p.gpu
                if (g.mem_used_mib or 0) > 0 and not (several_intel and g.vendor == VENDOR_INTEL)
            }
        out[p.pid] = idx
    return out


def rule_rank_shared_gpu(f: Facts) -> Iterable[Finding]:
    owners: dict[int, list[int]] = {}
    for pid, idx in _rank_gpus(f).items():
        for i in idx:
            owners.setdefault(i, []).append(pid)
    shared = {i: pids for i, pids in owners.items() if len(pids) > 1}
    if shared:
        i, pids = sorted(shared.items())[0]
        device = hint_device_type(m for p in f.processes if p.pid in pids for m in p.models)
        yield finding(
            "rank-shared-gpu",
            "warning",
            ref("warning.rank-shared-gpu", pids=plist(pids), gpu=i),
            ref("hint.rank-shared-gpu", device=device),
            pids,
        )


def rule_rank_device_mismatch(f: Facts) -> Iterable[Finding]:
    hits: list[tuple[ProcessFacts, int, str, str]] = []  # (process, its local rank, model name, device)
    for p in f.processes:
        if p.role != "rank" or p.local_rank is None:
            continue
        for m in p.models:
            kind = device_type(m.device)
            if kind not in GPU_DEVICE_TYPES or _one_visible_gpu(p.runtime, kind):
                continue
            idx = device_index(m.device)
            if idx is not None and idx != p.local_rank and m.device is not None:
                hits.append((p, p.local_rank, m.name, m.device))
    if hits:
        p, rank, model, device = hits[0]
        yield finding(
            "rank-device-mismatch",
            "warning",
            ref("warning.rank-device-mismatch", rank=rank, pid=p.pid, model=model, device=device),
            ref("hint.rank-device-mismatch", device=device_type(device) or "cuda"),
            (p.pid for p, *_ in hits),
        )


def _one_visible_gpu(rt: RuntimeRecord | None, kind: str | None) -> bool:
    """The rank sees one GPU of its model's kind (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or
    ZE_AFFINITY_MASK per rank): `cuda:0` (`xpu:0`) is then right for every rank."""
    if rt is None:
        return False
    return (rt.xpu_device_count if kind == "xpu" else rt.device_count) == 1


RULES: tuple[Rule, ...] = (
    rule_target_exited,
    rule_job_stopped,
    rule_cpu_build,
    rule_cuda_unavailable,
    rule_model_on_cpu,
    rule_input_mismatch,
    rule_mixed_devices,
    rule_idle_gpu,
    rule_worker_cuda,
    rule_rank_shared_gpu,
    rule_rank_device_mismatch,
    rule_memory_growth,
    rule_unregistered_gpu_process,
    rule_gpu_work_in_child,
    rule_shared_model_unprobed_child,
    rule_device_count_mismatch,
    rule_pid_namespace,
    rule_probe_unreadable,
    rule_probe_error,
    rule_nvml_unavailable,
    rule_no_probe,
    rule_no_parameters,
    rule_registered_before_compile,
    *EFFICIENCY_RULES,
    *STRAGGLER_RULES,
)
