"""Issue 41 item 5: the probe's facts of ROCm and XPU builds of torch. torch here is a CPU build, so
those builds are simulated in-process, as tests/unit/test_probe_facts.py simulates a CUDA build:
what the probe publishes (the build, the visible-devices variables, each GPU's PCI address and
gcnArchName, XPU's count and names), that it calls nothing that would initialise a device the script
has not (every such call of the fakes fails the test), the wire carrying the new fields into the
sidecar's records (and an older probe's payload without them), the verdict not calling a ROCm build
a CPU-only one, and the status document's runtime showing them."""

from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace

import msgpack
import pytest

from probe import facts
from probe_wire.records import DeviceRecord, RuntimeRecord, runtime_record
from probe_wire.schema import empty_payload, validate_payload
from probe_wire.writer import SegmentWriter
from sidecar.cli.summary import human_summary
from sidecar.documents import bounds
from sidecar.documents.contract import check
from sidecar.documents.document import status_document
from sidecar.poll.collect import TargetInfo
from sidecar.sources.proctree import ProcInfo, TreeSnapshot
from sidecar.sources.segments import SegmentSource
from sidecar.verdict import decide
from tests.helpers.records import FULL_RUNTIME
from tests.helpers.verdict_facts import CPU_RT, H200, model, proc
from tests.helpers.verdict_facts import facts as verdict_facts

torch = pytest.importorskip("torch")

HIP = "6.2.41133-dd7f95766"
GFX = "gfx942:sramecc+:xnack-"
VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
VARIABLES += ("ZE_AFFINITY_MASK",)


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch):
    """The probe's facts as in a process that asked nothing yet, no visible-devices variable set."""
    for name in ("_static_runtime", "_initialised_devices", "_initialised_xpu"):
        monkeypatch.setattr(facts, name, None)
    monkeypatch.setattr(facts, "_cudnn", [])
    monkeypatch.setattr(facts, "_cuda_probe_cache", {})
    monkeypatch.setattr(facts, "_driver_lib", [])
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def forbidden(what: str):
    """A call the probe must never make here: it would initialise a device, or poison fork."""

    def call(*args, **kwargs):
        raise AssertionError(f"the probe called {what}")

    return call


NO_XPU = SimpleNamespace(_is_compiled=lambda: False, is_available=forbidden("xpu.is_available"))


def mi300x(i: int) -> SimpleNamespace:
    """torch.cuda.get_device_properties(i) of a ROCm build on an MI300X node (GPU i at bus 0x0c + 0x10 i)."""
    return SimpleNamespace(
        name="AMD Instinct MI300X",
        uuid=f"{i:016x}",
        gcnArchName=GFX,
        pci_domain_id=0,
        pci_bus_id=0x0C + 0x10 * i,
        pci_device_id=0,
    )


def rocm_torch(initialised: bool, count=None, gpus: int = 2, xpu=NO_XPU) -> SimpleNamespace:
    """A ROCm build of torch: torch.cuda drives the AMD GPUs; torch.version.cuda is None."""
    cuda = SimpleNamespace(
        is_initialized=lambda: initialised,
        _is_in_bad_fork=lambda: False,
        _device_count_amdsmi=count or (lambda: gpus),
        _device_count_nvml=forbidden("the NVML counter on a ROCm build"),
        device_count=(lambda: gpus) if initialised else forbidden("cuda.device_count"),
        get_device_properties=mi300x if initialised else forbidden("cuda.get_device_properties"),
    )
    version = SimpleNamespace(cuda=None, hip=HIP, xpu=None)
    return SimpleNamespace(__version__="2.6.0+rocm6.2.4", version=version, cuda=cuda, xpu=xpu)


