"""The verdict: facts in, verdict out. Pure: no I/O, no clock, no globals.

`decide(facts)` answers "where does this job's compute go" with a status (GPU, CPU, MIXED,
UNKNOWN), a message in English and Chinese, and the warnings whose conditions hold in this poll.
Each warning is one rule in `RULES`; tests drive them with tables of facts. Hysteresis (so no
warning flaps between two polls) is a separate pure step, `settle`, that carries a small state
from one poll to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

STATUSES = ("GPU", "CPU", "MIXED", "UNKNOWN")
ACCELERATOR_TYPES = ("cuda", "mps", "xpu")
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
NVIDIA_VENDOR = "NVIDIA"


# ---------------------------------------------------------------------------------------------
# Facts
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rules:
    idle_util_pct: float = 5.0
    idle_window_s: float = 10.0
    data_wait_starved: float = 0.5
    growth_window_s: float = 120.0
    growth_min_span_s: float = 60.0
    growth_min_mib: float = 256.0
    growth_min_fraction: float = 0.10
    growth_monotonic_fraction: float = 0.8
    hysteresis_off_polls: int = 3


# Facts built per process on every poll are plain slotted dataclasses, not frozen ones: a frozen
# dataclass sets each field through object.__setattr__ (4 us for ProcessFacts, 64 of them a poll).
# Nothing mutates facts all the same: the verdict is a pure function of them.
@dataclass(slots=True)
class ModelFacts:
    name: str
    device: str | None  # "cpu", "cuda:0", "mixed", "no-parameters", ...
    devices: tuple[str, ...] = ()
    params: int | None = None
    input_device: str | None = None
    forward_calls: int = 0
    forward_rate_hz: float | None = None
    data_wait_fraction: float | None = None
    # Training steps as a framework callback counts them (probe.lightning, probe.transformers); None
    # without one. A trainer's steps say it works even when the registered module's forward is
    # never called (a LightningModule whose training_step calls self.net).
    train_steps: int | None = None
    step_rate_hz: float | None = None
    step_source: str | None = None
    shared_memory: bool | None = None  # parameters in shared memory (model.share_memory(): hogwild)
    # Device types of its parameters ({"cuda"}, {"cpu", "cuda"}, ...): asked by most rules.
    types: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        devs = self.devices or ((self.device,) if self.device and self.device != "mixed" else ())
        self.types = frozenset(t for t in (device_type(d) for d in devs) if t)


@dataclass(slots=True)
class ProcGpu:
    index: int
    mem_used_mib: float | None
    sm_util: float | None


@dataclass(slots=True)
class ProcessFacts:
    pid: int
    ppid: int | None = None
    depth: int = 0
    name: str = ""
    is_target: bool = False
    probe_state: str = "missing"
    probe_error: str | None = None
    probe_unreadable: bool = False
    role: str | None = None
    worker_id: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    dist_backend: str | None = None
    loader: str | None = None  # a DataLoader worker: which loader it serves ("train", "validation")
    mp_helper: bool = False  # multiprocessing's resource tracker or forkserver: no user code runs there
    publish_failure: str | None = None  # the probe could not publish its facts: why
    mp_child: bool = False  # started by multiprocessing's spawn or forkserver (DataLoader workers too)
    collected_models: tuple[str, ...] = ()  # registered, then garbage-collected (nobody kept them)
    runtime: dict[str, Any] | None = None
    cuda_memory_mib: float | None = None  # reserved by the allocator, per the probe
    models: tuple[ModelFacts, ...] = ()
    gpu: tuple[ProcGpu, ...] = ()  # per NVML
    # Derived once here rather than in each rule that asks (several, for every process, every poll).
    has_probe: bool = field(init=False, repr=False, compare=False)
    gpu_mem_mib: float = field(init=False, repr=False, compare=False)
    uses_gpu: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.has_probe = self.runtime is not None
        self.gpu_mem_mib = sum(g.mem_used_mib or 0.0 for g in self.gpu)
        self.uses_gpu = any((g.mem_used_mib or 0) > 0 or (g.sm_util or 0) > 0 for g in self.gpu)


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    util: float | None = None
    mem_util: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    lost: bool = False
    # (field, why it is None) as NVML answered, e.g. ("utilization", "Not Supported")
    field_errors: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SystemGpuFacts:
    vendor: str
    name: str
    pci: str | None
    driver: str | None
    nvml_index: int | None = None


@dataclass(frozen=True, slots=True)
class RecentSample:
    time: float
    tree_sm_util: float | None  # summed over the tree's processes; None when NVML gave nothing
    tree_gpu_mem_mib: float | None
    forward_calls: int  # summed over models on an accelerator
    model_gpu_util: float | None  # device utilisation of the GPU the model is on
    # Summed over models on an accelerator that count training steps; None when none does.
    train_steps: int | None = None


@dataclass(frozen=True)
class Facts:
    target_pid: int
    target_alive: bool = True
    processes: tuple[ProcessFacts, ...] = ()
    nvml_ok: bool = False
    nvml_error: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    gpus: tuple[GpuFacts, ...] = ()
    system_gpus: tuple[SystemGpuFacts, ...] = ()
    pid_namespace_suspect: bool = False
    stopped: tuple[tuple[int, float], ...] = ()  # (pid, seconds seen stopped) of stopped processes
    recent: tuple[RecentSample, ...] = ()
    rules: Rules = field(default_factory=Rules)


@dataclass(frozen=True)
class Warning:
    code: str
    severity: str  # error | warning | info
    message: str
    message_zh: str
    hint: str | None = None
    hint_zh: str | None = None
    pids: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "message_zh": self.message_zh,
            "hint": self.hint,
            "hint_zh": self.hint_zh,
            "pids": list(self.pids),
        }


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str
    message_zh: str
    warnings: tuple[Warning, ...]
    model_device: str | None
    input_device: str | None
    model_gpu_index: int | None  # NVML index of the GPU the (first) model is on


# ---------------------------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------------------------
def device_type(device: str | None) -> str | None:
    if not device or device in ("no-parameters",):
        return None
    return device.split(":", 1)[0]


def _norm_uuid(uuid: str | None) -> str | None:
    if not uuid:
        return None
    u = uuid.strip().lower()
    return u[4:] if u.startswith("gpu-") else u


def map_cuda_index(proc: ProcessFacts, cuda_index: int, gpus: tuple[GpuFacts, ...]) -> int | None:
    """NVML index of a process's `cuda:N`: by UUID from the probe, else through
    CUDA_VISIBLE_DEVICES, else N itself when NVML has such a device. `cuda:N` is not NVML index N
    in general: CUDA_VISIBLE_DEVICES renumbers, and CUDA's default order is not PCI order."""
    runtime = proc.runtime or {}
    for dev in runtime.get("devices") or ():
        if dev.get("index") == cuda_index and dev.get("uuid"):
            want = _norm_uuid(dev["uuid"])
            for g in gpus:
                if _norm_uuid(g.uuid) == want:
                    return g.index
    visible = runtime.get("cuda_visible_devices")
    if visible not in (None, ""):
        entries = [e.strip() for e in str(visible).split(",") if e.strip()]
        if cuda_index < len(entries):
            entry = entries[cuda_index]
            if entry.isdigit():
                return int(entry) if any(g.index == int(entry) for g in gpus) else None
            want = _norm_uuid(entry)
            for g in gpus:
                if _norm_uuid(g.uuid) and want and _norm_uuid(g.uuid).startswith(want):
                    return g.index
        return None
    return cuda_index if any(g.index == cuda_index for g in gpus) else None


