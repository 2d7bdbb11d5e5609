"""Issue 41 item 6: cpu-build and cuda-unavailable on AMD and Intel machines.

- cpu-build names the build of the user's own torch version for the machine's GPU: the ROCm index
  PyTorch publishes for that version on an AMD machine (never an index without it: a torch the table
  does not know gets pytorch.org's selector), the XPU index on an Intel GPU that XPU builds support
  (an older iGPU gets nothing), and today's NVIDIA advice wherever an NVIDIA GPU is (the seed's
  laptop: Intel iGPU + NVIDIA dGPU);
- a ROCm build of torch (torch.version.hip) without a GPU is cuda-unavailable with ROCm's reasons:
  hidden devices, no AMD GPU, no KFD, no /dev/kfd in a container, a user outside the device nodes'
  group, else a generic one;
- the sources' readers of what those reasons need (KFD's presence, a process's groups, the device
  nodes as it sees them) on fixture trees and on this machine's own /proc.
"""

from __future__ import annotations

import grp
import os
import re
from dataclasses import replace

import pytest

from probe_wire.records import RuntimeRecord
from sidecar.poll.collect import system_gpu_facts
from sidecar.poll.gpu_access import gpu_access_facts
from sidecar.sources.gpu_access import (
    DeviceNode,
    ProcessCredentials,
    kfd_present,
    read_credentials,
    read_gpu_nodes,
)
from sidecar.sources.host import HostPaths
from sidecar.sources.sysfs import SystemGpu
from sidecar.verdict import DeviceNodeFacts, GpuAccessFacts, SystemGpuFacts, decide
from tests.helpers.verdict_facts import INTEL_CARD, NVIDIA_CARD, en, facts, model, proc, zh

UNFILLED = re.compile(r"\{\w+\}")

MI300X = SystemGpuFacts("AMD", "AMD GPU", "0000:c1:00.0", "amdgpu", None, device_id="0x74a1")
RADEON_HD = SystemGpuFacts("AMD", "AMD GPU", "0000:01:00.0", "radeon", None, device_id="0x6798")  # pre-GCN
ARC_A770 = SystemGpuFacts(
    "Intel", "Intel GPU", "0000:03:00.0", "i915", None, device_id="0x56a0", integrated=False
)
METEOR_LAKE = SystemGpuFacts(
    "Intel", "Intel integrated graphics", "0000:00:02.0", "i915", None, device_id="0x7d55", integrated=True
)
LUNAR_LAKE = SystemGpuFacts(
    "Intel", "Intel integrated graphics", "0000:00:02.0", "xe", None, device_id="0x64a0", integrated=True
)
UHD_770 = replace(INTEL_CARD, device_id="0x4680")  # Alder Lake: no XPU build runs on it


def cpu(torch):
    return RuntimeRecord(torch=torch, cuda_build=None, cuda_available=False, device_count=0)


def no_nvidia(*procs, system, **kw):
    """Facts of a machine without NVIDIA's driver: NVML is missing, the OS shows `system`."""
    return facts(*procs, gpus=(), nvml_ok=False, system=system, **kw)


def the(code, f):
    found = [w for w in decide(f).warnings if w.code == code]
    assert len(found) <= 1, found
    return found[0] if found else None


