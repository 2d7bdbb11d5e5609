"""What reading AMD GPUs per process costs a poll beside reading NVIDIA's, for the same 1,000 processes.

    .venv/bin/python benchmarks/bench_vendor.py [--processes 1000] [--polls 60] [--rounds 3] [--kfd]

The same processes on 8 GPUs each way: (a) the vendor path as a poll uses it,
``VendorGpuSampler.poll`` (sidecar/poll/vendor_gpus.py: each pid's DRM fds kept by DrmFdIndex, their
fdinfo read and parsed, DrmSampler's rates, KFD's per-pid files when its topology exists, the rows by
pid), over a fixture /proc (sidecar.sources.host.HostPaths) of 1,000 pid folders of 7 fds each: 0-2
to /dev/null, a socket and a pipe (links to nothing, as their stat is to us), and fds 5 and 6 on one
amdgpu client (a dup) whose fdinfo is a 6.12 kernel's, 2 KiB; the device nodes are made with mknod
(226, 128+g), so run it as root. (b) the NVML path as a poll uses it: ``poll_nvml(NvmlSource())`` and
``nvml_facts`` for the same pids, on the simulated driver (tests/fakenvml) listing them across 8
GPUs. One poll of each in turns (the order alternating), each after a 60 ms pause (caches as cold
as at a poll 1.5 s after the last); each round a fresh process. The fd index's clock advances 1.5 s
a poll, so its fd listings (every FD_RESCAN_S) and scans cost what they cost at the default
interval, and every client's engine time grows between polls (its fdinfo rewritten, untimed), as a
busy job's does. A poll reads the 64 processes read longest ago (MAX_READS_PER_CALL), the others
keep their last rows: what is measured is that bound and the bookkeeping for all 1,000. The
fixture's folders are a disk's or tmpfs's, whose size is no fd count: the index lists each
process's fd numbers every 5 s, as on a kernel before 6.2.
Reported: CPU (time.process_time) per poll, the mean of a round, the median of the rounds' means,
the per-round ratios vendor / NVML; the vendor's median poll and the first poll of a fresh sampler
(every fd listed and stat()ed, every process read) apart.

Not a test: the figures go to docs/performance.md. A fixture's fdinfo is a file: a real one is
made by the driver at each read (amdgpu walks the client's buffers), so real reads cost more.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_sidecar import GAP_S, PIN, REPO, Driver

from tests.fakenvml import make_fake_sysfs
from tests.helpers.loadgen import busy_scenario

GPUS = 8
FIRST_PID = 300_000
KFD_GPU_ID = 40_000  # + the GPU's number


def gpu_pci(g: int) -> str:
    return f"0000:{0x11 + g:02x}:00.0"


def amdgpu_fdinfo(pid: int, g: int) -> str:
    """A 6.12 kernel's amdgpu fdinfo: the deprecated drm-memory-* and amd-* keys beside the
    drm-{total,shared,active,resident,purgeable}-* of every region, and the busy engines' time."""
    mem = {"vram": 2_039_648 + pid % 977, "gtt": 10_632, "cpu": 0}
    text = (
        f"pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t{1184 + pid}\ndrm-driver:\tamdgpu\n"
        f"drm-client-id:\t{pid}\ndrm-pdev:\t{gpu_pci(g)}\npasid:\t{32768 + pid % 30000}\n"
        "drm-client-name:\tpython3\n"
    )
    for region, kib in mem.items():
        text += f"drm-memory-{region}: \t{kib} KiB\n"
    for region, kib in mem.items():
        for kind in ("total", "shared", "active", "resident", "purgeable"):
            text += f"drm-{kind}-{region}:\t{kib if kind in ('total', 'resident') else 0} KiB\n"
    text += (
        f"amd-memory-visible-vram:\t{mem['vram']} KiB\namd-evicted-vram:\t0 KiB\n"
        "amd-evicted-visible-vram:\t0 KiB\n"
        f"amd-requested-vram:\t{mem['vram']} KiB\namd-requested-visible-vram:\t0 KiB\n"
        "amd-requested-gtt:\t10632 KiB\n"
    )
    return text + f"drm-engine-gfx:\t{4_181_386_391 + pid} ns\ndrm-engine-compute:\t1090034 ns\n"


