"""amdsmi, the optional ``[amd]`` extra (sidecar/sources/amdsmi_source.py), as DeviceFigures uses it.

No AMD driver or ROCm can be installed here, so amdsmi cannot load for real. Two kinds of test:

- Without amdsmi (the machine's own state): the import is tried lazily (only once an amdgpu card is
  read), once per loader, its failure remembered, and the figures are exactly sysfs's.
- With a STAND-IN ``amdsmi`` package this module writes into a temporary folder and puts on
  sys.path: a real importable package implementing, from the documented Python API (ROCm/amdsmi
  ``py-interface/README.md``: names, arguments, the dict keys and units each call returns, "N/A" for
  an unsupported field, ``AmdSmiLibraryException`` deriving ``AmdSmiException``), only the calls the
  source makes. It is not AMD's library: it checks our handling of the documented shapes (gaps
  filled, sysfs winning, one failing call leaving one figure None), not the library's behaviour.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from hostfs.paths import HostPaths
from sidecar.poll.vendor_figures import DeviceFigures, vendor_gpu_facts, with_figures
from sidecar.sources.amdsmi_source import AmdSmiLoader
from sidecar.sources.gpu_sysfs import GpuFiguresSampler
from sidecar.sources.sysfs import list_system_gpus
from sidecar.verdict import ProcGpu, decide
from tests.fakenvml import make_fake_sysfs
from tests.helpers.gpu_sysfs_trees import I915_IGPU, MI300X
from tests.helpers.verdict_facts import en, facts, proc, zh

S = 1_000_000_000
GAPPY_PCI = "0000:c2:00.0"


class Clock:
    def __init__(self) -> None:
        self.ns = 100 * S

    def __call__(self) -> int:
        return self.ns


def _gappy_mi300x() -> dict:
    """An MI300X whose sysfs lacks the busy figures, the VRAM used and the power cap (an older
    kernel, a VM): the gaps amdsmi may fill."""
    card = copy.deepcopy(MI300X)
    card.update(card="card1", pci=GAPPY_PCI)
    for name in ("gpu_busy_percent", "mem_busy_percent", "mem_info_vram_used"):
        del card["device_files"][name]
    del card["hwmon"][0]["power1_cap"]
    return card


def _tree(tmp_path: Path, cards: list[dict]) -> HostPaths:
    cards = [copy.deepcopy(c) for c in cards]
    for position, card in enumerate(cards):
        card["card"] = f"card{position}"
    return HostPaths(sysfs=str(make_fake_sysfs(tmp_path / "sys", cards)))


class ImportRecorder:
    """A real sys.meta_path finder that records each top-level import the import system could not
    answer from sys.modules, and lets the next finders answer it."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name, path=None, target=None):
        self.names.append(name)
        return None


@pytest.fixture
def no_amdsmi(monkeypatch):
    if "amdsmi" in sys.modules or importlib.util.find_spec("amdsmi") is not None:
        pytest.skip("amdsmi is installed here: this checks the machine without it")
    recorder = ImportRecorder()
    monkeypatch.setattr(sys, "meta_path", [recorder, *sys.meta_path])
    return recorder


def test_without_amdsmi_the_import_is_tried_once_when_an_amd_card_is_read_and_figures_are_sysfs(
    tmp_path, no_amdsmi
):
    host = _tree(tmp_path, [MI300X, I915_IGPU])
    listed = list_system_gpus(host=host)
    clock = Clock()
    loader = AmdSmiLoader()
    devices = DeviceFigures(host=host, clock_ns=clock, amdsmi=loader)
    got = devices.gpus(listed, 0)
    clock.ns += 30 * S  # both cards read again
    got_again = devices.gpus(listed, 0)
    assert no_amdsmi.names.count("amdsmi") == 1  # tried once, its failure remembered
    assert loader.tried and loader.get() is None and "not importable" in (loader.problem or "")
    assert no_amdsmi.names.count("amdsmi") == 1
    # exactly sysfs's figures, as without the extra
    sampler = GpuFiguresSampler(host=host, clock_ns=clock)
    expected = tuple(
        with_figures(g, f) for g, f in zip(vendor_gpu_facts(listed, 0), sampler.sample(listed), strict=True)
    )
    assert got_again == expected and got == expected
    assert got[0].clock_event_reasons is None and got[0].util == 87.0


