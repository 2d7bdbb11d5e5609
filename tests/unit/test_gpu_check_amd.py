"""scripts/gpu_check.sh's AMD path where no AMD GPU is (issue 41 item 10): the parsers of amd-smi's
and rocm-smi's JSON, the vendor detection on fixture /sys trees, the 5 % comparison, the
comparison rows against stand-in amd-smi/rocm-smi executables, and the script itself failing at once
without an AMD GPU or without a ROCm torch. The run against a real card is the script's own job.

The JSON samples are the shapes the tools' source prints (cited in scripts/gpu_amd_smi.py):
ROCm/amdsmi `amdsmi_cli/amdsmi_commands.py` `process` (tags rocm-5.7.0..rocm-6.1.0: bare byte
counts, a lone process merged into its GPU's entry, several under "values"; rocm-6.2 on:
"process_list" with {"value", "unit"} figures) and ROCm 7's `_process_sort_by_pid`
(ROCm/rocm-systems `projects/amdsmi/amdsmi_cli/amdsmi_commands.py`); ROCm/rocm_smi_lib
`python_smi_tools/rocm_smi.py` `showPids` + `print2DArray` + `printSysLog` for rocm-smi.
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakenvml import make_fake_sysfs

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
GIB = 2**30


@pytest.fixture(scope="module")
def scripts():
    """The scripts' modules, imported as gpu_check.sh's python imports them (scripts/ on sys.path)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield (
            importlib.import_module("gpu_amd_smi"),
            importlib.import_module("gpu_vendor"),
            importlib.import_module("gpu_check_amd"),
            importlib.import_module("gpu_check"),
        )
    finally:
        sys.path.remove(str(SCRIPTS))


def _vm(n: int, unit: str = "B") -> dict:
    return {"value": n, "unit": unit}


# ROCm 6.2 on (7.x adds sdma_usage, cu_occupancy, evicted_time): one entry per GPU, "process_list".
AMD_SMI_62 = [
    {
        "gpu": 0,
        "process_list": [
            {
                "process_info": {
                    "name": "python3",
                    "pid": 4242,
                    "memory_usage": {
                        "gtt_mem": _vm(2097152),
                        "cpu_mem": _vm(4096),
                        "vram_mem": _vm(2275409920),
                    },
                    "mem_usage": _vm(2277511168),
                    "usage": {"gfx": _vm(0, "ns"), "enc": _vm(0, "ns")},
                    "sdma_usage": _vm(0, "us"),
                    "cu_occupancy": 0,
                    "evicted_time": _vm(0, "ms"),
                }
            },
            {"process_info": {"name": "Xorg", "pid": 900, "memory_usage": {"vram_mem": _vm(1048576)}}},
        ],
    },
    {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]},
]
# ROCm 5.7-6.1: bare bytes; a lone process is merged into its GPU's entry, several are "values".
AMD_SMI_61_ONE = [
    {
        "gpu": 0,
        "process_info": {
            "name": "python3",
            "pid": 4242,
            "memory_usage": {"gtt_mem": 2097152, "cpu_mem": 4096, "vram_mem": 2275409920},
            "mem_usage": 2277511168,
            "usage": {"gfx": 0, "enc": 0},
        },
    }
]
AMD_SMI_61_MANY = [
    {
        "gpu": 0,
        "values": [
            {"process_info": {"name": "python3", "pid": 4242, "memory_usage": {"vram_mem": 2275409920}}},
            {"process_info": {"name": "Xorg", "pid": 900, "memory_usage": {"vram_mem": 1048576}}},
        ],
    },
    {"gpu": 1, "process_info": "Not Found"},
]
AMD_SMI_BY_PID = [
    {
        "pid": 4242,
        "name": "python3",
        "gpus": [
            {
                "gpu_index": 0,
                "mem": _vm(2277511168),
                "memory_usage": {"gtt_mem": _vm(2097152), "cpu_mem": _vm(4096), "vram_mem": _vm(2275409920)},
                "engine_usage": {"gfx": _vm(0, "ns"), "enc": _vm(0, "ns")},
                "cu_occupancy": 10,
            }
        ],
    }
]
ROCM_SMI = {"system": {"PID4242": "python3, 1, 2275409920, 0, 0", "PID77": "my, job, 1, 1048576, 0, 0"}}
AMD_SMI_LIST = [
    {"gpu": 0, "bdf": "0000:C1:00.0", "uuid": "fcff74a1-0000-1000-80ca-7e6d3a4c5b21"},
    {"gpu": 1, "bdf": "0000:c2:00.0", "uuid": "a2ff74a1-0000-1000-80f0-1c9a2b3d4e5f"},
]


