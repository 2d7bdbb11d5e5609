"""The runs source (sidecar/serve/source.py's RunsSource) over the run ledger: what the runs routes,
the MCP tools and `dsh-sidecar runs` / `compare` read. It names runs as a person does (short id, job
id, key: sidecar/documents/runs.py), picks `compare`'s default baseline (the ledger's previous run of
the same command in the same folder) and builds the documents.

The ledger is opened on the first question, and only if its file is there: a sidecar nobody asks
about runs never touches it, and a reader never makes one (no file: no runs yet). A ledger handed in
(the recorder's, sharing its connection and lock) is used as it is. A ledger that cannot be opened
or read raises RunsUnavailable with its message; the next question tries again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sidecar.common.runs import RunDetail
from sidecar.documents.contract_runs import MAX_RUNS_LISTED
from sidecar.documents.runs import (
    Doc,
    NoPreviousRun,
    RunsUnavailable,
    UnknownRun,
    ambiguous,
    check_run_name,
    compare_document,
    matching_keys,
    run_document,
    runs_document,
)
from sidecar.sources.ledger import Ledger, LedgerError, ledger_exists
from sidecar.sources.ledger.bounds import MAX_LISTED_RUNS
from sidecar.verdict.facts import Rules

T = TypeVar("T")
LIST_HINT = (
    "list the runs for their ids: `dsh-sidecar runs`, GET /api/dsh-gpu-dashboard/runs or the list_runs tool"
)


class LedgerRuns:
    """The runs of the ledger at `path` (or of `ledger`, already open)."""

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        ledger: Ledger | None = None,
        rules: Rules | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if path is not None:
            self.path = Path(path)
        elif ledger is not None:
            self.path = ledger.path
        else:
            raise ValueError("LedgerRuns needs a ledger's path or an open ledger")
        self.rules = rules or Rules()
        self._clock = clock
        self._ledger = ledger
        self._owned = ledger is None  # closed by close() only when opened here
        self._lock = threading.Lock()

    # -- the ledger ------------------------------------------------------------------------------

    def _open(self) -> Ledger | None:
        """The ledger, opened on first use; None while no file is there (no run recorded yet)."""
        with self._lock:
            if self._ledger is None:
                if not ledger_exists(self.path):
                    return None
                try:
                    self._ledger = Ledger(self.path)
                except LedgerError as exc:
                    raise RunsUnavailable(str(exc)) from None
            return self._ledger

    def close(self) -> None:
        with self._lock:
            if self._ledger is not None and self._owned:
                self._ledger.close()
                self._ledger = None

    def _read(self, ledger: Ledger, read: Callable[[Ledger], T]) -> T:
        """`read(ledger)`; a read that failed (the ledger answers it empty, with a new fault) is
        RunsUnavailable with the fault's text."""
        before = ledger.fault
        found = read(ledger)
        fault = ledger.fault
        if fault is not None and fault is not before:
            raise RunsUnavailable(fault.text)
        return found

    def _detail(self, ledger: Ledger, key: str) -> RunDetail:
        detail = self._read(ledger, lambda lg: lg.detail(key))
        if detail is None:  # named a moment ago, gone now (expired, or another sidecar's maintain())
            raise UnknownRun(f"the run {key} is no longer in the ledger; {LIST_HINT}")
        return detail

    def _find(self, ledger: Ledger | None, name: str) -> str:
        """The key of the one run `name` names, else UnknownRun or AmbiguousRun (with the runs it
        could be: whole records are read only then)."""
        name = check_run_name(name)
        keys = [] if ledger is None else matching_keys(self._read(ledger, lambda lg: lg.names()), name)
        if not keys:
            raise UnknownRun(f"no run {name} is recorded; {LIST_HINT}")
        if len(keys) > 1:
            assert ledger is not None
            records = [
                r
                for r in self._read(ledger, lambda lg: lg.runs(None, MAX_LISTED_RUNS))
                if r.identity.key in keys
            ]
            if len(records) > 1:
                raise ambiguous(name, records)
        return keys[0]

    # -- the documents ---------------------------------------------------------------------------

    def runs_document(self, since_unix_s: float | None = None) -> Doc:
        ledger = self._open()
        records = (
            ()
            if ledger is None
            else self._read(ledger, lambda lg: lg.runs(since_unix_s, MAX_RUNS_LISTED + 1))
        )
        return runs_document(
            records,
            time_unix_s=self._clock(),
            since_unix_s=since_unix_s,
            truncated=len(records) > MAX_RUNS_LISTED,
            notice=None if ledger is None else ledger.notice,
        )

    def run_document(self, name: str) -> Doc:
        ledger = self._open()
        key = self._find(ledger, name)
        assert ledger is not None  # _find found a run in it
        detail = self._detail(ledger, key)
        return run_document(detail, self._read(ledger, lambda lg: lg.previous(key)))

    def compare_document(self, run: str, baseline: str | None = None) -> Doc:
        ledger = self._open()
        key = self._find(ledger, run)
        assert ledger is not None
        if baseline is not None:
            base_key = self._find(ledger, baseline)
        else:
            previous = self._read(ledger, lambda lg: lg.previous(key))
            if previous is None:
                raise NoPreviousRun(
                    f"no earlier run of the same command in the same folder is recorded for {run}: name the "
                    f"run to compare it with (compare {run} OTHER); {LIST_HINT}"
                )
            base_key = previous.identity.key
        run_detail = self._detail(ledger, key)
        base_detail = self._detail(ledger, base_key)
        # Imported here: a serving sidecar's start needs no comparison.
        from sidecar.verdict.compare import compare_runs

        comparison = compare_runs(run_detail, base_detail, self.rules)
        return compare_document(comparison, run_detail.record, base_detail.record, chosen=baseline is None)
