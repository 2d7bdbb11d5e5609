"""What the verdict costs a job per poll: `decide(facts)` on the facts of the discovery scenario
(`bench_sidecar.py discovery`: 4 jobs of 16 probed processes over 8 simulated GPUs), this tree's
verdict beside the one of another commit, in one process.

    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        .venv/bin/python benchmarks/bench_verdict.py capture /tmp/facts.pickle'   # run the scenario, keep its facts
    .venv/bin/python benchmarks/bench_verdict.py time /tmp/facts.pickle --base HEAD~1 [--as-poller]

`capture` runs the scenario's discovery poller for `--polls` polls on a clock that steps by the
poll interval (1.5 s), so each job's `recent` holds the rules' 120 s window and the sample before it
(82 samples) as on a live sidecar, and pickles the facts each job's last poll handed to decide()
(the facts derived once a poll, Facts.__dict__'s cached values, left out: they are made again per
timed call, and `--as-poller` asks first what the poller's history sample asks of them). `time`
loads sidecar/verdict/ of `--base` from git as a package of its own (the same pickle loaded with
that package's classes), checks both give the same verdict on every job's facts, and prints the
best per-job time of each over `--rounds` rounds, taking turns. Warm figures: a poll 1.5 s after
the last one finds colder caches, and pays about twice as much (benchmarks/discovery_parts.py).
Not a test: figures for the commit message and docs/performance.md.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CAPTURE = r"""
import json, pickle, sys
import sidecar.poll.discovery as jobs, sidecar.poll.poller as poller
from sidecar.verdict.facts import _DERIVED_FACTS
target, n = json.loads(sys.argv[1]), int(sys.argv[2])  # (bench_sidecar.run_snippet's arguments)
out, roots = target["out"], set(target["roots"])
now = [1.7e9]
clock = lambda: now[0]   # the interval between two polls, whatever they cost
seen = {}
real = poller.decide
def decide(facts):
    seen[facts.target_pid] = facts
    return real(facts)
poller.decide = decide
p = jobs.JobsPoller(interval_s=1.5, clock=clock)
for _ in range(n):
    seen.clear()
    p.poll_once()
    now[0] += 1.5
kept = []
for f in (seen[r] for r in sorted(roots)):  # the scenario's jobs, not others on this machine
    kept.append({k: v for k, v in f.__dict__.items() if k not in _DERIVED_FACTS})
with open(out, "wb") as fh:
    pickle.dump(kept, fh)
print(json.dumps({"jobs": len(kept), "recent": [len(d["recent"]) for d in kept], "processes": [len(d["processes"]) for d in kept]}))
p.stop()
"""


def capture(out: Path, polls: int) -> None:
    from bench_sidecar import Driver, discovery_scenario, run_snippet

    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        driver = Driver(work / "driver")
        with discovery_scenario(work, driver) as jobs:
            target = json.dumps({"out": str(out), "roots": [j.pid for j in jobs]})
            print(run_snippet(CAPTURE, driver, target, polls))


def load_package(rev: str, name: str) -> None:
    """sidecar/verdict/ as of `rev`, importable as `name` (its own imports of sidecar.verdict
    rewritten to it; the rest of sidecar is this tree's)."""
    import importlib

    files = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:sidecar/verdict"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    root = Path(tempfile.mkdtemp()) / name
    root.mkdir()
    for f in files:
        if f.endswith(".py"):
            text = subprocess.run(
                ["git", "show", f"{rev}:sidecar/verdict/{f}"],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            (root / f).write_text(text.replace("sidecar.verdict", name))
    sys.path.insert(0, str(root.parent))
    importlib.import_module(name)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, package: str):
        super().__init__(io.BytesIO(data))
        self.package = package

    def find_class(self, module: str, name: str):
        if module.startswith("sidecar.verdict"):
            module = self.package + module[len("sidecar.verdict") :]
        return super().find_class(module, name)


def facts_of(data: bytes, package: str, as_poller: bool) -> list:
    """The pickled facts as `package`'s Facts (fresh ones per call: nothing derived yet, or, with
    `as_poller`, what the poller's history sample asked of them before decide())."""
    facts_cls = sys.modules[package + ".facts"].Facts
    primary = sys.modules[package + ".status"].primary_model_gpu_index
    fields = _Unpickler(data, package).load()

    def fresh(d: dict):
        f = object.__new__(facts_cls)
        f.__dict__.update(d)
        f.__dict__["recent"] = tuple([*d["recent"]])  # a new tuple each poll, as History.recent gives
        if as_poller:
            primary(f)  # samples.history_sample's question
        return f

    return fields, fresh


def best_us(candidates: list[tuple], rounds: int, inner: int) -> list[list[float]]:
    """Per candidate (decide, fields, fresh), per job: the best over `rounds` of the mean of `inner`
    calls on fresh facts, in µs. The candidates take turns within each round (the machine's other
    load and its clock speed fall on each alike)."""
    best = [[float("inf")] * len(c[1]) for c in candidates]
    for _ in range(rounds):
        for out, (decide, fields, fresh) in zip(best, candidates):
            for j, d in enumerate(fields):
                facts = [fresh(d) for _ in range(inner)]
                t = time.perf_counter()
                for f in facts:
                    decide(f)
                out[j] = min(out[j], (time.perf_counter() - t) / inner * 1e6)
    return best


def time_it(path: Path, base: str, rounds: int, inner: int, as_poller: bool) -> None:
    import sidecar.verdict  # noqa: F401

    load_package(base, "verdict_base")
    data = path.read_bytes()
    new_fields, new_fresh = facts_of(data, "sidecar.verdict", as_poller)
    old_fields, old_fresh = facts_of(data, "verdict_base", as_poller)
    new_decide = sys.modules["sidecar.verdict.status"].decide
    old_decide = sys.modules["verdict_base.status"].decide
    for a, b in zip(new_fields, old_fields, strict=True):
        if repr(new_decide(new_fresh(a))) != repr(old_decide(old_fresh(b))):
            raise SystemExit(f"the verdicts differ on job {a['target_pid']}")
    print(f"{len(new_fields)} jobs, recent: {[len(d['recent']) for d in new_fields]}; verdicts equal")
    old, new = best_us(
        [(old_decide, old_fields, old_fresh), (new_decide, new_fields, new_fresh)], rounds, inner
    )
    print(f"decide() per job, best of {rounds} x {inner} calls (µs):")
    print(f"  {base:<12} {' '.join(f'{x:7.1f}' for x in old)}   sum {sum(old):7.1f}")
    print(f"  {'this tree':<12} {' '.join(f'{x:7.1f}' for x in new)}   sum {sum(new):7.1f}")
    print(f"  ratio {sum(old) / sum(new):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["capture", "time"])
    ap.add_argument("file", type=Path)
    ap.add_argument("--polls", type=int, default=100, help="capture: polls before the kept one (default 100)")
    ap.add_argument("--base", default="HEAD", help="time: the commit to compare with (default HEAD)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--inner", type=int, default=50)
    ap.add_argument(
        "--as-poller", action="store_true", help="time: facts as the poller hands them (history sample first)"
    )
    args = ap.parse_args()
    if args.what == "capture":
        capture(args.file, args.polls)
    else:
        time_it(args.file, args.base, args.rounds, args.inner, args.as_poller)


if __name__ == "__main__":
    main()
