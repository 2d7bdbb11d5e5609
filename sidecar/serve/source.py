"""What the HTTP server reads its documents from, declared here so that the server depends on this
interface and never on a poller: `sidecar.poll.poller.Poller` (--pid, `run`), `sidecar.poll.discovery.JobsPoller`
(discovery) and the tests' own sources all provide it.

A source answers from the last poll it published and never polls on a request. Each document
method returns None before the first poll, and raises `sidecar.documents.document.UnknownJob` for
a `job` it does not watch or `NoDefaultJob` when `job` is None and no job is the caller's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

Document = dict[str, Any]


class Documents(Protocol):
    """The documents of the jobs, for one caller (the `status`, `jobs`, `history` and `watch` routes)."""

    def status_document(self, job: str | None = None) -> Document | None: ...

    def jobs_document(self) -> Document | None: ...

    def history_document(self, job: str | None = None, since: float | None = None) -> Document | None: ...

    def watch_document(self, job: str | None = None, since: tuple[int, int] | None = None) -> Document | None:
        """The job's WatchDocument (sidecar/documents/watch.py) without its comparison: the events
        after the cursor `since` (sidecar.verdict.watch.parse_cursor's; None: none)."""
        ...


class DocumentSource(Documents, Protocol):
    """A poller as the server sees it: its documents and the last poll (`/healthz`)."""

    def snapshot(self) -> tuple[Document | None, float | None]:
        """The default job's status document (None: none yet) and the last poll's UNIX time."""
        ...


class PerCallerSource(DocumentSource, Protocol):
    """A source that lists several users' jobs (root's discovery): the job it answers without
    ?job= depends on who asks, so the server asks it for the caller's view first (a source
    without `for_caller` answers every caller alike)."""

    def for_caller(self, caller_uid: Callable[[], int | None]) -> Documents:
        """The documents as the caller whose uid `caller_uid()` gives sees them (called at most
        once, only when the view needs it)."""
        ...


class RunsSource(Protocol):
    """The runs the ledger remembers (issue 40), as the runs routes and the MCP tools read them:
    sidecar.poll.runs_source.LedgerRuns, or a test's own. Each method returns a document
    (sidecar/documents/runs.py) or raises one of that module's RunsError: RunsUnavailable (the
    ledger cannot be read), UnknownRun, AmbiguousRun (with its candidates), NoPreviousRun; a name
    that cannot name a run is a ValueError."""

    def runs_document(self, since_unix_s: float | None = None) -> Document: ...

    def run_document(self, name: str) -> Document: ...

    def compare_document(self, run: str, baseline: str | None = None) -> Document: ...