def model_nvml_index(proc: ProcessFacts, model: ModelFacts, gpus: tuple[GpuFacts, ...]) -> int | None:
    if device_type(model.device) != "cuda":
        return None
    _, _, idx = (model.device or "").partition(":")
    return map_cuda_index(proc, int(idx) if idx.isdigit() else 0, gpus)


def _all_models(facts: Facts) -> Iterator[tuple[ProcessFacts, ModelFacts]]:
    for p in facts.processes:
        for m in p.models:
            yield p, m


def _runtimes(facts: Facts) -> list[tuple[ProcessFacts, dict[str, Any]]]:
    return [(p, p.runtime) for p in facts.processes if p.runtime]


def _nvidia_in_system(facts: Facts) -> bool:
    return bool(facts.gpus) or any(s.vendor == NVIDIA_VENDOR for s in facts.system_gpus)


def _gpu_name(facts: Facts, index: int | None) -> str | None:
    for g in facts.gpus:
        if g.index == index:
            return g.name
    return None


def _gpu(facts: Facts, index: int | None) -> GpuFacts | None:
    return next((g for g in facts.gpus if g.index == index), None)


def _plist(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in pids)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Rules: each yields the warnings whose condition holds now
# ---------------------------------------------------------------------------------------------
Rule = Callable[[Facts], Iterable[Warning]]


def rule_target_exited(f: Facts) -> Iterable[Warning]:
    if not f.target_alive:
        yield Warning(
            "target-exited",
            "info",
            f"The watched process {f.target_pid} has exited; showing its last known state.",
            f"被监视的进程 {f.target_pid} 已退出；显示的是它最后的状态。",
            "Start the job again, or attach to a new one with `dsh-sidecar --pid PID`.",
            "重新启动任务，或用 `dsh-sidecar --pid PID` 连接新的进程。",
            (f.target_pid,),
        )


def rule_job_stopped(f: Facts) -> Iterable[Warning]:
    """A stopped process (SIGSTOP, Ctrl-Z: state T) does nothing, yet its probe's figures stay at
    their last values, which read as a healthy job. The time is since the sidecar saw it stopped."""
    if not f.target_alive or not f.stopped:
        return
    pids = tuple(pid for pid, _ in f.stopped)
    longest_s = max(s for _, s in f.stopped)
    who = "The job is" if f.target_pid in pids else f"{len(pids)} process(es) of the job are"
    who_zh = "该任务" if f.target_pid in pids else f"该任务的 {len(pids)} 个进程"
    yield Warning(
        "job-stopped",
        "warning",
        f"{who} stopped (process {_plist(pids[:5])}, for {longest_s:.0f} s at least): it does no work, "
        "and the figures shown are its last ones.",
        f"{who_zh}已被暂停（进程 {_plist(pids[:5])}，至少 {longest_s:.0f} 秒）：它不做任何计算，显示的是最后的数值。",
        f"Resume it with `kill -CONT {pids[0]}` (or `fg` in the shell that stopped it).",
        f"用 `kill -CONT {pids[0]}` 恢复它（或在暂停它的 shell 中执行 `fg`）。",
        pids,
    )


def rule_nvml_unavailable(f: Facts) -> Iterable[Warning]:
    if f.nvml_ok:
        return
    nvidia_hw = any(s.vendor == NVIDIA_VENDOR for s in f.system_gpus)
    reason = f.nvml_error or "unknown error"
    yield Warning(
        "nvml-unavailable",
        "warning" if nvidia_hw else "info",
        f"The NVIDIA driver cannot be queried ({reason}); the verdict rests on the probe alone.",
        f"无法查询 NVIDIA 驱动（{reason}）；结论仅依据探针。",
        "Install or load the NVIDIA driver (`nvidia-smi` must work), or run the sidecar where the driver is visible."
        if nvidia_hw
        else "No NVIDIA GPU is visible on this machine; this is expected on a CPU-only machine.",
        "安装或加载 NVIDIA 驱动（`nvidia-smi` 必须能运行），或在能看到驱动的环境中运行 sidecar。"
        if nvidia_hw
        else "本机看不到 NVIDIA GPU；在纯 CPU 机器上这是正常的。",
    )


