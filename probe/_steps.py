"""Training steps, and DataLoader-like wrappers: what the framework callbacks add to the probe.

``StepCounter`` is what ``probe.lightning.ProbeCallback`` and ``probe.transformers.ProbeCallback``
attach to a model's record: training steps counted by the trainer's own hooks, their rate, and the
data wait timed between the end of one step and the start of the next (the trainer fetches the batch
in between), in the same window as ``loader=`` timing.

Nothing here imports torch or a framework; the callbacks' modules do, and only they.
"""

from __future__ import annotations

import sys
import time

from probe._breakdown import CLOCK, FRAMEWORK
from probe._rate import RateWindow
from probe.hooks import LoaderTimer, ProbeWorkerInit

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "LabelledWorkerInit",
    "cover_fresh_workers",
    "OptimizerSteps",
    "StepCounter",
    "find_dataloader",
    "is_lightning_module",
    "label_loader",
    "shares_memory",
    "step_fields",
    "worker_loader_label",
]

LABEL_MAX_CHARS = 64
STEP_SOURCES = ("lightning", "transformers", "optimizer")
# Attributes through which wrappers hold the DataLoader they iterate (accelerate's DataLoaderShard:
# base_dataloader), looked up in the instance's own __dict__ only: no property or __getattr__ runs.
_WRAPPED_LOADER_ATTRS = ("base_dataloader", "dataloader", "_dataloader", "loader", "_loader")
_MAX_UNWRAP = 4


class StepCounter:
    """Training steps of one model as its trainer's hooks report them, written by the training thread
    (plain attribute writes, no lock, like the forward count) and read by the publisher."""

    __slots__ = ("last_end", "next_first", "rate", "source", "steps", "timer")

    def __init__(self, source: str) -> None:
        self.source = source
        self.steps = 0
        self.rate = RateWindow(time.monotonic())
        self.timer = LoaderTimer(framework=True)
        self.last_end: float | None = None
        self.next_first = True

    # -- training thread --------------------------------------------------------------------------
    def epoch_start(self) -> None:
        """The next batch is an epoch's first: its wait (iterator and worker start) is wait only."""
        self.last_end = time.perf_counter()
        self.next_first = True

    def resume(self) -> None:
        """Validation, evaluation, a checkpoint or a log ended: the wait starts again from now."""
        if self.last_end is not None:
            self.last_end = time.perf_counter()

    def batch_start(self) -> None:
        now = time.perf_counter()
        if self.last_end is not None:
            self.timer.record(self.last_end, now, self.next_first)
        self.next_first = False

    def step_end(self, global_step: Any = None, boundary: bool = True) -> None:
        """A training step ended (``boundary``: for the step breakdown too; not where a trainer only
        reports the count it starts from)."""
        if type(global_step) is int and global_step >= 0:
            self.steps = global_step  # the trainer's own count: right after a resume from a checkpoint too
        else:
            self.steps += 1
        self.last_end = time.perf_counter()
        if boundary:
            CLOCK.step(FRAMEWORK)

    # -- publisher --------------------------------------------------------------------------------
    def update_rate(self, now_mono: float) -> None:
        self.rate.update(now_mono, self.steps)


class OptimizerSteps:
    """The training steps of a LightningModule registered without ``ProbeCallback``: the steps of the
    optimizer the step clock counts (probe/_breakdown.py), from registration on.

    Lightning's ``training_step`` often calls ``self.net(x)``, never the module's own forward: its
    forward count is then the validation's alone (0-3 calls/s beside hundreds of steps), while each
    training step still ends in ``optimizer.step()``, what Lightning's ``global_step`` counts too.
    The callback's count (``step_source`` "lightning") replaces this one once it is attached."""

    __slots__ = ("base", "rate", "source", "steps")
    timer = None  # no data-wait window of its own (StepCounter has one): the callback's times it

    def __init__(self) -> None:
        self.source = "optimizer"
        self.base = CLOCK.optimizer_steps
        self.steps = 0
        self.rate = RateWindow(time.monotonic())

    def update_rate(self, now_mono: float) -> None:
        self.steps = max(0, CLOCK.optimizer_steps - self.base)
        self.rate.update(now_mono, self.steps)


# Where LightningModule is defined, by package (the class is looked up by name: lightning is never imported).
_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")


def is_lightning_module(model: Any) -> bool:
    """Whether ``model`` is a LightningModule (of ``lightning`` or ``pytorch_lightning``)."""
    for cls in getattr(type(model), "__mro__", ()):
        if cls.__name__ == "LightningModule" and str(cls.__module__).split(".")[0] in _LIGHTNING_PACKAGES:
            return True
    return False


def step_fields(steps: StepCounter | OptimizerSteps | None) -> dict[str, Any]:
    """The per-model payload fields a StepCounter fills (None without one)."""
    if steps is None:
        return {"train_steps": None, "step_rate_hz": None, "step_source": None}
    return {
        "train_steps": int(steps.steps),
        "step_rate_hz": float(steps.rate.rate_hz),
        "step_source": steps.source,
    }


