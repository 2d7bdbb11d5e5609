"""Facts only the process itself knows: who it is (identity, role) and what its torch can do.

Nothing here imports torch: torch is looked up in sys.modules and used only when the process has
already imported it. Nothing here initialises CUDA either, nor calls into the CUDA runtime before
the process has done so itself: ``torch.cuda.is_available()`` runs ``cuInit`` through
``cudaGetDeviceCount``, which "poisons fork" (DataLoader workers and fork-started ranks forked after
it cannot use CUDA). Before CUDA is initialised the device count therefore comes from torch's
NVML-based counter; where NVML cannot answer, from the driver once the process itself initialised it
(``is_available()`` was called), from the driver library's absence or age; else it is unknown (None).

A ROCm build of torch calls its AMD GPUs ``cuda`` and runs the same code (``torch.cuda``, counted
before initialisation through amdsmi instead of NVML); it is told apart by ``torch.version.hip``.
XPU (Intel) devices are asked the same way: their names once the process initialised XPU; before,
only the count torch's own is_available() found, read from torch, never asked.
"""

from __future__ import annotations

import os
import sys

from hostfs.procid import process_start_ticks
from probe_wire.cleanup import has_live_segment
from probe_wire.schema import empty_runtime

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["identity", "memory", "role", "runtime"]

PATH_MAX_CHARS = 1024

_static_identity: dict[str, Any] | None = None
_static_runtime: dict[str, Any] | None = None
# Keyed by what can change the answer before CUDA is initialised (_VISIBILITY_KEY).
_cuda_probe_cache: dict[tuple[str | None, ...], tuple[bool | None, int | None]] = {}
_initialised_devices: tuple[int, list[dict[str, Any]]] | None = None  # (device count, devices)
_initialised_xpu: tuple[int, list[dict[str, Any]]] | None = None  # (device count, devices)

# The variables that choose which GPUs a process sees, published as set (the payload's key, the
# variable): CUDA's; ROCm's (ROCr's first, then HIP's or ROCclr's on what ROCr left, a ROCm build also
# taking CUDA_VISIBLE_DEVICES); Level Zero's (XPU).
_VISIBILITY_VARIABLES = (
    ("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"),
    ("hip_visible_devices", "HIP_VISIBLE_DEVICES"),
    ("rocr_visible_devices", "ROCR_VISIBLE_DEVICES"),
    ("gpu_device_ordinal", "GPU_DEVICE_ORDINAL"),
    ("ze_affinity_mask", "ZE_AFFINITY_MASK"),
)
VISIBILITY_MAX_CHARS = 512
# What torch's CUDA (or ROCm) device count before initialisation reads (torch.cuda._parse_visible_devices).
_VISIBILITY_KEY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def _clip(value: Any, n: int = PATH_MAX_CHARS) -> str | None:
    if value is None:
        return None
    s = str(value)
    return s[:n] if s else None


def identity() -> dict[str, Any]:
    """pid, ppid, start_ticks, argv0, script, hostname of this process (live pid and ppid)."""
    global _static_identity
    pid = os.getpid()
    if _static_identity is None or _static_identity["pid"] != pid:
        argv = getattr(sys, "argv", None) or [""]
        main = sys.modules.get("__main__")
        script = getattr(main, "__file__", None)
        _static_identity = {
            "pid": pid,
            "start_ticks": process_start_ticks(pid),
            "argv0": _clip(argv[0]),
            "script": _clip(os.path.abspath(script)) if script else None,
            "hostname": _clip(os.uname().nodename, 255),
        }
    out = dict(_static_identity)
    out["ppid"] = os.getppid()  # live: a child is re-parented when its parent dies
    return out


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def role(forked: bool) -> dict[str, Any]:
    """role, worker_id, rank, local_rank, world_size, dist_backend.

    Precedence: a DataLoader worker, then an initialised torch.distributed rank, then a forked child,
    then a process whose parent runs the probe (``child``), then RANK/LOCAL_RANK/WORLD_SIZE in the
    environment (``rank``), else ``main``. Rank fields are filled whenever known, whatever the role,
    so a worker can still be grouped with its rank.
    """
    out = {
        "role": "main",
        "worker_id": None,
        "rank": _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "dist_backend": None,
    }
    env_rank = any(v is not None for v in (out["rank"], out["local_rank"], out["world_size"]))
    dist_initialised = False
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist_initialised = True
        out["rank"] = int(dist.get_rank())
        out["world_size"] = int(dist.get_world_size())
        out["dist_backend"] = str(dist.get_backend())
    worker_info = None
    worker_mod = sys.modules.get("torch.utils.data._utils.worker")
    if worker_mod is not None:
        worker_info = worker_mod.get_worker_info()
    if worker_info is not None:
        out["role"] = "dataloader-worker"
        out["worker_id"] = int(worker_info.id)
    elif dist_initialised:
        out["role"] = "rank"
    elif forked or _parent_runs_the_probe():
        out["role"] = "child"
    elif env_rank:
        out["role"] = "rank"
    return out