def rule_no_probe(f: Facts) -> Iterable[Warning]:
    if not f.target_alive or any(p.has_probe for p in f.processes):
        return
    yield Warning(
        "no-probe",
        "warning",
        "No process of this job runs the probe, so the model's device is unknown.",
        "该任务中没有进程运行探针，因此无法知道模型所在设备。",
        "Add two lines to your training script: `import probe` and `probe.register(model)`.",
        "在训练脚本中加入两行：`import probe` 和 `probe.register(model)`。",
    )


def rule_probe_unreadable(f: Facts) -> Iterable[Warning]:
    bad = [p for p in f.processes if p.probe_unreadable]
    if bad:
        reasons = "; ".join(f"{p.pid}: {p.probe_error or p.probe_state}" for p in bad[:3])
        hint, hint_zh = _unreadable_hint({p.probe_state for p in bad})
        yield Warning(
            "probe-unreadable",
            "warning",
            f"The probe data of {len(bad)} process(es) cannot be read ({reasons}).",
            f"{len(bad)} 个进程的探针数据无法读取（{reasons}）。",
            hint,
            hint_zh,
            tuple(p.pid for p in bad),
        )


def rule_probe_error(f: Facts) -> Iterable[Warning]:
    bad = [p for p in f.processes if p.publish_failure]
    if bad:
        reasons = "; ".join(f"{p.pid}: {p.publish_failure}" for p in bad[:3])
        yield Warning(
            "probe-error",
            "warning",
            f"The probe in {len(bad)} process(es) cannot publish what it sees ({reasons}); their facts are missing.",
            f"{len(bad)} 个进程中的探针无法发布数据（{reasons}）；这些进程的信息缺失。",
            "Look for the cause in the message (a payload too large for DSH_PROBE_SEGMENT_BYTES, say), "
            "and report it if it is not yours.",
            "根据消息查找原因（例如数据超出 DSH_PROBE_SEGMENT_BYTES），若不是您的问题请报告。",
            tuple(p.pid for p in bad),
        )


def _unreadable_hint(states: set[str]) -> tuple[str, str]:
    """The fix for why it cannot be read: a planted file (whoever reads), a reader without the
    permission (never root: root opens every file), or a bad file."""
    if "owner-mismatch" in states:
        return (
            "A file under the process's segment name belongs to another user, so it was ignored: someone "
            "may have planted it. Remove it (`sudo rm /dev/shm/dsh-probe.PID`); meanwhile the probe "
            "publishes as dsh-probe.PID.START_TICKS, which the sidecar reads. `dsh-sidecar doctor` lists such files.",
            "该进程的共享内存段名下的文件属于其他用户，已被忽略：可能有人故意放置。请删除它"
            "（`sudo rm /dev/shm/dsh-probe.PID`）；在此期间探针以 dsh-probe.PID.START_TICKS 发布，sidecar 会读取。"
            "`dsh-sidecar doctor` 会列出此类文件。",
        )
    if "foreign-owner" in states:
        return (
            "Run the sidecar as the same user as the job, or as root (segments are private to their owner).",
            "以与任务相同的用户或 root 运行 sidecar（共享内存段仅属主可读）。",
        )
    return (
        "Check that the probe and sidecar versions match.",
        "确认探针与 sidecar 版本一致。",
    )


def rule_cpu_build(f: Facts) -> Iterable[Warning]:
    if not _nvidia_in_system(f):
        return
    cpu_only = [p for p, rt in _runtimes(f) if rt.get("torch") and rt.get("cuda_build") is None]
    # DataLoader workers share their trainer's torch: name them only when nothing else has it.
    pids = [p.pid for p in cpu_only if p.role != "dataloader-worker"] or [p.pid for p in cpu_only]
    if pids:
        torch_v = next(rt.get("torch") for p, rt in _runtimes(f) if p.pid == pids[0])
        cu = f.cuda_driver
        cu_tag = f"cu{cu.replace('.', '')}" if cu else "cu124"
        yield Warning(
            "cpu-build",
            "error",
            f"torch {torch_v} is a CPU-only build, but this machine has an NVIDIA GPU: the model can never use it.",
            f"torch {torch_v} 是仅支持 CPU 的版本，但本机有 NVIDIA GPU：模型永远无法使用它。",
            "Install a CUDA build of torch that matches the driver"
            + (f" (driver supports CUDA {cu})" if cu else "")
            + f", e.g. `pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{cu_tag}`.",
            "安装与驱动匹配的 CUDA 版 torch"
            + (f"（驱动支持 CUDA {cu}）" if cu else "")
            + f"，例如 `pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{cu_tag}`。",
            tuple(pids),
        )


def cuda_unavailable_reason(f: Facts, rt: dict[str, Any]) -> tuple[str, str, str, str]:
    """(reason, reason_zh, hint, hint_zh) for a CUDA build of torch that cannot use CUDA."""
    visible = rt.get("cuda_visible_devices")
    if visible is not None and str(visible).strip() in ("", "-1", "none", "NoDevFiles"):
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU",
            f"CUDA_VISIBLE_DEVICES={visible!r} 隐藏了所有 GPU",
            "Unset CUDA_VISIBLE_DEVICES or set it to the GPUs to use, e.g. `export CUDA_VISIBLE_DEVICES=0`.",
            "取消设置 CUDA_VISIBLE_DEVICES，或设为要使用的 GPU，例如 `export CUDA_VISIBLE_DEVICES=0`。",
        )
    if not _nvidia_in_system(f):
        return (
            "no NVIDIA GPU is visible on this machine",
            "本机看不到 NVIDIA GPU",
            "Run on a machine with an NVIDIA GPU, or expect CPU speed.",
            "请在有 NVIDIA GPU 的机器上运行，否则只能以 CPU 速度训练。",
        )
    build, drv = _version_tuple(rt.get("cuda_build")), _version_tuple(f.cuda_driver)
    if build and drv and drv < build:
        return (
            f"the driver supports CUDA {f.cuda_driver}, older than torch's CUDA {rt.get('cuda_build')}",
            f"驱动支持的 CUDA {f.cuda_driver} 低于 torch 的 CUDA {rt.get('cuda_build')}",
            "Upgrade the NVIDIA driver, or install a torch build for an older CUDA "
            f"(e.g. `--index-url https://download.pytorch.org/whl/cu{f.cuda_driver.replace('.', '')}`).",
            "升级 NVIDIA 驱动，或安装对应较旧 CUDA 的 torch 版本。",
        )
    if not f.nvml_ok:
        return (
            f"the NVIDIA driver is not usable ({f.nvml_error or 'unknown'})",
            f"NVIDIA 驱动不可用（{f.nvml_error or '未知'}）",
            "Check that `nvidia-smi` works; reinstall or load the driver.",
            "确认 `nvidia-smi` 能运行；重新安装或加载驱动。",
        )
    return (
        "torch cannot initialise CUDA",
        "torch 无法初始化 CUDA",
        "Run `python -c 'import torch; torch.cuda.init()'` to see the error, and `dsh-sidecar doctor`.",
        "运行 `python -c 'import torch; torch.cuda.init()'` 查看错误，并运行 `dsh-sidecar doctor`。",
    )