@pytest.mark.parametrize(
    ("sample", "shape"),
    [
        (AMD_SMI_62, "process_list"),
        (AMD_SMI_61_ONE, "values (ROCm 5.7-6.1)"),
        (AMD_SMI_61_MANY, "values (ROCm 5.7-6.1)"),
        (AMD_SMI_BY_PID, "by-pid"),
        ({"gpu_data": AMD_SMI_62}, "process_list"),  # a wrapping object, should a version add one
    ],
)
def test_amd_smi_process_json_of_every_known_shape_gives_the_job_s_vram(scripts, sample, shape):
    smi = scripts[0]
    reading = smi.parse_amd_smi_process(json.dumps(sample, indent=4))
    assert reading.error is None and reading.shape == shape
    assert reading.vram_mib_of(4242) == 2275409920 / 2**20
    assert reading.vram_mib_of(4242, gpu=0) == 2275409920 / 2**20
    assert reading.vram_mib_of(4242, gpu=1) is None  # the job is on GPU 0 only
    assert reading.vram_mib_of(5) is None
    assert [p.field for p in reading.rows_of(4242)] == ["memory_usage.vram_mem"]


def test_amd_smi_output_with_a_line_before_its_json_and_human_sizes(scripts):
    smi = scripts[0]
    sample = [{"gpu": 0, "process_info": {"pid": "4242", "memory_usage": {"vram_mem": "2.0 GB"}}}]
    reading = smi.parse_amd_smi_process("WARNING: a notice the tool printed first\n" + json.dumps(sample))
    assert reading.error is None
    assert reading.vram_mib_of(4242) == 2048.0


def test_amd_smi_with_no_process_parses_to_none_and_without_vram_falls_back_to_its_total(scripts):
    smi = scripts[0]
    none = smi.parse_amd_smi_process(json.dumps([{"gpu": 0, "process_list": [{"process_info": "N/A"}]}]))
    assert none.error is None and none.processes == ()
    total_only = smi.parse_amd_smi_process(
        json.dumps([{"gpu": 0, "process_info": {"pid": 1, "mem": 3 * 2**20}}])
    )
    assert total_only.vram_mib_of(1) == 3.0 and total_only.rows_of(1)[0].field == "mem"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("AMD SMI: the command is not supported", "no JSON in its output"),
        ('{"unexpected": 1}', "shape not known"),
        ("[1, 2]", "shape not known"),
        ("", "no JSON in its output"),
    ],
)
def test_amd_smi_output_that_cannot_be_parsed_says_so(scripts, text, says):
    reading = scripts[0].parse_amd_smi_process(text)
    assert reading.error is not None and says in reading.error
    assert reading.vram_mib_of(4242) is None


def test_rocm_smi_showpids_json(scripts):
    smi = scripts[0]
    reading = smi.parse_rocm_smi_pids("\n" + json.dumps(ROCM_SMI))
    assert reading.error is None
    assert reading.vram_mib_of(4242) == 2275409920 / 2**20
    assert reading.vram_mib_of(4242, gpu=0) == 2275409920 / 2**20  # no GPU number: its row counts
    assert reading.vram_mib_of(77) == 1.0  # a name with a space ("my job" -> "my, job")
    assert smi.parse_rocm_smi_pids("{}").processes == ()  # no KFD process: nothing under "system"
    assert "shape not known" in (smi.parse_rocm_smi_pids("[]").error or "")
    assert "no JSON" in (smi.parse_rocm_smi_pids("ERROR: GPU[0] not found").error or "")


def test_amd_smi_list_pci_addresses_and_the_pci_spellings(scripts):
    smi = scripts[0]
    assert smi.parse_amd_smi_list(json.dumps(AMD_SMI_LIST)) == {0: "0000:c1:00.0", 1: "0000:c2:00.0"}
    assert smi.parse_amd_smi_list("not json") == {}
    assert smi.pci_key("00000000:C1:00.0") == smi.pci_key("0000:c1:00.0") == smi.pci_key("c1:00.0")
    assert smi.pci_key("0000:c1:00.0") != smi.pci_key("0000:c2:00.0")