def test_a_rocm_build_publishes_hip_the_visible_devices_and_each_gpu_by_pci_address(monkeypatch):
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1,0")
    rt = facts.runtime(rocm_torch(initialised=True))
    assert (rt["torch"], rt["hip_build"], rt["cuda_build"], rt["xpu_build"]) == (
        "2.6.0+rocm6.2.4",
        HIP,
        None,
        None,
    )
    assert (rt["cuda_available"], rt["cuda_initialized"], rt["device_count"]) == (True, True, 2)
    assert [(d["index"], d["name"], d["pci_bus_id"], d["gcn_arch"]) for d in rt["devices"]] == [
        (0, "AMD Instinct MI300X", "0000:0c:00.0", GFX),
        (1, "AMD Instinct MI300X", "0000:1c:00.0", GFX),
    ]
    assert (rt["rocr_visible_devices"], rt["hip_visible_devices"], rt["gpu_device_ordinal"]) == (
        "2,3",
        "1,0",
        None,
    )
    assert rt["cuda_visible_devices"] is None and rt["cuda_driver_loadable"] is None  # libcuda never asked
    assert (rt["xpu_available"], rt["xpu_device_count"], rt["xpu_devices"]) == (False, 0, [])
    # As the sidecar's facts have it: the payload's runtime through the schema's validator.
    clean, reason = validate_payload({**empty_payload(), "runtime": rt})
    assert reason is None
    record = runtime_record(clean["runtime"])
    assert (
        record.hip_build == HIP
        and record.rocr_visible_devices == "2,3"
        and record.hip_visible_devices == "1,0"
    )
    assert record.devices[1] == DeviceRecord(
        1, "AMD Instinct MI300X", "GPU-0000000000000001", "0000:1c:00.0", GFX
    )


def test_a_cuda_builds_gcn_arch_name_is_not_published(monkeypatch):
    """A CUDA build's gcnArchName is the device's name again: only a ROCm build's is an arch. Its
    GPUs' PCI addresses are published all the same."""
    h200 = SimpleNamespace(
        name="NVIDIA H200",
        uuid="GPU-aaaa",
        gcnArchName="NVIDIA H200",
        pci_domain_id=0,
        pci_bus_id=0x3B,
        pci_device_id=0,
    )
    cuda = SimpleNamespace(
        is_initialized=lambda: True, device_count=lambda: 1, get_device_properties=lambda i: h200
    )
    version = SimpleNamespace(cuda="12.4", hip=None, xpu=None)
    monkeypatch.setattr(facts, "driver_library", lambda: (True, (12, 4)))
    rt = facts.runtime(SimpleNamespace(__version__="2.5.1+cu124", version=version, cuda=cuda, xpu=NO_XPU))
    assert rt["devices"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-aaaa",
            "pci_bus_id": "0000:3b:00.0",
            "gcn_arch": None,
        }
    ]
    assert (rt["cuda_build"], rt["hip_build"]) == ("12.4", None)


@pytest.mark.parametrize(
    ("ids", "address"),
    [
        ((0, 0x0C, 0), "0000:0c:00.0"),
        ((0x10000, 0xC1, 0x1F), "10000:c1:1f.0"),  # a VMD domain is wider than 4 digits
        (None, None),  # an older torch: no PCI ids in the properties
        ((0, 256, 0), None),
        ((0, 1, 32), None),
        ((0, True, 0), None),
        ((0, "0c", 0), None),
    ],
)
def test_a_devices_pci_address_as_sysfs_spells_it_or_none(ids, address):
    names = ("pci_domain_id", "pci_bus_id", "pci_device_id")
    props = SimpleNamespace(**dict(zip(names, ids, strict=True))) if ids else SimpleNamespace()
    assert facts._pci_address(props) == address


