"""What one sidecar poll costs, beside nvitop and gpustat on the same simulated driver and job.

    .venv/bin/python benchmarks/bench_sidecar.py compare   # 8 GPUs, 64 processes: our poll vs nvitop vs gpustat
    .venv/bin/python benchmarks/bench_sidecar.py scaling   # 1/8/64 GPUs x 16/256/1024 processes
    .venv/bin/python benchmarks/bench_sidecar.py idle --seconds 300   # the real sidecar, default interval
    .venv/bin/python benchmarks/bench_sidecar.py running --seconds 20 --rounds 3   # the real sidecar at 0.25 s beside nvitop
    .venv/bin/python benchmarks/bench_sidecar.py history   # memory of a 24-hour history
    .venv/bin/python benchmarks/bench_sidecar.py all [--quick] [--json out.json]

No GPU needed: the driver is tests/fakenvml (a simulated libnvidia-ml.so.1 that nvidia-ml-py,
nvitop and gpustat all load), the job is `tests.helpers.stress_jobs busy` (a root process and real `sleep`
children, each with a probe segment, all listed on the GPUs by the simulated driver). Every tool
runs in its own process against the same scenario; CPU is that process's CPU time
(time.process_time) per poll, after warm-up polls. Prints Markdown tables; --json keeps the raw
figures. Run it on a quiet machine: other load inflates every figure (ratios less so).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakenvml import build_library, nvml_env, write_scenario  # noqa: E402
from tests.helpers.harness import Sidecar, temporary_runs_ledger  # noqa: E402
from tests.helpers.loadgen import BusyJob, busy_scenario, proc_cpu_rss  # noqa: E402

OUR_POLL = r"""
import json, sys, time
from sidecar.poll.poller import Poller
root, n, gap_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
p = Poller(root, interval_s=1.5)
for _ in range(5):
    p.poll_once()      # warm-up: NVML initialised, static process facts cached
cpu, wall = [], []
for _ in range(n):
    time.sleep(gap_s)  # the job publishes again meanwhile, as between two polls 1.5 s apart
    c, w = time.process_time(), time.perf_counter()
    doc = p.poll_once()
    cpu.append(time.process_time() - c)
    wall.append(time.perf_counter() - w)
# Where the time goes: each source alone, same number of rounds.
parts = {"proctree": 0.0, "segments": 0.0, "nvml": 0.0}
for _ in range(n):
    time.sleep(gap_s)
    c = time.process_time(); tree = p.tree_source.poll(); parts["proctree"] += time.process_time() - c
    c = time.process_time(); p.segment_source.poll(tree); parts["segments"] += time.process_time() - c
    c = time.process_time(); p.nvml_source.poll(); parts["nvml"] += time.process_time() - c
print(json.dumps({"cpu": cpu, "wall": wall, "parts": {k: v / n for k, v in parts.items()},
                  "processes": len(doc["processes"]), "gpus": len(doc["gpus"]),
                  "with_probe": sum(q["has_probe"] for q in doc["processes"]),
                  "gpu_rows": sum(len(q["gpu"]) for q in doc["processes"])}))
"""

DISCOVERY_POLL = r"""
import json, os, sys, time
try:
    from sidecar.poll.discovery import JobsPoller
except ImportError:
    try:  # discovery_ab.py's checkout of a commit before poll/jobs.py was named poll/discovery.py
        from sidecar.poll.jobs import JobsPoller
    except ImportError:  # ... or before the layer packages
        from sidecar.jobs import JobsPoller
want, n, gap_s = set(json.loads(sys.argv[1])), int(sys.argv[2]), float(sys.argv[3])
# BENCH_AS_USER=1: keep only this user's jobs, as a sidecar not run by root does (root's keeps all).
p = JobsPoller(interval_s=1.5, uid=os.getuid() if os.environ.get("BENCH_AS_USER") == "1" else -1)
for _ in range(5):
    jobs = p.poll_once()   # warm-up: NVML initialised, jobs found, static process facts cached
cpu, wall = [], []
for _ in range(n):
    time.sleep(gap_s)
    c, w = time.process_time(), time.perf_counter()
    jobs = p.poll_once()
    cpu.append(time.process_time() - c)
    wall.append(time.perf_counter() - w)