def test_a_machine_without_an_amd_card_never_tries_the_import(tmp_path, no_amdsmi):
    host = _tree(tmp_path, [I915_IGPU])
    loader = AmdSmiLoader()
    DeviceFigures(host=host, clock_ns=Clock(), amdsmi=loader).gpus(list_system_gpus(host=host), 0)
    assert "amdsmi" not in no_amdsmi.names and not loader.tried


# The stand-in: answers per BDF, written into the package's source. MI300X's sysfs has every figure;
# amdsmi answers differently for it, so a figure from amdsmi there would show.
STANDIN_ANSWERS = {
    MI300X["pci"]: {
        "amdsmi_get_gpu_activity": {"gfx_activity": 11, "umc_activity": 5, "mm_activity": "N/A"},
        "amdsmi_get_gpu_vram_usage": {"vram_total": 196592, "vram_used": 7},
        "amdsmi_get_power_cap_info": {"power_cap": 500_000_000, "default_power_cap": 750_000_000},
        "amdsmi_get_violation_status": {
            "active_ppt_pwr": True,
            "active_socket_thrm": False,
            "active_prochot_thrm": "N/A",
            "active_vr_thrm": False,
            "active_hbm_thrm": True,
        },
    },
    GAPPY_PCI: {
        "amdsmi_get_gpu_activity": {"gfx_activity": 73, "umc_activity": "N/A", "mm_activity": "N/A"},
        "amdsmi_get_gpu_vram_usage": {"vram_total": 196592, "vram_used": 2048},
        "amdsmi_get_power_cap_info": "raise",  # AMDSMI_STATUS_NOT_SUPPORTED
        "amdsmi_get_violation_status": {f"active_{n}": "N/A" for n in ("ppt_pwr", "socket_thrm", "vr_thrm")},
    },
}

STANDIN_SOURCE = '''
"""STAND-IN for AMD's amdsmi Python package, written by tests/unit/test_amdsmi_source.py from the
documented API (ROCm/amdsmi py-interface/README.md). Not AMD's library."""

ANSWERS = {answers!r}
INIT_FAILS = {init_fails!r}
CALLS = []


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code):
        super().__init__(err_code)
        self.err_code = err_code


class _Handle:
    def __init__(self, bdf):
        self.bdf = bdf


def amdsmi_init(flag=None):
    CALLS.append(("amdsmi_init", None))
    if INIT_FAILS:
        raise AmdSmiLibraryException(34)  # AMDSMI_STATUS_DRIVER_NOT_LOADED


def amdsmi_get_processor_handles():
    return [_Handle(bdf) for bdf in ANSWERS]


def amdsmi_get_gpu_device_bdf(handle):
    return handle.bdf


def _answer(name, handle):
    CALLS.append((name, handle.bdf))
    got = ANSWERS[handle.bdf][name]
    if got == "raise":
        raise AmdSmiLibraryException(2)  # AMDSMI_STATUS_NOT_SUPPORTED
    return dict(got)


def amdsmi_get_gpu_activity(handle):
    return _answer("amdsmi_get_gpu_activity", handle)


def amdsmi_get_gpu_vram_usage(handle):
    return _answer("amdsmi_get_gpu_vram_usage", handle)


def amdsmi_get_power_cap_info(handle):
    return _answer("amdsmi_get_power_cap_info", handle)


def amdsmi_get_violation_status(handle):
    return _answer("amdsmi_get_violation_status", handle)
'''


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """Writes the stand-in package and puts its folder first on sys.path; removes the module after."""

    def write(*, init_fails: bool = False) -> None:
        package = tmp_path / "standin" / "amdsmi"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            textwrap.dedent(STANDIN_SOURCE.format(answers=STANDIN_ANSWERS, init_fails=init_fails))
        )
        monkeypatch.syspath_prepend(str(package.parent))

    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    yield write
    sys.modules.pop("amdsmi", None)  # no later test may find it


