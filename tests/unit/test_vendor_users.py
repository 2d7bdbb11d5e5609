"""Who else uses an AMD or Intel GPU (issue 41 items 7 and 8): the scan of the machine's DRM users is
bounded, owner-aware and slow to repeat; MCP's gpu_status names each GPU's vendor and what its driver
cannot tell, and says the other processes' names only inside the untrusted block."""

from __future__ import annotations

import os
from pathlib import Path

from sidecar.serve.mcp_server import call
from sidecar.sources.drm import DrmUserScan
from sidecar.sources.host import HostPaths
from tests.helpers.drm_tree import IGPU_PCI, _drm_node, i915_fdinfo
from tests.helpers.mcp_text import FORGED, data_block, outside_block


def _process(proc: Path, node: Path, pid: int, comm: str, client: int | None) -> None:
    """A fixture /proc/<pid>: its comm, a plain fd, and an i915 client on the iGPU unless None."""
    own = proc / str(pid)
    (own / "fd").mkdir(parents=True)
    (own / "fdinfo").mkdir()
    (own / "comm").write_text(comm + "\n")
    (own / "fd" / "0").symlink_to("/dev/null")
    (own / "fdinfo" / "0").write_text("pos:\t0\n")
    if client is not None:
        (own / "fd" / "9").symlink_to(node)
        (own / "fdinfo" / "9").write_text(i915_fdinfo(client))


def test_the_scan_is_owner_aware_bounded_and_kept_between_refreshes(tmp_path: Path):
    proc = tmp_path / "proc"
    node = _drm_node(tmp_path)
    _process(proc, node, 100, "Xorg", 1)
    _process(proc, node, 200, "bash", None)  # no GPU
    _process(proc, node, 300, "firefox", 2)
    (proc / "self").symlink_to("300")  # not a pid: not scanned
    host = HostPaths(procfs=str(proc))
    now = [0.0]
    scan = DrmUserScan(host=host, uid=None, clock=lambda: now[0], refresh_s=15.0)
    users = scan.users()
    assert [(u.pid, u.name) for u in users.by_pdev[IGPU_PCI]] == [(100, "Xorg"), (300, "firefox")]
    assert (users.scanned, users.truncated) == (3, False)
    # Within the refresh: the same scan, though a process came.
    _process(proc, node, 400, "gnome-shell", 3)
    now[0] = 14.0
    assert scan.users() is users and scan.scans == 1
    now[0] = 15.0
    assert [u.name for u in scan.users().by_pdev[IGPU_PCI]] == ["Xorg", "firefox", "gnome-shell"]
    # Another user's sidecar reads none of this user's processes; the bound keeps the lowest pids.
    other = DrmUserScan(host=host, uid=os.geteuid() + 1)
    assert other.users().by_pdev == {} and other.users().scanned == 0
    assert DrmUserScan(host=host, uid=os.geteuid()).users().scanned == 4
    bounded = DrmUserScan(host=host, uid=None, limit=2).users()
    assert [u.pid for u in bounded.by_pdev[IGPU_PCI]] == [100] and bounded.truncated
    # Root reads everyone's; any other user its own.
    assert DrmUserScan(host=host).uid == (None if os.geteuid() == 0 else os.geteuid())


def _gpu(index: int, vendor: str, driver: str | None, util: float | None, mem: float | None, others, names):
    return {
        "index": index,
        "vendor": vendor,
        "driver": driver,
        "name": {"nvidia": "NVIDIA GeForce RTX 4070 Laptop GPU", "intel": "Intel integrated graphics"}[
            vendor
        ],
        "util_pct": util,
        "mem_used_mib": mem,
        "mem_total_mib": 8188.0 if mem is not None else None,
        "other_process_count": others,
        "other_process_names": names,
    }


class _Backend:
    def __init__(self, device: str, gpu_index: int) -> None:
        self.device, self.gpu_index = device, gpu_index

    def status(self, job):
        return {
            "job_id": "10-20",
            "target": {"pid": 10, "alive": True},
            "status": "GPU",
            "message": "the model net is on the GPU",
            "model_device": self.device,
            "input_device": self.device,
            "model_gpu_index": self.gpu_index,
            "warnings": [],
            "gpus": [
                _gpu(0, "nvidia", None, 85.0, 2048.0, 0, None),
                _gpu(1, "intel", "i915", None, None, 2, ["Xorg", FORGED]),
            ],
            "processes": [],
            "processes_omitted": 0,
        }


def test_gpu_status_names_vendors_and_what_intel_cannot_tell_and_keeps_names_in_the_block():
    out, text = call(_Backend("cuda:0", 0), "gpu_status", {})  # checked against its output schema
    assert out is not None, text
    intel = out["gpus"][1]
    assert intel["vendor"] == "intel" and intel["util_pct"] is None  # unknown, never 0
    assert intel["cannot_tell"] == [
        "utilisation unknown: i915 reports none",
        "memory in use unknown: i915 reports none",
    ]
    said = outside_block(text)
    assert "- GPU 0 (NVIDIA): 85% busy, 2048 of 8188 MiB" in said
    assert "- GPU 1 (Intel): utilisation unknown: i915 reports none; memory in use unknown: i915" in said
    assert "2 other process(es) use it (named below)" in said
    assert "Xorg" not in said and "evil" not in said
    (used_by,) = [line for line in data_block(text) if line.startswith("GPU 1 is also used by: Xorg, ")]
    assert "\u202e" not in text and "\x1b" not in text and "\r" not in used_by
    assert "</untrusted-data>" not in used_by  # escaped: the block goes on
    # A model on the iGPU through XPU is on a GPU: the answer says so, and which one.
    out, text = call(_Backend("xpu:0", 1), "gpu_status", {})
    assert out["model_on_gpu"] is True
    assert text.splitlines()[0] == (
        "Yes: the model is on xpu:0 (GPU 1, Intel integrated graphics, utilisation unknown)."
    )