def test_a_rocm_build_counts_its_gpus_without_initialising_them_as_rocr_and_hip_choose(monkeypatch):
    """Before the script initialises the GPUs, the count is torch's amdsmi counter's, asked again when
    ROCR_VISIBLE_DEVICES (which it reads) changes, never the runtime's or NVML's."""
    asked = []

    def amdsmi_count():
        asked.append(os.environ.get("ROCR_VISIBLE_DEVICES"))
        return len(os.environ.get("ROCR_VISIBLE_DEVICES", "0,1,2,3").split(","))

    fake = rocm_torch(initialised=False, count=amdsmi_count)
    rt = facts.runtime(fake)
    assert (rt["cuda_available"], rt["device_count"], rt["cuda_initialized"], rt["devices"]) == (
        True,
        4,
        False,
        [],
    )
    assert facts.runtime(fake)["device_count"] == 4 and asked == [None]  # asked once for the same variables
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "3")
    assert facts.runtime(fake)["device_count"] == 1 and asked == [None, "3"]


def test_a_rocm_counter_that_refuses_the_visible_devices_leaves_the_count_unknown(monkeypatch):
    """torch's counter raises where HIP_VISIBLE_DEVICES names more GPUs than ROCR_VISIBLE_DEVICES
    leaves: the rest of the runtime is still published."""
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0,1")

    def refuses():
        raise RuntimeError("HIP_VISIBLE_DEVICES contains more devices than ROCR_VISIBLE_DEVICES")

    rt = facts.runtime(rocm_torch(initialised=False, count=refuses))
    assert (rt["cuda_available"], rt["device_count"], rt["hip_build"], rt["hip_visible_devices"]) == (
        None,
        None,
        HIP,
        "0,1",
    )


