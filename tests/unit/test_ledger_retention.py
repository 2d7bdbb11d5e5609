"""The run ledger's retention (sidecar/sources/ledger/retention.py, Ledger.maintain): old runs expire,
minutes older than a week merge into hour rows that keep what a comparison reads, the file stays
under its size cap, and a day of 1,000 short jobs an hour stays within LEDGER_DAY_BYTES_MAX."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.common.runs import MinuteFigures, VerdictChange
from sidecar.sources.ledger import Ledger, LedgerBatch, Retention
from sidecar.sources.ledger.bounds import (
    DOWNSAMPLED_SPAN_S,
    LEDGER_DAY_BYTES_MAX,
    MINUTE_RETENTION_S,
    RUN_RETENTION_S,
)
from sidecar.sources.ledger.retention import check_fields, merge_minutes
from tests.helpers.ledger_runs import DAY_START_UNIX_S as T0
from tests.helpers.ledger_runs import file_bytes, identity, minute, record, simulate

HOUR = DOWNSAMPLED_SPAN_S
DAY = 86_400.0
# Hours of the simulated day the test writes (the benchmark writes all 24): the file grows with the
# jobs (nothing is old enough to merge or expire within a day), so its share of the day's bound holds.
TEST_HOURS = 2


def test_every_minute_field_has_a_merge_rule():
    assert check_fields() == set()


def test_merged_minutes_keep_weighted_means_sums_peaks_and_the_spread():
    a = dataclasses.replace(minute(T0, polls=30, rate_hz=2.0), energy_j=None, temperature_peak_c=80.0)
    b = dataclasses.replace(minute(T0 + 60, polls=10, rate_hz=6.0), step_rate_sq_hz2=None,
                            clock_reasons=("HwSlowdown", "SwPowerCap"), gpu_util_pct=None, steps=None)
    c = MinuteFigures(T0 + 120, polls=0)  # a minute of no figures
    hour = merge_minutes([a, b, c], T0, HOUR)
    assert (hour.start_unix_s, hour.span_s, hour.minutes, hour.polls) == (T0, HOUR, 3, 40)
    assert hour.step_rate_hz == pytest.approx((2.0 * 30 + 6.0 * 10) / 40)
    assert hour.gpu_util_pct == a.gpu_util_pct  # only `a` had it
    assert hour.step_rate_sq_hz2 == pytest.approx(2.0**2 + 6.0**2)  # b's from its rate
    assert hour.steps == a.steps and hour.energy_j == b.energy_j  # sums of the known
    assert hour.gpu_held_s == a.gpu_held_s + b.gpu_held_s
    assert hour.temperature_peak_c == 80.0 and hour.gpu_processes == 2
    assert hour.clock_reasons == ("HwSlowdown", "SwPowerCap")
    # merging an hour row again with a late minute adds, never double-counts
    again = merge_minutes([hour, minute(T0 + 180, polls=20, rate_hz=4.0)], T0, HOUR)
    assert (again.minutes, again.polls) == (4, 60)
    assert again.step_rate_sq_hz2 == pytest.approx(4 + 36 + 16)


def test_maintain_merges_old_minutes_by_the_hour_and_expires_old_runs(tmp_path):
    old, mid, new = identity(1, T0), identity(2, T0 + 40 * DAY), identity(3, T0 + 95 * DAY)
    now = T0 + 95 * DAY + 600
    with Ledger(tmp_path / "runs.sqlite3") as ledger:
        for ident in (old, mid, new):
            start = ident.started_unix_s
            ledger.write(LedgerBatch(
                runs=(record(ident, start + 2 * HOUR),),
                minutes=tuple((ident.key, minute(start + 60 * m)) for m in range(120)),
                changes=((ident.key, VerdictChange(start, "ok")),),
            ))
        done = ledger.maintain(now)
        again = ledger.maintain(now)
        kept = {r.identity.key for r in ledger.runs()}
        mid_detail, new_detail = ledger.detail(mid.key), ledger.detail(new.key)
    assert now - (old.started_unix_s + 2 * HOUR) > RUN_RETENTION_S > now - (mid.started_unix_s + 2 * HOUR)
    assert kept == {mid.key, new.key} and done.runs_expired == 1
    assert done.minutes_merged == 120 and again.minutes_merged == 0  # mid's, once
    assert mid_detail is not None and new_detail is not None
    hours = mid_detail.minutes
    assert [(m.start_unix_s, m.span_s, m.minutes) for m in hours] == [(T0 + 40 * DAY, HOUR, 60), (T0 + 40 * DAY + HOUR, HOUR, 60)]
    assert sum(m.steps or 0 for m in hours) == 120 * minute(0).steps
    assert mid_detail.timeline == (VerdictChange(mid.started_unix_s, "ok"),)
    assert now - new.started_unix_s < MINUTE_RETENTION_S and len(new_detail.minutes) == 120  # by the minute still


def test_maintain_keeps_the_file_under_its_size_cap_deleting_the_oldest_runs(tmp_path):
    cap = Retention(size_cap_bytes=512 << 10)
    path = tmp_path / "runs.sqlite3"
    with Ledger(path, retention=cap) as ledger:
        for i in range(300):
            ident = identity(i, T0 + i * 60)
            ledger.write(LedgerBatch(runs=(record(ident, T0 + i * 60 + 300),),
                                     minutes=tuple((ident.key, minute(T0 + i * 60 + 60 * m)) for m in range(5))))
        done = ledger.maintain(T0 + 300 * 60)
        kept = [r.identity.key for r in ledger.runs(limit=1_000)]
    assert done.runs_over_cap > 0 and done.used_bytes <= cap.size_cap_bytes
    assert kept == [identity(i, 0).key for i in reversed(range(done.runs_over_cap, 300))]  # the newest stay
    assert file_bytes(path) <= cap.size_cap_bytes + (64 << 10)  # pages given back, WAL truncated


def test_a_simulated_day_of_short_jobs_stays_within_the_documented_size(tmp_path):
    """1,000 jobs an hour, written as a discovery sidecar writes them, maintain() hourly: the file's
    share of LEDGER_DAY_BYTES_MAX (benchmarks/ledger_size.py measures the whole day)."""
    path = tmp_path / "runs.sqlite3"
    with Ledger(path) as ledger:
        jobs = simulate(ledger, TEST_HOURS)
        assert ledger.fault is None
        listed = ledger.runs(limit=10_000)
        some = ledger.detail(listed[len(listed) // 2].identity.key)
    assert len(listed) == jobs == 1_000 * TEST_HOURS
    assert some is not None and 2 <= len(some.minutes) <= 6 and 1 <= len(some.timeline) <= 3
    assert file_bytes(path) <= LEDGER_DAY_BYTES_MAX * TEST_HOURS / 24
