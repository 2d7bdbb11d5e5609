"""The facts and history samples of a discovery poll, a baseline revision's code against this
checkout's, on captured inputs.

    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        .venv/bin/python benchmarks/collect_parts.py capture --out /tmp/polls.pickle'
    .venv/bin/python benchmarks/collect_parts.py compare /tmp/polls.pickle --baseline REV

`capture` runs the scenario of `discovery_parts.py` (4 jobs of 16 probed processes over 8 simulated
GPUs, republishing every 50 ms, a poll every 60 ms) and keeps what each job's collector was handed at
each poll (the process tree, the probe reads, the NVML snapshot, the devices as facts), pickled in
one piece so that objects shared between polls (an unchanged read, a payload's unchanged prefix
values) stay shared as they were. `compare` checks REV (a tag or commit) out with `git worktree add`
into a temporary folder, replays the polls through the collector and history sample of that tree
and of this checkout, each in a subprocess of its own (`replay --tree`), the two in turns round by
round, and removes the worktree. It prints the CPU per poll of each, best of rounds, and how many
polls' facts and samples differ (a baseline older than a field the facts gained differs in it).
Not a test: figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CAPTURE = r"""
import pickle, sys, time
import sidecar.poll.collect as collect, sidecar.poll.discovery as jobs
out_path, n, gap_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
polls = []  # one list per discovery poll: (target pid, now, tree, reads, nvml, system gpus, gpus) per job
real = collect.FactCollector.facts
def facts(self, now, tree, reads, nvml, system_gpus, gpus=None):
    if polls:
        polls[-1].append((self.target_pid, now, tree, reads, nvml, system_gpus, gpus))
    return real(self, now, tree, reads, nvml, system_gpus, gpus)
collect.FactCollector.facts = facts
p = jobs.JobsPoller(interval_s=1.5)
for _ in range(5):
    p.poll_once()
for _ in range(n):
    time.sleep(gap_s)
    polls.append([])
    p.poll_once()
with open(out_path, "wb") as f:
    pickle.dump(polls, f, protocol=pickle.HIGHEST_PROTOCOL)
p.stop()
print("{}")
"""


def capture(out: Path, polls: int) -> None:
    from bench_sidecar import GAP_S, Driver, discovery_scenario, run_snippet

    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        driver = Driver(work / "driver")
        with discovery_scenario(work, driver):
            run_snippet(CAPTURE, driver, str(out.resolve()), polls, GAP_S)


class _Replay:
    """One tree's collectors replaying the captured polls, one poll at a time."""

    def __init__(self, impl, polls) -> None:
        self.impl = impl
        # A copy of its own: the code caches by the identity of what it was handed.
        self.polls = pickle.loads(pickle.dumps(polls, protocol=pickle.HIGHEST_PROTOCOL))
        self.collectors: dict[int, object] = {}

    def poll(self, i: int) -> tuple[float, list]:
        """CPU seconds of poll i's facts and samples (all its jobs), and what they were."""
        impl, jobs = self.impl, self.polls[i]
        t = time.process_time()
        out = []
        for target, now, tree, reads, nvml, system_gpus, gpus in jobs:
            c = self.collectors.get(target)
            if c is None:
                c = self.collectors[target] = impl.FactCollector(target, impl.Rules(), lambda pid: True)
            facts = c.facts(now, tree, reads, nvml, system_gpus, gpus)
            out.append((facts, impl.history_sample(now, facts, c.proc_info)))
        return time.process_time() - t, out