class FakeXpu:
    """torch.xpu of an XPU build: names only once initialised; before, torch's own count of its
    is_available() (the Level Zero Sysman devices it keeps) is all there is to read."""

    def __init__(self) -> None:
        self.initialised = False
        self.bad_fork = False
        self._cached_zes_device_infos: list[object] = []
        self.is_available = forbidden("xpu.is_available before XPU is initialised")
        self._device_count_zes = forbidden("xpu's Level Zero count (it imports pyzes)")

    def _is_compiled(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialised and not self.bad_fork

    def _is_in_bad_fork(self) -> bool:
        return self.bad_fork

    def device_count(self) -> int:
        assert self.is_initialized(), "the probe called xpu.device_count before XPU was initialised"
        return 2

    def get_device_properties(self, i: int) -> SimpleNamespace:
        assert self.is_initialized(), "the probe called xpu.get_device_properties before XPU was initialised"
        return SimpleNamespace(
            name=("Intel(R) Arc(TM) A770 Graphics", "Intel(R) UHD Graphics 770")[i], uuid=[0] * 16
        )


def xpu_torch(xpu: FakeXpu) -> SimpleNamespace:
    version = SimpleNamespace(cuda=None, hip=None, xpu="20250004")
    return SimpleNamespace(__version__="2.7.0+xpu", version=version, cuda=SimpleNamespace(), xpu=xpu)


def test_xpu_counted_only_as_torch_found_and_named_once_the_script_initialised_it(monkeypatch):
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0,1")
    xpu = FakeXpu()
    fake = xpu_torch(xpu)
    rt = facts.runtime(fake)
    assert (rt["xpu_build"], rt["ze_affinity_mask"], rt["cuda_available"], rt["device_count"]) == (
        "20250004",
        "0,1",
        False,
        0,
    )
    assert (rt["xpu_available"], rt["xpu_initialized"], rt["xpu_device_count"], rt["xpu_devices"]) == (
        None,
        False,
        None,
        [],
    )
    xpu._cached_zes_device_infos = [object(), object()]  # the script asked torch.xpu.is_available()
    rt = facts.runtime(fake)
    assert (rt["xpu_available"], rt["xpu_device_count"], rt["xpu_devices"]) == (True, 2, [])
    xpu.initialised = True  # the script moved a model to xpu:0
    rt = facts.runtime(fake)
    assert (rt["xpu_available"], rt["xpu_initialized"], rt["xpu_device_count"]) == (True, True, 2)
    assert [(d["index"], d["name"]) for d in rt["xpu_devices"]] == [
        (0, "Intel(R) Arc(TM) A770 Graphics"),
        (1, "Intel(R) UHD Graphics 770"),
    ]
    clean, reason = validate_payload({**empty_payload(), "runtime": rt})
    assert reason is None
    assert runtime_record(clean["runtime"]).xpu_devices[1] == DeviceRecord(
        1, "Intel(R) UHD Graphics 770", None
    )
    # A DataLoader worker forked after that: the count its parent knew (whether or not torch counted
    # before initialising), no call into XPU.
    xpu.bad_fork = True
    xpu._cached_zes_device_infos = []
    rt = facts.runtime(fake)
    assert (rt["xpu_available"], rt["xpu_initialized"], rt["xpu_device_count"], rt["xpu_devices"]) == (
        True,
        False,
        2,
        [],
    )


def test_the_real_cpu_build_of_torch_has_no_xpu_and_publishes_the_variables_bounded(monkeypatch):
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("GPU_DEVICE_ORDINAL", "1")
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0.1")
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0," * 1000)
    rt = facts.runtime(torch)
    assert (rt["hip_build"], rt["xpu_build"]) == (torch.version.hip, getattr(torch.version, "xpu", None))
    assert (rt["xpu_available"], rt["xpu_initialized"], rt["xpu_device_count"], rt["xpu_devices"]) == (
        False,
        False,
        0,
        [],
    )
    assert (rt["hip_visible_devices"], rt["gpu_device_ordinal"], rt["ze_affinity_mask"]) == ("0", "1", "0.1")
    assert rt["rocr_visible_devices"] == ("0," * 1000)[: facts.VISIBILITY_MAX_CHARS]
    assert not torch.xpu.is_initialized()


# ---------------------------------------------------------------------------------------------
# The wire: written by the probe's writer into shared memory, read by the sidecar's segment source
# ---------------------------------------------------------------------------------------------
def _read(writer: SegmentWriter, source: SegmentSource, body: bytes):
    writer.publish_bytes(body)
    proc_info = ProcInfo(writer.pid, 1, writer.start_ticks, 1.0, "sleep", ("sleep",), None, 1.0, 0)
    read = source.poll(TreeSnapshot(writer.pid, True, (proc_info,)))[writer.pid]
    assert read.state == "ok", (read.state, read.error)
    return read.payload.runtime


def test_the_new_runtime_fields_cross_the_wire_and_an_older_probes_payload_reads_without_them(live_pid):
    rt = facts.runtime(rocm_torch(initialised=True))
    writer = SegmentWriter(pid=live_pid)
    source = SegmentSource(clean_dead=False, sweep_foreign=False)
    try:
        new = {**empty_payload(live_pid, writer.start_ticks), "runtime": rt}
        got = _read(writer, source, msgpack.packb(new))
        assert (got.hip_build, got.rocr_visible_devices, got.xpu_devices) == (HIP, None, ())
        assert [(d.pci_bus_id, d.gcn_arch) for d in got.devices] == [
            ("0000:0c:00.0", GFX),
            ("0000:1c:00.0", GFX),
        ]
        # An older probe's payload: none of the keys added within schema 1, devices without PCI.
        old_runtime = {k: v for k, v in FULL_RUNTIME.items() if k != "cuda_driver_loadable"}
        old = {**empty_payload(live_pid, writer.start_ticks), "runtime": old_runtime}
        got = _read(writer, source, msgpack.packb(old))
        assert got == RuntimeRecord(
            torch="2.5.1",
            cuda_build="12.4",
            cudnn=90100,
            cuda_available=True,
            cuda_initialized=True,
            device_count=1,
            devices=(DeviceRecord(0, "A100", "GPU-1"),),
            cuda_visible_devices="0",
            cuda_device_order="PCI_BUS_ID",
            mps_available=False,
            xpu_available=False,
        )
        assert (got.hip_build, got.xpu_devices, got.devices[0].pci_bus_id, got.cuda_driver_loadable) == (
            None,
        ) * 4
    finally:
        source.close()
        writer.close()


# ---------------------------------------------------------------------------------------------
# Above the sources: the verdict and the status document
# ---------------------------------------------------------------------------------------------
ROCM_RT = RuntimeRecord(
    torch="2.6.0+rocm6.2.4",
    hip_build=HIP,
    cuda_available=True,
    cuda_initialized=True,
    device_count=2,
    devices=(
        DeviceRecord(0, "AMD Instinct MI300X", None, "0000:0c:00.0", GFX),
        DeviceRecord(1, "AMD Instinct MI300X", None),
    ),
    hip_visible_devices="1,0",
    rocr_visible_devices="0,1,2,3",
    xpu_available=False,
    xpu_device_count=0,
    xpu_devices=(DeviceRecord(0, "Intel(R) UHD Graphics 770", None),),
)


def test_a_rocm_or_xpu_build_is_no_cpu_only_build_to_the_verdict():
    """Beside an NVIDIA GPU (where cpu-build is judged), a ROCm or XPU build has no CUDA version and
    is still no CPU-only build; a CPU build is."""
    for rt in (ROCM_RT, replace(CPU_RT, xpu_build="20250004")):
        codes = [
            w.code
            for w in decide(verdict_facts(proc(runtime=rt, models=[model("cpu")]), gpus=(H200,))).warnings
        ]
        assert "cpu-build" not in codes, rt
    codes = [
        w.code
        for w in decide(verdict_facts(proc(runtime=CPU_RT, models=[model("cpu")]), gpus=(H200,))).warnings
    ]
    assert "cpu-build" in codes


def _document(runtime: RuntimeRecord) -> dict:
    f = verdict_facts(proc(runtime=runtime, models=[model("cuda:0")]), gpus=(), nvml_ok=False)
    return status_document(
        f,
        decide(f),
        time_s=1090.0,
        interval_s=1.0,
        target=TargetInfo(100, "python", ["python", "train.py"], 990.0, 99000),
        proc_info={},
        other_processes={},
        events=[],
    )


def test_the_status_documents_runtime_shows_the_rocm_build_its_variables_and_devices():
    doc = _document(ROCM_RT)
    check(doc, "status")
    rt = doc["runtime"]
    assert (rt["hip_build"], rt["cuda_build"], rt["xpu_build"]) == (HIP, None, None)
    assert (rt["hip_visible_devices"], rt["rocr_visible_devices"], rt["gpu_device_ordinal"]) == (
        "1,0",
        "0,1,2,3",
        None,
    )
    assert (rt["xpu_available"], rt["xpu_device_count"], rt["devices_omitted"]) == (False, 0, 0)
    assert rt["devices"] == [
        {"device": "cuda:0", "name": "AMD Instinct MI300X", "pci_bus_id": "0000:0c:00.0", "gcn_arch": GFX},
        {"device": "cuda:1", "name": "AMD Instinct MI300X", "pci_bus_id": None, "gcn_arch": None},
        {"device": "xpu:0", "name": "Intel(R) UHD Graphics 770", "pci_bus_id": None, "gcn_arch": None},
    ]
    assert f"torch 2.6.0+rocm6.2.4 (ROCm {HIP})" in human_summary(doc)
    # Devices past the bound are counted, not shown.
    many = tuple(
        DeviceRecord(i, "AMD Instinct MI300X", None) for i in range(bounds.MAX_RUNTIME_DEVICES_SHOWN + 3)
    )
    rt = _document(replace(ROCM_RT, devices=many))["runtime"]
    assert len(rt["devices"]) == bounds.MAX_RUNTIME_DEVICES_SHOWN and rt["devices_omitted"] == 4
    # No probe told: every new field absent.
    rt = _document(RuntimeRecord())["runtime"]
    assert (rt["hip_build"], rt["xpu_available"], rt["devices"], rt["devices_omitted"]) == (None, None, [], 0)