def test_size_bytes(scripts):
    size = scripts[0].size_bytes
    assert size(1024) == 1024 and size(_vm(3, "MB")) == 3 * 2**20 and size(_vm(2, "GiB")) == 2 * GIB
    assert size("512 KB") == 512 * 1024 and size("7") == 7
    assert size("N/A") is None and size(None) is None and size(True) is None and size(_vm("N/A")) is None


def test_within_5_percent(scripts):
    within = scripts[0].within_pct
    assert within(2048.0, 2048.0) and within(2150.0, 2048.0) and within(1946.0, 2048.0)
    assert not within(2151.0, 2048.0) and not within(1945.0, 2048.0)
    assert not within(None, 2048.0) and not within(2048.0, None) and not within(0.0, 0.0)


# --- vendor detection on fixture trees ----------------------------------------------------------

MI300X = {"pci": "0000:c1:00.0", "vendor": "0x1002", "device": "0x74a1", "driver": "amdgpu"}
IGPU = {"pci": "0000:00:02.0", "vendor": "0x8086", "device": "0x9a49", "driver": "i915"}


def _roots(tmp_path: Path, cards: list[dict], dev: tuple[str, ...]) -> tuple[str, str]:
    sysfs = make_fake_sysfs(tmp_path / "sys", cards)
    devfs = tmp_path / "dev"
    devfs.mkdir()
    for name in dev:
        (devfs / name).write_text("")
    return str(sysfs), str(devfs)


def _no_tools(name: str) -> str | None:
    return None


@pytest.mark.parametrize(
    ("cards", "dev", "nvidia_smi", "vendor", "says"),
    [
        ([IGPU, MI300X], ("kfd",), False, "amd", "card1 0000:c1:00.0"),
        ([MI300X], (), False, "none", "no /dev/kfd"),  # amdgpu bound, ROCm's device absent
        ([{**MI300X, "driver": None}], ("kfd",), False, "none", "no card driven by amdgpu"),  # unbound
        ([{**MI300X, "driver": "radeon"}], ("kfd",), False, "none", "no card driven by amdgpu"),
        ([IGPU], (), False, "none", "no NVIDIA GPU"),
        ([MI300X], ("kfd",), True, "nvidia", "--amd checks it"),  # both: NVIDIA's, as before
        ([], ("nvidia0",), False, "nvidia", "nvidia0"),
    ],
)
def test_vendor_detection_on_fixture_trees(scripts, tmp_path, cards, dev, nvidia_smi, vendor, says):
    gpu_vendor = scripts[1]
    sysfs, devfs = _roots(tmp_path, cards, dev)
    which = (lambda name: f"/usr/bin/{name}") if nvidia_smi else _no_tools
    found = gpu_vendor.detect(sysfs, devfs, which)
    assert found.vendor == vendor
    assert says.replace("/dev", devfs) in found.why


# --- the comparison rows against stand-in tools ----------------------------------------------------


def _stand_in(bin_dir: Path, name: str, outputs: dict[str, str]) -> None:
    """An executable `name` printing outputs[its first argument] (as amd-smi process / list do),
    with shell builtins alone (the PATH given to the checks holds nothing else)."""
    bin_dir.mkdir(exist_ok=True)
    cases = "".join(f"  {arg}) printf '%s\\n' {shlex.quote(text)};;\n" for arg, text in outputs.items())
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\ncase "$1" in\n{cases}  *) echo "unknown $1" >&2; exit 2;;\nesac\n')
    path.chmod(0o755)


def _rows_of(scripts, monkeypatch, bin_dir: Path, mine: float | None) -> dict[str, tuple[str, str]]:
    check_amd, gpu_check = scripts[2], scripts[3]
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(check_amd, "ROCM_BIN", str(bin_dir / "absent"))
    gpu_check.ROWS.clear()
    try:
        check_amd.compare_with_tools(4242, mine, {"pci_bus_id": "0000:c1:00.0"})
        return {name: (result, detail) for name, result, detail in gpu_check.ROWS}
    finally:
        gpu_check.ROWS.clear()


