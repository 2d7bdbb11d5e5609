"""The models a process registered: their records, the DataLoaders timed for them, the torch hooks
that time their steps, and what each tick of the publisher updates in them.

``Models`` is one of the collaborators ``probe._state.Probe`` composes; every method runs under the
probe's lock (the forward hooks write their records' plain slots without it).
"""

from __future__ import annotations

import collections
import sys
import time
import warnings
import weakref

from probe import _steps
from probe._breakdown import CLOCK
from probe._journal import Journal, ProbeWarning
from probe._syncs import SyncCounter
from probe.hooks import LoaderTimer, ModelRecord, ProbeWorkerInit
from probe_wire.schema import MODEL_COLLECTED

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Collected models whose last entries stay in the payload (``finished``), the newest.
MAX_FINISHED_MODELS = 4
# Every this often the publisher walks all parameters even if the first one did not move, to catch
# a submodule moved on its own.
FULL_TRAVERSAL_S = 30.0


def model_entry(rec: ModelRecord, **over: object) -> dict[str, Any]:
    """A record's entry in the payload's ``models``."""
    entry = rec.to_payload()
    entry.update(_steps.step_fields(rec.steps))
    entry["shared_memory"] = _steps.shares_memory(rec)
    entry.update(over)
    return entry


class Models:
    def __init__(self, journal: Journal, request_publish: Callable[[], None]) -> None:
        self.journal = journal
        self.request_publish = request_publish  # a record calls it when its model's device changed
        self.records: list[ModelRecord] = []
        # The last payload entries of models that made forward calls and were then collected (a
        # rank's model when its worker function returns): what ran, for the job's final state.
        self.finished: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_FINISHED_MODELS)
        # Any: a DataLoader, torch's (the probe never imports torch)
        self.loader_timers: weakref.WeakKeyDictionary[Any, LoaderTimer] = weakref.WeakKeyDictionary()
        self.sync_counter = SyncCounter()
        self.device_dirty = False
        self.last_traversal_mono = 0.0

    def find(self, model: Any) -> ModelRecord | None:
        return next((r for r in self.records if r.module_ref() is model), None)

    def reset_after_fork(self) -> None:
        self.finished.clear()
        for rec in self.records:
            rec.reset_after_fork()
        self.sync_counter.reset_after_fork()

    # -- registration ---------------------------------------------------------------------------------
    def register(self, model: Any, name: str | None, loader: Any, syncs: bool = False) -> None:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(model, torch.nn.Module):
            message = f"register() needs a torch.nn.Module, got {type(model).__name__}"
            self.journal.record_error("register", message)
            self.journal.warn_once("register-type", f"dsh probe: {message}; nothing registered")
            return
        rec = self.find(model)
        if rec is None:
            rec = ModelRecord(model, name, torch, self.journal.record_error, self.request_publish)
            rec.install_hook(model)
            self.records.append(rec)
        elif name is not None:
            rec.name = str(name)[:256]
        if rec.steps is None and _steps.is_lightning_module(model):
            rec.steps = _steps.OptimizerSteps()  # its forward may not be the training step: count steps
        if loader is not None:
            self._attach_loader(rec, loader)
        if syncs is True:
            rec.syncs = True
            self.sync_counter.request()
        self._install_optimizer_hooks(torch, rec)
        try:
            _steps.cover_fresh_workers(torch)
        except Exception as e:  # noqa: BLE001 -- spawned workers then go without the probe
            self.journal.record_error("loader-workers", e)

    def unregister(self, model: Any) -> bool:
        keep, removed = [], False
        for rec in self.records:
            if rec.module_ref() is model:
                rec.remove_hook()
                removed = True
            else:
                keep.append(rec)
        self.records = keep
        return removed

    def _install_optimizer_hooks(self, torch: Any, rec: ModelRecord) -> None:
        """torch's global optimizer step hooks, for the step breakdown: once per process."""
        try:
            CLOCK.install_optimizer_hooks(torch, rec.is_compiling)
        except Exception as e:  # noqa: BLE001 -- the breakdown goes without the optimizer's time
            CLOCK.handles = ()
            self.journal.record_error("optimizer-hooks", e)

    def _attach_loader(self, rec: ModelRecord, loader: Any) -> None:
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
            except Exception as e:  # noqa: BLE001 -- recorded; the loader works on, untimed
                self.journal.record_error("loader", e)
                self.journal.warn_once("loader", f"dsh probe: loader timing not installed: {e}")
                return
            self.loader_timers[loader] = timer
            # Spawned workers never import the probe by themselves: have them start it.
            current = getattr(loader, "worker_init_fn", None)
            if not isinstance(current, ProbeWorkerInit):
                try:
                    loader.worker_init_fn = ProbeWorkerInit(current)
                except Exception as e:  # noqa: BLE001 -- recorded; the loader works on, its workers unwatched
                    self.journal.record_error("loader", e)
        rec.loader_timer = timer
        rec.attach_loader(loader)  # weak-referenceable: it is a key of loader_timers

    # -- what a publish updates -------------------------------------------------------------------------
    def prune_collected(self) -> None:
        """register() holds a model weakly: one nobody else kept (probe.register(Net())) is gone."""
        for rec in self.records:
            if not rec.alive:
                if rec.forward_calls:
                    self.finished.append(model_entry(rec, forward_rate_hz=0.0))
                else:  # registered and dropped unused: probe.register(Net()) with nothing keeping it
                    self.journal.record_error(MODEL_COLLECTED, rec.name)
        self.records = [r for r in self.records if r.alive]

    def tick(self, now_mono: float) -> None:
        """The periodic tick: rates, arming for the next call's input shape, compiled calls."""
        CLOCK.update(now_mono)
        for rec in self.records:
            rec.update_rate(now_mono)
            rec.armed = True
            if rec.compiled_seen:
                self._note_compiled(rec)

    def _note_compiled(self, rec: ModelRecord) -> None:
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
            self.journal.record_error("compile", message)
            # Once per record by compiled_noted. Not warn_once keyed by id(rec): a new model may get
            # the id of a collected one, and its warning would be swallowed.
            warnings.warn(f"dsh probe: {message}", ProbeWarning, stacklevel=3)

    def refresh_devices(self, now_mono: float, look: bool, traverse: bool) -> None:
        """Walk every model's parameters when asked (``traverse``), when due, or when a look
        (``look``: a tick, or a record said its device changed) finds a first parameter moved."""
        if not traverse and look:
            if now_mono - self.last_traversal_mono >= FULL_TRAVERSAL_S:
                traverse = True
            else:
                traverse = self._first_device_moved()
        if traverse:
            self.traverse_all()

    def _first_device_moved(self) -> bool:
        for rec in self.records:
            try:
                if rec.first_device_changed():
                    return True
            except Exception as e:  # noqa: BLE001 -- one odd model must not hide the others
                self.journal.record_error("traverse", e)
        return False

    def traverse_all(self) -> None:
        for rec in self.records:
            try:
                rec.traverse()
            except Exception as e:  # noqa: BLE001 -- one odd model must not hide the others
                self.journal.record_error("traverse", e)
        self.last_traversal_mono = time.monotonic()

    def poll_syncs(self) -> None:
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
                    self.journal.record_error("syncs", f"host-device syncs are not counted: {why}")
        except Exception as e:  # noqa: BLE001 -- recorded; counting syncs must not stop the publish
            self.journal.record_error("syncs", e)

    def entries(self, is_worker: bool) -> list[dict[str, Any]]:
        """The payload's models: the live records' entries, then the collected ones'."""
        # A worker forked from the trainer carries copies of its models: they are the trainer's.
        models = [model_entry(rec) for rec in self.records if not (is_worker and rec.inherited)]
        models.extend(self.finished)
        return models
