"""Verdict facts: what the sources found in one poll, as plain values, and the verdict's value types
(`Finding`, `Verdict`). Device helpers that several rules ask are here too."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from itertools import islice
from operator import attrgetter, le

from probe_wire.records import RuntimeRecord
from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS
from sidecar.common.catalogue import Ref
from sidecar.common.memo import for_the_same_objects
from sidecar.verdict.thresholds import Rules

# What `from sidecar.verdict import ...` gives (sidecar/verdict/__init__.py).
__all__ = [
    "ACCELERATOR_TYPES",
    "AMD_VENDOR",
    "GPU_DEVICE_TYPES",
    "INTEL_VENDOR",
    "NVIDIA_VENDOR",
    "SEVERITY_ORDER",
    "STATUSES",
    "Facts",
    "Finding",
]
__all__ += ["GpuFacts", "ModelFacts", "ProcGpu", "ProcessFacts", "RecentSample", "Rules"]
__all__ += ["LoaderSettings", "MathSettings", "MigFacts", "StepBreakdown", "RecentWindow", "times_in_order"]
__all__ += ["UTIL_UNKNOWN", "VENDORS", "VENDOR_AMD", "VENDOR_INTEL", "VENDOR_NVIDIA"]
__all__ += ["DeviceNodeFacts", "GpuAccessFacts"]
__all__ += [
    "SystemGpuFacts",
    "Verdict",
    "device_type",
    "ascii_index",
    "hint_device_type",
    "device_index",
    "pci_slot",
    "map_cuda_index",
    "map_rocm_index",
    "map_xpu_index",
    "model_gpu_index",
    "model_nvml_index",
]

STATUSES = ("GPU", "CPU", "MIXED", "UNKNOWN")
ACCELERATOR_TYPES = ("cuda", "mps", "xpu")
# The accelerators whose GPU the sidecar reads (which card, its busy share, its memory): `cuda`
# (NVIDIA's, and a ROCm build's AMD GPU) and `xpu` (an Intel GPU). Apple's `mps` has no such figures.
GPU_DEVICE_TYPES = frozenset({"cuda", "xpu"})
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
NVIDIA_VENDOR = "NVIDIA"  # as sources.sysfs names the vendors of the OS's graphics devices
AMD_VENDOR = "AMD"
INTEL_VENDOR = "Intel"
# GpuFacts.vendor and ProcGpu.vendor: who made the GPU (the documents' `vendor`).
VENDOR_NVIDIA, VENDOR_AMD, VENDOR_INTEL = "nvidia", "amd", "intel"
VENDORS = (VENDOR_NVIDIA, VENDOR_AMD, VENDOR_INTEL)
# ProcGpu.unknown_reason: why a process's utilisation on an AMD or Intel GPU is not known (never a 0).
UTIL_UNKNOWN = {
    "first-sample": "the first reading of its DRM engine counters: a rate needs two",
    "no-engine-counters": "the driver prints no engine time for it (a kernel before 5.19, or an older GPU)",
    "rocm-compute": "ROCm compute runs through KFD queues, whose busy time the kernel does not count per process",
}


# ---------------------------------------------------------------------------------------------
# Facts
# ---------------------------------------------------------------------------------------------
# Facts built per process on every poll are plain slotted dataclasses, not frozen ones: a frozen
# dataclass sets each field through object.__setattr__ (4 us for ProcessFacts, 64 of them a poll).
# Nothing mutates facts all the same: the verdict is a pure function of them.
@dataclass(frozen=True, slots=True)
class LoaderSettings:
    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None
    prefetch_factor: int | None = None  # batches each worker loads ahead (None without workers)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Where a process's training steps spent their wall time over the probe's window (fractions 0-1)."""

    window_s: float
    steps: int
    step_s: float | None = None
    data_wait_fraction: float | None = None
    forward_fraction: float | None = None
    optimizer_fraction: float | None = None
    other_fraction: float | None = None
    # Of other_fraction: between optimizer steps less forward and data wait (backward, collectives).
    backward_fraction: float | None = None