def build_fixture(root: Path, pids: list[int], kfd: bool) -> tuple[Path, Path]:
    """(procfs, sysfs) roots: each pid's fd/ and fdinfo/, 8 amdgpu cards, KFD's topology (and each
    pid's KFD files with ``kfd``)."""
    proc = root / "proc"
    dri = root / "dev" / "dri"
    dri.mkdir(parents=True)
    nodes = []
    for g in range(GPUS):
        node = dri / f"renderD{128 + g}"
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(226, 128 + g))  # as root; never opened
        nodes.append(node)
    head = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t{ino}\n"
    for i, pid in enumerate(pids):
        fd, fdinfo = proc / str(pid) / "fd", proc / str(pid) / "fdinfo"
        fd.mkdir(parents=True)
        fdinfo.mkdir()
        targets = ["/dev/null"] * 3 + [f"socket:[{9000 + i}]", f"pipe:[{19000 + i}]"]
        for n, target in enumerate(targets):
            (fd / str(n)).symlink_to(target)
            (fdinfo / str(n)).write_text(head.format(ino=n))
        drm = amdgpu_fdinfo(pid, i % GPUS)
        for n in (5, 6):  # one client, dup()'d
            (fd / str(n)).symlink_to(nodes[i % GPUS])
            (fdinfo / str(n)).write_text(drm)
    sysfs = make_fake_sysfs(
        root / "sys",
        [
            {"pci": gpu_pci(g), "vendor": "0x1002", "device": "0x74a1", "driver": "amdgpu"}
            for g in range(GPUS)
        ],
    )
    topology = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for g in range(GPUS):
        node = topology / str(g + 1)
        node.mkdir(parents=True)
        (node / "gpu_id").write_text(f"{KFD_GPU_ID + g}\n")
        (node / "properties").write_text(
            f"vendor_id 4098\ndevice_id 29857\nlocation_id {(0x11 + g) << 8}\ndomain 0\n"
        )
    for i, pid in enumerate(pids if kfd else ()):
        folder = sysfs / "class" / "kfd" / "kfd" / "proc" / str(pid)
        (folder / f"stats_{KFD_GPU_ID + i % GPUS}").mkdir(parents=True)
        (folder / "pasid").write_text("32770\n")
        (folder / f"vram_{KFD_GPU_ID + i % GPUS}").write_text(f"{2 << 30}\n")
        (folder / f"sdma_{KFD_GPU_ID + i % GPUS}").write_text("0\n")
        (folder / f"stats_{KFD_GPU_ID + i % GPUS}" / "cu_occupancy").write_text("60\n")
    return proc, sysfs


