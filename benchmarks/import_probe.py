"""What `import probe` costs a program: the fastest of N fresh interpreters (default 5).

    .venv/bin/python benchmarks/import_probe.py [--runs 5] [--checkout DIR] [--json FILE]

Two figures, each the fastest of the runs (the least disturbed by the rest of the machine):

- `inside`: `time.perf_counter()` around `import probe` in a fresh interpreter, what a training
  script's `import probe` line costs it;
- `whole`: the wall time of `python -c "import probe"` less that of `python -c pass`, run in turns:
  the same, plus what the import adds to the interpreter's exit (the probe's atexit handler).

Both run from the repository root with it on PYTHONPATH (the checkout's probe, not an installed one;
`--checkout DIR`: another one's, a `git worktree` of another commit, for a before and after),
DSH_PROBE unset (the probe on), in this interpreter (`sys.executable`). Not a test: the figure for
docs/performance.md; tests/integration/test_probe_processes.py::test_import_probe_is_light holds
what the import leaves out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 50.0  # docs/performance.md
INSIDE = (
    "import sys, time\n"
    "t0 = time.perf_counter()\n"
    "import probe\n"
    "t1 = time.perf_counter()\n"
    "ours = [m for m in sys.modules if m.split('.')[0] in ('probe', 'probe_wire', 'msgpack')]\n"
    "print((t1 - t0) * 1000.0, len(ours))\n"
)


def _env(checkout: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DSH_PROBE", None)
    env["PYTHONPATH"] = str(checkout)
    return env


def _wall_ms(code: str, checkout: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, check=True)
    return (time.perf_counter() - t0) * 1000.0


def measure(runs: int, checkout: Path = REPO) -> dict:
    env = _env(checkout)
    inside_ms, modules = [], set()
    import_ms, pass_ms = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", INSIDE], cwd=checkout, env=env, check=True, capture_output=True, text=True
        )
        ms, count = out.stdout.split()
        inside_ms.append(float(ms))
        modules.add(int(count))
        # In turns, so that a busy moment of the machine falls on both alike.
        import_ms.append(_wall_ms("import probe", checkout, env))
        pass_ms.append(_wall_ms("pass", checkout, env))
    return {
        "runs": runs,
        "python": sys.version.split()[0],
        "load_average": os.getloadavg()[0],
        "inside_ms": min(inside_ms),
        "whole_ms": min(import_ms) - min(pass_ms),
        "import_probe_wall_ms": min(import_ms),
        "pass_wall_ms": min(pass_ms),
        "modules_loaded": sorted(modules),  # probe, probe_wire and msgpack modules the import loaded
        "all_inside_ms": inside_ms,
        "all_import_probe_wall_ms": import_ms,
        "all_pass_wall_ms": pass_ms,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh interpreters of each kind (default 5)")
    ap.add_argument("--checkout", type=Path, default=REPO, help="the checkout whose probe is imported")
    ap.add_argument("--json", help="write the raw figures here")
    args = ap.parse_args()
    r = measure(args.runs, args.checkout.resolve())
    print(
        f"`import probe` of {args.checkout}, the fastest of {r['runs']} fresh interpreters "
        f"(Python {r['python']}, load {r['load_average']:.2f}):"
    )
    print()
    print("| figure | ms | target |")
    print("|---|---|---|")
    print(
        f"| around `import probe`, inside the interpreter | {r['inside_ms']:.1f} | at most {TARGET_MS:.0f} |"
    )
    print(
        f'| `python -c "import probe"` less `python -c pass` | {r["whole_ms"]:.1f} '
        f"({r['import_probe_wall_ms']:.1f} less {r['pass_wall_ms']:.1f}) | |"
    )
    print(f"\nprobe, probe_wire and msgpack modules loaded: {', '.join(map(str, r['modules_loaded']))}")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