@dataclass(frozen=True, slots=True)
class MathSettings:
    allow_tf32_matmul: bool | None = None
    cudnn_allow_tf32: bool | None = None
    float32_matmul_precision: str | None = None  # "highest", "high", "medium"
    cudnn_benchmark: bool | None = None


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
    param_dtypes: tuple[str, ...] = ()  # "float32", "bfloat16", ...
    autocast: str | None = None  # "off", or the dtype autocast ran the last forward in; None: not seen
    input_shape: tuple[int, ...] | None = None
    loader_settings: LoaderSettings | None = None
    # Its calls ran inside torch.compile where the probe could not count them (registered, then
    # inlined into a compiled parent): forward_calls and forward_rate_hz miss them.
    compiled_uncounted: bool = False
    data_wait_batches: int | None = None  # the batches data_wait_fraction covers: its window
    # Device types of its parameters ({"cuda"}, {"cpu", "cuda"}, ...): asked by most rules.
    types: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        devs = self.devices or ((self.device,) if self.device and self.device != DEVICE_MIXED else ())
        self.types = device_types(devs if type(devs) is tuple else tuple(devs))


@dataclass(slots=True)
class ProcGpu:
    index: int  # GpuFacts.index of the GPU
    mem_used_mib: float | None
    sm_util: float | None  # NVML's SM %; AMD/Intel: its busiest DRM engine's %
    mig_index: int | None = None  # the MIG device it runs in (GpuFacts.mig_devices)
    # AMD and Intel rows (poll/vendor_gpus.py); NVML's rows leave these as they are.
    vendor: str = VENDOR_NVIDIA
    pci: str | None = None  # the GPU's PCI address, "0000:03:00.0" (NVML's rows: see GpuFacts)
    unknown_reason: str | None = None  # why sm_util is None when the vendor cannot tell (UTIL_UNKNOWN)

    @property
    def in_use(self) -> bool:
        """The process holds memory or runs kernels on this GPU."""
        return (self.mem_used_mib or 0) > 0 or (self.sm_util or 0) > 0


@dataclass(frozen=True, slots=True)
class DeviceNodeFacts:
    """A GPU device node as a process sees it (/dev/kfd, /dev/dri/renderD128): permission bits,
    owner and group (`group`: its name where the group database knows it)."""

    path: str
    mode: int
    uid: int
    gid: int
    group: str | None = None


@dataclass(frozen=True, slots=True)
class GpuAccessFacts:
    """Whether a process may open the AMD GPU's device nodes: its filesystem uid and gid, its
    supplementary groups, and /dev/kfd and the render nodes as it sees them (sources.gpu_access)."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    nodes: tuple[DeviceNodeFacts, ...]

    def can_open(self, node: DeviceNodeFacts) -> bool:
        """Read and write, as the kernel's permission check grants them (root passes)."""
        if self.uid == 0:
            return True
        if self.uid == node.uid:
            bits = node.mode >> 6
        elif node.gid == self.gid or node.gid in self.groups:
            bits = node.mode >> 3
        else:
            bits = node.mode
        return bits & 0o6 == 0o6

    @property
    def denied(self) -> tuple[DeviceNodeFacts, ...]:
        return tuple(n for n in self.nodes if not self.can_open(n))

    @property
    def has_kfd(self) -> bool:
        return any(n.path == "/dev/kfd" for n in self.nodes)


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
    runtime: RuntimeRecord | None = None  # from its probe's payload (None: no probe read)
    cuda_memory_mib: float | None = None  # reserved by the allocator, per the probe
    models: tuple[ModelFacts, ...] = ()
    gpu: tuple[ProcGpu, ...] = ()  # per NVML
    steps: StepBreakdown | None = None
    math: MathSettings | None = None
    syncs_per_step: float | None = None  # only with register(model, syncs=True)
    hostname: str | None = None  # the node it runs on, as its probe reports it
    exited: bool = False  # gone: its last facts, kept for the job's final state
    # The AMD GPU's device nodes as it sees them, and its groups (None: not read; read only for a
    # ROCm build that has no GPU, sources.gpu_access).
    gpu_access: GpuAccessFacts | None = None
    # Derived once here rather than in each rule that asks (several, for every process, every poll).
    has_probe: bool = field(init=False, repr=False, compare=False)
    gpu_mem_mib: float = field(init=False, repr=False, compare=False)
    uses_gpu: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.has_probe = self.runtime is not None
        self.gpu_mem_mib = sum(g.mem_used_mib or 0.0 for g in self.gpu)
        self.uses_gpu = any(g.in_use for g in self.gpu)