def rule_cuda_unavailable(f: Facts) -> Iterable[Warning]:
    hits = [(p, rt) for p, rt in _runtimes(f) if rt.get("cuda_build") and rt.get("cuda_available") is False]
    if hits:
        reason, reason_zh, hint, hint_zh = cuda_unavailable_reason(f, hits[0][1])
        yield Warning(
            "cuda-unavailable",
            "error" if _nvidia_in_system(f) else "warning",
            f"CUDA is not available to torch: {reason}.",
            f"torch 无法使用 CUDA：{reason_zh}。",
            hint,
            hint_zh,
            tuple(p.pid for p, _ in hits),
        )


def rule_model_on_cpu(f: Facts) -> Iterable[Warning]:
    hits = [
        (p, m)
        for p, m in _all_models(f)
        if m.types == {"cpu"} and (p.runtime or {}).get("cuda_available") is True
    ]
    if hits:
        names = ", ".join(sorted({m.name for _, m in hits}))
        yield Warning(
            "model-on-cpu",
            "error",
            f"A GPU is usable but model {names} is on the CPU.",
            f"GPU 可用，但模型 {names} 在 CPU 上。",
            "Move it: `model.to('cuda')` (and its inputs: `x = x.to('cuda')`), before creating the optimizer.",
            "将它移到 GPU：`model.to('cuda')`（输入也要：`x = x.to('cuda')`），并在创建优化器之前完成。",
            tuple(sorted({p.pid for p, _ in hits})),
        )


def rule_input_mismatch(f: Facts) -> Iterable[Warning]:
    hits = [
        (p, m)
        for p, m in _all_models(f)
        if m.input_device
        and m.device
        and m.device not in ("mixed", "no-parameters")
        and m.input_device != m.device
        and device_type(m.input_device) != "meta"
    ]
    if hits:
        p, m = hits[0]
        yield Warning(
            "input-mismatch",
            "error",
            f"Model {m.name} is on {m.device} but is called with inputs on {m.input_device}.",
            f"模型 {m.name} 在 {m.device} 上，但输入在 {m.input_device} 上。",
            f"Move each batch to the model's device before the forward call: `x = x.to('{m.device}', non_blocking=True)` "
            "(with `pin_memory=True` in the DataLoader).",
            f"在前向调用前把每个批次移到模型所在设备：`x = x.to('{m.device}', non_blocking=True)`"
            "（并在 DataLoader 中设置 `pin_memory=True`）。",
            tuple(sorted({p.pid for p, _ in hits})),
        )


def rule_mixed_devices(f: Facts) -> Iterable[Warning]:
    models = list(_all_models(f))
    split = [(p, m) for p, m in models if len(m.types) > 1]
    types = set().union(*(m.types for _, m in models)) if models else set()
    if split:
        p, m = split[0]
        devs = ", ".join(m.devices)
        yield Warning(
            "mixed-devices",
            "warning",
            f"Model {m.name} has parameters or buffers on several devices ({devs}).",
            f"模型 {m.name} 的参数或缓冲区分布在多个设备上（{devs}）。",
            "Call `model.to(device)` after building the whole model; look for tensors created in `__init__` "
            "without `register_buffer`.",
            "在整个模型构建完成后调用 `model.to(device)`；检查 `__init__` 中未用 `register_buffer` 注册的张量。",
            tuple(sorted({p.pid for p, _ in split})),
        )
    elif len(types) > 1:
        yield Warning(
            "mixed-devices",
            "warning",
            f"The job's models are on different device types ({', '.join(sorted(types))}).",
            f"任务中的模型位于不同类型的设备上（{', '.join(sorted(types))}）。",
            "Make sure every model that should train on the GPU is moved there.",
            "确认所有应在 GPU 上训练的模型都已移过去。",
            tuple(sorted({p.pid for p, _ in models})),
        )


def rule_no_parameters(f: Facts) -> Iterable[Warning]:
    hits = [(p, m) for p, m in _all_models(f) if m.device == "no-parameters"]
    if hits:
        names = ", ".join(sorted({m.name for _, m in hits}))
        yield Warning(
            "no-parameters",
            "info",
            f"Model {names} has no parameters or buffers, so its device comes from its inputs only.",
            f"模型 {names} 没有参数或缓冲区，只能从输入推断设备。",
            "Register the module that holds the weights, e.g. `probe.register(model.backbone)`.",
            "请注册持有权重的模块，例如 `probe.register(model.backbone)`。",
            tuple(sorted({p.pid for p, _ in hits})),
        )


