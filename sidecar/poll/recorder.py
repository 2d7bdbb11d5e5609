"""The recorder: every run the sidecar watches, kept in the runs ledger (issue 40) so that its
history outlives the sidecar.

A ``RunRecorder`` is fed once per poll of its job (``observe``) with what the poll has: the facts,
the settled verdict, the job's target and placement, the history sample. It keeps the run's
identity (made at first sight; a field not known then is filled in once known), its setup, the
current minute (common.runs.MinuteFigures, added up by poll/run_figures.py), its verdict changes
and its totals, and hands the ledger a ``LedgerBatch`` when one is due (WRITE_EVERY_S, a minute's
end, a verdict change, the end). A ``Recording`` is what the recorders of one sidecar share: the
ledger (any ``RunSink``), this host's name and boot, and the batches due this poll, written in one
transaction (discovery writes its jobs' batches once per poll: ``batched``).

A sidecar that starts under a running job whose run the ledger has (the same key: the job on the
same boot) continues it: totals and the current minute go on from what was recorded, and the
minutes before are handed to the poller's history (``prefill``) so that /history shows them.

Recording costs a poll little: what a poll's processes and GPUs give is made once for the very same
objects (a steady job's facts are the same objects poll after poll), and a write is one ledger
transaction every WRITE_EVERY_S.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Final, Protocol

from sidecar.common.runs import (
    LedgerBatch,
    MinuteFigures,
    RunDetail,
    RunIdentity,
    RunRecord,
    RunSetup,
    RunTotals,
    VerdictChange,
    run_key,
)
from sidecar.documents.bounds import MAX_TEXT_CHARS, clip_opt
from sidecar.poll.run_figures import (
    MAX_GAP_POLLS,
    MINUTE_S,
    GpuPart,
    MinuteSums,
    check_period_s,
    gpu_part,
    minute_start,
    poll_figures,
    run_setup,
)
from sidecar.sources.boot import boot_id
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.interfaces import host_name
from sidecar.verdict import Facts, Rules, Verdict

if TYPE_CHECKING:
    from sidecar.poll.collect import TargetInfo
    from sidecar.poll.history import Sample
    from sidecar.poll.placement import Placement

# A run's batch is written at least this often while it runs (and at once at a minute's end, a
# verdict change, a change of its setup and its end): what a sidecar killed outright loses at most.
WRITE_EVERY_S: Final = 10.0
# The ledger's upkeep (old minutes merged, old runs dropped: the ledger's maintain) this often, the
# first time this long after the first write (not in a sidecar's first polls, whose pages wait).
MAINTAIN_EVERY_S: Final = 3600.0
MAINTAIN_FIRST_AFTER_S: Final = 60.0
# What a run keeps to write again while the ledger fails (a full disk): the oldest go first.
MAX_UNSENT_MINUTES: Final = 120
MAX_UNSENT_CHANGES: Final = 256
MAX_COMMAND_ARGS: Final = 64  # of the root's command line, each clipped to MAX_TEXT_CHARS


class RunSink(Protocol):
    """Where runs are kept: sources/ledger's Ledger (SQLite), or a test's own."""

    @property
    def fault(self) -> object | None:
        """Why the ledger is not recording now (the Ledger's LedgerFault: its ``text``), None while
        its writes succeed."""
        ...

    def write(self, batch: LedgerBatch) -> bool | None:
        """One transaction, never raising: False (or a fault) when the batch was dropped."""
        ...

    def detail(self, key: str) -> RunDetail | None: ...
    def maintain(self, now_unix_s: float) -> object: ...

    def forget(self, key: str) -> bool | None:
        """Deletes the run `key` whole, never raising."""
        ...


class EnergyReading(Protocol):
    """A GPU of the poll's NVML snapshot (sources.nvml's GpuInfo): its energy counter."""

    @property
    def index(self) -> int: ...
    @property
    def energy_mj(self) -> int | None: ...


class Recording:
    """What the recorders of one sidecar share: the ledger, this host, the batches due this poll.
    ``batched``: the batches wait for ``flush`` (discovery, once per poll for all its jobs); else
    each recorder's is written when it is due."""

    def __init__(
        self, sink: RunSink, *, host: HostPaths = HOST, batched: bool = False, period_s: float = MINUTE_S
    ) -> None:
        self.sink = sink
        self.host = host
        self.batched = batched
        # A ledger row's span (run_figures.MINUTE_S; tests shorten it: --runs-period).
        self.period_s = check_period_s(period_s)
        self.host_name = clip_opt(host_name(), MAX_TEXT_CHARS) or "localhost"
        self.boot_id = boot_id(host=host)
        self._queue: list[tuple[RunRecorder, LedgerBatch]] = []
        self._maintain_at: float | None = None  # when the next upkeep is due (set at the first write)

    @property
    def fault(self) -> str | None:
        """The ledger's fault as one line (its text), None while it records."""
        try:
            fault = self.sink.fault
        except Exception as exc:  # noqa: BLE001 -- a sink that cannot say is a sink that failed
            return f"{type(exc).__name__}: {exc}"
        if fault is None:
            return None
        text = getattr(fault, "text", None)
        return text if isinstance(text, str) else str(fault)

    def recorder(self, rules: Rules | None = None, interval_s: float | None = None) -> RunRecorder:
        return RunRecorder(self, rules, interval_s)

    def queue(self, recorder: RunRecorder, batch: LedgerBatch, now_unix_s: float) -> None:
        self._queue.append((recorder, batch))
        if not self.batched:
            self.flush(now_unix_s)

    def forget(self, recorder: RunRecorder) -> None:
        """``recorder``'s run was never a run of its own: its batches waiting here dropped, and what
        the ledger holds of it deleted."""
        self._queue = [(r, b) for r, b in self._queue if r is not recorder]
        if recorder.identity is not None:
            try:
                self.sink.forget(recorder.identity.key)
            except Exception:  # noqa: BLE001 -- the sink promises not to raise; recording must never stop a poll
                pass

    def flush(self, now_unix_s: float) -> None:
        """Writes the batches due, as one; tells each recorder whether the ledger took it."""
        if not self._queue:
            return
        queued, self._queue = self._queue, []
        batch = LedgerBatch(
            runs=tuple(r for _, b in queued for r in b.runs),
            minutes=tuple(m for _, b in queued for m in b.minutes),
            changes=tuple(c for _, b in queued for c in b.changes),
        )
        try:
            ok = self.sink.write(batch) is not False and self.sink.fault is None
        except Exception:  # noqa: BLE001 -- the sink promises not to raise; recording must never stop a poll
            ok = False
        for recorder, _ in queued:
            recorder.sent(ok)
        if self._maintain_at is None:
            self._maintain_at = now_unix_s + MAINTAIN_FIRST_AFTER_S
        elif now_unix_s >= self._maintain_at:
            self._maintain_at = now_unix_s + MAINTAIN_EVERY_S
            try:
                self.sink.maintain(now_unix_s)
            except Exception:  # noqa: BLE001 -- upkeep that fails is tried again in an hour
                pass