@dataclass(frozen=True)
class MigFacts:
    index: int
    uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None


@dataclass(slots=True)  # not frozen, as the per-process facts above: 8 a poll, of 33 fields
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
    # Efficiency (sidecar.common.nvml_names.GPU_EFFICIENCY_FIELDS, named as in the contract)
    compute_capability: str | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    sm_activity_fraction: float | None = None
    sm_occupancy_fraction: float | None = None
    tensor_activity_fraction: float | None = None
    dram_activity_fraction: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    mig_mode: bool | None = None
    mig_devices: tuple[MigFacts, ...] = ()
    # Not NVML's: an AMD or Intel GPU the OS lists (poll/vendor_gpus.py) has index, name, pci_bus_id,
    # vendor and driver; its device figures stay None until a device-level reader fills them.
    vendor: str = VENDOR_NVIDIA
    driver: str | None = None  # the kernel driver bound to it ("amdgpu", "i915", "xe"); NVML's: None


@dataclass(frozen=True)
class SystemGpuFacts:
    vendor: str
    name: str
    pci: str | None
    driver: str | None
    nvml_index: int | None = None
    device_id: str | None = None  # the PCI device id, "0x56a0" (which Intel GPUs run XPU builds)
    integrated: bool | None = None  # sysfs.SystemGpu's: Intel's iGPU (True) or not (False); others None


@dataclass(frozen=True, slots=True)
class RecentSample:
    time: float
    tree_sm_util: float | None  # summed over the tree's processes; None when NVML gave nothing
    tree_gpu_mem_mib: float | None
    forward_calls: int  # summed over models on an accelerator
    model_gpu_util: float | None  # device utilisation of the GPU the model is on
    # Summed over models on an accelerator that count training steps; None when none does.
    train_steps: int | None = None
    # The rank the others waited for at this poll (stragglers.straggler_candidate), as (rank, cause).
    straggler: tuple[int, str] | None = None


class RecentWindow(tuple[RecentSample, ...]):
    """Recent samples whose times are known to be in order (times_in_order holds): the poller's
    history keeps its window so, and hands it over as one. The rules then take it as such, where a
    look at every time of a 120 s window (480 samples at 0.25 s) cost each poll about 2 %."""

    __slots__ = ()


_time = attrgetter("time")


def times_in_order(times: Sequence[float]) -> bool:
    """The times never decrease and none is NaN (there is one at least)."""
    return bool(times) and times[0] <= times[-1] and all(map(le, times, islice(times, 1, None)))


def _samples_in_order(samples: Sequence[RecentSample]) -> bool:
    return times_in_order(list(map(_time, samples)))


# The idle and growth rules ask for the same poll's samples (Facts.recent).
_tuple_in_order = for_the_same_objects(_samples_in_order)