def rule_worker_cuda(f: Facts) -> Iterable[Warning]:
    hits = [
        p
        for p in f.processes
        if p.role == "dataloader-worker" and (p.gpu_mem_mib > 0 or (p.cuda_memory_mib or 0) > 0)
    ]
    if hits:
        yield Warning(
            "worker-cuda",
            "warning",
            f"DataLoader worker(s) {_plist(p.pid for p in hits)} hold GPU memory: each worker pays for its own CUDA context.",
            f"DataLoader 工作进程 {_plist(p.pid for p in hits)} 占用了 GPU 显存：每个工作进程都有自己的 CUDA 上下文。",
            "Keep Dataset.__getitem__ on the CPU; move whole batches to the GPU in the training loop "
            "(`pin_memory=True`, `x.to('cuda', non_blocking=True)`).",
            "让 Dataset.__getitem__ 只在 CPU 上运行；在训练循环中把整个批次移到 GPU"
            "（`pin_memory=True`，`x.to('cuda', non_blocking=True)`）。",
            tuple(p.pid for p in hits),
        )


def rule_gpu_work_in_child(f: Facts) -> Iterable[Warning]:
    target = next((p for p in f.processes if p.is_target), None)
    if target is None or target.uses_gpu:
        return
    kids = [p for p in f.processes if not p.is_target and p.uses_gpu]
    if kids:
        where = ", ".join(f"{p.pid} ({p.role or p.name})" for p in kids[:4])
        yield Warning(
            "gpu-work-in-child",
            "info",
            f"The GPU work is done by descendant process(es) of {target.pid}: {where}.",
            f"GPU 工作由 {target.pid} 的子进程完成：{where}。",
            "Nothing to fix: monitors that watch only the launcher's pid miss this; the process table shows it.",
            "无需修复：只监视启动进程的工具会漏掉这一点；进程表中可以看到。",
            tuple(p.pid for p in kids),
        )


def rule_unregistered_gpu_process(f: Facts) -> Iterable[Warning]:
    hits = [p for p in f.processes if p.uses_gpu and not p.has_probe]
    if not hits:
        return
    if all(p.mp_child for p in hits):
        # Spawned DataLoader workers or pool children: they never run the script's register() line.
        hint = (
            "They are multiprocessing children (spawn/forkserver), e.g. DataLoader workers: pass the loader, "
            "`probe.register(model, loader=train_loader)`, or call `probe.activate()` (or `probe.register(model)`) "
            "in the function they run."
        )
        hint_zh = (
            "它们是 multiprocessing 子进程（spawn/forkserver），例如 DataLoader 工作进程：传入加载器 "
            "`probe.register(model, loader=train_loader)`，或在它们运行的函数中调用 `probe.activate()`"
            "（或 `probe.register(model)`）。"
        )
    else:
        hint = "Call `probe.register(model)` in the code those processes run."
        hint_zh = "在这些进程运行的代码中调用 `probe.register(model)`。"
    yield Warning(
        "unregistered-gpu-process",
        "warning",
        f"Process(es) {_plist(p.pid for p in hits)} use the GPU without the probe; their model device is unknown.",
        f"进程 {_plist(p.pid for p in hits)} 在使用 GPU 但未运行探针；其模型设备未知。",
        hint,
        hint_zh,
        tuple(p.pid for p in hits),
    )


def rule_shared_model_unprobed_child(f: Facts) -> Iterable[Warning]:
    """A model in shared memory (``share_memory()``: hogwild) and child processes without the probe:
    whatever those children compute with it is not counted anywhere. Forked children inherit the
    probe and count their own calls; spawned and forkserver ones start without it."""
    owners = {p.pid: p for p in f.processes if any(m.shared_memory for m in p.models)}
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
    names = ", ".join(sorted({m.name for m in owner.models if m.shared_memory}))
    yield Warning(
        "shared-model-unprobed-child",
        "info",
        f"Model {names} of process {owner.pid} is in shared memory, and its child process(es) "
        f"{_plist(p.pid for p in kids)} run without the probe: calls they make with it are not counted.",
        f"进程 {owner.pid} 的模型 {names} 位于共享内存中，其子进程 {_plist(p.pid for p in kids)} 未运行探针："
        "它们对该模型的调用不会被统计。",
        "If they train the model (torch.multiprocessing, hogwild), call `probe.register(model)` at the start "
        "of the function they run: spawned and forkserver children do not inherit the probe, forked ones do.",
        "如果这些子进程在训练该模型（torch.multiprocessing、hogwild），请在它们运行的函数开头调用 "
        "`probe.register(model)`：spawn 与 forkserver 方式启动的子进程不会继承探针，fork 方式的会。",
        tuple(p.pid for p in kids),
    )


def rule_device_count_mismatch(f: Facts) -> Iterable[Warning]:
    if not f.system_gpus:
        return
    framework_counts = [
        rt.get("device_count") for _, rt in _runtimes(f) if rt.get("device_count") is not None
    ]
    usable = framework_counts[0] if framework_counts else (len(f.gpus) if f.nvml_ok else None)
    if usable is None or len(f.system_gpus) <= usable:
        return
    # Integrated and other non-NVIDIA devices can never run CUDA; NVIDIA devices beyond what the
    # framework reports are hidden (CUDA_VISIBLE_DEVICES, a CPU-only build, a broken driver).
    others = [s for s in f.system_gpus if s.vendor != NVIDIA_VENDOR]
    nvidia = [s for s in f.system_gpus if s.vendor == NVIDIA_VENDOR]
    hidden_nvidia = (
        max(0, len(nvidia) - usable) if framework_counts else sum(1 for s in nvidia if s.nvml_index is None)
    )
    parts = [f"{s.name} ({s.pci or 'unknown PCI address'})" for s in others]
    if hidden_nvidia:
        parts.append(f"{hidden_nvidia} NVIDIA GPU(s)")
    names = "; ".join(parts) or "unknown devices"
    if (
        hidden_nvidia
        and framework_counts
        and any(not rt.get("cuda_build") or rt.get("cuda_available") is False for _, rt in _runtimes(f))
    ):
        why, why_zh = (
            "torch cannot use CUDA here (see the error above).",
            "torch 在此无法使用 CUDA（见上方错误）。",
        )
    elif hidden_nvidia:
        why = "An NVIDIA GPU is hidden from the framework: check CUDA_VISIBLE_DEVICES and the driver."
        why_zh = "有 NVIDIA GPU 对框架不可见：检查 CUDA_VISIBLE_DEVICES 和驱动。"
    else:
        why, why_zh = (
            "Make sure the model is on the NVIDIA device (`cuda`).",
            "请确认模型在 NVIDIA 设备（`cuda`）上。",
        )
    yield Warning(
        "device-count-mismatch",
        "warning" if hidden_nvidia else "info",
        f"The system sees {len(f.system_gpus)} graphics devices, the framework can use {usable}; "
        f"not usable: {names}.",
        f"系统看到 {len(f.system_gpus)} 个图形设备，框架可使用 {usable} 个；不可用：{names}。",
        ("An integrated Intel or AMD GPU cannot run CUDA; that is expected. " if others else "") + why,
        ("Intel 或 AMD 集成显卡无法运行 CUDA，这是正常的。" if others else "") + why_zh,
    )


