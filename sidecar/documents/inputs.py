"""What the documents are made of, as protocols (sidecar/documents/document.py reads them): the
poll's and the sources' objects live in the layers above (poll) and beside (sources), which the
documents never import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# A document or an object of one: JSON whose shape sidecar/documents/contract.py declares and checks at
# run time (DSH_CONTRACT_CHECK); the type checker cannot follow that declaration, hence Any.
Doc = dict[str, Any]


class Target(Protocol):
    """A job's watched process as first seen (sidecar/poll/collect.py's TargetInfo)."""

    @property
    def job_id(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def cmdline(self) -> Sequence[str] | None: ...
    @property
    def create_time(self) -> float | None: ...


class Root(Protocol):
    """A job's root as its list entry shows it (sidecar/sources/lineage.py's RootInfo)."""

    @property
    def uid(self) -> int | None: ...
    @property
    def user(self) -> str | None: ...
    @property
    def cwd(self) -> str | None: ...
    @property
    def ancestor_pids(self) -> tuple[int, ...]: ...
    @property
    def slurm_job(self) -> str | None: ...


class ProcessInfo(Protocol):
    """What the OS says of a process at each poll (sidecar/sources/proctree.py's ProcInfo)."""

    @property
    def cmdline(self) -> Sequence[str]: ...
    @property
    def cpu_percent(self) -> float | None: ...
    @property
    def rss_mib(self) -> float | None: ...


class HistorySample(Protocol):
    def as_dict(self) -> Doc: ...


class History(Protocol):
    """A job's recent samples and events (sidecar/poll/history.py's History)."""

    def samples(self, since: float | None = None) -> Sequence[HistorySample]: ...
    def events(self, since: float | None = None) -> list[Doc]: ...
