"""What the probe publishes, and when: the payload built from the process's facts, its models and
its journal, written to the segment only when it changed (a periodic tick with nothing new leaves
the segment alone, so its seq stays and readers skip it).

``Publisher`` is one of the collaborators ``probe._state.Probe`` composes; it runs under the probe's
lock, and the segment it writes is the probe's (opened, forked away from and closed there).
"""

from __future__ import annotations

import sys
import time

from probe import _distributed, _settings, _steps, facts
from probe._breakdown import CLOCK
from probe._journal import MESSAGE_MAX_CHARS, Journal
from probe._models import Models
from probe_wire.schema import MAX_MODELS, PUBLISH_FAILED, empty_payload

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

    from probe_wire.writer import SegmentWriter


class Publisher:
    def __init__(self, journal: Journal, models: Models) -> None:
        self.journal = journal
        self.models = models
        self.publishes = 0
        # What the last publish said (less its time) and through which writer.
        self.last_body: tuple[object, dict[str, Any]] | None = None
        self.dist_rank: dict[str, Any] | None = None  # rank, world_size, dist_backend once a process group ran

    def reset_after_fork(self) -> None:
        self.publishes = 0
        self.last_body = None
        self.dist_rank = None

    def last_named_models(self, writer: SegmentWriter) -> bool:
        """Whether the last publish, through ``writer``, named models (the job's final state)."""
        last = self.last_body
        return bool(last and last[0] is writer and last[1].get("models"))

    # -- the payload ------------------------------------------------------------------------------------
    def build_payload(self, forked: bool) -> dict[str, Any]:
        now = time.time()
        torch = sys.modules.get("torch")
        payload = empty_payload()
        payload.update(facts.identity())
        try:
            who = self._remembered_rank(facts.role(forked))
            who.update(_distributed.distributed(who.get("role") == "rank", payload["hostname"]))
        except Exception as e:  # noqa: BLE001 -- one bad fact must not hide the others
            self.journal.record_error("role", e)
            who = {}
        payload.update(who)
        try:
            payload["runtime"] = facts.runtime(torch)
            payload["memory"] = facts.memory(torch)
        except Exception as e:  # noqa: BLE001 -- one bad fact must not hide the others
            self.journal.record_error("runtime", e)
        is_worker = payload["role"] == "dataloader-worker"
        payload["models"] = self.models.entries(is_worker)[:MAX_MODELS]
        payload["loader"] = _steps.worker_loader_label() if is_worker else None
        if torch is not None:
            try:
                payload["math"] = _settings.math_settings(torch)
            except Exception as e:  # noqa: BLE001 -- one bad fact must not hide the others
                self.journal.record_error("math", e)
        steps, syncs = CLOCK.figures()
        payload["steps"] = steps
        payload["syncs_per_step"] = syncs if self.models.sync_counter.counting() else None
        payload.update(self.journal.payload_fields())
        payload["published_at"] = now
        return payload

    def _remembered_rank(self, who: dict[str, Any]) -> dict[str, Any]:
        """A process that ran as a torch.distributed rank stays that rank once its process group is
        destroyed (the last thing a DDP script does, just before its final publish at exit)."""
        if who.get("dist_backend") is not None:
            self.dist_rank = {k: who[k] for k in ("rank", "world_size", "dist_backend")}
        elif self.dist_rank is not None and who.get("role") in ("main", "child"):
            who = {**who, **self.dist_rank, "role": "rank"}
        return who

    # -- publishing -------------------------------------------------------------------------------------
    def publish(self, writer: SegmentWriter, forked: bool, periodic: bool, traverse: bool = False) -> None:
        """Bring the models up to date, then write the payload unless a periodic tick found nothing
        new since the last publish through this writer."""
        models = self.models
        now_mono = time.monotonic()
        models.prune_collected()
        models.poll_syncs()
        if periodic:
            models.tick(now_mono)
        dirty, models.device_dirty = models.device_dirty, False
        models.refresh_devices(now_mono, look=dirty or periodic, traverse=traverse)
        payload = self.build_payload(forked)
        body = dict(payload)
        del body["published_at"]
        last = self.last_body
        if periodic and last is not None and last[0] is writer and last[1] == body:
            return
        try:
            writer.publish(payload)
            self.publishes += 1
            self.last_body = (writer, body)
        except Exception as e:  # noqa: BLE001 -- recorded; the next publish tries again
            self.journal.record_error("publish", e)
            self._publish_failure(writer, e)

    def _publish_failure(self, writer: SegmentWriter, error: BaseException) -> None:
        """Publish this process's identity and the error alone: the sidecar then says the probe
        failed, instead of showing the last facts as current or asking for a register() call."""
        try:
            now = time.time()
            payload = empty_payload()
            payload.update(facts.identity())
            message = f"{type(error).__name__}: {error}"[:MESSAGE_MAX_CHARS]
            payload["errors"] = [{"time": now, "where": PUBLISH_FAILED, "message": message}]
            payload["published_at"] = now
            writer.publish(payload)
            self.last_body = None  # the next tick tries the whole payload again
        except Exception:  # noqa: BLE001 -- nothing smaller to publish
            pass