ROUND = r"""
import collections, json, statistics, sys, time
from sidecar.poll.collect import nvml_facts
from sidecar.poll.poller import poll_nvml
from sidecar.poll.vendor_gpus import VendorGpuSampler
from sidecar.sources.drm import DrmFdIndex, DrmSampler
from sidecar.sources.host import HostPaths
from sidecar.sources.nvml import NvmlSource
from sidecar.sources.sysfs import list_system_gpus

procfs, sysfs, first_pid, n, polls, gap_s, first_in = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]))
pids = set(range(first_pid, first_pid + n))
host = HostPaths(procfs=procfs, sysfs=sysfs)
now = [0.0]  # the fd index's clock: 1.5 s a poll, as at the default interval

def vendor_sampler():
    return VendorGpuSampler(host=host, drm=DrmSampler(host=host, index=DrmFdIndex(clock=lambda: now[0])))

vendor = vendor_sampler()
gpus = vendor.gpus(list_system_gpus(host=host), 8)
nvml, errors = NvmlSource(), collections.Counter()
last = None

# Busy clients: each fdinfo's engine time grows between two polls (rewritten outside the timing).
fdinfo = {pid: f"{procfs}/{pid}/fdinfo/" for pid in pids}
texts = {pid: open(path + "5").read() for pid, path in fdinfo.items()}

def busy(step):
    for pid, path in fdinfo.items():
        text = texts[pid].replace("drm-engine-gfx:\t", f"drm-engine-gfx:\t{step}")
        for fd in ("5", "6"):
            with open(path + fd, "w") as f:
                f.write(text)

def poll_vendor():
    now[0] += 1.5
    return vendor.poll(pids, gpus)

def poll_nvidia():
    global last
    snap = poll_nvml(nvml, errors)
    last = nvml_facts(snap, pids, None, last.rows if last else None, last.gpus if last else ())
    return last

# The first poll of fresh samplers: every fd listed and stat()ed (the first fresh one pays the
# tree's first reads too, as a sidecar's first poll does).
first = []
for _ in range(first_in):
    fresh = vendor_sampler()
    time.sleep(gap_s)
    c = time.process_time()
    fresh.poll(pids, gpus)
    first.append(time.process_time() - c)
for step in range(5):
    busy(step + 1)
    v, nv = poll_vendor(), poll_nvidia()
assert len(v.by_pid) == n and len(nv.by_pid) == n, (len(v.by_pid), len(nv.by_pid), dict(errors))
scans0 = vendor.drm.index.scans
spent = {"vendor": [], "nvml": []}
for r in range(polls):
    busy(r + 10)
    for name, fn in ((("vendor", poll_vendor), ("nvml", poll_nvidia)) if r % 2 else (("nvml", poll_nvidia), ("vendor", poll_vendor))):
        time.sleep(gap_s)
        c = time.process_time()
        fn()
        spent[name].append(time.process_time() - c)
print(json.dumps({"vendor_ms": 1000 * statistics.mean(spent["vendor"]),
                  "nvml_ms": 1000 * statistics.mean(spent["nvml"]),
                  "vendor_median_ms": 1000 * statistics.median(spent["vendor"]),
                  "nvml_median_ms": 1000 * statistics.median(spent["nvml"]),
                  "first_ms": [1000 * f for f in first],
                  "rescans_per_poll": (vendor.drm.index.scans - scans0) / polls}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=60, help="polls of each side a round (default 60)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="fresh processes, one after the other (default 3)"
    )
    parser.add_argument("--kfd", action="store_true", help="every process has KFD files too (ROCm compute)")
    parser.add_argument("--json", help="keep the rounds' raw figures here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the fixture's DRM device nodes are made with mknod")
    pids = list(range(FIRST_PID, FIRST_PID + args.processes))
    rounds = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        procfs, sysfs = build_fixture(work, pids, args.kfd)
        driver = Driver(work / "driver")
        driver.write(busy_scenario(pids, GPUS))  # NvmlSource never looks the pids up
        for _ in range(args.rounds):
            argv = [procfs, sysfs, FIRST_PID, args.processes, args.polls, GAP_S, 3]
            out = subprocess.run(
                [*PIN, sys.executable, "-c", ROUND, *map(str, argv)],
                env=driver.env(),
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise SystemExit(out.stderr[-3000:])
            rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=1))
    vendor = statistics.median(r["vendor_ms"] for r in rounds)
    nvml = statistics.median(r["nvml_ms"] for r in rounds)
    ratios = [r["vendor_ms"] / r["nvml_ms"] for r in rounds]
    first = statistics.median(f for r in rounds for f in r["first_ms"][1:])
    print(
        f"{args.processes} processes, 8 GPUs, {args.polls} polls a side x {args.rounds} rounds{', KFD' if args.kfd else ''}"
    )
    median_poll = statistics.median(r["vendor_median_ms"] for r in rounds)
    print(
        "| vendor (DRM fdinfo) | NVML | vendor / NVML | per round | vendor: median poll, first poll | re-scans a poll |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {vendor:.2f} ms | {nvml:.2f} ms | **{vendor / nvml:.1f}** | "
        f"{', '.join(f'{x:.1f}' for x in ratios)} | {median_poll:.1f} ms, {first:.1f} ms | "
        f"{statistics.median(r['rescans_per_poll'] for r in rounds):.0f} |"
    )


if __name__ == "__main__":
    main()