def _digest(made: list) -> str:
    """A poll's facts and samples as text both trees can make: the facts' repr, the samples' rows."""
    parts = []
    for facts, sample in made:
        rows = (sample._gpus.tobytes(), sample._processes.tobytes(), sample._job.tobytes())
        parts.append(f"{facts!r}|{sample.time!r}|{rows!r}|{sample.recent!r}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


_EVICT = bytearray(64 << 20)


def _evict() -> None:
    """Leave the CPU's caches as a poll 1.5 s after the last finds them: full of other work."""
    _EVICT[::64] = bytes(len(_EVICT) // 64)
    time.sleep(0.002)


def _add_foreign_rows(polls, per_gpu: int) -> None:
    """Other users' processes on every GPU (a shared machine): ``per_gpu`` rows more on each device
    of each snapshot, pids no job has."""
    from sidecar.sources.nvml import GpuProcess

    for jobs in polls:
        nvml = jobs[0][4]
        for d in nvml.devices:
            d.processes = d.processes + [
                GpuProcess(4_000_000 + 1000 * d.index + k, 1000.0 + k, k % 100, 10, ("compute",))
                for k in range(per_gpu)
            ]


def replay(tree: Path, path: Path, cold: bool, foreign: int, vary_sm: bool) -> None:
    """One round of the captured polls through ``tree``'s sidecar (this process imports it from
    there): prints each poll's CPU seconds and digest as JSON."""
    sys.path.insert(0, str(tree.resolve()))
    try:
        import sidecar.poll.collect as impl
    except ImportError:  # a baseline from before the layer packages
        import sidecar.collect as impl

    assert Path(impl.__file__).resolve().is_relative_to(tree.resolve()), impl.__file__
    with open(path, "rb") as f:
        polls = pickle.load(f)
    if foreign:
        _add_foreign_rows(polls, foreign)
    if vary_sm:  # a busy GPU's per-process samples change from poll to poll
        for i, jobs in enumerate(polls):
            for d in jobs[0][4].devices:
                for gp in d.processes:
                    gp.sm_util = None if gp.sm_util is None else (gp.sm_util + i) % 100
    rp = _Replay(impl, polls)
    times, digests = [], []
    gc.disable()
    for i in range(len(polls)):
        if cold:
            _evict()
        t, made = rp.poll(i)
        times.append(t)
        digests.append(_digest(made))
    gc.enable()
    print(json.dumps({"times": times, "digests": digests, "jobs": len(polls[0]), "polls": len(polls)}))


def _replay_in(tree: Path, path: Path, flags: list[str]) -> dict:
    r = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "replay", str(path), "--tree", str(tree), *flags],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(r.stdout.splitlines()[-1])


def compare(path: Path, baseline: str, rounds: int, cold: bool, foreign: int, vary_sm: bool) -> None:
    flags = (
        (["--cold"] if cold else []) + ["--foreign-rows", str(foreign)] + (["--vary-sm"] if vary_sm else [])
    )
    work = Path(tempfile.mkdtemp(prefix="collect-baseline-"))
    checkout = work / "tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(checkout), baseline], check=True
    )
    try:
        times: dict[str, list[float]] = {"before": [], "after": []}
        ratios, differ = [], 0
        for r in range(rounds):
            # The two in turns, round by round (first one, then the other): what the machine does
            # meanwhile weighs on both alike.
            order = [("before", checkout), ("after", REPO)]
            runs = dict(
                (name, _replay_in(tree, path, flags)) for name, tree in (order if r % 2 == 0 else order[::-1])
            )
            b, a = runs["before"], runs["after"]
            if r == 0:
                print(f"{a['polls']} polls of {a['jobs']} jobs; baseline {baseline}")
                differ = sum(x != y for x, y in zip(b["digests"], a["digests"], strict=True))
            for i, (tb, ta) in enumerate(zip(b["times"], a["times"], strict=True)):
                if i >= 2:  # the first polls fill the caches
                    times["before"].append(tb)
                    times["after"].append(ta)
                    ratios.append(ta / tb)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(checkout)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    for name, values in times.items():
        print(
            f"  {name:<7} facts + samples per poll: median {1000 * statistics.median(values):.3f} ms, "
            f"p10 {1000 * sorted(values)[len(values) // 10]:.3f} ms"
        )
    print(
        f"  after / before, median of the polls' ratios: {statistics.median(ratios):.3f} ({len(ratios)} polls); "
        f"polls whose facts or samples differ: {differ}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--polls", type=int, default=40)
    m = sub.add_parser("compare")
    m.add_argument("path", type=Path)
    m.add_argument("--baseline", required=True, help="the tag or commit to compare with (git worktree add)")
    m.add_argument("--rounds", type=int, default=10)
    m.add_argument("--cold", action="store_true", help="evict the CPU caches before each poll")
    m.add_argument("--foreign-rows", type=int, default=0, help="other users' processes added on each GPU")
    m.add_argument("--vary-sm", action="store_true", help="per-process utilisation changing at every poll")
    rp = sub.add_parser("replay", help="one round through one tree's code (compare runs it)")
    rp.add_argument("path", type=Path)
    rp.add_argument("--tree", type=Path, required=True)
    rp.add_argument("--cold", action="store_true")
    rp.add_argument("--foreign-rows", type=int, default=0)
    rp.add_argument("--vary-sm", action="store_true")
    args = parser.parse_args()
    if args.cmd == "capture":
        capture(args.out, args.polls)
    elif args.cmd == "replay":
        replay(args.tree, args.path, args.cold, args.foreign_rows, args.vary_sm)
    else:
        compare(args.path, args.baseline, args.rounds, args.cold, args.foreign_rows, args.vary_sm)


if __name__ == "__main__":
    main()