def test_amdsmi_fills_only_sysfs_gaps_and_a_failing_call_leaves_only_its_figure_none(tmp_path, standin):
    standin()
    host = _tree(tmp_path, [MI300X, _gappy_mi300x()])
    listed = list_system_gpus(host=host)
    loader = AmdSmiLoader()
    mi, gappy = DeviceFigures(host=host, clock_ns=Clock(), amdsmi=loader).gpus(listed, 0)
    lib = sys.modules["amdsmi"]
    assert loader.problem is None and sorted(loader.get().pcis) == sorted(STANDIN_ANSWERS)

    # sysfs wins wherever it gave a figure: the MI300X's are all sysfs's, amdsmi asked only why
    # the clocks are held down, which sysfs does not print.
    assert (mi.util, mi.mem_util, mi.mem_used_mib, mi.power_limit_w) == (87.0, 34.0, 80 * 1024, 750.0)
    assert mi.clock_event_reasons == ("sw_power_cap", "sw_thermal_slowdown")  # PPT; HBM thermal
    assert [name for name, bdf in lib.CALLS if bdf == MI300X["pci"]] == ["amdsmi_get_violation_status"]
    # ... and the throttled rule says so, pointing at amd-smi, not at nvidia-smi or Intel's files
    row = ProcGpu(0, 40_000.0, 90.0, None, "amd", MI300X["pci"])
    (w,) = [
        w for w in decide(facts(proc(gpu=[row]), gpus=(mi,), nvml_ok=False)).warnings if w.code == "throttled"
    ]
    assert "amd-smi monitor --violation" in en(w.hint) and "nvidia-smi" not in en(w.hint)
    assert "/sys/bus/pci" not in en(w.hint) and "amd-smi" in zh(w.hint)

    # The gappy card: filled from amdsmi; "N/A" stays None; the power cap call raised, so the power
    # limit alone is None while the others are filled; no violation flag supported: unknown.
    assert (gappy.util, gappy.mem_util, gappy.mem_used_mib, gappy.mem_total_mib) == (
        73.0,
        None,
        2048.0,
        192 * 1024,  # sysfs's total
    )
    assert gappy.power_limit_w is None and gappy.power_w == 412.0
    assert gappy.clock_event_reasons is None


def test_amdsmi_that_imports_but_does_not_initialise_is_unavailable_once(tmp_path, standin):
    standin(init_fails=True)
    host = _tree(tmp_path, [MI300X])
    listed = list_system_gpus(host=host)
    clock = Clock()
    loader = AmdSmiLoader()
    devices = DeviceFigures(host=host, clock_ns=clock, amdsmi=loader)
    first = devices.gpus(listed, 0)
    clock.ns += 2 * S
    devices.gpus(listed, 0)
    lib = sys.modules["amdsmi"]
    assert lib.CALLS == [("amdsmi_init", None)]  # tried once, nothing else asked
    assert "did not initialise" in (loader.problem or "") and loader.get() is None
    assert first[0].util == 87.0 and first[0].clock_event_reasons is None


def test_doctor_says_whether_amdsmi_loaded_only_where_an_amd_card_is_listed(no_amdsmi):
    from sidecar.cli.doctor import _amdsmi_lines, amdsmi_report

    assert amdsmi_report(False) is None and _amdsmi_lines(None) == []
    assert "amdsmi" not in no_amdsmi.names  # no AMD card: not even tried
    report = amdsmi_report(True)
    assert report is not None and not report["loaded"] and report["gpus"] == 0
    (line,) = _amdsmi_lines(report)
    assert line.startswith("[--] amdsmi not loaded") and "not importable" in line
    assert _amdsmi_lines({"loaded": True, "gpus": 2, "problem": None}) == [
        "[ok] amdsmi (the [amd] extra) loaded: 2 AMD GPU(s)"
    ]