def find_dataloader(obj: Any) -> Any:
    """The torch DataLoader ``obj`` iterates: ``obj`` itself, or the one a wrapper holds (accelerate's
    DataLoaderShard and the like); None when there is none. Timing and worker setup go on that one,
    so what the wrapper yields is unchanged."""
    for _ in range(_MAX_UNWRAP + 1):
        if callable(getattr(type(obj), "_get_iterator", None)):
            return obj
        inst = getattr(obj, "__dict__", None)
        if type(inst) is not dict:
            return None
        inner = next((inst[a] for a in _WRAPPED_LOADER_ATTRS if a in inst and inst[a] is not obj), None)
        if inner is None:
            return None
        obj = inner
    return None


# -- DataLoader workers that start without the probe -----------------------------------------------
def _workers_start_fresh(loader: Any) -> bool:
    """Whether ``loader``'s workers start as new interpreters (spawn, forkserver) rather than as forks
    of this process, which carry the probe over (probe/_state.py's fork handler). Asked without fixing
    multiprocessing's default method (``allow_none``): that would make a later set_start_method fail."""
    ctx = loader.multiprocessing_context
    method: str | None
    if ctx is not None:
        method = str(ctx.get_start_method())
    else:
        mp = sys.modules.get("multiprocessing")
        chosen = mp.get_start_method(allow_none=True) if mp is not None else None
        method = str(chosen) if chosen is not None else None
        if method is None:  # not chosen yet: the platform's default
            method = "fork" if sys.platform.startswith("linux") and sys.version_info < (3, 14) else "spawn"
    return method != "fork"


def cover_fresh_workers(torch: Any) -> None:
    """Have the workers of every DataLoader of this process run the probe, ``loader=`` given or not.

    Forked workers inherit it; spawned and forkserver ones (the default inside an ``mp.spawn`` rank,
    where multiprocessing's start method is spawn) start without it, and only a ``worker_init_fn``
    pickled into them can start it. So when an iterator is made for such a loader, its
    ``worker_init_fn`` becomes ``ProbeWorkerInit(the user's)``, as ``register(model, loader=loader)``
    does: the user's function still runs, after ours, with the same argument. Installed once per
    process on the DataLoader class (a subclass's own ``_get_iterator`` calls it through super())."""
    module = sys.modules.get("torch.utils.data.dataloader")
    cls = getattr(module, "DataLoader", None)
    original = getattr(cls, "_get_iterator", None)
    if cls is None or original is None or getattr(original, "_dsh_probe_covers", False):
        return

    def _get_iterator(self: Any) -> Any:
        try:
            current = self.worker_init_fn
            if self.num_workers > 0 and not isinstance(current, ProbeWorkerInit) and _workers_start_fresh(self):
                self.worker_init_fn = ProbeWorkerInit(current)
        except Exception:  # noqa: BLE001 -- the loader goes on as the user made it
            pass
        return original(self)

    _get_iterator._dsh_probe_covers = True  # type: ignore[attr-defined]
    _get_iterator.__wrapped__ = original  # type: ignore[attr-defined]
    cls._get_iterator = _get_iterator


# -- which loader a DataLoader worker serves ------------------------------------------------------
_worker_label: str | None = None


def worker_loader_label() -> str | None:
    """In a DataLoader worker started through a labelled loader: that loader's label."""
    return _worker_label


class LabelledWorkerInit(ProbeWorkerInit):
    """A ``worker_init_fn`` that also tells the worker which loader it serves ("train", "validation").

    Pickled for spawn and forkserver workers with its label and the user's function, rebuilt
    through ``__init__`` like its base."""

    __slots__ = ("label",)

    def __init__(self, user_fn: Any = None, label: str | None = None) -> None:
        super().__init__(user_fn)
        self.label = None if label is None else str(label)[:LABEL_MAX_CHARS]

    def __reduce__(self) -> Any:
        return (LabelledWorkerInit, (self.user_fn, self.label))

    def __call__(self, worker_id: int) -> None:
        global _worker_label
        _worker_label = self.label  # before the worker's first publish, which ProbeWorkerInit makes
        super().__call__(worker_id)


def label_loader(loader: Any, label: str) -> bool:
    """Have the workers ``loader`` starts from now on say they serve ``label``; True when set.

    Workers already running (a persistent loader's, or those of an iterator made before this call)
    keep what they had."""
    base = find_dataloader(loader)
    if base is None:
        return False
    current = getattr(base, "worker_init_fn", None)
    if isinstance(current, LabelledWorkerInit):
        if current.label == label:
            return True
        user_fn = current.user_fn
    elif isinstance(current, ProbeWorkerInit):
        user_fn = current.user_fn
    else:
        user_fn = current
    base.worker_init_fn = LabelledWorkerInit(user_fn, label)
    return True


def shares_memory(rec: Any) -> bool | None:
    """Whether the model's (first) parameter lives in shared memory on the CPU: ``share_memory()``
    was called, so other processes (hogwild, ``mp.Process`` children) may be training it. None when
    unknown (no parameters, or not on the CPU, where ``is_shared`` says nothing about sharing)."""
    try:
        inner = rec.inner_ref()
        if inner is None:
            return None
        for p in inner.parameters():
            if p.device.type != "cpu":
                return None
            return bool(p.is_shared())
    except Exception:  # noqa: BLE001 -- a fact we could not read is an unknown one
        return None
    return None