def test_the_job_s_memory_against_amd_smi_and_rocm_smi(scripts, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "amd-smi", {"process": json.dumps(AMD_SMI_62), "list": json.dumps(AMD_SMI_LIST)})
    _stand_in(bin_dir, "rocm-smi", {"--showpids": json.dumps(ROCM_SMI)})
    rows = _rows_of(scripts, monkeypatch, bin_dir, 2200.0)  # amd-smi: 2170 MiB
    assert rows["amd-smi gpu of the card"][0] == "PASS"
    assert rows["amd-smi process"][0] == "PASS" and "2170.0 MiB" in rows["amd-smi process"][1]
    assert rows["rocm-smi --showpids"][0] == "PASS"
    assert rows["memory within 5 % of the AMD tool"] == ("PASS", "sidecar 2200.0 MiB, amd-smi 2170.0 MiB")
    far = _rows_of(scripts, monkeypatch, bin_dir, 2048.0 + 400)
    assert far["memory within 5 % of the AMD tool"][0] == "FAIL"


def test_an_amd_smi_that_cannot_be_parsed_fails_its_row_and_rocm_smi_is_the_reference(
    scripts, tmp_path, monkeypatch
):
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "amd-smi", {"process": "Segmentation fault", "list": "[]"})
    _stand_in(bin_dir, "rocm-smi", {"--showpids": json.dumps(ROCM_SMI)})
    rows = _rows_of(scripts, monkeypatch, bin_dir, 2180.0)
    assert rows["amd-smi process"][0] == "FAIL" and "cannot parse: no JSON" in rows["amd-smi process"][1]
    assert rows["memory within 5 % of the AMD tool"] == ("PASS", "sidecar 2180.0 MiB, rocm-smi 2170.0 MiB")


def test_without_amd_smi_or_rocm_smi_the_comparison_fails(scripts, tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    rows = _rows_of(scripts, monkeypatch, tmp_path / "bin", 2180.0)
    assert rows == {
        "amd-smi / rocm-smi": ("FAIL", "neither is installed (PATH, /opt/rocm/bin): nothing to compare with")
    }


# --- the script itself, here (no AMD GPU) ----------------------------------------------------------


def _run_script(tmp_path: Path, args: list[str], sysfs: str, devfs: str) -> subprocess.CompletedProcess[str]:
    """gpu_check.sh with the fixture roots and a PATH of the few tools it needs (no nvidia-smi,
    amd-smi or rocm-smi, whatever this machine has)."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("dirname", "timeout", "head"):
        found = shutil.which(tool)
        assert found, tool
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {
        **os.environ,
        "PATH": str(bin_dir),
        "PYTHON": sys.executable,
        "GPU_CHECK_SYSFS": sysfs,
        "GPU_CHECK_DEVFS": devfs,
    }
    env.pop("GPU_CHECK_VENDOR", None)
    return subprocess.run(
        ["/bin/bash", str(SCRIPTS / "gpu_check.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_the_script_parses():
    for script in ("gpu_check.sh",):
        r = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_the_script_without_an_amd_gpu_fails_at_once(tmp_path):
    sysfs, devfs = _roots(tmp_path, [IGPU], ())
    detect = _run_script(tmp_path, ["--detect"], sysfs, devfs)
    assert detect.returncode == 0 and "found none: no NVIDIA GPU" in detect.stdout
    r = _run_script(tmp_path, ["--amd"], sysfs, devfs)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        f"amd gpu  FAIL    no {devfs}/kfd; no amdgpu card in {sysfs}/class/drm: nothing can be checked"
        in r.stdout
    )


def test_the_script_on_an_amd_machine_with_a_cpu_torch_fails_on_the_torch_build(tmp_path):
    """Detection picks AMD by itself, the card passes, and this machine's CPU-only torch fails the
    ROCm-build row before any job starts."""
    sysfs, devfs = _roots(tmp_path, [IGPU, MI300X], ("kfd",))
    r = _run_script(tmp_path, [], sysfs, devfs)
    assert "found amd" in r.stdout, r.stdout + r.stderr
    assert "card1 0000:c1:00.0 (0x74a1)" in r.stdout
    torch_row = next(line for line in r.stdout.splitlines() if line.startswith("torch ROCm build"))
    assert "FAIL" in torch_row and "no torch.version.hip" in torch_row
    assert r.returncode == 1
