"""The runs documents' words (sidecar/documents/runs.py): `since` as a person writes it, a run's
name and the runs it names, short ids that stay unique in a listing, the bounds of a run document,
and the contract's enums kept equal to the comparison's own."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from sidecar.common.runs import RunDetail, run_id, run_key
from sidecar.documents import contract_runs
from sidecar.documents.runs import (
    check_run_name,
    matching_keys,
    parse_since,
    run_document,
    runs_document,
    shown_ids,
)
from sidecar.verdict import compare, compare_reasons
from tests.helpers.ledger_runs import identity, minute, record

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "back_s"),
    [("7d", 7 * 86_400), ("12h", 43_200), ("30m", 1_800), ("90s", 90), ("2w", 14 * 86_400), ("1.5h", 5_400), (" 7D ", 604_800)],
)
def test_since_as_a_duration_back_from_now(text, back_s):
    assert parse_since(text, NOW) == NOW - back_s


def test_since_as_a_date_a_time_or_a_unix_time():
    utc = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc).timestamp()
    assert parse_since("2026-12-01T08:00Z", NOW) == utc
    assert parse_since("2026-12-01T10:00+02:00", NOW) == utc
    assert parse_since("2026-12-01T08:00", NOW) == utc  # UTC without a zone, as `report --since`
    assert parse_since("2026-12-01", NOW) == utc - 8 * 3_600
    assert parse_since("1733040000", NOW) == parse_since("@1733040000", NOW) == 1_733_040_000.0


@pytest.mark.parametrize("text", ["", "7y", "-1", "nan", "inf", "1e999", "3 fortnights", "7d\x1b", "\u202e7d", "1" * 41, "5000w"])
def test_since_refuses_what_it_cannot_read(text):
    with pytest.raises(ValueError, match="since"):
        parse_since(text, NOW)


@pytest.mark.parametrize("text", ["", "a b", "ab\x00", "ab\x1b[2J", "ab\u202e", "ab\u2028", "é", "a" * 129])
def test_a_run_name_is_letters_digits_and_a_few_signs(text):
    with pytest.raises(ValueError) as caught:
        check_run_name(text)
    assert text not in str(caught.value) or not text  # never quoted back


def _records():
    a = record(identity(1, NOW), NOW + 60)
    twin = dataclasses.replace(a, identity=dataclasses.replace(a.identity, key=run_key("boot-2", a.identity.job_id)))
    b = record(identity(2, NOW), NOW + 60)
    return a, twin, b


def test_a_name_is_a_key_a_job_id_or_a_short_id_prefix():
    a, twin, b = _records()
    names = [(r.identity.key, r.identity.job_id) for r in (a, twin, b)]
    assert matching_keys(names, a.identity.key) == [a.identity.key]
    assert matching_keys(names, a.identity.job_id) == [a.identity.key, twin.identity.key]  # one job id, two boots
    assert matching_keys(names, run_id(b.identity.key)) == [b.identity.key]
    assert matching_keys(names, run_id(b.identity.key)[:4].upper()) == [b.identity.key]
    assert matching_keys(names, run_id(b.identity.key)[:3]) == []  # too short to be an id
    assert matching_keys(names, run_id(b.identity.key, 64)) == [b.identity.key]


def test_listed_ids_are_lengthened_until_unique_and_are_8_digits_alone():
    # two keys whose 8-digit ids are the same (found by search: 32 bits meet after ~77,000 keys)
    clash = ("boot/1779-1779", "boot/48820-48820")
    assert run_id(clash[0]) == run_id(clash[1])
    ids = shown_ids((*clash, "boot/1-1"))
    assert len(set(ids.values())) == 3 and all(run_id(k, 64).startswith(i) for k, i in ids.items())
    assert {len(i) for i in ids.values()} == {10}  # one length in a listing: its column stays aligned
    assert shown_ids(clash[:1]) == {clash[0]: run_id(clash[0])}  # alone, its 8 digits


def test_a_run_document_keeps_the_newest_rows_within_its_bounds():
    a = record(identity(1, NOW), NOW + 60)
    minutes = tuple(minute(NOW + 60 * i) for i in range(contract_runs.MAX_RUN_MINUTES + 5))
    doc = run_document(RunDetail(a, (), minutes))
    assert len(doc["minutes"]) == contract_runs.MAX_RUN_MINUTES and doc["minutes_omitted"] == 5
    assert doc["minutes"][-1]["start_unix_s"] == minutes[-1].start_unix_s
    assert "step_rate_sq_hz2" not in doc["minutes"][0]


def test_a_runs_document_lists_at_most_its_bound():
    records = [record(identity(i, NOW), NOW + 60) for i in range(contract_runs.MAX_RUNS_LISTED + 1)]
    doc = runs_document(records, time_unix_s=NOW, since_unix_s=None, truncated=False)
    assert len(doc["runs"]) == contract_runs.MAX_RUNS_LISTED and doc["truncated"] is True


def test_the_contract_names_the_comparisons_words():
    assert contract_runs.OUTCOMES == compare.OUTCOMES
    assert contract_runs.FIGURES == compare.FIGURES
    assert contract_runs.PARTS == compare.PARTS == compare_reasons.PHASES
    assert contract_runs.REASONS == compare_reasons.REASONS
    notes = tuple(getattr(compare, n) for n in compare.__all__ if n.startswith("NOTE_"))
    assert set(contract_runs.NOTES) == set(notes)