def _parent_runs_the_probe() -> bool:
    # The parent's own segment, under either of its names: a file someone else planted under the
    # parent's pid (another user's, a dead process's leftover) never makes the job's main a child.
    return has_live_segment(os.getppid())


def _static(torch: Any) -> dict[str, Any]:
    global _static_runtime
    if _static_runtime is None:
        version = getattr(torch, "version", None)
        backends = getattr(torch, "backends", None)
        mps = None
        if backends is not None and hasattr(backends, "mps"):
            mps = bool(backends.mps.is_available())
        _static_runtime = {
            "torch": _clip(getattr(torch, "__version__", None), 64),
            "cuda_build": _clip(getattr(version, "cuda", None), 64),
            "hip_build": _clip(getattr(version, "hip", None), 64),
            "xpu_build": _clip(getattr(version, "xpu", None), 64),
            "mps_available": mps,
        }
    return _static_runtime


# [version or None] once read: the linked cuDNN does not change.
_cudnn: list[int | None] = []


def _cudnn_version(torch: Any) -> int | None:
    """cuDNN's version, asked only once CUDA is initialised: torch.backends.cudnn.version()
    initialises CUDA itself (seen with torch 2.11 on an H200: a context in every probed process,
    and a DataLoader forked after it in a "bad fork")."""
    if not _cudnn:
        backends = getattr(torch, "backends", None)
        v = backends.cudnn.version() if backends is not None and hasattr(backends, "cudnn") else None
        _cudnn.append(int(v) if v is not None else None)
    return _cudnn[0]


def _count_without_cuda_init(torch: Any, ask_driver: bool) -> tuple[bool | None, int | None]:
    """(available, device count) from NVML via torch's own helper; where NVML cannot count, from the
    CUDA driver (``ask_driver``: not a child forked after CUDA was initialised); (None, None) when
    unknown."""
    key = tuple(map(os.environ.get, _VISIBILITY_KEY))
    cached = _cuda_probe_cache.get(key)
    if cached is None:
        cached = _cuda_probe_cache[key] = _count_from_nvml(torch)
    if cached[0] is None and ask_driver and not getattr(torch.version, "hip", None):
        # Not cached: the answer comes once the script initialises CUDA (is_available(), say).
        return _count_once_initialised()
    return cached


def _count_from_nvml(torch: Any) -> tuple[bool | None, int | None]:
    cuda = torch.cuda
    if getattr(torch.version, "hip", None):
        counter = getattr(cuda, "_device_count_amdsmi", None)
    else:
        counter = getattr(cuda, "_device_count_nvml", None)
    answer: tuple[bool | None, int | None] = (None, None)
    if counter is not None:
        try:
            n = counter()
        except RuntimeError:
            # A ROCm build's counter refuses HIP_VISIBLE_DEVICES naming more GPUs than
            # ROCR_VISIBLE_DEVICES leaves (torch.cuda._parse_visible_devices): unknown, as torch's own
            # is_available() says once the script asks.
            n = None
        if isinstance(n, int) and n >= 0:
            answer = (n > 0, n)
    if answer[0] and not getattr(torch.version, "hip", None):
        loadable, driver = driver_library()
        build = _major_minor(getattr(torch.version, "cuda", None))
        if not loadable:
            # NVML answers without the CUDA driver library (a container started with
            # NVIDIA_DRIVER_CAPABILITIES=utility mounts libnvidia-ml but not libcuda): torch's runtime
            # cannot load it either, and is_available() is False.
            answer = (False, answer[1])
        elif driver is not None and build is not None and driver[0] < build[0]:
            # NVML counts the GPUs whatever the driver's age; torch's CUDA runtime refuses a driver of
            # an older CUDA major (cudaErrorInsufficientDriver), and is_available() is then False.
            answer = (False, answer[1])
    elif answer[0] is None and not getattr(torch.version, "hip", None):
        # NVML cannot count (no libnvidia-ml.so.1: a machine without the NVIDIA driver, where pip's
        # default torch is still a CUDA build). Without the driver's library, or with one of an older
        # CUDA major, torch's runtime cannot run either: is_available() is False.
        loadable, driver = driver_library()
        build = _major_minor(getattr(torch.version, "cuda", None))
        if not loadable or (driver is not None and build is not None and driver[0] < build[0]):
            answer = (False, None)
    return answer


# CUresult values (cuda.h).
_CUDA_SUCCESS, _CUDA_ERROR_NO_DEVICE = 0, 100