def rule_pid_namespace(f: Facts) -> Iterable[Warning]:
    if f.pid_namespace_suspect:
        yield Warning(
            "pid-namespace",
            "warning",
            "The driver reports GPU processes whose pids do not exist here: the sidecar runs in another PID "
            "namespace than the driver (a container), so per-process GPU use cannot be attributed.",
            "驱动报告的 GPU 进程 pid 在此处不存在：sidecar 运行在与驱动不同的 PID 命名空间（容器）中，无法按进程归属 GPU 使用。",
            "Run the sidecar in the host PID namespace (`docker run --pid=host ...`, or `hostPID: true` in Kubernetes).",
            "在宿主机 PID 命名空间中运行 sidecar（`docker run --pid=host ...`，或 Kubernetes 中 `hostPID: true`）。",
        )


def _idle_window(f: Facts) -> list[RecentSample] | None:
    """The recent samples covering the idle window, or None when history is too short."""
    if not f.recent:
        return None
    now = f.recent[-1].time
    window = [s for s in f.recent if s.time >= now - f.rules.idle_window_s]
    older = [s for s in f.recent if s.time < now - f.rules.idle_window_s]
    if not older and (now - window[0].time) < f.rules.idle_window_s:
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


def rule_idle_gpu(f: Facts) -> Iterable[Warning]:
    on_gpu = [(p, m) for p, m in _all_models(f) if "cuda" in m.types]
    if not on_gpu:
        return
    window = _idle_window(f)
    if not window or len(window) < 2:
        return

    def util(s: RecentSample) -> float | None:
        return s.tree_sm_util if s.tree_sm_util is not None else s.model_gpu_util

    utils = [util(s) for s in window]
    if any(u is None for u in utils) or max(utils) >= f.rules.idle_util_pct:
        return
    if not _still_working(window):
        return  # no steps (or forward calls): the job is paused or evaluating elsewhere, not starved
    waits = [m.data_wait_fraction for _, m in on_gpu if m.data_wait_fraction is not None]
    span = window[-1].time - window[0].time
    if waits and max(waits) >= f.rules.data_wait_starved:
        hint = (
            f"Data loading starves the GPU: the loop waits for the next batch {max(waits):.0%} of the time. "
            "Raise `num_workers`, set `pin_memory=True` and `persistent_workers=True`, or cache/preprocess the data."
        )
        hint_zh = (
            f"数据加载拖慢了 GPU：训练循环有 {max(waits):.0%} 的时间在等待下一个批次。"
            "增大 `num_workers`，设置 `pin_memory=True` 和 `persistent_workers=True`，或缓存/预处理数据。"
        )
    else:
        hint = (
            "Likely causes: data loading (pass `loader=` to `probe.register` to measure it), a model too small "
            "for the GPU (raise the batch size), host syncs such as `.item()` or `.cpu()` every step, or the work "
            "happening in another process."
        )
        hint_zh = (
            "可能原因：数据加载（向 `probe.register` 传入 `loader=` 以测量），模型相对 GPU 太小（增大批量），"
            "每步调用 `.item()` 或 `.cpu()` 等主机同步，或计算发生在其他进程中。"
        )
    yield Warning(
        "idle-gpu",
        "warning",
        f"The model is on the GPU but the GPU has been below {f.rules.idle_util_pct:.0f}% busy for {span:.0f} s "
        f"while {'training steps' if window[-1].train_steps is not None else 'forward calls'} continue.",
        f"模型在 GPU 上，但在{'训练步' if window[-1].train_steps is not None else '前向调用'}持续进行时，"
        f"GPU 利用率已连续 {span:.0f} 秒低于 {f.rules.idle_util_pct:.0f}%。",
        hint,
        hint_zh,
        tuple(sorted({p.pid for p, _ in on_gpu})),
    )


class MemoryGrowth(NamedTuple):
    first_mib: float
    last_mib: float
    start_unix_s: float
    end_unix_s: float


def memory_growth(samples: Iterable[RecentSample], rules: Rules) -> MemoryGrowth | None:
    """The job's GPU memory at the start and end of the growth window when it grows steadily over
    it, else None. The one decision of "memory growing": the warning and the document's
    `memory_growth` both come from here."""
    pts = [(s.time, s.tree_gpu_mem_mib) for s in samples if s.tree_gpu_mem_mib is not None]
    if len(pts) < 3:
        return None
    now = pts[-1][0]
    pts = [pt for pt in pts if pt[0] >= now - rules.growth_window_s]
    if len(pts) < 3 or pts[-1][0] - pts[0][0] < rules.growth_min_span_s:
        return None
    first, last = pts[0][1], pts[-1][1]
    grown = last - first
    if grown < rules.growth_min_mib or grown < rules.growth_min_fraction * max(first, 1.0):
        return None
    steps = [b[1] - a[1] for a, b in zip(pts, pts[1:])]
    non_decreasing = sum(1 for d in steps if d >= 0) / len(steps)
    if non_decreasing < rules.growth_monotonic_fraction:
        return None
    return MemoryGrowth(first, last, pts[0][0], pts[-1][0])


