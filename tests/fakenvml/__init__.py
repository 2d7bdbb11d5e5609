"""A simulated NVIDIA driver for tests, plus a fake /sys tree.

`build_library(dir)` compiles fakenvml.c into `dir/libnvidia-ml.so.1`; `write_scenario(path, dict)`
writes the file that library reads (named by FAKE_NVML_SCENARIO). Processes must be started with
`LD_LIBRARY_PATH` pointing at the library: nvidia-ml-py loads `libnvidia-ml.so.1` once per process
and never again, so in-process tests cannot swap drivers. `FakeNvml` bundles the two for tests and
`PythonWorker` keeps one such process alive so a test can change the scenario under it.

Scenario keys are documented in README.md next to this file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fakenvml.c"
LIBRARY_NAME = "libnvidia-ml.so.1"

# Names accepted in a GPU's "not_supported" list; fakenvml.c has the same table (ns_names).
NOT_SUPPORTED_QUERIES = (
    "utilization",
    "memory",
    "memory_v2",
    "temperature",
    "power",
    "power_limit",
    "processes",
    "process_utilization",
    "pci",
    "compute_capability",
    "encoder",
    "decoder",
    "clock_event_reasons",  # both nvmlDeviceGetCurrentClocksEventReasons and ...ThrottleReasons
    "sm_clock",  # nvmlDeviceGetClockInfo(SM or GRAPHICS)
    "mem_clock",  # nvmlDeviceGetClockInfo(MEM)
    "sm_clock_max",  # nvmlDeviceGetMaxClockInfo (every domain)
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "mig_mode",
    "energy",  # nvmlDeviceGetTotalEnergyConsumption
)

# Integer per-GPU keys of the efficiency fields (clocks in MHz, PCIe generation and lane count).
_INT_GPU_KEYS_EFFICIENCY = (
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "mem_clock_max_mhz",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
)

_GLOBAL_KEYS = {"driver_version", "cuda_driver_version", "init_error", "sample_period_us", "gpus"}
_GPU_KEYS = {
    "name",
    "uuid",
    "serial",
    "pci_bus_id",
    "pci_device_id",
    "memory_total_mib",
    "memory_used_mib",
    "memory_reserved_mib",
    "memory_total_bytes",
    "memory_used_bytes",
    "util_gpu",
    "util_mem",
    "temperature_c",
    "power_mw",
    "power_limit_mw",
    "energy_mj",
    "compute_capability",
    "lost",
    "not_supported",
    "processes",
    "clock_event_reasons",
    "throttle_reasons_only",
    *_INT_GPU_KEYS_EFFICIENCY,
    "gpm",
    "mig_mode",
    "mig",
    "mig_max_devices",
    "mig_unprivileged",
}
_PROC_KEYS = {"pid", "used_mib", "sm_util", "mem_util", "type", "gpu_instance_id", "compute_instance_id"}
_MIG_KEYS = {"uuid", "gpu_instance_id", "compute_instance_id", "memory_total_mib", "memory_used_mib"}
_PROC_TYPES = {"compute": 1, "graphics": 2, "both": 3}
MAX_GPUS = 64  # fakenvml.c: MAX_GPUS
MAX_PROCS = 512  # fakenvml.c: MAX_PROCS


# --------------------------------------------------------------------------- building


def nvml_header() -> Path:
    """The official nvml.h from the nvidia-nvml-dev wheel (under the `nvidia` namespace package)."""
    import nvidia  # namespace package: nvidia-nvml-dev puts nvidia/cuXX/include/nvml.h under it

    for root in getattr(nvidia, "__path__", []):
        found = sorted(Path(root).glob("*/include/nvml.h"))
        if found:
            return found[-1]
    raise FileNotFoundError("nvml.h not found: install the nvidia-nvml-dev package")


def build_library(out_dir: str | os.PathLike[str]) -> Path:
    """Compile the simulated driver into `out_dir/libnvidia-ml.so.1` and return its path.

    Rebuilt only when the source, the header or the flags change (a stamp file holds their hash),
    so calling it from every session costs a stat when nothing changed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    header = nvml_header()
    cc = shutil.which(os.environ.get("CC", "gcc")) or "gcc"
    # No -Werror: a newer gcc's new warnings must not break the test suite. Prototype or layout
    # mistakes are hard errors anyway (conflicting types with nvml.h, static_assert).
    flags = [
        "-std=c11",
        "-O2",
        "-Wall",
        "-Wno-unused-parameter",
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        "-DNVML_NO_UNVERSIONED_FUNC_DEFS",
        f"-Wl,-soname,{LIBRARY_NAME}",
    ]
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(header.read_bytes())
    digest.update(" ".join([cc, *flags]).encode())
    stamp_text = digest.hexdigest()
    lib = out_dir / LIBRARY_NAME
    stamp = out_dir / (LIBRARY_NAME + ".sha256")
    if lib.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        return lib
    # Build beside the target and rename, so a concurrent loader never maps a half-written file.
    fd, tmp = tempfile.mkstemp(prefix=".fakenvml-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        cmd = [cc, *flags, "-I", str(header.parent), "-o", tmp, str(SOURCE), "-lpthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building the simulated NVML failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stamp.write_text(stamp_text)
    return lib


# --------------------------------------------------------------------------- scenarios


def _error_code(value: Any) -> int:
    """NVML error given as a name ("DRIVER_NOT_LOADED", "NVML_ERROR_...") or a number."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    import pynvml  # only for its constants; importing does not load the driver

    name = str(value).upper()
    if not name.startswith("NVML_ERROR_"):
        name = "NVML_ERROR_" + name
    code = getattr(pynvml, name, None)
    if not isinstance(code, int):
        raise ValueError(f"unknown NVML error name {value!r}")
    return code


def _one_line(key: str, value: Any) -> str:
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"{key} must be a single line: {value!r}")
    return text


def _check_keys(what: str, given: Iterable[str], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        # A misspelt key would otherwise silently fall back to a default and the test would pass
        # for the wrong reason.
        raise ValueError(f"unknown {what} key(s) {unknown}; allowed: {sorted(allowed)}")


def render_scenario(scenario: Mapping[str, Any]) -> str:
    """The line-oriented text fakenvml.c parses (see parse_scenario there)."""
    _check_keys("scenario", scenario, _GLOBAL_KEYS)
    gpus = list(scenario.get("gpus") or [])
    if len(gpus) > MAX_GPUS:
        raise ValueError(f"at most {MAX_GPUS} GPUs")
    lines = [
        "# fakenvml scenario (written by tests.fakenvml.write_scenario)",
        f"driver_version {_one_line('driver_version', scenario.get('driver_version', '550.54.15'))}",
        f"cuda_driver_version {int(scenario.get('cuda_driver_version', 12040))}",
        f"init_error {_error_code(scenario.get('init_error'))}",
        f"sample_period_us {int(scenario.get('sample_period_us', 166666))}",
    ]
    for index, gpu in enumerate(gpus):
        _check_keys(f"gpus[{index}]", gpu, _GPU_KEYS)
        lines.append("gpu")
        for key in ("name", "uuid", "serial", "pci_bus_id"):
            if gpu.get(key) is not None:
                lines.append(f"{key} {_one_line(key, gpu[key])}")
        for key in (
            "pci_device_id",
            "memory_total_mib",
            "memory_used_mib",
            "memory_reserved_mib",
            "memory_total_bytes",  # exact bytes; after the _mib keys, so they win when both are given
            "memory_used_bytes",
            "util_gpu",
            "util_mem",
            "temperature_c",
            "power_mw",
            "power_limit_mw",
            "energy_mj",
        ):
            if gpu.get(key) is not None:
                lines.append(f"{key} {int(gpu[key])}")
        if gpu.get("compute_capability") is not None:
            major, minor = gpu["compute_capability"]
            lines.append(f"compute_capability {int(major)}.{int(minor)}")
        lines.append(f"lost {1 if gpu.get('lost') else 0}")
        lines.extend(_efficiency_lines(index, gpu))
        for query in gpu.get("not_supported") or ():
            if query not in NOT_SUPPORTED_QUERIES:
                raise ValueError(f"gpus[{index}].not_supported: {query!r} not in {NOT_SUPPORTED_QUERIES}")
            lines.append(f"not_supported {query}")
        procs = list(gpu.get("processes") or [])
        if len(procs) > MAX_PROCS:
            raise ValueError(f"at most {MAX_PROCS} processes per GPU")
        for proc in procs:
            _check_keys(f"gpus[{index}].processes[]", proc, _PROC_KEYS)
            kind = proc.get("type", "compute")
            if kind not in _PROC_TYPES:
                raise ValueError(f"process type {kind!r} not in {sorted(_PROC_TYPES)}")
            used = proc.get("used_mib", 0)
            used = -1 if used is None else int(used)
            gi, ci = proc.get("gpu_instance_id"), proc.get("compute_instance_id")
            mig_ids = "" if gi is None and ci is None else f" {_NO_ID if gi is None else int(gi)} {_NO_ID if ci is None else int(ci)}"
            lines.append(
                f"proc {int(proc['pid'])} {used} {int(proc.get('sm_util', 0))} "
                f"{int(proc.get('mem_util', 0))} {_PROC_TYPES[kind]}{mig_ids}"
            )
    return "\n".join(lines) + "\n"


_NO_ID = 0xFFFFFFFF  # NVML's "not a MIG instance" in process entries
MAX_MIG = 8  # fakenvml.c: MAX_MIG


def clock_event_mask(reasons: int | Iterable[str]) -> int:
    """An nvmlClocksEventReason* bit mask from an int or names of nvml_names.CLOCK_EVENT_REASONS."""
    if isinstance(reasons, int):
        return reasons
    from sidecar.common.nvml_names import CLOCK_EVENT_REASONS

    bits = {name: bit for bit, name in CLOCK_EVENT_REASONS}
    mask = 0
    for name in reasons:
        if name not in bits:
            raise ValueError(f"unknown clock event reason {name!r}; known: {sorted(bits)}")
        mask |= bits[name]
    return mask


def gpm_metric_id(name: int | str) -> int:
    """NVML_GPM_METRIC_* id from an int or its name without the prefix ("sm_util", "any_tensor_util")."""
    if isinstance(name, int):
        return name
    import pynvml  # constants only

    value = getattr(pynvml, "NVML_GPM_METRIC_" + str(name).upper(), None)
    if not isinstance(value, int) or str(name).upper() == "MAX":
        raise ValueError(f"unknown GPM metric {name!r} (NVML_GPM_METRIC_<NAME> without the prefix)")
    return value


def _efficiency_lines(index: int, gpu: Mapping[str, Any]) -> list[str]:
    """Scenario lines for clocks, PCIe, GPM and MIG (the keys documented in README.md)."""
    lines = []
    if gpu.get("clock_event_reasons") is not None:
        lines.append(f"clock_event_reasons {clock_event_mask(gpu['clock_event_reasons'])}")
    if gpu.get("throttle_reasons_only"):
        lines.append("throttle_reasons_only 1")
    for key in _INT_GPU_KEYS_EFFICIENCY:
        if gpu.get(key) is not None:
            lines.append(f"{key} {int(gpu[key])}")
    gpm = gpu.get("gpm")
    if gpm is not None:
        lines.append("gpm_supported 1")
        for name, value in dict(gpm).items():
            metric = gpm_metric_id(name)
            lines.append(f"gpm_not_supported {metric}" if value is None else f"gpm {metric} {float(value)!r}")
    migs = list(gpu.get("mig") or [])
    if len(migs) > MAX_MIG:
        raise ValueError(f"at most {MAX_MIG} MIG devices per GPU")
    mode = gpu.get("mig_mode", True if migs else None)
    if mode is not None:
        lines.append(f"mig_mode {1 if mode else 0}")
    if gpu.get("mig_max_devices") is not None:
        lines.append(f"mig_max_devices {int(gpu['mig_max_devices'])}")
    if gpu.get("mig_unprivileged"):
        lines.append("mig_unprivileged 1")
    for k, mig in enumerate(migs):
        _check_keys(f"gpus[{index}].mig[{k}]", mig, _MIG_KEYS)
        uuid = _one_line("mig uuid", mig.get("uuid", f"MIG-{index:08x}-{k:04x}-4000-8000-000000000000"))
        if not uuid or " " in uuid:
            raise ValueError(f"gpus[{index}].mig[{k}].uuid must be one word: {uuid!r}")
        lines.append(
            f"mig {uuid} {int(mig.get('gpu_instance_id', k + 1))} {int(mig.get('compute_instance_id', 0))} "
            f"{int(mig.get('memory_total_mib', 9856))} {int(mig.get('memory_used_mib', 0))}"
        )
    return lines


def write_scenario(path: str | os.PathLike[str], scenario: Mapping[str, Any]) -> Path:
    """Atomically replace the scenario file, making sure a running library notices.

    The library compares (inode, size, mtime). A freshly renamed file can reuse the old inode number
    and have the same size, and file mtimes come from a coarse kernel clock (milliseconds), so two
    quick writes could look identical: the new file's mtime is pushed past the old one's if needed.
    """
    path = Path(path)
    text = render_scenario(scenario).encode()
    try:
        previous_mtime_ns = path.stat().st_mtime_ns
    except FileNotFoundError:
        previous_mtime_ns = None
    fd, tmp = tempfile.mkstemp(prefix=".scenario-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        if previous_mtime_ns is not None and os.stat(tmp).st_mtime_ns <= previous_mtime_ns:
            bumped = previous_mtime_ns + 1_000_000
            os.utime(tmp, ns=(bumped, bumped))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# What NvmlSource reports in field_errors for a GPU of `gpu()` (an A100) whatever the test: GPM needs
# Hopper or newer. Tests that expect "no errors" compare against this.
def _default_field_errors() -> dict[str, str]:
    from sidecar.common.nvml_names import GPM_FIELDS
    from sidecar.sources.nvml import GPM_UNSUPPORTED

    return {name: GPM_UNSUPPORTED for name, _id, _scale in GPM_FIELDS}


DEFAULT_FIELD_ERRORS = _default_field_errors()


# --------------------------------------------------------------------------- running code against it


def nvml_env(
    lib_dir: str | os.PathLike[str],
    scenario_path: str | os.PathLike[str] | None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """os.environ plus what a child process needs to load the simulated driver."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(lib_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p
    )
    if scenario_path is not None:
        env["FAKE_NVML_SCENARIO"] = str(scenario_path)
    # The repository root on sys.path, so children can import probe/sidecar/tests as we do.
    root = str(HERE.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    if extra:
        env.update(extra)
    return env


def run_python(code: str, env: Mapping[str, str], timeout: float = 60) -> Any:
    """Run a Python snippet in a fresh interpreter; it must print one JSON document last."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"snippet failed (rc {proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"snippet printed nothing; stderr:\n{proc.stderr}")
    return json.loads(lines[-1])


_WORKER_LOOP = r"""
import json, sys, traceback
ns = {"__name__": "__worker__"}
out = sys.stdout
sys.stdout = sys.stderr  # stray prints must not break the protocol
for line in sys.stdin:
    ns.pop("result", None)
    try:
        exec(json.loads(line), ns)
        reply = {"result": ns.get("result")}
    except BaseException:
        reply = {"error": traceback.format_exc()}
    out.write(json.dumps(reply, default=repr) + "\n")
    out.flush()
"""


class PythonWorker:
    """A long-lived interpreter that runs snippets on request and sends back their `result`.

    Keeps one NVML-loaded process alive while the test rewrites the scenario under it. Snippets
    share a namespace, so `import`s and objects persist between calls.
    """

    def __init__(self, env: Mapping[str, str], timeout: float = 60):
        self.timeout = timeout
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_LOOP],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._stderr: list[str] = []
        # Drain stderr continuously so a chatty child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def __call__(self, code: str) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(textwrap.dedent(code)) + "\n")
        self._proc.stdin.flush()
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self._proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.timeout)
        if not result or not result[0]:
            self.close()
            raise RuntimeError(f"worker died or timed out; stderr:\n{''.join(self._stderr)}")
        reply = json.loads(result[0])
        if "error" in reply:
            raise RuntimeError(f"snippet raised in the worker:\n{reply['error']}")
        return reply["result"]

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> PythonWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class FakeNvml:
    """One simulated machine: where the library is and where its scenario file lives."""

    lib_dir: Path
    scenario_path: Path
    _workers: list[PythonWorker] = field(default_factory=list, repr=False)

    def write(self, scenario: Mapping[str, Any]) -> Path:
        return write_scenario(self.scenario_path, scenario)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return nvml_env(self.lib_dir, self.scenario_path, extra)

    def run(self, code: str, extra_env: Mapping[str, str] | None = None, timeout: float = 60) -> Any:
        """Run a snippet in a fresh process with the simulated driver; returns its last JSON line."""
        return run_python(code, self.env(extra_env), timeout)

    def worker(self, extra_env: Mapping[str, str] | None = None) -> PythonWorker:
        """A persistent process with the simulated driver (closed when the fixture ends)."""
        w = PythonWorker(self.env(extra_env))
        self._workers.append(w)
        return w

    def close(self) -> None:
        for w in self._workers:
            w.close()
        self._workers.clear()


def gpu(index: int = 0, **overrides: Any) -> dict[str, Any]:
    """A fully specified GPU for scenarios, distinct per index; override any key."""
    base: dict[str, Any] = {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": f"GPU-{index:08x}-1111-4222-8333-{index:012x}",
        "pci_bus_id": f"00000000:{index + 0x10:02X}:00.0",
        "memory_total_mib": 81920,
        "memory_used_mib": 0,
        "memory_reserved_mib": 0,
        "util_gpu": 0,
        "util_mem": 0,
        "temperature_c": 35,
        "power_mw": 60000,
        "lost": False,
        "not_supported": [],
        "processes": [],
    }
    base.update(overrides)
    return base


# --------------------------------------------------------------------------- fake /sys


def make_fake_sysfs(root: str | os.PathLike[str], cards: Iterable[Mapping[str, Any]]) -> Path:
    """Build a /sys-like tree under `root` with DRM cards laid out (and linked) as the kernel does.

    Each card: {"pci": "0000:00:02.0", "vendor": "0x8086", "device": "0x9a49",
    "class": "0x030000", "driver": "i915" or None (no driver bound), "card": "card0" (default by
    position), "connectors": ["eDP-1"], "vendor_file": False (omit the vendor file, as for a
    non-PCI framebuffer), "dangling": True (class/drm link points nowhere), and the driver's own
    files: "device_files" {path under the PCI device folder: text} (amdgpu's gpu_busy_percent, xe's
    tile0/gt0/freq0/act_freq), "card_files" {path under the DRM card folder: text} (i915's
    gt/gt0/rps_act_freq_mhz), "hwmon" [{file: text}, ...] (each a device/hwmon/hwmon<n> folder,
    n counted across the whole tree as the kernel does)}.
    Returns `root`; give it to the sidecar with `--path.sysfs ROOT` (a reader: `HostPaths(sysfs=ROOT)`).
    """
    root = Path(root)
    drm = root / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    (drm / "version").write_text("drm 1.1.0 20060810\n")  # a plain file the real dir also holds
    hwmon_number = 0
    for position, card in enumerate(cards):
        name = card.get("card", f"card{position}")
        pci = card.get("pci", f"0000:{position:02x}:00.0")
        dev_dir = root / "devices" / "pci0000:00" / pci
        card_dir = dev_dir / "drm" / name
        card_dir.mkdir(parents=True, exist_ok=True)
        if card.get("vendor_file", True):
            (dev_dir / "vendor").write_text(f"{card.get('vendor', '0x10de')}\n")
        (dev_dir / "device").write_text(f"{card.get('device', '0x0000')}\n")
        (dev_dir / "class").write_text(f"{card.get('class', '0x030000')}\n")
        driver = card.get("driver")
        if driver:
            drv_dir = root / "bus" / "pci" / "drivers" / driver
            drv_dir.mkdir(parents=True, exist_ok=True)
            _symlink(drv_dir, dev_dir / "driver")
        _symlink(dev_dir, card_dir / "device")
        if card.get("dangling"):
            _symlink(root / "devices" / "gone" / name, drm / name)
        else:
            _symlink(card_dir, drm / name)
        for connector in card.get("connectors", ()):
            conn_dir = card_dir / f"{name}-{connector}"
            conn_dir.mkdir(exist_ok=True)
            (conn_dir / "status").write_text("connected\n")
            _symlink(conn_dir, drm / f"{name}-{connector}")
        _write_files(dev_dir, card.get("device_files", {}))
        _write_files(card_dir, card.get("card_files", {}))
        for files in card.get("hwmon", ()):
            hwmon_dir = dev_dir / "hwmon" / f"hwmon{hwmon_number}"
            _write_files(hwmon_dir, files)
            (root / "class" / "hwmon").mkdir(parents=True, exist_ok=True)
            _symlink(hwmon_dir, root / "class" / "hwmon" / f"hwmon{hwmon_number}")
            hwmon_number += 1
    return root


def _write_files(base: Path, files: Mapping[str, str]) -> None:
    base.mkdir(parents=True, exist_ok=True)
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _symlink(target: Path, link: Path) -> None:
    """Relative links, like the kernel's, so the tree still resolves if copied elsewhere."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


__all__ = [
    "DEFAULT_FIELD_ERRORS",
    "FakeNvml",
    "LIBRARY_NAME",
    "NOT_SUPPORTED_QUERIES",
    "PythonWorker",
    "build_library",
    "clock_event_mask",
    "gpm_metric_id",
    "gpu",
    "make_fake_sysfs",
    "nvml_env",
    "nvml_header",
    "render_scenario",
    "run_python",
    "write_scenario",
]
