"""sidecar/verdict/accounting.py on small hand-made runs whose sums are worked out in the comments:
a row at the window's edge counts for its part inside, a run's GPU models share its figures, energy
known for part of a run is summed with the share it covers and unknown energy stays None, busy never
exceeds held, and what counts as busy (gpu_works) follows the idle threshold."""

from __future__ import annotations

import pytest

from sidecar.common.runs import MinuteFigures, RunDetail, RunIdentity, RunRecord, RunSetup
from sidecar.verdict.accounting import account, gpu_works, runs_usage


def _run(key: str, minutes: list[MinuteFigures], models: tuple[str, ...] = (), **ident: object) -> RunDetail:
    identity = RunIdentity(key=key, job_id=key.split("/")[-1], host="h", started_unix_s=0.0, **ident)  # type: ignore[arg-type]
    return RunDetail(record=RunRecord(identity=identity, setup=RunSetup(gpu_models=models)), minutes=tuple(minutes))


def test_edges_count_in_part_and_models_share_a_run():
    hour = MinuteFigures(start_unix_s=0.0, span_s=3600.0, minutes=60, gpu_held_s=7200.0, gpu_busy_s=3600.0)
    minute = MinuteFigures(start_unix_s=3600.0, gpu_held_s=120.0, gpu_busy_s=120.0, energy_j=6000.0)
    outside = MinuteFigures(start_unix_s=7200.0, gpu_held_s=120.0, gpu_busy_s=0.0)
    run = _run("b/1-1", [hour, minute, outside], ("A100", "H100", "H100"), user="ann", slurm_job="9")
    # window [1800, 3630): half the hour row (3600 held, 1800 busy), half the minute (60 held and busy, 3000 J)
    usages = runs_usage([run], 1800.0, 3630.0)
    assert [u.gpu_model for u in usages] == ["A100", "H100"]
    assert sum(u.gpu_held_s for u in usages) == pytest.approx(3660.0)
    assert sum(u.gpu_busy_s for u in usages) == pytest.approx(1860.0)
    assert usages[1].gpu_held_s == pytest.approx(3660.0 * 2 / 3)
    report = account(usages, "gpu", 1800.0, 3630.0)
    assert [r.key for r in report.rows] == ["H100", "A100"]  # twice the idle GPU-hours first
    total = report.total
    assert total.gpu_held_h == pytest.approx(3660 / 3600) and total.gpu_idle_held_h == pytest.approx(0.5)
    assert total.energy_kwh == pytest.approx(3000 / 3.6e6)
    assert total.energy_known_fraction == pytest.approx(60 / 3660)  # only the minute knew its energy
    assert total.runs == 1 and total.slurm_jobs == ("9",) and total.users == ("ann",)
    assert runs_usage([run], 9000.0, 9999.0) == ()  # no row inside: no usage, no run counted


def test_unknown_energy_is_none_and_busy_never_exceeds_held():
    m = MinuteFigures(start_unix_s=0.0, gpu_held_s=60.0, gpu_busy_s=90.0)  # a recorder's rounding
    report = account(runs_usage([_run("b/2-2", [m], uid=7)], 0.0, 60.0), "job", 0.0, 60.0)
    (row,) = report.rows
    assert row.key == "b/2-2" and row.job_id == "2-2" and row.users == ("uid 7",) and row.gpu_models == ()
    assert row.energy_kwh is None and row.energy_known_fraction is None
    assert row.gpu_busy_h == row.gpu_held_h and row.gpu_idle_held_h == 0.0
    assert account(runs_usage([_run("b/3-3", [m])], 0.0, 60.0), "gpu", 0.0, 60.0).rows[0].key == "unknown"
    with pytest.raises(ValueError):
        account([], "host", 0.0, 1.0)


def test_busy_is_the_utilisation_else_the_sm_activity_against_the_threshold():
    assert gpu_works(5.0, None, 5.0) is True and gpu_works(4.9, 0.9, 5.0) is False
    assert gpu_works(None, 0.06, 5.0) is True and gpu_works(None, 0.01, 5.0) is False
    assert gpu_works(None, None, 5.0) is None