def rule_memory_growth(f: Facts) -> Iterable[Warning]:
    grown = memory_growth(f.recent, f.rules)
    if grown:
        first, last = grown.first_mib, grown.last_mib
        yield Warning(
            "memory-growth",
            "warning",
            f"The job's GPU memory keeps growing: {first:.0f} → {last:.0f} MiB over the last "
            f"{min(f.rules.growth_window_s, f.recent[-1].time - f.recent[0].time):.0f} s.",
            f"任务的 GPU 显存持续增长：最近一段时间从 {first:.0f} MiB 增至 {last:.0f} MiB。",
            "Look for tensors kept across steps: accumulating `loss` instead of `loss.item()`, lists of outputs, "
            "or a growing cache; `torch.cuda.memory_summary()` shows what holds memory.",
            "检查跨步保留的张量：累加 `loss` 而不是 `loss.item()`、保存输出的列表或不断增长的缓存；"
            "`torch.cuda.memory_summary()` 可显示显存占用来源。",
            tuple(p.pid for p in f.processes if p.uses_gpu),
        )


def _rank_gpus(f: Facts) -> dict[int, set[int]]:
    """NVML GPU indices each rank process uses (by its models, else by NVML memory)."""
    out: dict[int, set[int]] = {}
    for p in f.processes:
        if p.role != "rank":
            continue
        idx = {model_nvml_index(p, m, f.gpus) for m in p.models} - {None}
        if not idx:
            idx = {g.index for g in p.gpu if (g.mem_used_mib or 0) > 0}
        out[p.pid] = idx
    return out


def rule_rank_shared_gpu(f: Facts) -> Iterable[Warning]:
    owners: dict[int, list[int]] = {}
    for pid, idx in _rank_gpus(f).items():
        for i in idx:
            owners.setdefault(i, []).append(pid)
    shared = {i: pids for i, pids in owners.items() if len(pids) > 1}
    if shared:
        i, pids = sorted(shared.items())[0]
        yield Warning(
            "rank-shared-gpu",
            "warning",
            f"Ranks in processes {_plist(pids)} share GPU {i}: they compete for it while other GPUs may idle.",
            f"进程 {_plist(pids)} 中的多个 rank 共用 GPU {i}：它们相互争用，其他 GPU 可能闲置。",
            "Call `torch.cuda.set_device(local_rank)` and use `device = f'cuda:{local_rank}'` in each rank.",
            "在每个 rank 中调用 `torch.cuda.set_device(local_rank)`，并使用 `device = f'cuda:{local_rank}'`。",
            tuple(pids),
        )


def rule_rank_device_mismatch(f: Facts) -> Iterable[Warning]:
    hits = []
    for p in f.processes:
        if p.role != "rank" or p.local_rank is None:
            continue
        if (p.runtime or {}).get("device_count") == 1:
            continue  # one visible GPU per rank (CUDA_VISIBLE_DEVICES): cuda:0 is right for every rank
        for m in p.models:
            if device_type(m.device) == "cuda":
                _, _, idx = m.device.partition(":")
                if idx.isdigit() and int(idx) != p.local_rank:
                    hits.append((p, m))
    if hits:
        p, m = hits[0]
        yield Warning(
            "rank-device-mismatch",
            "warning",
            f"Rank with LOCAL_RANK={p.local_rank} (pid {p.pid}) has model {m.name} on {m.device}.",
            f"LOCAL_RANK={p.local_rank} 的 rank（pid {p.pid}）的模型 {m.name} 在 {m.device} 上。",
            "Use `device = torch.device('cuda', int(os.environ['LOCAL_RANK']))` and `torch.cuda.set_device(device)`.",
            "使用 `device = torch.device('cuda', int(os.environ['LOCAL_RANK']))` 并调用 `torch.cuda.set_device(device)`。",
            tuple(p.pid for p, _ in hits),
        )


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
)


# ---------------------------------------------------------------------------------------------
# Status and message
# ---------------------------------------------------------------------------------------------
def primary_model_gpu_index(f: Facts) -> int | None:
    """NVML index of the GPU the first model with a device is on (None when it is not on CUDA)."""
    first = next(((p, m) for p, m in _all_models(f) if m.types), None)
    if first and "cuda" in first[1].types:
        return model_nvml_index(first[0], first[1], f.gpus)
    return None