def samples_in_order(samples: Sequence[RecentSample]) -> bool:
    """times_in_order of the samples' times. History gives them in order except after the clock
    stepped back (a RecentWindow then says so at no cost); a tuple's is found once for its rules (a
    list may change between two calls)."""
    if type(samples) is RecentWindow:
        return True
    if type(samples) is tuple:
        return _tuple_in_order(samples)
    return _samples_in_order(samples)


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
    kfd_present: bool | None = None  # the kernel's KFD (ROCm's compute device) exists; None: unknown
    pid_namespace_suspect: bool = False
    stopped: tuple[tuple[int, float], ...] = ()  # (pid, seconds seen stopped) of stopped processes
    target_age_s: float | None = None  # since the job's root process started; None: unknown
    recent: tuple[RecentSample, ...] = ()
    rules: Rules = field(default_factory=Rules)

    def with_recent(self, recent: tuple[RecentSample, ...]) -> Facts:
        """These facts with `recent` set, and what was derived from them already: the history sample
        asks for model_gpu_indices before the poller sets `recent`, and the verdict made it again."""
        # A copy of the instance's dict rather than dataclasses.replace (which rebuilds it through
        # __init__ field by field, ten times the cost): Facts has no __post_init__, and its dict
        # holds its fields and the cached derived facts, which are kept.
        new = object.__new__(Facts)
        new.__dict__.update(self.__dict__)
        new.__dict__["recent"] = recent
        return new

    def keep_derived(self, last: Facts | None) -> None:
        """Take what ``last`` derived already (the cached properties below) when it has the very same
        processes and GPUs: each is made of those alone (tests/unit/test_history.py holds them to
        that), so a steady job's polls derive them once, not at every poll. For new facts, whose
        own derived facts are not made yet."""
        if last is None or last.processes is not self.processes or last.gpus is not self.gpus:
            return
        mine, theirs = self.__dict__, last.__dict__
        for name in _DERIVED_FACTS:
            if name in theirs and name not in mine:
                mine[name] = theirs[name]

    # Derived once per poll, because several rules ask (each asked them afresh: about 60 % of a
    # job's verdict). Not fields: dataclasses.replace makes them afresh for the new facts. None
    # reads `recent` (with_recent keeps them).
    @cached_property
    def model_gpu_indices(self) -> dict[int, int | None]:
        """GPU index of each model's device, by the id() of its ModelFacts (alive as long as these
        facts are): see model_gpu_index."""
        gpus = self.gpus
        return {id(m): model_nvml_index(p, m, gpus) for p, m in self.model_pairs}

    @cached_property
    def model_pairs(self) -> tuple[tuple[ProcessFacts, ModelFacts], ...]:
        """(process, model) of each model, in order: what all_models gives (asked by most rules)."""
        return tuple((p, m) for p in self.processes for m in p.models)

    @cached_property
    def probed_runtimes(self) -> tuple[tuple[ProcessFacts, RuntimeRecord], ...]:
        """(process, runtime) of each process whose probe reported one: what runtimes gives."""
        return tuple((p, p.runtime) for p in self.processes if p.runtime is not None)

    @cached_property
    def gpus_by_index(self) -> dict[int, GpuFacts]:
        out: dict[int, GpuFacts] = {}
        for g in self.gpus:
            out.setdefault(g.index, g)  # the first of a (never seen) repeated index, as a scan finds
        return out

    @cached_property
    def job_gpu_indices(self) -> tuple[int, ...]:
        """NVML indices of the GPUs the job uses: where its models are, and where NVML lists its
        processes."""
        used = {g.index for p in self.processes for g in p.gpu if g.in_use}
        used |= {i for i in self.model_gpu_indices.values() if i is not None}
        return tuple(sorted(used))

    @cached_property
    def job_gpus(self) -> tuple[GpuFacts, ...]:
        """The GPUs of job_gpu_indices that NVML lists and has not lost: the efficiency rules'."""
        found = self.gpus_by_index
        return tuple(g for i in self.job_gpu_indices if (g := found.get(i)) is not None and not g.lost)


_DERIVED_FACTS = tuple(name for name, v in vars(Facts).items() if isinstance(v, cached_property))


@dataclass(frozen=True)
class Finding:
    """A warning whose condition holds: its code, facts and references into the catalogue, no text."""

    code: str
    severity: str  # error | warning | info
    message: Ref
    hint: Ref | None = None
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Verdict:
    status: str
    message: Ref
    warnings: tuple[Finding, ...]
    model_device: str | None
    input_device: str | None
    model_gpu_index: int | None  # GpuFacts.index of the GPU the (first) model is on


# ---------------------------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=256)  # asked for each model's device by several rules, each poll
def device_type(device: str | None) -> str | None:
    if not device or device == DEVICE_NO_PARAMETERS:
        return None
    return device.split(":", 1)[0]


@lru_cache(maxsize=256)
def device_types(devices: tuple[str, ...]) -> frozenset[str]:
    """The device types among ``devices`` ({"cuda"} of ("cuda:0", "cuda:1")); a model's facts are
    made at every poll that changed its payload, from a handful of distinct device lists."""
    return frozenset(t for t in (device_type(d) for d in devices) if t)


def ascii_index(text: str) -> int | None:
    """A non-negative index written in ASCII digits, else None: str.isdigit() alone takes "²",
    which int() refuses (a device "cuda:²" made the verdict raise at every poll)."""
    return int(text) if text.isascii() and text.isdigit() else None


@lru_cache(maxsize=256)  # as device_type
def device_index(device: str | None) -> int | None:
    """N of a device "type:N", else None."""
    return ascii_index((device or "").partition(":")[2])


