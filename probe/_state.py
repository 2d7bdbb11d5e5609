"""The probe's per-process state: the one ``Probe`` (``PROBE``), its segment, its publisher thread,
and what a fork and the process's exit do to them.

``Probe`` composes the rest: ``Journal`` (errors, events, warnings given: probe/_journal.py),
``Models`` (registration, DataLoader timing, what each tick updates: probe/_models.py) and
``Publisher`` (the payload and when it is written: probe/_publisher.py), each imported and created
when first used (``_load_parts``): ``import probe`` creates the ``Probe`` alone. Public calls take ``lock``;
the forward hooks never do. After a fork the child gets fresh state (its own lock, no writer, no
thread, counters reset) from the ``os.register_at_fork`` handler, so it can never write into its
parent's segment; it opens its own segment lazily.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from probe._journal import ProbeWarning
from probe._workers import set_worker_starter
from probe_wire.header import DEFAULT_SEGMENT_BYTES, MAX_SEGMENT_BYTES, MIN_SEGMENT_BYTES, SegmentError

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

    from probe._journal import Journal
    from probe._models import Models
    from probe._publisher import Publisher
    from probe.hooks import ModelRecord
    from probe_wire.writer import SegmentWriter

__all__ = ["PROBE", "Probe", "ProbeWarning"]

ENV_ENABLE = "DSH_PROBE"
ENV_INTERVAL_S = "DSH_PROBE_INTERVAL_S"
ENV_SEGMENT_BYTES = "DSH_PROBE_SEGMENT_BYTES"
DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.05
# A forked child waits this long before opening its own segment: children that exec or exit at once
# (subprocess helpers, short pool tasks) never create one.
CHILD_GRACE_S = 0.25


def _env_float(name: str, default: float, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    if value != value:  # NaN
        return default
    return min(high, max(low, value))


class Probe:
    # The parts a model, an event or a publish needs: set by _load_parts on first use (read before
    # then, they load through __getattr__), so that ``import probe`` imports none of them.
    journal: Journal
    models: Models
    publisher: Publisher

    def __init__(self) -> None:
        self.enabled = os.environ.get(ENV_ENABLE, "1").strip().lower() not in ("0", "false", "no", "off")
        self.disabled_reason: str | None = None if self.enabled else f"{ENV_ENABLE}=0"
        self.interval_s = _env_float(ENV_INTERVAL_S, DEFAULT_INTERVAL_S, MIN_INTERVAL_S, 3600.0)
        self.segment_bytes = int(
            _env_float(ENV_SEGMENT_BYTES, DEFAULT_SEGMENT_BYTES, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES)
        )
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.pid = os.getpid()
        self.writer: SegmentWriter | None = None
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.forked = False
        self.mp_finalizer_pid: int | None = None
        self.swept: list[int] = []  # pids whose dead segments this process's probe removed at start
        # A DataLoader worker starts the probe through _workers.ProbeWorkerInit, which cannot import
        # us for it (we import it): this process's Probe is the one it starts.
        set_worker_starter(self.activate_worker)
        if self.enabled:
            os.register_at_fork(after_in_child=self._after_fork_in_child)
            atexit.register(self.shutdown, True)

    # -- the parts, loaded on first use ------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Python calls this only for an attribute not set: here, a part not loaded yet.
        if name not in ("journal", "models", "publisher"):
            raise AttributeError(f"'Probe' object has no attribute {name!r}")
        self._load_parts(everything=name != "journal")
        return self.__dict__[name]

    def _loaded(self, part: str = "publisher") -> bool:
        return part in self.__dict__

    def _load_parts(self, everything: bool = True) -> None:
        """Import and create the journal and, with ``everything``, the models and the publisher. Always
        on the caller's thread, never the publisher's: an import in flight there when the process
        forks would leave its module's lock held in the child (the publisher only starts once loaded)."""
        with self.lock:
            if not self._loaded("journal"):
                from probe._journal import Journal

                self.journal = Journal()  # first: recording an error needs it alone
            if everything and not self._loaded():
                from probe._models import Models
                from probe._publisher import Publisher

                self.models = Models(self.journal, self._request_publish)
                self.publisher = Publisher(self.journal, self.models)

    # -- what the collaborators hold, under the names callers and tests read -------------------------
    @property
    def records(self) -> list[ModelRecord]:
        return self.models.records

    @property
    def sync_counter(self) -> Any:
        return self.models.sync_counter

    @property
    def errors(self) -> Any:
        return self.journal.errors

    @property
    def events(self) -> Any:
        return self.journal.events

    @property
    def warned(self) -> set[str]:
        return self.journal.warned

    @property
    def publishes(self) -> int:
        return self.publisher.publishes

    # -- bookkeeping --------------------------------------------------------------------------------
    def record_error(self, where: str, error: BaseException | str) -> None:
        self.journal.record_error(where, error)

    def _request_publish(self) -> None:
        self.models.device_dirty = True
        self.wake.set()

    def _check_pid(self) -> None:
        # A fork that bypassed os.fork (a C extension calling fork() directly) skips our handler; its
        # inherited lock may be held by a thread that does not exist here, so check before locking.
        if os.getpid() != self.pid:
            self._after_fork_in_child()

    # -- activation -----------------------------------------------------------------------------------
    def _activate_locked(self, start_thread: bool = True) -> bool:
        """Open this process's segment (once) and start its publisher; False when the probe is off."""
        if self.writer is not None:
            return True
        if not self.enabled:
            return False
        self._load_parts()
        from probe_wire.writer import SegmentWriter

        try:
            self.writer = SegmentWriter(size_bytes=self.segment_bytes)
        except (SegmentError, OSError) as e:
            from probe_wire.names import segment_name  # the writer's import: loaded

            # Turn the whole probe off: a process without a segment has nothing to publish to.
            self.enabled = False
            self.disabled_reason = f"cannot create shared-memory segment {segment_name(os.getpid())}: {e}"
            self.journal.warn_once("segment", f"dsh probe disabled: {self.disabled_reason}")
            return False
        if self.writer.fallback_reason:  # its name was squatted: it still publishes, under another
            self.journal.warn_once("segment-name", f"dsh probe: {self.writer.fallback_reason}")
        self._register_mp_finalizer()
        if start_thread:
            self._start_thread_locked(first_delay_s=None)
        return True

    def _register_mp_finalizer(self) -> None:
        # multiprocessing's forked children leave through os._exit, which skips atexit; they do run
        # multiprocessing's own finalizers first, so the segment is unlinked there too.
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is None or self.mp_finalizer_pid == self.pid:
            return
        try:
            mp_util.Finalize(None, self.shutdown, args=(True,), exitpriority=100)
            self.mp_finalizer_pid = self.pid
        except Exception as e:  # noqa: BLE001 -- atexit still covers the common case
            self.record_error("finalizer", e)

    def _start_thread_locked(self, first_delay_s: float | None) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        self.stopping = False
        self.thread = threading.Thread(
            target=self._run, args=(first_delay_s,), name="dsh-probe-publisher", daemon=True
        )
        self.thread.start()

    def _run(self, first_delay_s: float | None) -> None:
        my_pid = os.getpid()
        if first_delay_s is None and not self.forked:
            # A job ended by SIGTERM or SIGKILL leaves its processes' segments behind: the first probe
            # of this user's next job removes those whose writers are provably dead (once, off the
            # training thread; only this user's files, never another PID namespace's).
            # Loaded already (the writer imports it, on the caller's thread): this import only looks
            # it up, and never holds an import lock across a fork.
            from probe_wire.cleanup import FINAL_SPARED_S, sweep_dead_segments

            try:
                # Not the final publishes of a moment ago: a sibling rank's that ended before this
                # one's probe started is its job's final state, which a monitor has yet to read.
                self.swept = sweep_dead_segments(
                    skip={my_pid}, owner_uid=os.getuid(), spare_finals_s=FINAL_SPARED_S
                )
            except Exception as e:  # noqa: BLE001 -- recorded; the publisher starts regardless
                self.record_error("sweep", e)
        if first_delay_s is not None:
            # A forked child: open our own segment only if we are still alive (and not exec'd) by then.
            if self.wake.wait(first_delay_s) and self.stopping:
                return
            with self.lock:
                if self.stopping or os.getpid() != my_pid or not self._activate_locked(start_thread=False):
                    return
                self._publish_locked(periodic=False)
        while True:
            self.wake.wait(self.interval_s)
            self.wake.clear()
            if self.stopping or os.getpid() != my_pid:
                return
            try:
                with self.lock:
                    if self.writer is None:
                        return
                    self._publish_locked(periodic=True)
            except Exception as e:  # noqa: BLE001 -- a daemon thread that dies silently is worse
                self.record_error("publisher", e)

    # -- fork and exit ----------------------------------------------------------------------------------
    def _after_fork_in_child(self) -> None:
        was_active = self.writer is not None
        old_writer = self.writer
        # The parent's lock may have been held by its publisher thread at the fork: never reuse it.
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.pid = os.getpid()
        self.writer = None
        self.thread = None
        self.stopping = False
        self.forked = True
        # Only what is loaded (nothing is imported in a fork's child): unloaded, there is nothing to reset.
        if self._loaded("journal"):
            self.journal.reset_after_fork()
        if self._loaded():
            self.models.reset_after_fork()
            self.publisher.reset_after_fork()
        breakdown = sys.modules.get("probe._breakdown")  # the step clock, loaded by a model or a framework
        if breakdown is not None:
            breakdown.CLOCK.reset()
        if old_writer is not None:
            try:
                old_writer.detach()  # unmaps our copy of the mapping; the parent's stays intact
            except Exception:  # noqa: BLE001 -- nothing to report to yet: we have no segment
                pass
        if was_active and self.enabled:
            self._start_thread_locked(first_delay_s=CHILD_GRACE_S)

    def shutdown(self, at_exit: bool = False) -> None:
        """Stop publishing and close this process's segment; ``at_exit``: the process is ending
        (atexit, multiprocessing's finalizer), and a last publish that named models stays for a
        sidecar whose next poll comes after the end; otherwise the segment is unlinked."""
        self.stopping = True
        self.wake.set()
        if not self._loaded():  # never activated: no segment, no publisher thread, nothing counted
            return
        locked = self.lock.acquire(timeout=1.0)
        try:
            if self.sync_counter.state != "off" and os.getpid() == self.pid:
                self.sync_counter.release(sys.modules.get("torch"))
            if self.writer is not None and os.getpid() == self.pid and locked:
                # The final counts: without this publish the segment keeps what the last periodic
                # tick saw, up to an interval behind. Readers still holding the file read it after
                # the close below (probe_wire.reader: a closed segment's last payload).
                try:
                    self._publish_locked(periodic=True)
                except Exception:  # noqa: BLE001 -- the close below matters more
                    pass
            writer, self.writer = self.writer, None
            if writer is not None and os.getpid() == self.pid:
                # A process whose last publish named models leaves it behind, marked closed, for a
                # sidecar whose next poll comes after this process's end: the job's final state.
                keep = at_exit and self.publisher.last_named_models(writer)
                writer.close(unlink=not keep, keep_final=keep)
        except Exception:  # noqa: BLE001 -- exiting: there is nobody left to tell
            pass
        finally:
            if locked:
                self.lock.release()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            # Joined outside the lock (the thread may be waiting for it), so that a later activation
            # in this process starts a fresh publisher instead of finding this one on its way out.
            thread.join(timeout=1.0)

    # -- publishing -----------------------------------------------------------------------------------
    def build_payload_locked(self) -> dict[str, Any]:
        return self.publisher.build_payload(self.forked)

    def _publish_locked(self, periodic: bool, traverse: bool = False) -> None:
        if self.writer is not None:
            self.publisher.publish(self.writer, self.forked, periodic, traverse)

    # -- public operations (wrapped by probe/__init__.py) ------------------------------------------------
    def register(self, model: Any, name: str | None = None, loader: Any = None, syncs: bool = False) -> Any:
        if not self.enabled:
            return model
        self._check_pid()
        with self.lock:
            if not self._activate_locked():
                return model
            try:
                self.models.register(model, name, loader, syncs)
            except Exception as e:  # noqa: BLE001 -- register() never raises into the training script
                self.record_error("register", e)
                self.journal.warn_once("register-failed", f"dsh probe: register() failed: {e}")
            self._publish_locked(periodic=False, traverse=True)
        return model

    def unregister(self, model: Any) -> bool:
        if not self.enabled:
            return False
        self._check_pid()
        with self.lock:
            removed = self.models.unregister(model)
            if removed:
                self._publish_locked(periodic=False)
            return removed

    def event(self, name: Any) -> None:
        if not self.enabled:
            return
        self._check_pid()
        with self.lock:
            if not self._activate_locked():
                return
            self.journal.event(name)
            self._publish_locked(periodic=False, traverse=True)

    def refresh(self) -> None:
        if not self.enabled:
            return
        self._check_pid()
        with self.lock:
            if self.writer is None:
                return
            self._publish_locked(periodic=False, traverse=True)

    def activate(self) -> bool:
        if not self.enabled:
            return False
        self._check_pid()
        with self.lock:
            if not self._activate_locked():
                return False
            if self.publishes == 0:
                self._publish_locked(periodic=False, traverse=True)
            return True

    def activate_worker(self, worker_id: int) -> None:
        if not self.enabled:
            return
        self._check_pid()
        with self.lock:
            if self._activate_locked():
                self._publish_locked(periodic=False)

    def snapshot(self) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        self._check_pid()
        with self.lock:
            return self.build_payload_locked()

    def status(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "reason": self.disabled_reason,
            "segment": self.writer.name if self.writer is not None else None,
            "interval_s": self.interval_s,
            "models": len(self.records) if self._loaded() else 0,
            "publishes": self.publishes if self._loaded() else 0,
        }


PROBE = Probe()