class RunRecorder:
    """One job's run, fed once per poll (``observe``); see the module's docstring."""

    def __init__(
        self, recording: Recording, rules: Rules | None = None, interval_s: float | None = None
    ) -> None:
        self.recording = recording
        # The poller's interval: a poll's share of the held GPU-seconds is at most MAX_GAP_POLLS of it.
        self.interval_s = interval_s
        self.idle_util_pct = (rules or Rules()).idle_util_pct
        self.identity: RunIdentity | None = None
        self.setup = RunSetup()
        self.minute: MinuteSums | None = None
        self.prefill: tuple[MinuteFigures, ...] = ()  # minutes recorded before this sidecar, at first sight
        self.ended_unix_s: float | None = None
        self.exit_code: int | None = None
        self._unsent_minutes: list[MinuteFigures] = []
        self._unsent_changes: list[VerdictChange] = []
        self._last_change: tuple[str, tuple[str, ...]] | None = None
        self._last_verdict: Verdict | None = None
        self._part: GpuPart | None = None
        self._placed: tuple[object, ...] | None = None
        self._facts: Facts | None = None  # the last poll's: what the setup is made of at a write
        self._most_processes = 0
        self._last_poll_s: float | None = None
        self._last_write_s: float | None = None
        self._last_steps: int | None = None
        self._energy_mj: dict[int, int] = {}
        self._due = False
        self._forgotten = False  # forget(): nothing of the run is written any more
        self._sent_upto = (0, 0)  # the finished minutes and changes the batch queued last holds
        # RunTotals, kept as they grow
        self._steps: int | None = None
        self._held_s = self._busy_s = 0.0
        self._energy_j: float | None = None
        self._mem_peak: float | None = None
        self._power_peak: float | None = None
        self._temperature_peak: float | None = None
        self._last_seen_s: float | None = None

    # -- first sight ------------------------------------------------------------------------------
    def begin(self, now: float, target: TargetInfo) -> tuple[MinuteFigures, ...]:
        """The run's identity at first sight, and what the ledger has of it already (a sidecar
        restarted under a running job): the minutes recorded before, for the poller's history."""
        key = run_key(self.recording.boot_id, target.job_id)
        started = target.create_time if target.create_time is not None else now
        self.identity = RunIdentity(
            key=key, job_id=target.job_id, host=self.recording.host_name, started_unix_s=started
        )
        self._identify(target, None)
        self._due = True
        try:
            detail = self.recording.sink.detail(key)
        except Exception:  # noqa: BLE001 -- a ledger that cannot answer: the run starts afresh
            detail = None
        if detail is not None:
            self._resume(detail, now)
        return self.prefill

    def _resume(self, detail: RunDetail, now: float) -> None:
        rec = detail.record
        assert self.identity is not None
        self.identity = _filled(rec.identity, self.identity)
        self.setup = rec.setup
        t = rec.totals
        self._steps, self._held_s, self._busy_s, self._energy_j = (
            t.steps,
            t.gpu_held_s,
            t.gpu_busy_s,
            t.energy_j,
        )
        self._mem_peak, self._power_peak, self._temperature_peak = (
            t.gpu_mem_peak_mib,
            t.power_peak_w,
            t.temperature_peak_c,
        )
        if detail.timeline:
            last = detail.timeline[-1]
            self._last_change = (last.status, last.warnings)
        period_s = self.recording.period_s
        current = minute_start(now, period_s)
        minutes = detail.minutes
        row = minutes[-1] if minutes else None
        if row is not None and row.start_unix_s == current and row.minutes == 1 and row.span_s == period_s:
            # This minute goes on from its recorded sums; its recorded part is shown all the same
            # (a sidecar restarted 40 s into a minute shows those 40 s).
            self.minute = MinuteSums.resumed(minutes[-1])
        self.prefill = tuple(m for m in minutes if m.start_unix_s < now)

    def _identify(self, target: TargetInfo, placement: Placement | None) -> None:
        """Fills in what the identity did not know yet (the root's owner, the job's key, its pod):
        looked at again only when what says it changed (its values: the placement makes its
        objects afresh when its payloads change)."""
        assert self.identity is not None
        root = target.root
        dist = placement.distributed if placement is not None else None
        pod = placement.pod if placement is not None else None
        seen = (
            root,
            None if dist is None else (dist.job_key, dist.world_size),
            None if pod is None else (pod.namespace, pod.pod),
        )
        if seen == self._placed:
            return
        self._placed = seen
        ident = self.identity
        found = RunIdentity(
            key=ident.key,
            job_id=ident.job_id,
            host=ident.host,
            started_unix_s=ident.started_unix_s,
            uid=root.uid if root is not None else None,
            user=clip_opt(root.user) if root is not None else None,
            command=tuple(
                clip_opt(a, MAX_TEXT_CHARS) or "" for a in (target.cmdline or ())[:MAX_COMMAND_ARGS]
            ),
            cwd=clip_opt(root.cwd, MAX_TEXT_CHARS) if root is not None else None,
            distributed_key=dist.job_key if dist is not None else None,
            world_size=dist.world_size if dist is not None else None,
            slurm_job=root.slurm_job if root is not None else None,
            pod=f"{pod.namespace}/{pod.pod}" if pod is not None and pod.namespace and pod.pod else None,
        )
        merged = _filled(ident, found)
        if merged != ident:
            self.identity = merged
            self._due = True

    # -- each poll --------------------------------------------------------------------------------
    def observe(
        self,
        now: float,
        facts: Facts,
        verdict: Verdict,
        target: TargetInfo,
        placement: Placement | None,
        sample: Sample,
        other_processes: Mapping[int, int],
        devices: Sequence[EnergyReading] = (),
    ) -> None:
        """One poll of the job; the poll that finds the target gone is its end."""
        if self.ended_unix_s is not None:
            return
        if self.identity is None:
            self.begin(now, target)
        self._identify(target, placement)
        self._setup(facts)
        period_s = self.recording.period_s
        minute_s = minute_start(now, period_s)
        if self.minute is None or self.minute.start_unix_s != minute_s:
            if self.minute is not None:
                self._keep_unsent(self.minute.figures())
                self._due = True
            self.minute = MinuteSums(minute_s, period_s)
        dt = 0.0 if self._last_poll_s is None else now - self._last_poll_s
        self._add(now, facts, sample, other_processes, devices, max(0.0, dt))
        self._change(now, verdict)
        if not facts.target_alive:
            self.ended_unix_s = now
            self._due = True
        if self._due or self._last_write_s is None or now - self._last_write_s >= WRITE_EVERY_S:
            self._write(now)

    def _add(
        self,
        now: float,
        facts: Facts,
        sample: Sample,
        others: Mapping[int, int],
        devices: Sequence[EnergyReading],
        dt: float,
    ) -> None:
        if self.interval_s is not None:
            dt = min(dt, self.interval_s * MAX_GAP_POLLS)
        self._last_poll_s = self._last_seen_s = now
        part = self._part = gpu_part(self._part, facts, others, self.idle_util_pct)
        recent = sample.recent
        cpu, rss, _, rate = sample.job
        figures = poll_figures(part, rate, recent.tree_gpu_mem_mib, cpu, rss)
        minute = self.minute
        assert minute is not None
        minute.add(figures, part, dt)
        self._held_s += dt * part.held
        self._busy_s += dt * part.busy
        self._mem_peak = _peak(self._mem_peak, minute.mem_peak)
        self._power_peak = _peak(self._power_peak, minute.power_peak)
        self._temperature_peak = _peak(self._temperature_peak, minute.temperature_peak)
        self._count_steps(minute, recent.train_steps)
        if devices:
            self._count_energy(minute, part, devices)

    def _count_steps(self, minute: MinuteSums, steps: int | None) -> None:
        """The minute's steps: the increase of the job's training steps since the last poll. A
        count that went down (a process restarted) starts again from there; steps before the first
        count are not the minute's."""
        if steps is None:
            return
        last = self._last_steps
        grown = steps - last if last is not None and steps >= last else 0
        self._last_steps = steps
        minute.steps = (minute.steps or 0) + grown
        self._steps = (self._steps or 0) + grown

    def _count_energy(self, minute: MinuteSums, part: GpuPart, devices: Sequence[EnergyReading]) -> None:
        """The increase of NVML's energy counter on the job's GPUs since the last poll (a GPU that
        another job shares counts whole: NVML cannot split it). A counter that went down (the
        driver reloaded) starts again from there."""
        indices = part.indices
        added: float | None = None
        for d in devices:
            mj = d.energy_mj
            if mj is None or d.index not in indices:
                continue
            last = self._energy_mj.get(d.index)
            if last is not None:
                added = (added or 0.0) + (mj - last) / 1000.0 if mj >= last else (added or 0.0)
            self._energy_mj[d.index] = mj
        if added is not None:
            minute.energy_j = (minute.energy_j or 0.0) + added
            self._energy_j = (self._energy_j or 0.0) + added

    def _setup(self, facts: Facts) -> None:
        """The processes counted (the most seen); the rest of the setup is made at a write, of the
        last poll's facts (it changes rarely, and a poll of 64 processes need not look at each)."""
        processes = facts.processes
        if self._facts is None or self._facts.processes is not processes:
            live = len(processes) - sum(1 for p in processes if p.exited)
            self._most_processes = max(self._most_processes, live)
        self._facts = facts

    def _change(self, now: float, verdict: Verdict) -> None:
        if verdict is self._last_verdict:
            return
        self._last_verdict = verdict
        key = (verdict.status, tuple(sorted({w.code for w in verdict.warnings})))
        if key != self._last_change:
            self._last_change = key
            self._unsent_changes.append(VerdictChange(now, *key))
            del self._unsent_changes[:-MAX_UNSENT_CHANGES]
            self._due = True

    def _keep_unsent(self, m: MinuteFigures) -> None:
        self._unsent_minutes.append(m)
        del self._unsent_minutes[:-MAX_UNSENT_MINUTES]

    # -- writing ----------------------------------------------------------------------------------
    def record(self) -> RunRecord:
        assert self.identity is not None
        last = self._last_change
        seen = self._last_seen_s
        end = self.ended_unix_s if self.ended_unix_s is not None else seen
        return RunRecord(
            identity=self.identity,
            setup=self.setup,
            totals=RunTotals(
                wall_s=max(0.0, (end or self.identity.started_unix_s) - self.identity.started_unix_s),
                steps=self._steps,
                gpu_held_s=self._held_s,
                gpu_busy_s=self._busy_s,
                energy_j=self._energy_j,
                gpu_mem_peak_mib=self._mem_peak,
                power_peak_w=self._power_peak,
                temperature_peak_c=self._temperature_peak,
            ),
            last_seen_unix_s=seen,
            ended_unix_s=self.ended_unix_s,
            exit_code=self.exit_code,
            status=last[0] if last is not None else None,
            warnings=last[1] if last is not None else (),
        )

    def _write(self, now: float) -> None:
        assert self.identity is not None
        if self._forgotten:
            return
        if self._facts is not None:
            self.setup = run_setup(self._facts, self.setup, self._most_processes)
        key = self.identity.key
        minutes = [*self._unsent_minutes, *((self.minute.figures(),) if self.minute is not None else ())]
        batch = LedgerBatch(
            runs=(self.record(),),
            minutes=tuple((key, m) for m in minutes),
            changes=tuple((key, c) for c in self._unsent_changes),
        )
        self._due = False
        self._last_write_s = now
        self._sent_upto = (len(self._unsent_minutes), len(self._unsent_changes))
        self.recording.queue(self, batch, now)

    def sent(self, ok: bool) -> None:
        """The ledger took (``ok``) the last batch: its finished minutes and changes are kept no more."""
        if ok:
            minutes, changes = self._sent_upto
            del self._unsent_minutes[:minutes]
            del self._unsent_changes[:changes]
            self._sent_upto = (0, 0)

    def close(self) -> None:
        """What the polls since the last write added, written (the sidecar stops): a sidecar that
        stops loses nothing of its run; one killed outright, at most WRITE_EVERY_S."""
        last = self._last_poll_s
        if (
            self.identity is not None
            and last is not None
            and last != self._last_write_s
            and not self._forgotten
        ):
            self._write(last)

    def forget(self) -> None:
        """The job was never one of its own (discovery found it through a process of another job's,
        a DataLoader worker whose trainer started its probe later): its run is deleted from the
        ledger and nothing more of it is written."""
        self._forgotten = True
        self.recording.forget(self)

    def set_exit_code(self, code: int | None, now: float) -> None:
        """The job's exit code, where the caller knows it (``dsh-sidecar run``: its child's)."""
        if self.identity is None or code is None:
            return
        self.exit_code = code
        if self.ended_unix_s is None:
            self.ended_unix_s = now
        self._write(now)


def _peak(peak: float | None, v: float | None) -> float | None:
    if v is None:
        return peak
    return v if peak is None or v > peak else peak


def _filled(ident: RunIdentity, more: RunIdentity) -> RunIdentity:
    """``ident`` with the fields it does not know taken from ``more``."""
    changes = {
        name: getattr(more, name)
        for name in ("uid", "user", "cwd", "distributed_key", "world_size", "slurm_job", "pod")
        if getattr(ident, name) is None and getattr(more, name) is not None
    }
    if not ident.command and more.command:
        changes["command"] = more.command
    return replace(ident, **changes) if changes else ident
