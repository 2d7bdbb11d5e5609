"""The probe's per-process state: registered models, events, errors, the segment and its publisher.

One ``Probe`` per process (``PROBE``). Public calls take ``lock``; the forward hooks never do. After a
fork the child gets fresh state (its own lock, no writer, no thread, counters reset) from the
``os.register_at_fork`` handler, so it can never write into its parent's segment; it opens its own
segment lazily.
"""

from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time
import warnings
import weakref

from probe import _settings, _steps, facts
from probe._breakdown import CLOCK
from probe._syncs import SyncCounter
from probe.hooks import LoaderTimer, ModelRecord, ProbeWorkerInit
from probe_wire.cleanup import sweep_dead_segments
from probe_wire.header import DEFAULT_SEGMENT_BYTES, MAX_SEGMENT_BYTES, MIN_SEGMENT_BYTES, SegmentError
from probe_wire.names import segment_name
from probe_wire.schema import (
    MAX_ERRORS,
    MAX_EVENTS,
    MAX_MODELS,
    MODEL_COLLECTED,
    PUBLISH_FAILED,
    empty_payload,
)
from probe_wire.writer import SegmentWriter

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

ENV_ENABLE = "DSH_PROBE"
ENV_INTERVAL_S = "DSH_PROBE_INTERVAL_S"
ENV_SEGMENT_BYTES = "DSH_PROBE_SEGMENT_BYTES"
DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.05
# Collected models whose last entries stay in the payload (Probe.finished), the newest.
MAX_FINISHED_MODELS = 4
# Every this often the publisher walks all parameters even if the first one did not move, to catch
# a submodule moved on its own.
FULL_TRAVERSAL_S = 30.0
# A forked child waits this long before opening its own segment: children that exec or exit at once
# (subprocess helpers, short pool tasks) never create one.
CHILD_GRACE_S = 0.25
MESSAGE_MAX_CHARS = 512
EVENT_NAME_MAX_CHARS = 256