ours = [j for j in jobs["jobs"] if j["root_pid"] in want]
# A page open: each poll, then the shown job's status document (a job's document is made when asked).
page = []
for _ in range(n):
    time.sleep(gap_s)
    c = time.process_time()
    p.poll_once()
    p.status_document(None)
    page.append(time.process_time() - c)
print(json.dumps({"cpu": cpu, "wall": wall, "jobs": len(ours), "all_jobs": len(jobs["jobs"]), "page": page,
                  "processes": sum(j["process_count"] for j in ours), "gpu_rows": 0}))
p.stop()
"""

NVITOP_POLL = r"""
import json, sys, time
from nvitop import Device, GpuProcess
n, gap_s = int(sys.argv[2]), float(sys.argv[3])
devices = Device.all()   # kept between polls, as nvitop's own monitor does
def poll():
    rows = 0
    for d in devices:
        d.memory_used(); d.memory_total(); d.gpu_utilization(); d.memory_utilization()
        rows += len(GpuProcess.take_snapshots(d.processes().values(), failsafe=True))
    return rows
for _ in range(5):
    poll()
cpu, wall = [], []
for _ in range(n):
    time.sleep(gap_s)  # the same pause before each poll as ours gets
    c, w = time.process_time(), time.perf_counter()
    rows = poll()
    cpu.append(time.process_time() - c)
    wall.append(time.perf_counter() - w)
print(json.dumps({"cpu": cpu, "wall": wall, "gpu_rows": rows}))
"""

# nvitop polling every `interval` s for `seconds` s, reading the facts the sidecar shows where nvitop
# has them (memory, utilisation, temperature, power and its limit, clocks, performance state, the
# processes), as its monitor does: devices kept, a snapshot of every GPU process at every poll.
NVITOP_RUNNING = r"""
import json, sys, time
from nvitop import Device, GpuProcess
interval, seconds = float(sys.argv[2]), float(sys.argv[3])
devices = Device.all()
def poll():
    rows = 0
    for d in devices:
        d.memory_used(); d.memory_total(); d.gpu_utilization(); d.memory_utilization()
        d.temperature(); d.power_usage(); d.power_limit(); d.sm_clock(); d.memory_clock()
        d.max_sm_clock(); d.performance_state()
        rows += len(GpuProcess.take_snapshots(d.processes().values(), failsafe=True))
    return rows
polls, rows = 0, 0
deadline = time.monotonic() + seconds
next_at = time.monotonic()
while time.monotonic() < deadline:
    rows = poll()
    polls += 1
    next_at += interval
    time.sleep(max(0.0, next_at - time.monotonic()))
print(json.dumps({"polls": polls, "gpu_rows": rows}))
"""

GPUSTAT_POLL = r"""
import json, sys, time
import gpustat
n, gap_s = int(sys.argv[2]), float(sys.argv[3])
for _ in range(2):
    gpustat.new_query()
cpu, wall = [], []
for _ in range(n):
    time.sleep(gap_s)
    c, w = time.process_time(), time.perf_counter()
    q = gpustat.new_query()
    cpu.append(time.process_time() - c)
    wall.append(time.perf_counter() - w)
print(json.dumps({"cpu": cpu, "wall": wall, "gpu_rows": sum(len(g.processes or []) for g in q.gpus)}))
"""


# The busy job republishes this often, and each measured poll waits GAP_S first (see compare).
PUBLISH_S = 0.05
GAP_S = 0.06
PIN = os.environ.get("BENCH_PIN", "").split()  # e.g. "taskset -c 1": each tool on the same core


class Driver:
    """The simulated driver: library built once, one scenario file."""

    def __init__(self, directory: Path):
        self.lib_dir = build_library(directory / "lib").parent
        self.scenario = directory / "scenario.txt"

    def write(self, scenario: dict) -> None:
        write_scenario(self.scenario, scenario)

    def env(self, extra: dict | None = None) -> dict:
        env = nvml_env(self.lib_dir, self.scenario, extra)
        env["PYTHONPATH"] = str(REPO)
        return env


def run_snippet(
    code: str, driver: Driver, root: int | str, n: int, gap_s: float = 0.0, checkout: Path = REPO
) -> dict:
    """`code` in a fresh process with `checkout`'s packages (another commit's, for an A/B); its last
    line of output, as JSON."""
    env = driver.env()
    env["PYTHONPATH"] = str(checkout)
    out = subprocess.run(
        [*PIN, sys.executable, "-c", code, str(root), str(n), str(gap_s)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# The parts benchmarks' timer (running_parts.py, discovery_parts.py): `timed(owner, name, label)`
# wraps owner.name and adds its CPU time to spent[label]. Needs `collections` and `time` imported.
TIMED_SNIPPET = r"""
spent = collections.Counter()