# id, facts, the message's and the hint's catalogue ids (None: no cpu-build), words the hint has
CPU_BUILD_CASES = [
    (
        "AMD GPU, CPU torch 2.9.1: the ROCm index of 2.9",
        no_nvidia(proc(runtime=cpu("2.9.1+cpu"), models=[model("cpu")]), system=(MI300X,)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm",
        ["torch==2.9.1 --index-url https://download.pytorch.org/whl/rocm6.4", "ROCm 6.4"],
    ),
    (
        "AMD GPU, CPU torch 2.6.0: the newer of its two ROCm indexes",
        no_nvidia(proc(runtime=cpu("2.6.0")), system=(MI300X,)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm",
        ["torch==2.6.0 --index-url https://download.pytorch.org/whl/rocm6.2.4", "ROCm 6.1, 6.2.4"],
    ),
    (
        "AMD GPU, CPU torch 2.0.1: the index's own name, rocm5.4.2",
        no_nvidia(proc(runtime=cpu("2.0.1+cpu")), system=(MI300X,)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm",
        ["torch==2.0.1 --index-url https://download.pytorch.org/whl/rocm5.4.2"],
    ),
    (
        "AMD GPU, CPU torch 2.13.0 (this project's): rocm7.2",
        no_nvidia(proc(runtime=cpu("2.13.0+cpu")), system=(MI300X,)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm",
        ["torch==2.13.0 --index-url https://download.pytorch.org/whl/rocm7.2"],
    ),
    (
        "AMD GPU, a torch minor the table lacks: the selector, the version kept",
        no_nvidia(proc(runtime=cpu("2.14.0+cpu")), system=(MI300X,)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm.unknown",
        ["https://pytorch.org/get-started/locally/", "`torch==2.14.0`"],
    ),
    (
        "AMD GPU, a development build: the selector",
        no_nvidia(proc(runtime=cpu("2.13.0.dev20260401+cpu")), system=(MI300X,)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm.unknown",
        ["https://pytorch.org/get-started/locally/"],
    ),
    (
        "an old Radeon on the radeon driver: no ROCm, no cpu-build",
        no_nvidia(proc(runtime=cpu("2.9.1")), system=(RADEON_HD,)),
        None,
        None,
        [],
    ),
    (
        "Intel Arc, CPU torch 2.7.0: the XPU index of 2.7.0",
        no_nvidia(proc(runtime=cpu("2.7.0+cpu"), models=[model("cpu")]), system=(ARC_A770,)),
        "warning.cpu-build.intel",
        "hint.cpu-build.xpu",
        ["torch==2.7.0 --index-url https://download.pytorch.org/whl/xpu", '.to("xpu")'],
    ),
    (
        "Meteor Lake iGPU, CPU torch 2.13.0: the XPU index",
        no_nvidia(proc(runtime=cpu("2.13.0+cpu")), system=(METEOR_LAKE,)),
        "warning.cpu-build.intel",
        "hint.cpu-build.xpu",
        ["torch==2.13.0 --index-url https://download.pytorch.org/whl/xpu"],
    ),
    (
        "Lunar Lake iGPU, CPU torch 2.4.1: no XPU build of 2.4, upgrade",
        no_nvidia(proc(runtime=cpu("2.4.1")), system=(LUNAR_LAKE,)),
        "warning.cpu-build.intel",
        "hint.cpu-build.xpu.too-old",
        ["torch 2.4.1 has no XPU build", "--upgrade torch --index-url https://download.pytorch.org/whl/xpu"],
    ),
    (
        "Intel Arc, a torch minor the table lacks: the selector",
        no_nvidia(proc(runtime=cpu("2.14.0")), system=(ARC_A770,)),
        "warning.cpu-build.intel",
        "hint.cpu-build.xpu.unknown",
        ["https://pytorch.org/get-started/locally/", "`torch==2.14.0`"],
    ),
    (
        "an Alder Lake UHD iGPU: XPU builds do not run on it, no cpu-build",
        no_nvidia(proc(runtime=cpu("2.9.1")), system=(UHD_770,)),
        None,
        None,
        [],
    ),
    (
        "AMD dGPU beside an Intel Arc: ROCm",
        no_nvidia(proc(runtime=cpu("2.8.0")), system=(ARC_A770, MI300X)),
        "warning.cpu-build.amd",
        "hint.cpu-build.rocm",
        ["whl/rocm6.4"],
    ),
    (
        "a ROCm build on an AMD machine is no CPU build",
        no_nvidia(
            proc(runtime=RuntimeRecord(torch="2.9.1+rocm6.4", hip_build="6.4.43482", cuda_available=True)),
            system=(MI300X,),
        ),
        None,
        None,
        [],
    ),
    (
        "an XPU build that sees the Arc is no CPU build",
        no_nvidia(
            proc(runtime=RuntimeRecord(torch="2.7.0+xpu", cuda_available=False, xpu_available=True)),
            system=(ARC_A770,),
        ),
        None,
        None,
        [],
    ),
]


@pytest.mark.parametrize(
    ("f", "message_id", "hint_id", "words"),
    [c[1:] for c in CPU_BUILD_CASES],
    ids=[c[0] for c in CPU_BUILD_CASES],
)
def test_cpu_build_names_the_wheel_of_the_same_torch_for_the_machines_gpu(f, message_id, hint_id, words):
    w = the("cpu-build", f)
    if message_id is None:
        assert w is None
        return
    assert w is not None and w.severity == "error" and w.pids == (100,)
    assert (w.message.id, w.hint.id) == (message_id, hint_id)
    hint = en(w.hint)
    for word in words:
        assert word in hint
    for text in (en(w.message), hint, zh(w.message), zh(w.hint)):
        assert not UNFILLED.search(text), text
    if f.processes[0].models:  # the status says why the model is on the CPU
        assert "CPU-only build" in en(decide(f).message)


def test_the_intel_igpu_beside_an_nvidia_dgpu_keeps_todays_nvidia_advice():
    """The seed's laptop: a Meteor Lake iGPU (which XPU builds run on) beside an NVIDIA card whose
    driver supports CUDA 12.4."""
    laptop = facts(proc(runtime=cpu("2.6.0+cpu"), models=[model("cpu")]), system=(METEOR_LAKE, NVIDIA_CARD))
    nvidia_only = facts(proc(runtime=cpu("2.6.0+cpu"), models=[model("cpu")]), system=(NVIDIA_CARD,))
    w = the("cpu-build", laptop)
    assert w == the("cpu-build", nvidia_only)
    assert w.message.id == "warning.cpu-build" and w.hint.id == "hint.cpu-build.driver"
    assert "torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124" in en(w.hint)
    # Without NVML (no driver loaded) the OS's NVIDIA card still decides it, not the iGPU.
    w = the("cpu-build", no_nvidia(proc(runtime=cpu("2.6.0+cpu")), system=(METEOR_LAKE, NVIDIA_CARD)))
    assert w.message.id == "warning.cpu-build" and w.hint.id == "hint.cpu-build" and "whl/cu118" in en(w.hint)


def test_a_cpu_build_on_an_amd_or_intel_machine_is_not_also_a_device_count_mismatch():
    """cpu-build names the AMD or Intel GPU and the build that would use it; device-count-mismatch
    called that GPU one that "cannot run CUDA; that is expected" and told the user to put the model
    on an NVIDIA device the machine does not have. Where the GPU gets no wheel (an Alder Lake iGPU)
    neither says anything (no torch build would use it); beside an NVIDIA card, it says what it said."""
    torch = proc(runtime=cpu("2.6.0+cpu"), models=[model("cpu")])
    for system in ((MI300X,), (METEOR_LAKE,), (UHD_770, MI300X)):
        f = no_nvidia(torch, system=system)
        assert the("cpu-build", f) is not None and the("device-count-mismatch", f) is None, system
    igpu = no_nvidia(torch, system=(UHD_770,))
    assert the("device-count-mismatch", igpu) is None and the("cpu-build", igpu) is None
    laptop = the("device-count-mismatch", facts(torch, system=(METEOR_LAKE, NVIDIA_CARD)))
    assert laptop is not None and "1 NVIDIA GPU" in en(laptop.message)


def test_nvml_unavailable_on_an_amd_or_intel_machine_says_what_is_true_there():
    """NVML missing where the OS lists AMD or Intel GPUs and no NVIDIA one: information that NVML is
    NVIDIA's and those GPUs are read from the kernel, never "expected on a CPU-only machine" nor "the
    verdict rests on the probe alone". A CPU-only machine and an NVIDIA machine keep their texts."""
    torch = proc(runtime=ROCM_RT, models=[model("cuda:0")])
    for system, vendors in (
        ((MI300X,), "AMD"),
        ((ARC_A770,), "Intel"),
        ((METEOR_LAKE, MI300X, LUNAR_LAKE), "Intel, AMD"),
    ):
        w = the("nvml-unavailable", no_nvidia(torch, system=system))
        assert w is not None and w.severity == "info", system
        for text in (en(w.message), en(w.hint), zh(w.message), zh(w.hint)):
            assert not UNFILLED.search(text), text
            assert "CPU" not in text and "probe" not in text and "探针" not in text, text
        assert en(w.message).endswith("the OS lists no NVIDIA GPU here."), en(w.message)
        assert en(w.hint) == (
            f"That is expected: NVML reads NVIDIA GPUs only. The {vendors} GPUs here are read from the "
            "kernel's drivers (sysfs, DRM) instead."
        )
    cpu_only = the("nvml-unavailable", no_nvidia(torch, system=()))
    assert cpu_only.severity == "info" and cpu_only.hint.id == "hint.nvml-unavailable.no-nvidia"
    assert en(cpu_only.hint).endswith("this is expected on a CPU-only machine.")
    # An NVIDIA card the OS lists (beside the AMD one): NVIDIA's warning, as before.
    nvidia = the("nvml-unavailable", no_nvidia(torch, system=(MI300X, NVIDIA_CARD)))
    assert nvidia.severity == "warning" and nvidia.hint.id == "hint.nvml-unavailable"
    assert en(nvidia.message).endswith("the verdict rests on the probe alone.")


ROCM_RT = RuntimeRecord(
    torch="2.9.1+rocm6.4", cuda_build=None, hip_build="6.4.43482", cuda_available=False, device_count=0
)
RENDER_GID = 109
KFD = DeviceNodeFacts("/dev/kfd", 0o660, 0, RENDER_GID, "render")
RENDER_NODE = DeviceNodeFacts("/dev/dri/renderD128", 0o660, 0, RENDER_GID, "render")
USER = GpuAccessFacts(1000, 1000, (1000, 27), (KFD, RENDER_NODE))  # in sudo, not in render


def rocm_job(rt=ROCM_RT, *, access=None, system=(MI300X,), kfd=True):
    return no_nvidia(
        proc(runtime=rt, models=[model("cpu")], gpu_access=access), system=system, kfd_present=kfd
    )


# id, facts, reason id, hint id, words of the message, severity
ROCM_CASES = [
    (
        "ROCR_VISIBLE_DEVICES empty",
        rocm_job(replace(ROCM_RT, rocr_visible_devices="")),
        "reason.rocm.hidden",
        "hint.cuda-unavailable.rocm.hidden",
        ["ROCR_VISIBLE_DEVICES='' hides every AMD GPU"],
        "error",
    ),
    (
        "HIP_VISIBLE_DEVICES=-1",
        rocm_job(replace(ROCM_RT, hip_visible_devices="-1"), access=USER),
        "reason.rocm.hidden",
        "hint.cuda-unavailable.rocm.hidden",
        ["HIP_VISIBLE_DEVICES='-1'"],
        "error",
    ),
    (
        "CUDA_VISIBLE_DEVICES empty hides AMD GPUs from HIP too",
        rocm_job(replace(ROCM_RT, cuda_visible_devices="", hip_visible_devices="0")),
        "reason.rocm.hidden",
        "hint.cuda-unavailable.rocm.hidden",
        ["CUDA_VISIBLE_DEVICES=''"],
        "error",
    ),
    (
        "no AMD GPU on the machine",
        rocm_job(system=(UHD_770,)),
        "reason.rocm.no-amd",
        "hint.cuda-unavailable.rocm.no-amd",
        ["none is visible"],
        "warning",
    ),
    (
        "no KFD in the kernel",
        rocm_job(kfd=False, access=USER),
        "reason.rocm.no-kfd",
        "hint.cuda-unavailable.rocm.no-kfd",
        ["no KFD device"],
        "error",
    ),
    (
        "a container without /dev/kfd",
        rocm_job(access=GpuAccessFacts(0, 0, (), (RENDER_NODE,))),
        "reason.rocm.no-kfd-node",
        "hint.cuda-unavailable.rocm.no-kfd-node",
        ["/dev/kfd is not in the process's /dev"],
        "error",
    ),
    (
        "a user outside the render group",
        rocm_job(access=USER),
        "reason.rocm.no-permission",
        "hint.cuda-unavailable.rocm.no-permission",
        ["cannot open /dev/kfd, /dev/dri/renderD128", "group render"],
        "error",
    ),
    (
        "the render node owned by video on an older udev, kfd by render",
        rocm_job(
            access=replace(
                USER, groups=(RENDER_GID,), nodes=(KFD, replace(RENDER_NODE, gid=44, group="video"))
            )
        ),
        "reason.rocm.no-permission",
        "hint.cuda-unavailable.rocm.no-permission",
        ["cannot open /dev/dri/renderD128:", "group video"],
        "error",
    ),
    (
        "in the render group: a generic ROCm failure",
        rocm_job(access=replace(USER, groups=(1000, RENDER_GID))),
        "reason.rocm.init-failed",
        "hint.cuda-unavailable.rocm",
        ["HIP 6.4.43482"],
        "error",
    ),
    (
        "nodes open to everyone: a generic ROCm failure",
        rocm_job(access=replace(USER, nodes=(replace(KFD, mode=0o666), replace(RENDER_NODE, mode=0o666)))),
        "reason.rocm.init-failed",
        "hint.cuda-unavailable.rocm",
        ["cannot initialise the AMD GPU"],
        "error",
    ),
    (
        "root opens any node: a generic ROCm failure",
        rocm_job(access=replace(USER, uid=0, gid=0, groups=())),
        "reason.rocm.init-failed",
        "hint.cuda-unavailable.rocm",
        ["cannot initialise the AMD GPU"],
        "error",
    ),
    (
        "nothing known of KFD or the nodes: a generic ROCm failure",
        rocm_job(kfd=None),
        "reason.rocm.init-failed",
        "hint.cuda-unavailable.rocm",
        ["cannot initialise the AMD GPU"],
        "error",
    ),
]


@pytest.mark.parametrize(
    ("f", "reason_id", "hint_id", "words", "severity"),
    [c[1:] for c in ROCM_CASES],
    ids=[c[0] for c in ROCM_CASES],
)
def test_a_rocm_build_without_a_gpu_says_rocms_reason(f, reason_id, hint_id, words, severity):
    w = the("cuda-unavailable", f)
    assert w is not None and w.severity == severity and w.pids == (100,)
    assert (w.message.params["reason"].id, w.hint.id) == (reason_id, hint_id)
    message = en(w.message)
    for word in words:
        assert word in message
    for text in (message, en(w.hint), zh(w.message), zh(w.hint)):
        assert not UNFILLED.search(text), text
    # The status says the same reason, never "a CPU-only build", and no cpu-build is raised.
    v = decide(f)
    assert (
        v.status == "CPU"
        and "CPU-only" not in en(v.message)
        and en(w.message.params["reason"]) in en(v.message)
    )
    assert the("cpu-build", f) is None


def test_the_permission_hint_names_every_group_to_join():
    f = rocm_job(access=replace(USER, nodes=(KFD, replace(RENDER_NODE, gid=44, group="video"))))
    assert "`sudo usermod -aG render,video $USER`" in en(the("cuda-unavailable", f).hint)


# ---------------------------------------------------------------------------------------------
# The sources: fixture trees, and this machine's own /proc
# ---------------------------------------------------------------------------------------------
def _tree(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys" / "class" / "drm").mkdir(parents=True)
    return HostPaths(procfs=str(tmp_path / "proc"), sysfs=str(tmp_path / "sys"))


def test_kfd_presence_is_read_from_sysfs(tmp_path):
    host = _tree(tmp_path)
    assert kfd_present(host=host) is False
    (tmp_path / "sys" / "class" / "kfd" / "kfd").mkdir(parents=True)
    assert kfd_present(host=host) is True
    assert kfd_present(host=HostPaths(procfs=str(tmp_path / "proc"), sysfs=str(tmp_path / "none"))) is None


STATUS = """Name:\tpython
Umask:\t0002
State:\tS (sleeping)
Uid:\t1000\t1001\t1000\t1002
Gid:\t1000\t1003\t1000\t1004
FDSize:\t256
Groups:\t4 24 27 1000 {extra}
NStgid:\t4242
"""


def test_a_processs_groups_are_read_from_its_status(tmp_path):
    host = _tree(tmp_path)
    (tmp_path / "proc" / "4242").mkdir()
    (tmp_path / "proc" / "4242" / "status").write_text(STATUS.format(extra="109"))
    # The filesystem ids (the fourth column) are what the kernel checks a device node against.
    assert read_credentials(4242, host=host) == ProcessCredentials(1002, 1004, (4, 24, 27, 1000, 109))
    (tmp_path / "proc" / "4242" / "status").write_text(STATUS.format(extra="").replace("4 24 27 1000 ", ""))
    assert read_credentials(4242, host=host) == ProcessCredentials(1002, 1004, ())
    (tmp_path / "proc" / "4242" / "status").write_text("Name:\tpython\n")
    assert read_credentials(4242, host=host) is None
    assert read_credentials(4343, host=host) is None  # gone


def test_this_processs_own_credentials_are_what_the_os_says():
    creds = read_credentials(os.getpid())
    assert creds is not None
    assert (creds.uid, creds.gid, set(creds.groups)) == (os.geteuid(), os.getegid(), set(os.getgroups()))


def test_the_device_nodes_are_read_as_the_process_sees_them(tmp_path):
    host = _tree(tmp_path)
    root = tmp_path / "proc" / "4242" / "root"
    assert read_gpu_nodes(4242, host=host) is None  # no root to read: another user's, or gone
    (root / "dev" / "dri").mkdir(parents=True)
    assert read_gpu_nodes(4242, host=host) == ()
    for name, mode in (
        ("kfd", 0o660),
        ("dri/renderD129", 0o666),
        ("dri/renderD128", 0o660),
        ("dri/card0", 0o660),
    ):
        (root / "dev" / name).write_text("")
        os.chmod(root / "dev" / name, mode)
    uid, gid = os.getuid(), os.getgid()
    assert read_gpu_nodes(4242, host=host) == (
        DeviceNode("/dev/kfd", 0o660, uid, gid),
        DeviceNode("/dev/dri/renderD128", 0o660, uid, gid),
        DeviceNode("/dev/dri/renderD129", 0o666, uid, gid),
    )


def test_the_os_devices_pci_device_id_reaches_the_verdicts_facts():
    arc = SystemGpu(
        "Intel", "0x8086", "0x56a0", "Intel GPU", "0000:03:00.0", "i915", "card1", integrated=False
    )
    (facts_,) = system_gpu_facts([arc], ())
    assert facts_.device_id == "0x56a0" and facts_.vendor == "Intel" and facts_.integrated is False


def test_a_processs_access_to_the_nodes_becomes_the_verdicts_fact(tmp_path):
    """The sources' two reads joined, the group named where this machine's group database knows
    the gid: the fixture's nodes belong to this test's own group."""
    host = _tree(tmp_path)
    assert gpu_access_facts(4242, host=host) is None  # no such process
    (tmp_path / "proc" / "4242" / "root" / "dev").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "status").write_text(STATUS.format(extra="109"))
    (tmp_path / "proc" / "4242" / "root" / "dev" / "kfd").write_text("")
    os.chmod(tmp_path / "proc" / "4242" / "root" / "dev" / "kfd", 0o660)
    access = gpu_access_facts(4242, host=host)
    gid = os.getgid()
    assert access is not None and (access.uid, access.gid, access.groups) == (
        1002,
        1004,
        (4, 24, 27, 1000, 109),
    )
    (node,) = access.nodes
    assert (node.path, node.mode, node.gid) == ("/dev/kfd", 0o660, gid) and access.has_kfd
    assert node.group == grp.getgrgid(gid).gr_name
    assert access.denied == ((node,) if gid not in (1004, 4, 24, 27, 1000, 109) else ())
