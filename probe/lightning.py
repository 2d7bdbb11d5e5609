"""``ProbeCallback`` for Lightning: what a LightningModule's training loop hides from ``register``.

    from probe.lightning import ProbeCallback
    trainer = lightning.pytorch.Trainer(callbacks=[ProbeCallback()])

Importable only where Lightning is installed (``lightning`` or ``pytorch_lightning``; the class is a
Callback of both when both are there); ``import probe`` never imports this module. The callback:

- registers the LightningModule at ``on_fit_start`` and, after the first training batch, the child
  modules that batch really called (``training_step`` usually calls ``self.net(x)``, never
  ``self.forward``): found by forward pre-hooks installed for that one batch and removed after it;
- counts training batches (``on_train_batch_end``): ``train_steps``, ``step_rate_hz``, and the step
  boundaries of the payload's ``steps`` breakdown, where the optimizer's time starts when the closure
  Lightning runs inside ``optimizer.step()`` returns (``on_before_optimizer_step``);
- times the data wait from ``on_train_batch_start`` against the previous ``on_train_batch_end`` (the
  loop fetches the batch in between), validation left out;
- records fit start, each training epoch, fit end and exceptions as events;
- labels the train and validation loaders, so their workers say which one they serve.

Every hook is wrapped: a failure is recorded in the payload's errors, never raised into the trainer,
never printed, and nothing here touches a batch, an output or the module's state.
"""

from __future__ import annotations

import probe
from probe import _frameworks, _steps
from probe._breakdown import CLOCK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _callback_bases() -> tuple[type, ...]:
    bases: list[type] = []
    try:
        from lightning.pytorch import Callback

        bases.append(Callback)
    except ImportError:
        pass
    try:
        from pytorch_lightning import Callback as PLCallback

        if PLCallback not in bases:
            bases.append(PLCallback)
    except ImportError:
        pass
    if not bases:
        raise ImportError("probe.lightning needs Lightning: pip install lightning (or pytorch_lightning)")
    return tuple(bases)


__all__ = ["ProbeCallback"]

SOURCE = "lightning"
# Child modules watched during the first batch to find the ones training_step calls; containers
# (ModuleList, ModuleDict) are looked into one level.
MAX_WATCHED_MODULES = 64


def _loaders(obj: Any, limit: int = 16) -> list[Any]:
    """DataLoaders in what ``trainer.train_dataloader`` / ``val_dataloaders`` hold (one, a list or a dict)."""
    if obj is None:
        return []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, list | tuple):
        items = list(obj)
    else:
        items = [obj]
    return items[:limit]


def _watch_candidates(module: Any) -> list[tuple[str, Any]]:
    """(name, module) of the LightningModule's children that hold parameters, and of the items of
    its ModuleList/ModuleDict children."""
    torch = __import__("torch")
    containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
    out: list[tuple[str, Any]] = []
    for name, child in module.named_children():
        if isinstance(child, containers):
            out.extend((f"{name}.{n}", c) for n, c in child.named_children())
        else:
            out.append((name, child))
    return [(n, m) for n, m in out if next(m.parameters(), None) is not None][:MAX_WATCHED_MODULES]


# Its bases are found at import (lightning.pytorch's Callback, pytorch_lightning's, or both), which no
# type checker can follow: the class is checked as a plain class.
class ProbeCallback(*_callback_bases()):  # type: ignore[misc]
    """Registers the LightningModule and the modules it calls, counts steps, times data waits."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        self.name = name
        self._steps: _steps.StepCounter | None = None
        self._watch: list[tuple[str, Any, Any]] = []  # (name, module, handle) during the first training batch
        self._called: set[int] = set()
        self._found_children = False

    # -- fit -------------------------------------------------------------------------------------
    @_frameworks.guarded_hook("lightning.on_fit_start")
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._steps = _frameworks.attach_steps(pl_module, self._model_name(pl_module), SOURCE)
        _frameworks.event("lightning: fit start")

    @_frameworks.guarded_hook("lightning.on_fit_end")
    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._unwatch()
        _frameworks.event(f"lightning: fit end after {self._count()} steps")

    @_frameworks.guarded_hook("lightning.on_exception")
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._unwatch()
        _frameworks.event(f"lightning: {type(exception).__name__} after {self._count()} steps")

    @_frameworks.guarded_hook("lightning.on_train_start")
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # Both loaders exist by now; workers started later (the next epoch's, each validation
        # run's) say which loader they serve.
        self._label(trainer)
        train = _loaders(getattr(trainer, "train_dataloader", None))
        if train:
            _frameworks.attach_loader(pl_module, train[0])

    # -- epochs and batches -------------------------------------------------------------------------
    @_frameworks.guarded_hook("lightning.on_train_epoch_start")
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._label(trainer)
        if self._steps is not None:
            self._steps.epoch_start()
        _frameworks.event(f"lightning: train epoch {int(trainer.current_epoch)}")

    @_frameworks.guarded_hook("lightning.on_train_batch_start")
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._steps is not None:
            self._steps.batch_start()
        if not self._found_children:
            self._found_children = True
            self._start_watch(pl_module)

    @_frameworks.guarded_hook("lightning.on_train_batch_end")
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._watch:
            self._register_called(pl_module)
        if self._steps is not None:
            self._steps.step_end()

    @_frameworks.guarded_hook("lightning.on_before_optimizer_step")
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        # Lightning runs training_step and backward in a closure inside optimizer.step(); this hook
        # runs when that closure returns: the optimizer's own time starts here.
        CLOCK.closure_done()

    @_frameworks.guarded_hook("lightning.on_validation_start")
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._label(trainer)

    @_frameworks.guarded_hook("lightning.on_validation_end")
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._steps is not None:
            self._steps.resume()  # validation inside an epoch is not a wait for training data

    # -- helpers ----------------------------------------------------------------------------------
    def _model_name(self, pl_module: Any) -> str:
        return self.name or type(pl_module).__name__

    def _count(self) -> int:
        return self._steps.steps if self._steps is not None else 0

    def _label(self, trainer: Any) -> None:
        for dl in _loaders(getattr(trainer, "train_dataloader", None)):
            _steps.label_loader(dl, "train")
        vals = _loaders(getattr(trainer, "val_dataloaders", None))
        for i, dl in enumerate(vals):
            _steps.label_loader(dl, "validation" if len(vals) == 1 else f"validation {i}")

    def _start_watch(self, pl_module: Any) -> None:
        called = self._called

        def seen(module: Any, args: Any) -> None:
            called.add(id(module))

        for name, module in _watch_candidates(pl_module):
            if _frameworks.registered(module):
                continue
            self._watch.append((name, module, module.register_forward_pre_hook(seen)))

    def _register_called(self, pl_module: Any) -> None:
        watched, self._watch = self._watch, []
        for _, _, handle in watched:
            handle.remove()
        base = self._model_name(pl_module)
        for name, module, _ in watched:
            if id(module) in self._called:
                probe.register(module, name=f"{base}.{name}")
        self._called.clear()

    def _unwatch(self) -> None:
        watched, self._watch = self._watch, []
        for _, _, handle in watched:
            try:
                handle.remove()
            except Exception as e:  # noqa: BLE001 -- recorded; the probe never breaks the trainer
                _frameworks.record_error("lightning.unwatch", e)