def timed(owner, name, label):
    real = getattr(owner, name)
    def wrapper(*args, **kwargs):
        t = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - t
    setattr(owner, name, wrapper)
"""


def ms(values: list[float], q: float = 50) -> float:
    s = sorted(values)
    return 1000 * s[min(len(s) - 1, int(len(s) * q / 100))]


def compare(work: Path, driver: Driver, polls: int) -> dict:
    # The job republishes every 50 ms and each of our polls waits 60 ms first, so every poll finds
    # what a poll 1.5 s after the last would: new payloads from every process whose facts changed
    # (the ranks' forward counters), the same from the rest (workers' static facts, not republished).
    with BusyJob(work, processes=64, gpus=8, publish_interval_s=PUBLISH_S) as job:
        driver.write(busy_scenario(job.pids, 8))
        time.sleep(1.5)  # every segment published
        ours = run_snippet(OUR_POLL, driver, job.pid, polls, GAP_S)
        nvitop = run_snippet(NVITOP_POLL, driver, job.pid, max(20, polls // 4), GAP_S)
        gpustat = run_snippet(GPUSTAT_POLL, driver, job.pid, max(3, polls // 40), GAP_S)
    rows = {"dsh sidecar poll": ours, "nvitop snapshot": nvitop, "gpustat new_query": gpustat}
    base = statistics.median(ours["cpu"])
    print("\n## One poll, 8 GPUs x 64 processes (simulated driver)\n")
    print("| tool | CPU per poll, median | p95 | wall per poll, median | GPU process rows | CPU vs ours |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {ms(r['cpu']):.2f} ms | {ms(r['cpu'], 95):.2f} ms | {ms(r['wall']):.2f} ms | "
            f"{r['gpu_rows']} | {statistics.median(r['cpu']) / base:.1f}x |"
        )
    print(
        f"\nEach tool sleeps {1000 * GAP_S:.0f} ms before each measured poll, so every poll starts with caches "
        "as cold as at a 1.5 s interval, and the job has "
        "republished meanwhile: the ranks' payloads are new at every poll of ours."
        f"\nOur poll covers {ours['processes']} processes ({ours['with_probe']} probe segments read), "
        f"{ours['gpus']} GPUs. Where its CPU goes (each source alone): "
        + ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in ours["parts"].items())
        + "; the rest is the verdict, the history and the status document."
    )
    return {
        name: {"cpu_ms_p50": ms(r["cpu"]), "cpu_ms_p95": ms(r["cpu"], 95), "wall_ms_p50": ms(r["wall"])}
        | ({"parts_ms": {k: 1000 * v for k, v in r["parts"].items()}} if "parts" in r else {})
        for name, r in rows.items()
    }


@contextmanager
def discovery_scenario(
    work: Path, driver: Driver, unrelated: int = 0, publish_interval_s: float = PUBLISH_S
) -> Iterator[list[BusyJob]]:
    """The discovery scenario, for as long as the block runs: `unrelated` sleeping processes, then 4
    jobs of 16 probed processes (a root and 15 `sleep` children) over 8 GPUs of `driver`, every
    segment published once. Yields the jobs."""
    sleepers = [subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL) for _ in range(unrelated)]
    jobs: list[BusyJob] = []
    try:
        for i in range(4):
            (work / f"job{i}").mkdir(parents=True, exist_ok=True)
            jobs.append(
                BusyJob(work / f"job{i}", processes=16, gpus=8, publish_interval_s=publish_interval_s)
            )
        driver.write(busy_scenario([pid for j in jobs for pid in j.pids], 8))
        time.sleep(1.5)  # every segment published
        yield jobs
    finally:
        for j in jobs:
            j.__exit__(None, None, None)
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()


def discovery(
    work: Path, driver: Driver, polls: int, unrelated: int = 1000, rounds: int = 3, gap_s: float = GAP_S
) -> dict:
    """Discovery (no --pid): 4 jobs of 16 probed processes over 8 GPUs among `unrelated` other
    processes, one poll of all of them beside nvitop's snapshot of the same machine. The two take
    turns for `rounds` rounds, in alternating order, each in a fresh process: a shared VM's slow
    spells (nvitop's snapshot here: 25 to 50 ms from one hour to the next) then fall on both, not on
    whichever ran during them. Each round gives a ratio; the table shows the median of each tool's
    per-round medians and the range of the per-round ratios."""
    ours_runs: list[dict] = []
    nvitop_runs: list[dict] = []
    with discovery_scenario(work, driver, unrelated) as jobs:
        roots = json.dumps([j.pid for j in jobs])
        for r in range(rounds):
            order = ("ours", "nvitop") if r % 2 == 0 else ("nvitop", "ours")
            for tool in order:
                if tool == "ours":
                    ours_runs.append(run_snippet(DISCOVERY_POLL, driver, roots, polls, gap_s))
                else:
                    nvitop_runs.append(run_snippet(NVITOP_POLL, driver, 0, max(20, polls // 4), gap_s))
    ratios = [
        statistics.median(n["cpu"]) / statistics.median(o["cpu"]) for o, n in zip(ours_runs, nvitop_runs)
    ]
    ours = ours_runs[-1]

    def med(runs: list[dict], key: str = "cpu", q: float = 50) -> float:
        return statistics.median(ms(r[key], q) for r in runs)

    ratio = med(nvitop_runs) / med(ours_runs)
    print(
        f"\n## Discovery: 4 jobs x 16 probed processes, 8 GPUs, {unrelated} unrelated processes "
        f"({rounds} rounds, {1000 * gap_s:.0f} ms before each poll)\n"
    )
    print("| tool | CPU per poll, median | p95 | wall per poll, median | nvitop / ours |")
    print("|---|---|---|---|---|")
    print(
        f"| dsh-sidecar (no --pid) | {med(ours_runs):.2f} ms | {med(ours_runs, q=95):.2f} ms | "
        f"{med(ours_runs, 'wall'):.2f} ms | {ratio:.1f}x (rounds: {min(ratios):.1f}x to {max(ratios):.1f}x) |"
    )
    page_ratio = med(nvitop_runs) / med(ours_runs, "page")
    print(
        f"| dsh-sidecar, and the default job's status document (a page open) | {med(ours_runs, 'page'):.2f} ms | {med(ours_runs, 'page', 95):.2f} ms | | {page_ratio:.1f}x |"
    )
    print(
        f"| nvitop snapshot | {med(nvitop_runs):.2f} ms | {med(nvitop_runs, q=95):.2f} ms | {med(nvitop_runs, 'wall'):.2f} ms | 1.0x |"
    )
    print(
        "\nPer round (ours, nvitop, ratio): "
        + "; ".join(
            f"{ms(o['cpu']):.2f} / {ms(n['cpu']):.2f} ms, {x:.1f}x"
            for o, n, x in zip(ours_runs, nvitop_runs, ratios)
        )
    )
    print(
        f"\nOur poll found {ours['jobs']} of the 4 jobs ({ours['processes']} processes; "
        f"{ours['all_jobs']} jobs on the machine in all) without reading /proc of the {unrelated} others."
    )
    return {
        "ours_cpu_ms_p50": med(ours_runs),
        "ours_with_document_cpu_ms_p50": med(ours_runs, "page"),
        "nvitop_cpu_ms_p50": med(nvitop_runs),
        "ratio": ratio,
        "round_ratios": ratios,
        "gap_s": gap_s,
        "jobs": ours["jobs"],
        "load_average": os.getloadavg(),
    }


def scaling(work: Path, driver: Driver, polls: int, quick: bool) -> dict:
    sizes = (16, 256) if quick else (16, 256, 1024)
    out = {}
    print("\n## Scaling of one poll (CPU per poll, median; every process has a probe segment)\n")
    print("| processes \\ GPUs | 1 | 8 | 64 |")
    print("|---|---|---|---|")
    for procs in sizes:
        cells = []
        for gpus in (1, 8, 64):
            with BusyJob(work, processes=procs, gpus=gpus, publish_interval_s=PUBLISH_S) as job:
                driver.write(busy_scenario(job.pids, gpus))
                time.sleep(1.0 + procs / 500)  # every segment published
                n = max(10, polls // (1 + procs // 64))
                r = run_snippet(OUR_POLL, driver, job.pid, n, GAP_S)
            cpu = ms(r["cpu"])
            out[f"{procs}x{gpus}"] = {
                "cpu_ms_p50": cpu,
                "wall_ms_p50": ms(r["wall"]),
                "gpu_rows": r["gpu_rows"],
                "parts_ms": {k: 1000 * v for k, v in r["parts"].items()},
            }
            note = "" if r["gpu_rows"] == procs else f" ({r['gpu_rows']} on GPUs)"
            cells.append(f"{cpu:.1f} ms{note}")
        print(f"| {procs} | " + " | ".join(cells) + " |")
    print("\n(The simulated driver lists at most 512 processes per GPU.)")
    return out


def idle(work: Path, driver: Driver, seconds: float, warmup_s: float = 15.0) -> dict:
    with BusyJob(work, processes=64, gpus=8) as job:
        driver.write(busy_scenario(job.pids, 8))
        with Sidecar(["--pid", str(job.pid), "--port", "0"], env=driver.env()) as sc:
            time.sleep(warmup_s)
            cpu0, rss0, _ = proc_cpu_rss(sc.proc.pid)
            t0 = time.monotonic()
            rss = [rss0]
            while time.monotonic() - t0 < seconds:
                time.sleep(min(5.0, seconds - (time.monotonic() - t0)) or 0.01)
                rss.append(proc_cpu_rss(sc.proc.pid)[1])
            cpu1, rss1, hwm = proc_cpu_rss(sc.proc.pid)
            elapsed = time.monotonic() - t0
            polls = len(sc.history()["samples"])
    share = 100 * (cpu1 - cpu0) / elapsed
    print(
        f"\n## The sidecar at the default interval (1.5 s), 8 GPUs x 64 processes, {elapsed:.0f} s after {warmup_s:.0f} s warm-up\n"
    )
    print("| CPU share of one core | CPU per poll | RSS start | RSS end | RSS peak (VmHWM) |")
    print("|---|---|---|---|---|")
    print(
        f"| {share:.2f}% | {1000 * (cpu1 - cpu0) / (elapsed / 1.5):.1f} ms | {rss0:.1f} MiB | {rss1:.1f} MiB | {hwm:.1f} MiB |"
    )
    return {
        "seconds": elapsed,
        "cpu_share_pct": share,
        "rss_start_mib": rss0,
        "rss_end_mib": rss1,
        "rss_peak_mib": hwm,
        "rss_series_mib": rss,
        "history_samples": polls,
    }


def _polls_so_far(sc: Sidecar) -> int:
    """The sidecar's poll count, from /metrics (the poll-duration histogram's count)."""
    code, body = sc.get("/metrics")
    if code != 200:
        raise RuntimeError(f"/metrics answered {code}")
    for line in body.decode().splitlines():
        if line.startswith("dsh_sidecar_poll_duration_seconds_count"):
            return int(float(line.split()[-1]))
    raise RuntimeError("no dsh_sidecar_poll_duration_seconds_count in /metrics")


def _running_ours(job: BusyJob, driver: Driver, interval_s: float, seconds: float, warmup_s: float) -> dict:
    with Sidecar(
        ["--pid", str(job.pid), "--port", "0", "--interval", str(interval_s)], env=driver.env()
    ) as sc:
        time.sleep(warmup_s)
        polls0, (cpu0, _, _) = _polls_so_far(sc), proc_cpu_rss(sc.proc.pid)
        time.sleep(seconds)
        polls1, (cpu1, _, _) = _polls_so_far(sc), proc_cpu_rss(sc.proc.pid)
    return {"cpu_s": cpu1 - cpu0, "polls": polls1 - polls0}


def _running_nvitop(driver: Driver, interval_s: float, seconds: float, warmup_s: float) -> dict:
    """nvitop's loop in its own process; its CPU over the same window, after the same warm-up."""
    proc = subprocess.Popen(
        [*PIN, sys.executable, "-c", NVITOP_RUNNING, "0", str(interval_s), str(warmup_s + seconds)],
        env=driver.env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(warmup_s)
    cpu0 = proc_cpu_rss(proc.pid)[0]
    t0 = time.monotonic()
    time.sleep(seconds - 0.5)  # ends before the loop does, so the process is still there to read
    cpu1 = proc_cpu_rss(proc.pid)[0]
    elapsed = time.monotonic() - t0
    out, _ = proc.communicate(timeout=60)
    done = json.loads(out.strip().splitlines()[-1])
    return {"cpu_s": cpu1 - cpu0, "polls": elapsed / interval_s, "gpu_rows": done["gpu_rows"]}


def running(
    work: Path, driver: Driver, seconds: float, rounds: int, interval_s: float = 0.25, warmup_s: float = 5.0
) -> dict:
    """The real `dsh-sidecar --pid ROOT --interval 0.25` and nvitop's loop at the same interval, each
    alone in turns for `rounds` rounds (the order alternating), over one busy job of 64 processes on
    8 GPUs: each process's whole CPU time over `seconds` (after `warmup_s`) per poll, as a user pays
    it (the poll, the server's and main thread's wake-ups, garbage collection)."""
    ours_runs: list[dict] = []
    nvitop_runs: list[dict] = []
    with BusyJob(work, processes=64, gpus=8) as job:
        driver.write(busy_scenario(job.pids, 8))
        time.sleep(1.5)  # every segment published
        for r in range(rounds):
            for tool in ("ours", "nvitop") if r % 2 == 0 else ("nvitop", "ours"):
                if tool == "ours":
                    ours_runs.append(_running_ours(job, driver, interval_s, seconds, warmup_s))
                else:
                    nvitop_runs.append(_running_nvitop(driver, interval_s, seconds, warmup_s))
    per_poll = {
        "ours": [1000 * x["cpu_s"] / x["polls"] for x in ours_runs],
        "nvitop": [1000 * x["cpu_s"] / x["polls"] for x in nvitop_runs],
    }
    ratios = [n / o for o, n in zip(per_poll["ours"], per_poll["nvitop"])]
    ours_ms, nvitop_ms = statistics.median(per_poll["ours"]), statistics.median(per_poll["nvitop"])
    print(
        f"\n## The running sidecar at --interval {interval_s}, 8 GPUs x 64 processes, beside nvitop's loop "
        f"({rounds} rounds of {seconds:.0f} s each, in turns)\n"
    )
    print("| tool | process CPU per poll, median of rounds | per round | nvitop / ours |")
    print("|---|---|---|---|")
    print(
        f"| dsh-sidecar --pid --interval {interval_s} | {ours_ms:.2f} ms | "
        + ", ".join(f"{x:.2f}" for x in per_poll["ours"])
        + f" | {nvitop_ms / ours_ms:.1f}x (rounds: {min(ratios):.1f}x to {max(ratios):.1f}x) |"
    )
    print(
        f"| nvitop (same facts, same interval) | {nvitop_ms:.2f} ms | "
        + ", ".join(f"{x:.2f}" for x in per_poll["nvitop"])
        + " | 1.0x |"
    )
    print(
        f"\nOur polls per round: {', '.join(str(x['polls']) for x in ours_runs)}; nvitop's GPU process rows: {nvitop_runs[-1]['gpu_rows']}"
    )
    return {
        "ours_cpu_ms_per_poll": per_poll["ours"],
        "nvitop_cpu_ms_per_poll": per_poll["nvitop"],
        "ratio": nvitop_ms / ours_ms,
        "round_ratios": ratios,
        "load_average": os.getloadavg(),
    }


HISTORY_SIZE = r"""
import json, sys, gc
from sidecar.poll.poller import Poller
from sidecar.poll.history import History
root, n = int(sys.argv[1]), int(sys.argv[2])
p = Poller(root, interval_s=1.5, history_s=86400)
for _ in range(n):
    p.poll_once()
def deep(obj, seen):
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, tuple):
        size += sum(deep(x, seen) for x in obj)
    elif hasattr(type(obj), "__slots__"):  # sys.getsizeof counts an array's buffer itself
        for name in type(obj).__slots__:
            size += deep(getattr(obj, name), seen)
    elif hasattr(obj, "__dict__"):
        size += deep(tuple(vars(obj).values()), seen) + sys.getsizeof(vars(obj))
    return size
samples = p.history.samples()
seen = set()
# Small ints and shared constants are not the history's: count them once, outside.
for x in range(-5, 257):
    seen.add(id(x))
seen.update(id(x) for x in (None, True, False, 0.0))
per = [deep(s, seen) for s in samples[-20:]]
print(json.dumps({"bytes_per_sample": sum(per) / len(per), "capacity": p.history.capacity,
                  "gpu_rows": len(samples[-1].processes), "gpus": len(samples[-1].gpus)}))
"""


def history(work: Path, driver: Driver) -> dict:
    out = {}
    print("\n## A 24-hour history at the default 1.5 s interval (ring buffer of 57,601 samples)\n")
    print("| job | bytes per sample | 24 h (57,601 samples) |")
    print("|---|---|---|")
    with BusyJob(work, processes=64, gpus=8) as job:
        for label, listed in (
            ("8 GPUs, 8 GPU processes (one rank per GPU)", job.pids[:8]),
            ("8 GPUs, 64 GPU processes", job.pids),
        ):
            driver.write(busy_scenario(listed, 8))
            r = run_snippet(HISTORY_SIZE, driver, job.pid, 30)
            total = r["bytes_per_sample"] * r["capacity"] / 1048576
            out[label] = {"bytes_per_sample": r["bytes_per_sample"], "mib_24h": total}
            print(f"| {label} | {r['bytes_per_sample']:.0f} | {total:.0f} MiB |")
    print("\n(The default --history is 600 s: 401 samples, a 1/144 of these figures.)")
    return out


def main() -> int:
    temporary_runs_ledger()  # the sidecars it starts record their runs (the default) into a temporary ledger
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["compare", "discovery", "running", "scaling", "idle", "history", "all"])
    ap.add_argument("--polls", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=300.0, help="idle: how long to measure (default 300)")
    ap.add_argument("--quick", action="store_true", help="scaling without 1024 processes, idle for 60 s")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="discovery, running: rounds of ours and nvitop's, in turns (default 3)",
    )
    ap.add_argument(
        "--gap-ms",
        type=float,
        default=1000 * GAP_S,
        help=f"discovery: the pause before each poll (default {1000 * GAP_S:.0f}; 0: polls back to back, caches warm)",
    )
    ap.add_argument("--json", default="", help="also write the raw figures to this file")
    args = ap.parse_args()
    print(
        f"# bench_sidecar.py {args.what} on {platform.node()}: {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f} at start"
    )
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-sidecar-") as tmp:
        work = Path(tmp)
        driver = Driver(work)
        if args.what in ("compare", "all"):
            results["compare"] = compare(work, driver, args.polls)
        if args.what in ("discovery", "all"):
            results["discovery"] = discovery(
                work, driver, args.polls, rounds=args.rounds, gap_s=args.gap_ms / 1000
            )
        if args.what in ("running", "all"):
            results["running"] = running(
                work, driver, 20.0 if args.what == "all" else args.seconds, args.rounds
            )
        if args.what in ("scaling", "all"):
            results["scaling"] = scaling(work, driver, args.polls, args.quick)
        if args.what in ("history", "all"):
            results["history"] = history(work, driver)
        if args.what in ("idle", "all"):
            results["idle"] = idle(work, driver, 60.0 if args.quick and args.what == "all" else args.seconds)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