class ProbeWarning(UserWarning):
    """The probe could not do something; it carries on (or turns itself off) without raising."""


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
        self.records: list[ModelRecord] = []
        # The last payload entries of models that made forward calls and were then collected (a
        # rank's model when its worker function returns): what ran, for the job's final state.
        self.finished: collections.deque = collections.deque(maxlen=MAX_FINISHED_MODELS)
        self.dist_rank: dict | None = None  # rank, world_size, dist_backend once a process group ran
        self.loader_timers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.events: collections.deque = collections.deque(maxlen=MAX_EVENTS)
        self.errors: collections.deque = collections.deque(maxlen=MAX_ERRORS)
        self.warned: set[str] = set()
        self.device_dirty = False
        self.publishes = 0
        # What the last publish said (less its time) and through which writer: a periodic tick with
        # nothing new leaves the segment alone, so its seq stays and readers skip it.
        self.last_body: tuple[object, dict] | None = None
        self.last_traversal_mono = 0.0
        self.mp_finalizer_pid: int | None = None
        self.swept: list[int] = []  # pids whose dead segments this process's probe removed at start
        self.sync_counter = SyncCounter()
        if self.enabled:
            os.register_at_fork(after_in_child=self._after_fork_in_child)
            atexit.register(self.shutdown, True)

    # -- bookkeeping --------------------------------------------------------------------------------
    def warn_once(self, key: str, message: str) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        warnings.warn(message, ProbeWarning, stacklevel=4)

    def record_error(self, where: str, error: BaseException | str) -> None:
        if isinstance(error, BaseException):
            message = f"{type(error).__name__}: {error}"
        else:
            message = str(error)
        self.errors.append({"time": time.time(), "where": where[:64], "message": message[:MESSAGE_MAX_CHARS]})

    def _request_publish(self) -> None:
        self.device_dirty = True
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
        try:
            self.writer = SegmentWriter(size_bytes=self.segment_bytes)
        except (SegmentError, OSError) as e:
            # Turn the whole probe off: a process without a segment has nothing to publish to.
            self.enabled = False
            self.disabled_reason = f"cannot create shared-memory segment {segment_name(os.getpid())}: {e}"
            self.warn_once("segment", f"dsh probe disabled: {self.disabled_reason}")
            return False
        if self.writer.fallback_reason:  # its name was squatted: it still publishes, under another
            self.warn_once("segment-name", f"dsh probe: {self.writer.fallback_reason}")
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
            try:
                self.swept = sweep_dead_segments(skip={my_pid}, owner_uid=os.getuid())
            except Exception as e:  # noqa: BLE001
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
        self.events.clear()
        self.errors.clear()
        self.finished.clear()
        self.dist_rank = None
        self.publishes = 0
        self.last_body = None
        for rec in self.records:
            rec.reset_after_fork()
        CLOCK.reset()
        self.sync_counter.reset_after_fork()
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
                keep = at_exit and bool(
                    self.last_body and self.last_body[0] is writer and self.last_body[1].get("models")
                )
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
    def build_payload_locked(self) -> dict:
        now = time.time()
        torch = sys.modules.get("torch")
        payload = empty_payload()
        payload.update(facts.identity())
        try:
            who = self._remembered_rank(facts.role(self.forked))
        except Exception as e:  # noqa: BLE001 -- one bad fact must not hide the others
            self.record_error("role", e)
            who = {}
        payload.update(who)
        try:
            payload["runtime"] = facts.runtime(torch)
            payload["memory"] = facts.memory(torch)
        except Exception as e:  # noqa: BLE001
            self.record_error("runtime", e)
        is_worker = payload["role"] == "dataloader-worker"
        models = []
        for rec in self.records:
            # A worker forked from the trainer carries copies of its models: they are the trainer's.
            if is_worker and rec.inherited:
                continue
            models.append(self._model_entry(rec))
        models.extend(self.finished)
        payload["models"] = models[:MAX_MODELS]
        payload["loader"] = _steps.worker_loader_label() if is_worker else None
        # tuple() copies in one C call: forward hooks append errors without the lock, and iterating
        # the deque itself while one does would raise "deque mutated during iteration".
        if torch is not None:
            try:
                payload["math"] = _settings.math_settings(torch)
            except Exception as e:  # noqa: BLE001
                self.record_error("math", e)
        steps, syncs = CLOCK.figures()
        payload["steps"] = steps
        payload["syncs_per_step"] = syncs if self.sync_counter.counting() else None
        payload["events"] = [dict(e) for e in tuple(self.events)]
        payload["errors"] = [dict(e) for e in tuple(self.errors)]
        payload["published_at"] = now
        return payload

    def _remembered_rank(self, who: dict) -> dict:
        """A process that ran as a torch.distributed rank stays that rank once its process group is
        destroyed (the last thing a DDP script does, just before its final publish at exit)."""
        if who.get("dist_backend") is not None:
            self.dist_rank = {k: who[k] for k in ("rank", "world_size", "dist_backend")}
        elif self.dist_rank is not None and who.get("role") in ("main", "child"):
            who = {**who, **self.dist_rank, "role": "rank"}
        return who

    @staticmethod
    def _model_entry(rec: ModelRecord, **over: object) -> dict:
        entry = rec.to_payload()
        entry.update(_steps.step_fields(rec.steps))
        entry["shared_memory"] = _steps.shares_memory(rec)
        entry.update(over)
        return entry

    def _note_compiled_locked(self, rec: ModelRecord) -> None:
        # Compiled calls of a frame dynamo compiled are counted after their graph (probe/_compiled.py).
        # Other compiled calls (a module inlined into a compiled parent, torch without the means)
        # cannot be: all we know is that at least one ran since the last look, which is enough to
        # say when the model last ran, and the payload says its count misses them.
        rec.compiled_seen = False
        if rec.compiled_counted:
            rec.compiled_counted = False
            return
        rec.compiled_uncounted = True
        rec.last_forward_time = time.time()
        if not rec.compiled_noted:
            rec.compiled_noted = True
            message = (
                f"model {rec.name!r} runs inside torch.compile (or was exported), where its forward calls cannot be counted; "
                "register the compiled module instead: probe.register(torch.compile(model)), "
                "or call probe.register(model) after torch.compile"
            )
            self.record_error("compile", message)
            # Once per record by compiled_noted. Not warn_once keyed by id(rec): a new model may get
            # the id of a collected one, and its warning would be swallowed.
            warnings.warn(f"dsh probe: {message}", ProbeWarning, stacklevel=3)

    def _traverse_all_locked(self) -> None:
        for rec in self.records:
            try:
                rec.traverse()
            except Exception as e:  # noqa: BLE001
                self.record_error("traverse", e)
        self.last_traversal_mono = time.monotonic()

    def _publish_locked(self, periodic: bool, traverse: bool = False) -> None:
        if self.writer is None:
            return
        now_mono = time.monotonic()
        # register() holds a model weakly: one nobody else kept (probe.register(Net())) is gone.
        for rec in self.records:
            if not rec.alive:
                if rec.forward_calls:
                    self.finished.append(self._model_entry(rec, forward_rate_hz=0.0))
                else:  # registered and dropped unused: probe.register(Net()) with nothing keeping it
                    self.record_error(MODEL_COLLECTED, rec.name)
        self.records = [r for r in self.records if r.alive]
        self._poll_syncs_locked()
        if periodic:
            CLOCK.update(now_mono)
            for rec in self.records:
                rec.update_rate(now_mono)
                rec.armed = True
                if rec.compiled_seen:
                    self._note_compiled_locked(rec)
        dirty, self.device_dirty = self.device_dirty, False
        if not traverse and (dirty or periodic):
            if now_mono - self.last_traversal_mono >= FULL_TRAVERSAL_S:
                traverse = True
            else:
                for rec in self.records:
                    try:
                        if rec.first_device_changed():
                            traverse = True
                            break
                    except Exception as e:  # noqa: BLE001
                        self.record_error("traverse", e)
        if traverse:
            self._traverse_all_locked()
        payload = self.build_payload_locked()
        body = dict(payload)
        del body["published_at"]
        last = self.last_body
        if periodic and last is not None and last[0] is self.writer and last[1] == body:
            return
        try:
            self.writer.publish(payload)
            self.publishes += 1
            self.last_body = (self.writer, body)
        except Exception as e:  # noqa: BLE001 -- recorded; the next publish tries again
            self.record_error("publish", e)
            self._publish_failure_locked(e)

    def _poll_syncs_locked(self) -> None:
        """Sync counting follows the models registered with ``syncs=True`` (see probe/_syncs.py)."""
        counter = self.sync_counter
        if counter.state == "off" and not any(r.syncs for r in self.records):
            return
        try:
            torch = sys.modules.get("torch")
            if not any(r.syncs for r in self.records):
                counter.release(torch)
            elif torch is not None:
                why = counter.poll(torch)
                if why is not None:
                    self.record_error("syncs", f"host-device syncs are not counted: {why}")
        except Exception as e:  # noqa: BLE001
            self.record_error("syncs", e)

    def _publish_failure_locked(self, error: BaseException) -> None:
        """Publish this process's identity and the error alone: the sidecar then says the probe
        failed, instead of showing the last facts as current or asking for a register() call."""
        try:
            now = time.time()
            payload = empty_payload()
            payload.update(facts.identity())
            message = f"{type(error).__name__}: {error}"[:MESSAGE_MAX_CHARS]
            payload["errors"] = [{"time": now, "where": PUBLISH_FAILED, "message": message}]
            payload["published_at"] = now
            self.writer.publish(payload)
            self.last_body = None  # the next tick tries the whole payload again
        except Exception:  # noqa: BLE001 -- nothing smaller to publish
            pass

    # -- public operations (wrapped by probe/__init__.py) ------------------------------------------------
    def register(self, model: Any, name: str | None = None, loader: Any = None, syncs: bool = False) -> Any:
        if not self.enabled:
            return model
        self._check_pid()
        with self.lock:
            if not self._activate_locked():
                return model
            try:
                self._register_locked(model, name, loader, syncs)
            except Exception as e:  # noqa: BLE001 -- register() never raises into the training script
                self.record_error("register", e)
                self.warn_once("register-failed", f"dsh probe: register() failed: {e}")
            self._publish_locked(periodic=False, traverse=True)
        return model

    def _register_locked(self, model: Any, name: str | None, loader: Any, syncs: bool = False) -> None:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(model, torch.nn.Module):
            message = f"register() needs a torch.nn.Module, got {type(model).__name__}"
            self.record_error("register", message)
            self.warn_once("register-type", f"dsh probe: {message}; nothing registered")
            return
        rec = next((r for r in self.records if r.module_ref() is model), None)
        if rec is None:
            rec = ModelRecord(model, name, torch, self.record_error, self._request_publish)
            rec.install_hook(model)
            self.records.append(rec)
        elif name is not None:
            rec.name = str(name)[:256]
        if loader is not None:
            self._attach_loader_locked(rec, loader)
        if syncs is True:
            rec.syncs = True
            self.sync_counter.request()
        self._install_optimizer_hooks_locked(torch, rec)

    def _install_optimizer_hooks_locked(self, torch: Any, rec: ModelRecord) -> None:
        """torch's global optimizer step hooks, for the step breakdown: once per process."""
        try:
            CLOCK.install_optimizer_hooks(torch, rec.is_compiling)
        except Exception as e:  # noqa: BLE001 -- the breakdown goes without the optimizer's time
            CLOCK.handles = ()
            self.record_error("optimizer-hooks", e)

    def _attach_loader_locked(self, rec: ModelRecord, loader: Any) -> None:
        # A wrapper (accelerate's DataLoaderShard, ...) is timed through the DataLoader it iterates.
        loader = _steps.find_dataloader(loader) or loader
        try:
            timer = self.loader_timers.get(loader)
        except TypeError:
            timer = None  # not weak-referenceable: cannot be a DataLoader
        if timer is None:
            timer = LoaderTimer()
            try:
                timer.install(loader)
            except Exception as e:  # noqa: BLE001
                self.record_error("loader", e)
                self.warn_once("loader", f"dsh probe: loader timing not installed: {e}")
                return
            self.loader_timers[loader] = timer
            # Spawned workers never import the probe by themselves: have them start it.
            current = getattr(loader, "worker_init_fn", None)
            if not isinstance(current, ProbeWorkerInit):
                try:
                    loader.worker_init_fn = ProbeWorkerInit(current)
                except Exception as e:  # noqa: BLE001
                    self.record_error("loader", e)
        rec.loader_timer = timer
        rec.attach_loader(loader)  # weak-referenceable: it is a key of loader_timers

    def unregister(self, model: Any) -> bool:
        if not self.enabled:
            return False
        self._check_pid()
        with self.lock:
            keep, removed = [], False
            for rec in self.records:
                if rec.module_ref() is model:
                    rec.remove_hook()
                    removed = True
                else:
                    keep.append(rec)
            self.records = keep
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
            self.events.append({"time": time.time(), "name": str(name)[:EVENT_NAME_MAX_CHARS]})
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

    def snapshot(self) -> dict | None:
        if not self.enabled:
            return None
        self._check_pid()
        with self.lock:
            return self.build_payload_locked()

    def status(self) -> dict:
        return {
            "enabled": self.enabled,
            "reason": self.disabled_reason,
            "segment": self.writer.name if self.writer is not None else None,
            "interval_s": self.interval_s,
            "models": len(self.records),
            "publishes": self.publishes,
        }


PROBE = Probe()
