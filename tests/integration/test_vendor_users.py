"""The seed's laptop (issue 41 item 7): an Intel iGPU beside an NVIDIA card. The iGPU's card says who
uses it (the compositor, a browser: real processes whose fds a fixture /proc shows as i915 clients),
while the job runs on the NVIDIA card (the simulated driver); and a job that runs on the iGPU through
XPU is GPU, its row on the Intel card, and no "other" user of it."""

from __future__ import annotations

import json

import msgpack
import pytest

from probe_wire.schema import empty_payload
from probe_wire.writer import SegmentWriter
from sidecar.poll.poller import Poller
from sidecar.sources.host import HostPaths
from tests.fakenvml import gpu
from tests.helpers.drm_tree import IGPU_PCI, MirroredProc, i915_fdinfo, laptop_sysfs, named_process
from tests.helpers.fake_job import MODEL_DEFAULTS
from tests.helpers.sidecar_cli import cli

BIDI_NAME = "chrome\u202e\x07tab"  # 13 bytes: a bidi override and a bell in a process's own name


@pytest.fixture
def desktop(tmp_path):
    """Xorg, firefox and a process with a hostile name: real processes, each named by its file."""
    folder = tmp_path / "bin"
    folder.mkdir()
    procs = [named_process(folder, n) for n in ("Xorg", "firefox", BIDI_NAME)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def _by_vendor(doc):
    return {g["vendor"]: g for g in doc["gpus"]}


def test_the_igpus_card_lists_the_desktops_processes_while_the_job_runs_on_the_nvidia_card(
    tmp_path, fake_nvml, sleepers, desktop
):
    (job,) = sleepers(1)
    proc = MirroredProc(tmp_path, job, *desktop)
    for client, pid in enumerate(desktop, start=10):
        proc.drm_fd(7, i915_fdinfo(client), pid=pid)
        proc.drm_fd(8, i915_fdinfo(client), pid=pid)  # a dup: one process all the same
    fake_nvml.write(
        {
            "gpus": [
                gpu(
                    0,
                    pci_bus_id="00000000:01:00.0",
                    processes=[{"pid": job, "used_mib": 2048, "sm_util": 85}],
                )
            ]
        }
    )
    sysfs = laptop_sysfs(tmp_path)
    out = cli(
        "--pid", str(job), "--once", "--json", "--path.procfs", str(proc.root), "--path.sysfs", str(sysfs),
        env=fake_nvml.env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    cards = _by_vendor(doc)
    nvidia, intel = cards["nvidia"], cards["intel"]
    assert intel["pci_bus_id"] == IGPU_PCI and intel["driver"] == "i915"
    # Who uses the iGPU: the desktop's processes, named, the hostile name cleaned of its controls.
    assert intel["other_process_count"] == 3
    assert sorted(intel["other_process_names"]) == sorted(["Xorg", "firefox", "chrometab"])
    assert intel["other_process_names_omitted"] == 0
    # The NVIDIA card runs the job alone; NVML's names are not read.
    assert nvidia["other_process_count"] == 0 and nvidia["other_process_names"] is None
    (target,) = [p for p in doc["processes"] if p["pid"] == job]
    assert [u["index"] for u in target["gpu"]] == [nvidia["index"]]
    assert doc["status"] == "GPU"


def _publish_xpu_model(writer: SegmentWriter, pid: int) -> None:
    runtime = {
        **empty_payload()["runtime"],
        "torch": "2.7.0+xpu",
        "xpu_build": "20250004",
        "xpu_available": True,
        "xpu_initialized": True,
        "xpu_device_count": 1,
        "xpu_devices": [{"index": 0, "name": "Intel(R) Iris(R) Xe Graphics", "uuid": None}],
    }
    model = {**MODEL_DEFAULTS, "name": "net", "params": 1000, "device": "xpu:0", "devices": ["xpu:0"]}
    payload = {**empty_payload(pid, writer.start_ticks), "runtime": runtime, "models": [model]}
    writer.publish_bytes(msgpack.packb(payload))


def test_a_job_on_the_igpu_through_xpu_is_gpu_and_its_row_is_on_the_intel_card(tmp_path, live_pid, desktop):
    xorg = desktop[0]
    proc = MirroredProc(tmp_path, live_pid, xorg)
    proc.drm_fd(5, i915_fdinfo(40, render_ns=1_000_000))  # the job's Level Zero context on the iGPU
    proc.drm_fd(7, i915_fdinfo(10), pid=xorg)
    host = HostPaths(procfs=str(proc.root), sysfs=str(laptop_sysfs(tmp_path)))
    writer = SegmentWriter(pid=live_pid)
    try:
        _publish_xpu_model(writer, live_pid)
        doc = Poller(live_pid, nvml_source=object(), host=host).poll_once()
    finally:
        writer.close()
    intel = _by_vendor(doc)["intel"]
    assert doc["status"] == "GPU", doc["message"]
    assert doc["model_device"] == "xpu:0" and doc["model_gpu_index"] == intel["index"]
    (target,) = [p for p in doc["processes"] if p["pid"] == live_pid]
    (row,) = target["gpu"]
    assert row["index"] == intel["index"] and row["vendor"] == "intel"
    # The job is no other process on its own GPU: Xorg alone is.
    assert (intel["other_process_count"], intel["other_process_names"]) == (1, ["Xorg"])
