"""The KFD reader (sidecar/sources/kfd.py) over a fixture /sys laid out as amdkfd's kfd_process.c and
kfd_topology.c write it: per-process vram_/sdma_/stats_ files by GPU id, GPU ids mapped to PCI
addresses through the topology's gpu_id and properties (domain, location_id = bus << 8 | devfn)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostfs.paths import HostPaths
from sidecar.sources.kfd import KfdGpuUse, read_kfd_process, read_kfd_processes, read_kfd_topology

GPU, PARTITION, UNKNOWN = 53142, 40210, 777
TRAINER, OPENED_ONLY, ODD = 4242, 4300, 4400


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _node(kfd: Path, n: int, gpu_id: int, location_id: int, render_minor: int) -> None:
    node = kfd / "topology" / "nodes" / str(n)
    _write(node / "gpu_id", f"{gpu_id}\n")
    props = (
        "cpu_cores_count 0\nsimd_count 304\nmem_banks_count 1\nvendor_id 4098\ndevice_id 29880\n"
        f"location_id {location_id}\ndrm_render_minor {render_minor}\nhive_id 0\ndomain 0\n"
    )
    _write(node / "properties", props)


@pytest.fixture
def sysfs(tmp_path):
    kfd = tmp_path / "sys" / "class" / "kfd" / "kfd"
    _write(kfd / "topology" / "nodes" / "0" / "gpu_id", "0\n")  # the CPU node
    _write(kfd / "topology" / "nodes" / "0" / "properties", "cpu_cores_count 64\nsimd_count 0\n")
    _node(kfd, 1, GPU, 0xC100, 128)  # 0000:c1:00.0
    _node(kfd, 2, PARTITION, (1 << 28) | 0xC100, 129)  # its second partition (bits 31:28)
    proc = kfd / "proc"
    t = proc / str(TRAINER)
    _write(t / "pasid", "32770\n")
    _write(t / f"vram_{GPU}", f"{8 * 1024**3}\n")
    _write(t / f"sdma_{GPU}", "1500\n")
    _write(t / f"stats_{GPU}" / "cu_occupancy", "38\n")
    _write(t / f"stats_{GPU}" / "evicted_ms", "12\n")
    _write(t / "queues" / "0" / "type", "compute\n")
    _write(t / "queues" / "1" / "type", "sdma\n")
    o = proc / str(OPENED_ONLY)  # opened /dev/kfd, did nothing
    _write(o / "pasid", "32771\n")
    _write(o / f"vram_{GPU}", "0\n")
    _write(o / f"sdma_{GPU}", "0\n")
    _write(o / f"stats_{GPU}" / "cu_occupancy", "0\n")
    (o / "queues").mkdir()
    odd = proc / str(ODD)
    _write(odd / f"vram_{UNKNOWN}", "garbage\n")  # a GPU id the topology lacks, a value that is not one
    _write(odd / f"sdma_{UNKNOWN}", "9" * 100)
    return HostPaths(sysfs=str(tmp_path / "sys"), procfs=str(tmp_path / "proc"))


def test_topology_maps_gpu_ids_to_pci_addresses(sysfs):
    nodes = read_kfd_topology(host=sysfs)
    assert [(n.gpu_id, n.pci, n.partition, n.render_minor, n.vendor_id) for n in nodes] == [
        (PARTITION, "0000:c1:00.0", 1, 129, 0x1002),
        (GPU, "0000:c1:00.0", 0, 128, 0x1002),
    ]
    assert read_kfd_topology(host=HostPaths(sysfs="/nonexistent")) == ()


def test_processes_their_figures_and_the_opened_only_one(sysfs):
    trainer, opened, odd = read_kfd_processes(host=sysfs)  # every process KFD lists
    assert (trainer.pid, trainer.pasid, trainer.queue_count, trainer.vram_mib) == (TRAINER, 32770, 2, 8192.0)
    assert trainer.gpus == (KfdGpuUse(GPU, "0000:c1:00.0", 8192.0, 1500, 38, 12),)
    # Reported with its zeros: deciding that it does not use the GPU is the verdict's.
    assert (opened.pid, opened.queue_count, opened.vram_mib) == (OPENED_ONLY, 0, 0.0)
    assert opened.gpus == (KfdGpuUse(GPU, "0000:c1:00.0", 0.0, 0, 0, None),)
    assert (odd.pasid, odd.queue_count) == (None, None)
    assert odd.gpus == (KfdGpuUse(UNKNOWN, None, None, None, None, None),)


def test_only_the_pids_asked_for_and_vanished_ones_skipped(sysfs):
    nodes = read_kfd_topology(host=sysfs)
    assert [p.pid for p in read_kfd_processes([OPENED_ONLY, 99999, TRAINER], host=sysfs, topology=nodes)] == [
        TRAINER,
        OPENED_ONLY,
    ]
    assert read_kfd_process(99999, host=sysfs) is None
    assert read_kfd_processes([TRAINER], host=HostPaths(sysfs="/nonexistent")) == ()


def test_a_polls_brief_read_is_the_full_reads_vram_and_compute_units(sysfs):
    nodes = read_kfd_topology(host=sysfs)
    full = read_kfd_processes([TRAINER, OPENED_ONLY], host=sysfs, topology=nodes)
    brief = read_kfd_processes([TRAINER, OPENED_ONLY], host=sysfs, topology=nodes, brief=True)
    assert [(p.pid, [(g.gpu_id, g.pci, g.vram_mib, g.cu_occupancy) for g in p.gpus]) for p in brief] == [
        (p.pid, [(g.gpu_id, g.pci, g.vram_mib, g.cu_occupancy) for g in p.gpus]) for p in full
    ]
    assert all(g.sdma_busy_us is None and g.evicted_ms is None for p in brief for g in p.gpus)
