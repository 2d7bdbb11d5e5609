"""AMD's SMI library (``amdsmi``, the ``[amd]`` extra) as an optional source of amdgpu device figures.

The sidecar reads AMD GPUs from sysfs without any vendor SDK (``gpu_sysfs.py``); where amdsmi is
installed and its native library loads, it answers what sysfs does not print: why the clocks are held
down (``amdsmi_get_violation_status``'s ``active_*`` flags, MI300 and newer; older parts answer N/A),
and the GFX and memory activity, VRAM use and power cap on parts or kernels whose sysfs lacks them.
``sidecar/poll/vendor_figures.py`` takes a figure from here only where sysfs gave none.

This module is the one door to the library: nothing else imports it. The import and
``amdsmi_init()`` are tried at most once per ``AmdSmiLoader`` (the process has one, ``LOADER``),
and only when asked (the poller asks when the OS lists an amdgpu card): a missing package, a missing
``libamd_smi.so`` or a failed init (no driver) leaves it unavailable, said once in the log, and
nothing else changes. Each figure is one documented call (ROCm/amdsmi ``py-interface/README.md``,
``docs/reference/amdsmi-py-api.md``), its result checked for type and physical range: an
``AmdSmiException`` (unsupported, busy, a VM guest) or a malformed answer makes that figure None and
leaves the others. Units as documented: activity in %, ``amdsmi_get_gpu_vram_usage`` in MB (the C
struct's ``In MB``; MiB in practice: amdsmi divides bytes by 1024²), ``power_cap`` in µW.

Per-process figures are not taken from amdsmi: its process list is read from the same DRM fdinfo
files ``sources/drm`` reads, without de-duplicating a client's fds (docs/design.md, the vendor
sources).
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.sources.amdgpu_metrics import VIOLATION_NAMES

__all__ = ["LOADER", "VIOLATION_FLAGS", "AmdSmiLoader", "AmdSmiReader", "Violations"]

log = logging.getLogger(__name__)

MODULE = "amdsmi"
MAX_DEVICES = 64  # handles taken from the library (an 8-GPU node split into CPX partitions: 64)
MAX_VRAM_MIB = 1 << 24  # 16 TiB
MAX_POWER_CAP_W = 10_000.0
_BDF_LEN = 12  # "0000:c1:00.0"
# amdsmi_get_violation_status's flags (amdsmi_violation_status_t's active_*), each named as the
# residency counter it is made of (sources/amdgpu_metrics.VIOLATION_NAMES: PROCHOT; PVIOL, package
# power tracking; TVIOL, the socket's thermal limit; the voltage regulators' and the HBM's)
VIOLATION_FLAGS = {f"active_{name}": name for name in VIOLATION_NAMES}


@dataclass(frozen=True, slots=True)
class Violations:
    """Why the clocks are held down now: the ``VIOLATION_FLAGS`` names that are active (() none).
    Only the flags the part supports count; with none supported the reading is None, not this."""

    active: tuple[str, ...]


def _percent(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None  # "N/A" (0xFFFF: unsupported), or not a number
    return float(x) if 0 <= x <= 100 else None


def _bounded(x: object, top: float) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x) if 0 <= x <= top else None


def _pci(x: object) -> str | None:
    """A documented BDF string ("0000:c1:00.0"), lower-cased as sysfs spells it."""
    if not isinstance(x, str) or len(x) != _BDF_LEN:
        return None
    text = x.lower()
    parts = text.replace(".", ":").split(":")
    widths = [len(p) for p in parts]
    if widths != [4, 2, 2, 1] or not all(all(c in "0123456789abcdef" for c in p) for p in parts):
        return None
    return text


class AmdSmiReader:
    """amdsmi loaded and initialised: its GPUs by PCI address, each figure one call. Not
    thread-safe (DeviceFigures' polls run one at a time)."""

    def __init__(self, lib: Any, handles: Mapping[str, Any]) -> None:
        self._lib = lib
        self._handles = dict(handles)
        exc = getattr(lib, "AmdSmiException", None)
        library_error: tuple[type[BaseException], ...] = (
            (exc,) if isinstance(exc, type) and issubclass(exc, BaseException) else ()
        )
        # the library's own exception, and what a binding's formatting of an odd answer may raise
        self._errors: tuple[type[BaseException], ...] = (
            *library_error,
            ArithmeticError,
            LookupError,
            TypeError,
            ValueError,
            OSError,
        )

    @property
    def pcis(self) -> tuple[str, ...]:
        return tuple(self._handles)

    def call(self, handle: object, fn_name: str) -> object:
        """The answer of ``amdsmi.<fn_name>(handle)``; None when the call failed (or this version of
        the library lacks it)."""
        fn = getattr(self._lib, fn_name, None)
        if not callable(fn):
            return None
        try:
            return fn(handle)
        except self._errors:
            return None

    def _dict(self, pci: str, fn_name: str) -> Mapping[str, object]:
        handle = self._handles.get(pci)
        got = None if handle is None else self.call(handle, fn_name)
        return got if isinstance(got, Mapping) else {}

    def activity_pct(self, pci: str) -> tuple[float | None, float | None]:
        """(GFX, memory controller) activity, %: ``amdsmi_get_gpu_activity``'s ``gfx_activity`` and
        ``umc_activity``."""
        a = self._dict(pci, "amdsmi_get_gpu_activity")
        return _percent(a.get("gfx_activity")), _percent(a.get("umc_activity"))

    def vram_mib(self, pci: str) -> tuple[float | None, float | None]:
        """(used, total) VRAM: ``amdsmi_get_gpu_vram_usage``; a used above the total is neither."""
        v = self._dict(pci, "amdsmi_get_gpu_vram_usage")
        used, total = _bounded(v.get("vram_used"), MAX_VRAM_MIB), _bounded(v.get("vram_total"), MAX_VRAM_MIB)
        if used is not None and total is not None and used > total:
            return None, None
        return used, total

    def power_cap_w(self, pci: str) -> float | None:
        """The power cap in force: ``amdsmi_get_power_cap_info``'s ``power_cap`` (µW); 0 is none."""
        cap_uw = _bounded(
            self._dict(pci, "amdsmi_get_power_cap_info").get("power_cap"), MAX_POWER_CAP_W * 1e6
        )
        return cap_uw / 1e6 if cap_uw else None

    def violations(self, pci: str) -> Violations | None:
        """``amdsmi_get_violation_status``'s active flags; None where no flag is supported ("N/A")."""
        status = self._dict(pci, "amdsmi_get_violation_status")
        flags = {name: status.get(key) for key, name in VIOLATION_FLAGS.items()}
        known = {name: v for name, v in flags.items() if isinstance(v, bool)}
        if not known:
            return None
        return Violations(tuple(name for name, v in known.items() if v))


class AmdSmiLoader:
    """Imports and initialises amdsmi at most once; ``get`` is the reader, or None for good."""

    def __init__(self, module: str = MODULE) -> None:
        self._module = module
        self._tried = False
        self._reader: AmdSmiReader | None = None
        self.problem: str | None = None  # why it is unavailable, once tried

    @property
    def tried(self) -> bool:
        return self._tried

    def get(self) -> AmdSmiReader | None:
        if not self._tried:
            self._tried = True
            self._reader = self._load()
        return self._reader

    def _load(self) -> AmdSmiReader | None:
        try:
            lib = importlib.import_module(self._module)
        except Exception as exc:  # noqa: BLE001 -- an optional vendor binding: missing package, missing .so (OSError), its own import errors
            self._unavailable(f"{self._module} is not importable: {exc!r}")
            return None
        try:
            lib.amdsmi_init()
            handles = lib.amdsmi_get_processor_handles()
            if not isinstance(handles, (list, tuple)):
                self._unavailable(f"{self._module}: amdsmi_get_processor_handles gave no list")
                return None
        except Exception as exc:  # noqa: BLE001 -- init without a driver raises the library's own errors; any failure means not used
            self._unavailable(f"{self._module} did not initialise: {exc!r}")
            return None
        reader = AmdSmiReader(lib, {})
        by_pci: dict[str, Any] = {}
        for handle in handles[:MAX_DEVICES]:
            pci = _pci(reader.call(handle, "amdsmi_get_gpu_device_bdf"))
            if pci is not None:
                by_pci.setdefault(pci, handle)
        log.info("amdsmi loaded: %d AMD GPU(s)", len(by_pci))
        return AmdSmiReader(lib, by_pci)

    def _unavailable(self, why: str) -> None:
        self.problem = why[:500]
        log.info("amdsmi unavailable (the AMD figures come from sysfs alone): %s", self.problem)
        return None


LOADER = AmdSmiLoader()  # the process's: the import is tried once, whoever asks