def _count_once_initialised() -> tuple[bool | None, int | None]:
    """(available, device count) from the driver when this process has initialised it itself:
    ``cuDeviceGetCount`` answers CUDA_ERROR_NOT_INITIALIZED, and initialises nothing, before
    ``cuInit`` ("If cuInit() has not been called, any function from the driver API will return
    CUDA_ERROR_NOT_INITIALIZED", CUDA Driver API). (None, None) until then, or from another process
    than the one that loaded the library (a forked child: CUDA is not fork-safe)."""
    if not _driver_handle or _driver_handle[0][1] != os.getpid():
        return None, None
    lib = _driver_handle[0][0]
    try:
        import ctypes

        count = ctypes.c_int(0)
        result = lib.cuDeviceGetCount(ctypes.byref(count))
    except (OSError, AttributeError, ImportError):
        return None, None
    if result == _CUDA_SUCCESS and count.value >= 0:
        return count.value > 0, count.value
    if result == _CUDA_ERROR_NO_DEVICE:  # the script's cuInit found no device: is_available() False
        return False, 0
    return None, None


def _major_minor(version: Any) -> tuple[int, int] | None:
    try:
        major, minor = str(version).split(".")[:2]
        return int(major), int(minor)
    except (TypeError, ValueError):
        return None


# [(loadable, (major, minor) or None)] once asked: the driver library does not come or go.
_driver_lib: list[tuple[bool, tuple[int, int] | None]] = []
# [(the loaded library, the pid that loaded it)] once loaded.
_driver_handle: list[tuple[Any, int]] = []


def driver_library() -> tuple[bool, tuple[int, int] | None]:
    """(whether libcuda.so.1 loads, the CUDA version the driver supports or None when unknown).

    Loading the library is what torch's CUDA runtime does first, by the same name and search path, so
    its answer is torch's; loading runs no CUDA code (``cuInit`` does, and is never called here).
    ``cuDriverGetVersion`` is the one driver call documented to work before ``cuInit``: it neither
    initialises CUDA nor poisons fork.
    """
    if not _driver_lib:
        loadable, version_mm = False, None
        try:
            import ctypes

            lib = ctypes.CDLL("libcuda.so.1")
            loadable = True
            _driver_handle.append((lib, os.getpid()))
            version = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
                version_mm = (version.value // 1000, version.value % 1000 // 10)
        except (OSError, AttributeError, ImportError):
            pass  # not loadable (OSError), or a library without the call: its version stays unknown
        _driver_lib.append((loadable, version_mm))
    return _driver_lib[0]


def driver_cuda_version() -> tuple[int, int] | None:
    """(major, minor) of the CUDA version the installed driver supports, None when unknown."""
    return driver_library()[1]


def _uuid(props: Any) -> str | None:
    raw = getattr(props, "uuid", None)
    if raw is None:
        return None
    s = str(raw)
    # NVML spells UUIDs "GPU-…" (or "MIG-…"): the same spelling lets the sidecar join the two.
    return s if s.startswith(("GPU-", "MIG-")) else f"GPU-{s}"


def _pci_address(props: Any) -> str | None:
    """The device's PCI address as sysfs, DRM fdinfo (``drm-pdev``) and KFD's topology spell it
    ("0000:c1:00.0"), from torch's pci_domain_id, pci_bus_id and pci_device_id (recent torch; None
    before). The function is 0: the device properties do not give it, and a GPU's is 0."""
    domain, bus, device = (
        getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")
    )
    if type(domain) is not int or type(bus) is not int or type(device) is not int:
        return None
    if not (0 <= domain <= 0xFFFFFFFF and 0 <= bus <= 0xFF and 0 <= device <= 0x1F):
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def _device(index: int, props: Any, rocm: bool) -> dict[str, Any]:
    """A ``cuda:<index>`` device of the payload, from torch.cuda.get_device_properties."""
    return {
        "index": index,
        "name": _clip(props.name, 256) or "?",
        "uuid": _uuid(props),
        "pci_bus_id": _pci_address(props),
        # A CUDA build's gcnArchName is the device's name again (torch/csrc/cuda/Module.cpp).
        "gcn_arch": _clip(getattr(props, "gcnArchName", None), 64) if rocm else None,
    }


def runtime(torch: Any | None) -> dict[str, Any]:
    """The payload's ``runtime`` map; torch None means torch is not imported in this process."""
    global _initialised_devices
    out = empty_runtime()
    for key, variable in _VISIBILITY_VARIABLES:
        out[key] = _clip(os.environ.get(variable), VISIBILITY_MAX_CHARS)
    out["cuda_device_order"] = _clip(os.environ.get("CUDA_DEVICE_ORDER"), 64)
    out["xpu_devices"] = []
    if torch is None:
        return out
    out.update(_static(torch))
    _xpu_runtime(torch, out)
    if not (getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)):
        # A CPU-only build: is_available() returns False without touching any driver.
        out["cuda_available"] = False
        out["device_count"] = 0
        return out
    cuda = torch.cuda
    # is_initialized() is False in a forked child of a CUDA process ("bad fork"): that child must not
    # touch CUDA, and the cached NVML answer it inherited is reused rather than asked again.
    initialised = cuda.is_initialized()
    if initialised:
        out["cuda_initialized"] = True
        out["cudnn"] = _cudnn_version(torch)
        if _initialised_devices is None:
            count = int(cuda.device_count())
            rocm = bool(getattr(torch.version, "hip", None))
            devices = [_device(i, cuda.get_device_properties(i), rocm) for i in range(count)]
            _initialised_devices = (count, devices)
        count, devices = _initialised_devices
        out["cuda_available"] = count > 0
        out["device_count"] = count
        out["devices"] = [dict(d) for d in devices]
    else:
        bad_fork = getattr(cuda, "_is_in_bad_fork", None)
        in_bad_fork = bool(bad_fork is not None and bad_fork())
        if in_bad_fork and _initialised_devices is not None:
            count = _initialised_devices[0]
            out["cuda_available"] = bool(count)
            out["device_count"] = count
        else:
            out["cuda_available"], out["device_count"] = _count_without_cuda_init(torch, not in_bad_fork)
    if initialised and not getattr(torch.version, "hip", None):
        out["cuda_driver_loadable"] = True  # CUDA runs in this process: torch loaded the library
    elif _driver_lib:  # asked only where NVML counted a GPU or could not count: never just to publish it
        out["cuda_driver_loadable"] = _driver_lib[0][0]
    return out


