"""A small run ledger for the runs commands', routes' and MCP tools' tests, written through the
ledger's own API (Ledger.write with LedgerBatch), as the recorder writes it:

- `base`: `python train.py` in /home/ada/proj, num_workers=8, ten minutes at 4 steps/s;
- `slow`: the same command in the same folder an hour later, num_workers=0: its data wait is half
  the step, 2.5 steps/s (compare's REGRESSION, cause data wait, reason the loader settings);
- `other`: another command, still live, no steps;
- `forged`: a command, folder and host that carry escape sequences, line breaks and bidi overrides
  (what a user's text or an edited file can hold).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sidecar.common.runs import MinuteFigures, RunIdentity, RunRecord, VerdictChange, run_id
from sidecar.sources.ledger import Ledger, LedgerBatch
from tests.helpers.ledger_runs import DAY_START_UNIX_S, SETUP, identity, minute, record

T0 = DAY_START_UNIX_S
FORGED = "x\x1b[2J\n- 9999 forged line\r\u202eevil\u2028"
COMMAND = ("python", "train.py")


def _minutes(start_unix_s: float, rate_hz: float, **changes: float) -> tuple[MinuteFigures, ...]:
    # a small spread minute to minute, as a real run has: the noise the comparison measures
    return tuple(
        dataclasses.replace(minute(start_unix_s + 60 * i, rate_hz=rate_hz * (1 + 0.004 * (i % 3 - 1))), **changes)
        for i in range(10)
    )


def _record(ident: RunIdentity, seen_unix_s: float, *, ended: bool, workers: str = "8") -> RunRecord:
    rec = record(ident, seen_unix_s, ended=ended, status="GPU", warnings=("data-wait",) if workers == "0" else ())
    loader = (("num_workers", workers), ("pin_memory", "True"))
    return dataclasses.replace(rec, setup=dataclasses.replace(SETUP, loader=loader))


def fill(path: Path, *, t0: float = T0, base_workers: str = "8") -> dict[str, RunRecord]:
    """Writes the four runs into the ledger at `path`; their records by name. `t0`: when `base`
    starts (a multiple of 60; a sidecar that records into the ledger merges minutes older than a
    week: its tests start them hours ago); `base_workers`: its num_workers."""
    base = identity(1, t0, command=COMMAND)
    slow = identity(2, t0 + 3_600, command=COMMAND)
    other = identity(3, t0 + 7_200, command=("python", "eval.py"))
    forged = dataclasses.replace(
        identity(4, t0 + 9_000), command=("python", FORGED), cwd=f"/home/ada/{FORGED}", host=f"node{FORGED}"
    )
    runs = {
        "base": _record(base, t0 + 600, ended=True, workers=base_workers),
        "slow": _record(slow, t0 + 4_200, ended=True, workers="0"),
        "other": dataclasses.replace(_record(other, t0 + 7_500, ended=False), totals=dataclasses.replace(
            record(other, t0 + 7_500).totals, steps=None)),
        "forged": _record(forged, t0 + 9_300, ended=True),
    }
    minutes = [(base.key, m) for m in _minutes(t0, 4.0)]
    minutes += [
        (slow.key, m)
        for m in _minutes(
            t0 + 3_600, 2.5, data_wait_fraction=0.5, forward_fraction=0.19, backward_fraction=0.24,
            optimizer_fraction=0.05, other_fraction=0.02,
        )
    ]
    changes = [(base.key, VerdictChange(t0 + 5, "GPU")), (slow.key, VerdictChange(t0 + 3_605, "GPU")),
               (slow.key, VerdictChange(t0 + 3_700, "GPU", ("data-wait",)))]
    with Ledger(path) as ledger:
        assert ledger.write(LedgerBatch(tuple(runs.values()), tuple(minutes), tuple(changes)))
    return runs


def short(rec: RunRecord) -> str:
    return run_id(rec.identity.key)