def _status_and_message(f: Facts) -> tuple[str, str, str, str | None, str | None, int | None]:
    models = list(_all_models(f))
    typed = [(p, m, m.types) for p, m in models]
    types = set().union(*(t for _, _, t in typed)) if typed else set()
    first = next(((p, m) for p, m, t in typed if t), None)
    model_device = first[1].device if first else (models[0][1].device if models else None)
    input_device = next((m.input_device for _, m in models if m.input_device), None)
    gpu_index = primary_model_gpu_index(f)

    if types:
        names = ", ".join(sorted({m.name for _, m, t in typed if t}))
        if len(types) > 1 or any(len(t) > 1 for _, _, t in typed):
            devs = ", ".join(sorted({d for _, m, _ in typed for d in (m.devices or (m.device,)) if d}))
            return (
                "MIXED",
                f"Model {names} is split across devices ({devs}).",
                f"模型 {names} 分布在多个设备上（{devs}）。",
                model_device,
                input_device,
                gpu_index,
            )
        (kind,) = types
        if kind in ACCELERATOR_TYPES:
            g = _gpu(f, gpu_index)
            where = f" ({g.name})" if g and g.name else ""
            busy = f", {_pct(g.util)} busy" if g and g.util is not None else ""
            return (
                "GPU",
                f"Model {names} runs on {model_device}{where}{busy}.",
                f"模型 {names} 运行在 {model_device}{where} 上"
                + (f"，利用率 {_pct(g.util)}" if busy else "")
                + "。",
                model_device,
                input_device,
                gpu_index,
            )
        if kind == "cpu":
            why, why_zh = _cpu_reason(f, [p for p, _, _ in typed])
            return (
                "CPU",
                f"Model {names} runs on the CPU: {why}.",
                f"模型 {names} 运行在 CPU 上：{why_zh}。",
                model_device,
                input_device,
                None,
            )
        return (
            "UNKNOWN",
            f"Model {names} is on the {kind} device, which does no compute.",
            f"模型 {names} 位于 {kind} 设备上，该设备不执行计算。",
            model_device,
            input_device,
            None,
        )

    gpu_procs = [p for p in f.processes if p.uses_gpu]
    if gpu_procs:
        where = ", ".join(f"{p.pid}" for p in gpu_procs[:4])
        return (
            "GPU",
            f"The job does GPU work (process {where}); register the model with the probe to see its device.",
            f"该任务在使用 GPU（进程 {where}）；用探针注册模型即可看到其设备。",
            None,
            input_device,
            next((g.index for p in gpu_procs for g in p.gpu), None),
        )
    if not f.target_alive and not f.processes:
        return (
            "UNKNOWN",
            f"Process {f.target_pid} has exited and nothing is known about it.",
            f"进程 {f.target_pid} 已退出，没有关于它的信息。",
            None,
            None,
            None,
        )
    if any(p.has_probe for p in f.processes):
        missing = "no model is registered yet (call `probe.register(model)`)"
        missing_zh = "尚未注册模型（调用 `probe.register(model)`）"
        if models:
            missing = "the registered model has no parameters and has not been called yet"
            missing_zh = "已注册的模型没有参数，且尚未被调用"
        elif any(p.collected_models for p in f.processes):
            names = ", ".join(sorted({n for p in f.processes for n in p.collected_models}))
            missing = (
                f"the registered model {names} was garbage-collected: nothing else kept it "
                "(register returns the model: `model = probe.register(Net().to(device))`)"
            )
            missing_zh = (
                f"已注册的模型 {names} 已被垃圾回收：没有其他引用保留它"
                "（register 会返回模型：`model = probe.register(Net().to(device))`）"
            )
    else:
        missing = "no probe in the job and no GPU work seen by the driver"
        missing_zh = "任务中没有探针，驱动也未看到 GPU 工作"
        if not f.nvml_ok:
            missing = "no probe in the job, and the NVIDIA driver cannot be queried"
            missing_zh = "任务中没有探针，且无法查询 NVIDIA 驱动"
    return (
        "UNKNOWN",
        f"Not enough evidence: {missing}.",
        f"证据不足：{missing_zh}。",
        model_device,
        input_device,
        None,
    )


def _cpu_reason(f: Facts, procs: list[ProcessFacts]) -> tuple[str, str]:
    rt = next((p.runtime for p in procs if p.runtime), None) or {}
    if rt.get("torch") and rt.get("cuda_build") is None:
        return (
            f"torch {rt['torch']} is a CPU-only build",
            f"torch {rt['torch']} 是仅支持 CPU 的版本",
        )
    if rt.get("cuda_available") is False:
        reason, reason_zh, _, _ = cuda_unavailable_reason(f, rt)
        return f"CUDA is not available ({reason})", f"CUDA 不可用（{reason_zh}）"
    if rt.get("cuda_available") is True:
        return "a GPU is available but the model was not moved to it", "GPU 可用，但模型没有被移到 GPU 上"
    return "no accelerator is in use", "未使用任何加速器"


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------
def candidate_warnings(f: Facts) -> list[Warning]:
    out: list[Warning] = []
    for rule in RULES:
        out.extend(rule(f))
    return out


def decide(f: Facts) -> Verdict:
    status, message, message_zh, model_device, input_device, gpu_index = _status_and_message(f)
    if not f.target_alive and f.processes:
        message = f"Process {f.target_pid} has exited. Last known: {message}"
        message_zh = f"进程 {f.target_pid} 已退出。最后状态：{message_zh}"
    warnings = tuple(sorted(candidate_warnings(f), key=lambda w: SEVERITY_ORDER[w.severity]))
    return Verdict(status, message, message_zh, warnings, model_device, input_device, gpu_index)


@dataclass(frozen=True)
class HysteresisState:
    """Per warning code: the last observed warning and how many polls in a row it was absent."""

    held: tuple[tuple[str, Warning, int], ...] = ()


def settle(
    prev: HysteresisState, verdict: Verdict, rules: Rules | None = None, live_pids: set[int] | None = None
) -> tuple[Verdict, HysteresisState]:
    """Keep a warning shown until it has been absent for `hysteresis_off_polls` polls in a row, so a
    condition hovering at a threshold does not flap between two polls. A warning appears at once:
    hiding a real problem for a few polls is worse than showing it early. A held warning about
    processes that have all exited goes at once (``live_pids``): its condition cannot hover, and
    frameworks that recreate their DataLoader workers every epoch would otherwise keep it up."""
    off_polls = (rules or Rules()).hysteresis_off_polls
    seen = {w.code: w for w in verdict.warnings}
    held: list[tuple[str, Warning, int]] = []
    shown = list(verdict.warnings)
    for code, w, absent in prev.held:
        if code in seen:
            continue
        if live_pids is not None and w.pids and not live_pids.intersection(w.pids):
            continue
        if absent + 1 < off_polls:
            held.append((code, w, absent + 1))
            shown.append(w)
    held.extend((code, w, 0) for code, w in seen.items())
    shown.sort(key=lambda w: SEVERITY_ORDER[w.severity])
    return replace(verdict, warnings=tuple(shown)), HysteresisState(tuple(held))