@lru_cache(maxsize=1024)  # asked for every GPU of every model's device by several rules, each poll
def _norm_uuid(uuid: str | None) -> str | None:
    if not uuid:
        return None
    u = uuid.strip().lower()
    return u[4:] if u.startswith("gpu-") else u


@for_the_same_objects  # a poll's devices, asked for each model by several rules
def _indices_by_uuid(gpus: tuple[GpuFacts, ...]) -> dict[str | None, int]:
    """NVML index of each normalised UUID (the first GPU of a repeated one, as a scan finds it)."""
    out: dict[str | None, int] = {}
    for g in gpus:
        key = _norm_uuid(g.uuid)
        if key is not None:
            out.setdefault(key, g.index)
    return out


_NO_RUNTIME = RuntimeRecord()  # a process its probe told nothing of: no devices, no CUDA_VISIBLE_DEVICES


def pci_slot(address: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address "dddd:bb:dd.f" (NVML's 8-digit domain too, any case);
    the function is left out: the probe's addresses (torch's pci_domain_id/bus_id/device_id) have none,
    and a GPU is function 0 of its slot. None when it is not one."""
    parts = (address or "").strip().split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2].partition(".")[0], 16)
    except ValueError:
        return None


@for_the_same_objects  # a poll's devices, asked for each model by several rules
def _amd_by_slot(gpus: tuple[GpuFacts, ...]) -> dict[tuple[int, int, int], int]:
    """GPU index of each AMD GPU's PCI slot (the first of a repeated one)."""
    out: dict[tuple[int, int, int], int] = {}
    for g in gpus:
        if g.vendor == VENDOR_AMD and (slot := pci_slot(g.pci_bus_id)) is not None:
            out.setdefault(slot, g.index)
    return out


def map_rocm_index(runtime: RuntimeRecord, cuda_index: int, gpus: tuple[GpuFacts, ...]) -> int | None:
    """GPU index of a ROCm build's `cuda:N`: the AMD GPU in the PCI slot the probe gives for that
    device (HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES renumber, and HIP's order is not the
    kernel's: only the address says which GPU it is); without one, the machine's only AMD GPU for
    `cuda:0`; else None. Never an NVIDIA GPU: a ROCm build runs on AMD's alone."""
    by_slot = _amd_by_slot(gpus)
    for dev in runtime.devices:
        if dev.index == cuda_index and (slot := pci_slot(dev.pci_bus_id)) is not None:
            return by_slot.get(slot)
    if cuda_index == 0 and len(by_slot) == 1:
        return next(iter(by_slot.values()))
    return None


def map_cuda_index(proc: ProcessFacts, cuda_index: int, gpus: tuple[GpuFacts, ...]) -> int | None:
    """GPU index of a process's `cuda:N`: for a ROCm build, map_rocm_index; else (NVIDIA's) by UUID
    from the probe, else through CUDA_VISIBLE_DEVICES, else N itself when NVML has such a device.
    `cuda:N` is not NVML index N in general: CUDA_VISIBLE_DEVICES renumbers, and CUDA's default
    order is not PCI order."""
    runtime = proc.runtime or _NO_RUNTIME
    if runtime.hip_build is not None:
        return map_rocm_index(runtime, cuda_index, gpus)
    for dev in runtime.devices:
        if dev.index == cuda_index and dev.uuid:
            index = _indices_by_uuid(gpus).get(_norm_uuid(dev.uuid))
            if index is not None:
                return index
    visible = runtime.cuda_visible_devices
    if visible not in (None, ""):
        entries = [e.strip() for e in str(visible).split(",") if e.strip()]
        if cuda_index < len(entries):
            entry = entries[cuda_index]
            number = ascii_index(entry)
            if number is not None:
                return number if any(g.index == number and g.vendor == VENDOR_NVIDIA for g in gpus) else None
            want = _norm_uuid(entry)
            for g in gpus:
                if (have := _norm_uuid(g.uuid)) and want and have.startswith(want):
                    return g.index
        return None
    return cuda_index if any(g.index == cuda_index and g.vendor == VENDOR_NVIDIA for g in gpus) else None


@for_the_same_objects  # a poll's devices, asked for each model by several rules
def _intel_gpus(gpus: tuple[GpuFacts, ...]) -> tuple[GpuFacts, ...]:
    return tuple(g for g in gpus if g.vendor == VENDOR_INTEL)


def map_xpu_index(runtime: RuntimeRecord, xpu_index: int, gpus: tuple[GpuFacts, ...]) -> int | None:
    """GPU index of a process's `xpu:N`: the Intel GPU in the PCI slot the probe gives for that
    device; without one, the machine's only Intel GPU for `xpu:0` (a laptop's iGPU, an Arc card);
    else None (Level Zero's order and ZE_AFFINITY_MASK renumber: only an address would say)."""
    intel = _intel_gpus(gpus)
    for dev in runtime.xpu_devices or ():
        if dev.index == xpu_index and (slot := pci_slot(dev.pci_bus_id)) is not None:
            return next((g.index for g in intel if pci_slot(g.pci_bus_id) == slot), None)
    return intel[0].index if xpu_index == 0 and len(intel) == 1 else None


def model_nvml_index(proc: ProcessFacts, model: ModelFacts, gpus: tuple[GpuFacts, ...]) -> int | None:
    """GpuFacts.index of the GPU a model is on: `cuda:N` (NVIDIA's, or a ROCm build's AMD GPU) and
    `xpu:N` (an Intel GPU); None for other devices or when it cannot be told."""
    kind = device_type(model.device)
    if kind == "xpu":
        return map_xpu_index(proc.runtime or _NO_RUNTIME, device_index(model.device) or 0, gpus)
    if kind != "cuda":
        return None
    return map_cuda_index(proc, device_index(model.device) or 0, gpus)


def model_gpu_index(facts: Facts, proc: ProcessFacts, model: ModelFacts) -> int | None:
    """model_nvml_index of a model of these facts, made once per poll (Facts.model_gpu_indices)."""
    found = facts.model_gpu_indices
    key = id(model)
    return found[key] if key in found else model_nvml_index(proc, model, facts.gpus)


def hint_device_type(models: Iterable[ModelFacts]) -> str:
    """The torch device type a hint names (`.to('cuda')`, `torch.xpu.set_device`) for these models:
    "xpu" where those on a GPU are all on Intel's, else "cuda" (NVIDIA's, and a ROCm build's AMD
    GPU, which torch calls `cuda` too)."""
    on_gpu = set().union(*(m.types & GPU_DEVICE_TYPES for m in models))
    return "xpu" if on_gpu == {"xpu"} else "cuda"


ModelHits = list[tuple[ProcessFacts, ModelFacts]]  # (process, model) pairs a rule's finding is about


def all_models(facts: Facts) -> tuple[tuple[ProcessFacts, ModelFacts], ...]:
    """(process, model) of each model of these facts, in order."""
    return facts.model_pairs


def runtimes(facts: Facts) -> tuple[tuple[ProcessFacts, RuntimeRecord], ...]:
    """(process, runtime) of each process whose probe reported one, in order."""
    return facts.probed_runtimes


def nvidia_in_system(facts: Facts) -> bool:
    return any(g.vendor == VENDOR_NVIDIA for g in facts.gpus) or any(
        s.vendor == NVIDIA_VENDOR for s in facts.system_gpus
    )


def amd_in_system(facts: Facts) -> bool:
    return any(s.vendor == AMD_VENDOR for s in facts.system_gpus)


def is_xpu_build(rt: RuntimeRecord) -> bool:
    """torch built for Intel GPUs: torch.version.xpu (the probe's ``xpu_build``), its version's local
    label ("2.7.0+xpu"), or it sees one."""
    return (
        rt.xpu_build is not None
        or rt.xpu_available is True
        or str(rt.torch or "").partition("+")[2].startswith("xpu")
    )


def cpu_only_build(rt: RuntimeRecord) -> bool:
    """A torch built for no GPU: neither CUDA nor ROCm nor XPU. A ROCm build numbers its AMD GPUs
    `cuda:N` but has no CUDA version (torch.version.cuda is None there, torch.version.hip is not)."""
    return bool(rt.torch) and rt.cuda_build is None and rt.hip_build is None and not is_xpu_build(rt)


def gpu_by_index(facts: Facts, index: int | None) -> GpuFacts | None:
    return None if index is None else facts.gpus_by_index.get(index)


def plist(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in pids)


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def version_tuple(v: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except (TypeError, ValueError):
        return None