def _xpu_runtime(torch: Any, out: dict[str, Any]) -> None:
    """XPU's facts into ``out``, asked as CUDA's are: names (which initialise XPU) only once the
    process initialised XPU itself; before, the count torch found (_xpu_count_without_init); in a
    child forked after XPU was initialised, what the parent knew."""
    global _initialised_xpu
    xpu = getattr(torch, "xpu", None)
    compiled = getattr(xpu, "_is_compiled", None)
    if xpu is None or compiled is None:
        return  # a torch without torch.xpu: unknown
    if not compiled():  # not an XPU build: is_available() is False without asking anything
        out["xpu_available"], out["xpu_initialized"], out["xpu_device_count"] = False, False, 0
        return
    # As torch.cuda's: False in a child forked after XPU was initialised ("bad fork").
    is_initialized = getattr(xpu, "is_initialized", None)
    out["xpu_initialized"] = initialised = bool(is_initialized is not None and is_initialized())
    if initialised:
        if _initialised_xpu is None:
            count = int(xpu.device_count())
            names = [_clip(xpu.get_device_properties(i).name, 256) or "?" for i in range(count)]
            devices = [
                {"index": i, "name": n, "uuid": None, "pci_bus_id": None, "gcn_arch": None}
                for i, n in enumerate(names)
            ]
            _initialised_xpu = (count, devices)
        count_known: int | None = _initialised_xpu[0]
        out["xpu_devices"] = [dict(d) for d in _initialised_xpu[1]]
    else:
        bad_fork = getattr(xpu, "_is_in_bad_fork", None)
        if bad_fork is not None and bad_fork():
            count_known = _initialised_xpu[0] if _initialised_xpu is not None else None
        else:
            count_known = _xpu_count_without_init(xpu)
    out["xpu_device_count"] = count_known
    out["xpu_available"] = None if count_known is None else count_known > 0


def _xpu_count_without_init(xpu: Any) -> int | None:
    """XPU devices as torch counted them before XPU was initialised: read, never asked. torch's
    is_available() counts through Level Zero Sysman, which does not poison fork, and keeps one entry
    per device it counted (torch.xpu._cached_zes_device_infos). Asking here would import a module
    (pyzes) into the script and, where Level Zero fails, warn on its stderr; an older torch counts
    only through the runtime, which poisons fork. None when unknown: not counted yet, or none found."""
    found = getattr(xpu, "_cached_zes_device_infos", None)
    return len(found) if type(found) is list and found else None


def memory(torch: Any | None) -> list[dict[str, Any]]:
    """Caching-allocator figures per device, only once the process itself initialised CUDA."""
    if torch is None or _initialised_devices is None or not torch.cuda.is_initialized():
        return []
    cuda = torch.cuda
    out = []
    for i in range(_initialised_devices[0] or 0):
        out.append(
            {
                "device": f"cuda:{i}",
                "allocated_bytes": int(cuda.memory_allocated(i)),
                "reserved_bytes": int(cuda.memory_reserved(i)),
                "peak_allocated_bytes": int(cuda.max_memory_allocated(i)),
                "peak_reserved_bytes": int(cuda.max_memory_reserved(i)),
            }
        )
    return out
