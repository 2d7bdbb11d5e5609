"""The facts and history samples of a discovery poll, old code against new, on captured inputs.

    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        .venv/bin/python benchmarks/collect_parts.py capture --out /tmp/polls.pickle'
    .venv/bin/python benchmarks/collect_parts.py compare /tmp/polls.pickle

`capture` runs the scenario of `discovery_parts.py` (4 jobs of 16 probed processes over 8 simulated
GPUs, republishing every 50 ms, a poll every 60 ms) and keeps what each job's collector was handed at
each poll (the process tree, the probe reads, the NVML snapshot, the devices as facts), pickled in
one piece so that objects shared between polls (an unchanged read, a payload's unchanged prefix
values) stay shared as they were. `compare` replays them, in one process, through the collector and
history sample as they were (tests/helpers/collect_before.py) and as they are (sidecar/poll/collect.py):
each poll's facts and samples must be equal, and it prints the CPU per poll of each, best of rounds.
Not a test: figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CAPTURE = r"""
import pickle, sys, time
import sidecar.poll.collect as collect, sidecar.poll.jobs as jobs
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
    """One implementation's collectors replaying the captured polls, one poll at a time."""

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


def _samples_equal(a, b) -> bool:
    return (
        a.time == b.time
        and a._gpus.tobytes() == b._gpus.tobytes()
        and a._processes.tobytes() == b._processes.tobytes()
        and a._job.tobytes() == b._job.tobytes()
        and a.recent == b.recent
    )


_EVICT = bytearray(64 << 20)


def _evict() -> None:
    """Leave the CPU's caches as a poll 1.5 s after the last finds them: full of other work."""
    _EVICT[:: 64] = bytes(len(_EVICT) // 64)
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


def compare(path: Path, rounds: int, cold: bool, foreign: int, vary_sm: bool) -> None:
    import sidecar.poll.collect as new
    from tests.helpers import collect_before as old

    with open(path, "rb") as f:
        polls = pickle.load(f)
    if foreign:
        _add_foreign_rows(polls, foreign)
    if vary_sm:  # a busy GPU's per-process samples change from poll to poll
        for i, jobs in enumerate(polls):
            for d in jobs[0][4].devices:
                for gp in d.processes:
                    gp.sm_util = None if gp.sm_util is None else (gp.sm_util + i) % 100
    print(f"{len(polls)} polls of {len(polls[0])} jobs, {sum(len(j[2].processes) for j in polls[0])} processes")
    times: dict[str, list[float]] = {"before": [], "after": []}
    ratios = []
    gc.disable()
    for r in range(rounds):
        before, after = _Replay(old, polls), _Replay(new, polls)
        for i in range(len(polls)):
            # The two in turns, poll by poll (first one, then the other): what the machine does
            # meanwhile weighs on both alike.
            pair = (before, after) if (i + r) % 2 == 0 else (after, before)
            made = {}
            for rp in pair:
                if cold:
                    _evict()
                made[id(rp)] = rp.poll(i)
            (tb, ob), (ta, oa) = made[id(before)], made[id(after)]
            for (fa, sa), (fb, sb) in zip(ob, oa, strict=True):
                assert fa == fb, f"poll {i}: facts differ"
                assert _samples_equal(sa, sb), f"poll {i}: samples differ"
            if i >= 2:  # the first polls fill the caches
                times["before"].append(tb)
                times["after"].append(ta)
                ratios.append(ta / tb)
        gc.collect()
    gc.enable()
    for name, values in times.items():
        print(f"  {name:<7} facts + samples per poll: median {1000 * statistics.median(values):.3f} ms, "
              f"p10 {1000 * sorted(values)[len(values) // 10]:.3f} ms")
    print(f"  after / before, median of the polls' ratios: {statistics.median(ratios):.3f} "
          f"({len(ratios)} polls, every one's facts and samples equal)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--polls", type=int, default=40)
    m = sub.add_parser("compare")
    m.add_argument("path", type=Path)
    m.add_argument("--rounds", type=int, default=10)
    m.add_argument("--cold", action="store_true", help="evict the CPU caches before each poll")
    m.add_argument("--foreign-rows", type=int, default=0, help="other users' processes added on each GPU")
    m.add_argument("--vary-sm", action="store_true", help="per-process utilisation changing at every poll")
    args = parser.parse_args()
    if args.cmd == "capture":
        capture(args.out, args.polls)
    else:
        compare(args.path, args.rounds, args.cold, args.foreign_rows, args.vary_sm)


if __name__ == "__main__":
    main()
