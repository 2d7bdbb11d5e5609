"""`dsh-sidecar report` against a simulated week whose ground truth this test wrote (issue 40: "a test
checks the figures against a simulated week ... within 1 %").

A week of 200 runs of five users (one known by uid only) on 1-8 GPUs of three models, with Slurm job
ids, pods, stretches where the GPUs are held with no work, energy known, unknown, and known for part
of a run, and the week's first two days downsampled into hour rows as the ledger keeps them, is
written through Ledger.write into a temporary ledger. The expected totals are summed here, second by
second of each row's share of the window, apart from sidecar/verdict/accounting.py; the report's
JSON (`report --json`, the real CLI in this process) must match them within 1 %. The window starts
and ends mid-minute and mid-hour, so the rows at its edges count in part.

The printers are checked on the same ledger: the table puts the most GPU-hours held idle first and
shows hostile names as visible escapes; the CSV is RFC 4180 and never starts a cell with a formula.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from sidecar.cli.main import main
from sidecar.common.exit_codes import EXIT_LEDGER, EXIT_OK, EXIT_USAGE
from sidecar.common.runs import LedgerBatch, MinuteFigures, RunIdentity, RunRecord, RunSetup
from sidecar.documents.contract import check
from sidecar.sources.ledger import Ledger

WEEK_START = 1_764_288_000.0  # 2025-11-28 00:00 UTC, a multiple of an hour
DAY = 86_400.0
SINCE = WEEK_START + 0.5 * DAY + 17.3  # mid-hour, mid-minute: the rows at the edges count in part
UNTIL = WEEK_START + 7 * DAY - 40.7
HOURLY_BEFORE = WEEK_START + 2 * DAY  # rows before this are hour rows (downsampled), as a ledger keeps them
USERS = [("alice", 1001), ("bob", 1002), ("carol", 1003), ("dave", 1004), (None, 1005)]
MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB"]
HOSTILE = "=cmd|' /C calc'!A0\x1b[31m\u202e"  # a formula, an escape sequence, a bidi override


@dataclass
class Truth:
    """What the test wrote, summed by itself: GPU-seconds, joules, runs."""

    held_s: float = 0.0
    busy_s: float = 0.0
    energy_j: float = 0.0
    energy_known: bool = False
    runs: set[str] = field(default_factory=set)


def _inside_s(start: float, span: float) -> float:
    """Seconds of [start, start + span) inside [SINCE, UNTIL), counted as the report must."""
    return max(0.0, min(start + span, UNTIL) - max(start, SINCE))


def _week(rng: random.Random) -> tuple[list[RunRecord], list[tuple[str, MinuteFigures]]]:
    runs, minutes = [], []
    for n in range(200):
        user, uid = USERS[n % len(USERS)]
        gpus = rng.choice([1, 1, 2, 4, 8])
        model = MODELS[n % 3] if n % 11 else MODELS[(n + 1) % 3]
        models = (model,) * gpus if n % 13 else (MODELS[0], MODELS[1])  # a few runs on two models
        gpus = len(models)
        start = WEEK_START + rng.randrange(0, int(7 * DAY / 60) - 10) * 60.0
        length_min = rng.randint(5, 400)
        idle_from, idle_len = rng.randint(0, length_min), rng.randint(0, 90)  # a stretch held with no work
        energy = ("known", "unknown", "half")[n % 3]
        key = f"boot-{n // 50}/{4000 + n}-{n * 7}"
        ident = RunIdentity(
            key=key, job_id=f"{4000 + n}-{n * 7}", host=f"node-{n % 4}", started_unix_s=start,
            uid=uid, user=user, command=("python", "train.py", f"--seed={n}") if n != 7 else (HOSTILE,),
            slurm_job=str(880_000 + n) if n % 2 else None, pod=f"ml/trainer-{n}" if n % 5 == 0 else None,
        )
        end = start + length_min * 60.0
        runs.append(RunRecord(identity=ident, setup=RunSetup(gpu_models=models), last_seen_unix_s=end, ended_unix_s=end))
        hour_rows: dict[float, list[MinuteFigures]] = defaultdict(list)
        for i in range(length_min):
            t = start + 60.0 * i
            held_share = 1.0 if i < length_min - 1 else rng.choice([0.25, 0.5, 1.0])  # the last minute in part
            held = 60.0 * gpus * held_share
            busy = 0.0 if idle_from <= i < idle_from + idle_len else held * rng.choice([1.0, 1.0, 0.8])
            known = energy == "known" or (energy == "half" and i % 2 == 0)
            m = MinuteFigures(
                start_unix_s=t, polls=40, gpu_held_s=held, gpu_busy_s=busy,
                energy_j=held * rng.uniform(80, 400) if known else None,
            )
            if t < HOURLY_BEFORE:
                hour_rows[t - (t - WEEK_START) % 3600].append(m)
            else:
                minutes.append((key, m))
        for hour, rows in hour_rows.items():  # merged as retention.merge_minutes would: sums
            known_e = [r.energy_j for r in rows if r.energy_j is not None]
            minutes.append((key, MinuteFigures(
                start_unix_s=hour, span_s=3600.0, minutes=len(rows), polls=40 * len(rows),
                gpu_held_s=sum(r.gpu_held_s for r in rows), gpu_busy_s=sum(r.gpu_busy_s for r in rows),
                energy_j=sum(known_e) if known_e else None,
            )))
    return runs, minutes


def _truth(runs: list[RunRecord], minutes: list[tuple[str, MinuteFigures]]) -> dict[str, dict[str, Truth]]:
    """Expected totals by user, job and GPU model, from the rows as written."""
    run_of = {r.identity.key: r for r in runs}
    out: dict[str, dict[str, Truth]] = {"user": defaultdict(Truth), "job": defaultdict(Truth), "gpu": defaultdict(Truth)}
    for key, m in minutes:
        share = _inside_s(m.start_unix_s, m.span_s) / m.span_s
        if share == 0:
            continue
        run = run_of[key]
        user = run.identity.user or f"uid {run.identity.uid}"
        models = run.setup.gpu_models
        parts = [("user", user, 1.0), ("job", key, 1.0)]
        parts += [("gpu", model, models.count(model) / len(models)) for model in set(models)]
        for by, k, part in parts:
            t = out[by][k]
            t.held_s += m.gpu_held_s * share * part
            t.busy_s += m.gpu_busy_s * share * part
            if m.energy_j is not None:
                t.energy_known = True
                t.energy_j += m.energy_j * share * part
            t.runs.add(key)
    return out


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict[str, Truth]]]:
    runs, minutes = _week(random.Random(40))
    path = tmp_path_factory.mktemp("ledger") / "runs.sqlite3"
    with Ledger(path) as ledger:
        assert ledger.write(LedgerBatch(runs=tuple(runs), minutes=tuple(minutes)))
    return str(path), _truth(runs, minutes)


def _report(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> str:
    code = main(["report", "--runs-db", path, "--since", f"@{SINCE}", "--until", f"@{UNTIL}", *extra])
    out = capsys.readouterr()
    assert code == EXIT_OK, out.err
    return out.out


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= 0.01 * abs(want) + 1e-9


@pytest.mark.parametrize("by", ["user", "job", "gpu"])
def test_the_report_matches_the_week_it_was_written_from(week, capsys, by):
    path, truth = week
    doc = json.loads(_report(capsys, path, "--json", "--by", by))
    check(doc, "report")
    assert (doc["by"], doc["source"], doc["since_unix_s"], doc["until_unix_s"]) == (by, "ledger", SINCE, UNTIL)
    expected = truth[by]
    rows = {r["key"]: r for r in doc["rows"]}
    assert set(rows) == set(expected)
    for key, t in expected.items():
        r = rows[key]
        assert _close(r["gpu_held_h"] * 3600, t.held_s), (key, r["gpu_held_h"] * 3600, t.held_s)
        assert _close(r["gpu_busy_h"] * 3600, t.busy_s), key
        assert _close(r["gpu_idle_held_h"] * 3600, t.held_s - t.busy_s), key
        assert r["runs"] == len(t.runs), key
        if t.energy_known:
            assert _close(r["energy_kwh"] * 3.6e6, t.energy_j), key
        else:
            assert r["energy_kwh"] is None, key  # unknown, never 0
    held = sum(t.held_s for t in expected.values())
    assert _close(doc["total"]["gpu_held_h"] * 3600, held)
    assert _close(doc["total"]["gpu_idle_held_h"] * 3600, held - sum(t.busy_s for t in expected.values()))
    # the headline order: the most GPU-hours held with no work first
    idle = [r["gpu_idle_held_h"] for r in doc["rows"]]
    assert idle == sorted(idle, reverse=True) and idle[0] > 0
    if by == "job":
        # Slurm ids and pods are the job's; a run without them has none
        some = next(r for r in doc["rows"] if r["slurm_jobs"] and r["pods"])
        assert some["slurm_job_count"] == 1 and some["pods"][0].startswith("ml/trainer-")
        assert any(not r["slurm_jobs"] for r in doc["rows"])
    if by == "user":
        assert "uid 1005" in rows  # a user known by uid only
        assert rows["bob"]["slurm_job_count"] > 0


def test_the_table_puts_idle_first_and_shows_hostile_names_as_text(week, capsys):
    path, truth = week
    text = _report(capsys, path, "--by", "job")
    assert "\x1b" not in text and "\u202e" not in text and "\\u001b[31m" in text
    lines = text.splitlines()
    assert "held with no work" in lines[0] and lines[1].split()[:2] == ["job", "user"]
    jobs = truth["job"]
    worst = max(jobs, key=lambda k: (jobs[k].held_s - jobs[k].busy_s))
    assert lines[2].startswith(worst.split("/", 1)[1])  # `<job id>@<host>`
    assert lines[-1].startswith("total")


def test_the_csv_is_rfc4180_and_no_cell_is_a_formula(week, capsys):
    path, truth = week
    text = _report(capsys, path, "--csv", "--by", "job")
    assert text.endswith("\r\n") and "\x1b" not in text
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    assert header[:3] == ["by", "key", "runs"] and len(body) == len(truth["job"]) + 1
    command = header.index("command")
    hostile = [r for r in body if "calc" in r[command]]
    assert len(hostile) == 1 and hostile[0][command].startswith("'=")
    assert not any(cell[:1] in "=+-@" and cell for r in body for cell in r)
    total = body[-1]
    assert total[1] == "total"
    held = float(total[header.index("gpu_held_h")])
    assert _close(held * 3600, sum(t.held_s for t in truth["job"].values()))


def test_a_missing_ledger_and_a_backward_window_are_said(tmp_path, capsys):
    assert main(["report", "--runs-db", str(tmp_path / "none.sqlite3")]) == EXIT_LEDGER
    assert "no run ledger at" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite3").exists()  # a report never creates a ledger
    assert main(["report", "--since", "1d", "--until", "2d", "--runs-db", str(tmp_path / "x")]) == EXIT_USAGE
    assert "must come before" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["report", "--since", "yesterday"])
    assert exc.value.code == EXIT_USAGE
    assert "not a time" in capsys.readouterr().err


def test_an_empty_window_is_a_report_of_nothing(week, capsys):
    path, _ = week
    code = main(["report", "--runs-db", path, "--since", "@1000", "--until", "@2000", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK and doc["rows"] == []
    assert doc["total"]["gpu_held_h"] == 0 and doc["total"]["energy_kwh"] is None
