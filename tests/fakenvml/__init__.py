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
    "compute_capability",
    "lost",
    "not_supported",
    "processes",
}
_PROC_KEYS = {"pid", "used_mib", "sm_util", "mem_util", "type"}
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
        ):
            if gpu.get(key) is not None:
                lines.append(f"{key} {int(gpu[key])}")
        if gpu.get("compute_capability") is not None:
            major, minor = gpu["compute_capability"]
            lines.append(f"compute_capability {int(major)}.{int(minor)}")
        lines.append(f"lost {1 if gpu.get('lost') else 0}")
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
            lines.append(
                f"proc {int(proc['pid'])} {used} {int(proc.get('sm_util', 0))} "
                f"{int(proc.get('mem_util', 0))} {_PROC_TYPES[kind]}"
            )
    return "\n".join(lines) + "\n"


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
    non-PCI framebuffer), "dangling": True (class/drm link points nowhere)}.
    Returns `root`; point DSH_SYSFS_ROOT at it.
    """
    root = Path(root)
    drm = root / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    (drm / "version").write_text("drm 1.1.0 20060810\n")  # a plain file the real dir also holds
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
    return root


def _symlink(target: Path, link: Path) -> None:
    """Relative links, like the kernel's, so the tree still resolves if copied elsewhere."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


__all__ = [
    "FakeNvml",
    "LIBRARY_NAME",
    "NOT_SUPPORTED_QUERIES",
    "PythonWorker",
    "build_library",
    "gpu",
    "make_fake_sysfs",
    "nvml_env",
    "nvml_header",
    "render_scenario",
    "run_python",
    "write_scenario",
]
