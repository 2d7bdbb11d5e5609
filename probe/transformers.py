"""``ProbeCallback`` for the Hugging Face ``Trainer``: the model it really trains, its steps, its waits.

    from probe.transformers import ProbeCallback
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, callbacks=[ProbeCallback()])

Importable only where transformers is installed; ``import probe`` never imports this module. The
callback:

- registers the model ``on_train_begin`` is given: the one the Trainer trains, after
  ``accelerator.prepare`` (wrappers such as DDP call it, so its forwards are counted);
- counts optimizer steps (``on_step_end``, ``state.global_step``): ``train_steps``, ``step_rate_hz``;
- times the data wait from ``on_step_begin`` against the previous ``on_step_end`` (the Trainer
  fetches the step's batches in between), leaving out logging, saving and evaluation;
- records train begin, train end and each evaluation as events;
- labels the train loader (accelerate's DataLoaderShard included), so its workers say "train".

Every hook is wrapped: a failure is recorded in the payload's errors, never raised into the Trainer,
never printed. Callbacks cannot change the forward pass, and this one returns no ``control``.
"""

from __future__ import annotations

from probe import _frameworks, _steps
from transformers import TrainerCallback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ProbeCallback"]

SOURCE = "transformers"


class ProbeCallback(TrainerCallback):  # type: ignore[misc]  # transformers is not followed (pyproject's [tool.mypy])
    """Registers the trained model, counts steps, times data waits, records train/eval events."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._steps: _steps.StepCounter | None = None

    @_frameworks.guarded_hook("transformers.on_train_begin")
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if model is not None:
            self._steps = _frameworks.attach_steps(model, self.name, SOURCE)
            if self._steps is not None:
                # A resumed run starts at its checkpoint's step: a count, not a step that ended.
                self._steps.step_end(state.global_step, boundary=False)
                self._steps.epoch_start()
        loader = kwargs.get("train_dataloader")
        if loader is not None:
            _steps.label_loader(loader, "train")
            if model is not None:
                _frameworks.attach_loader(model, loader)
        _frameworks.event("transformers: train begin")

    @_frameworks.guarded_hook("transformers.on_epoch_begin")
    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._steps is not None:
            self._steps.epoch_start()

    @_frameworks.guarded_hook("transformers.on_step_begin")
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._steps is not None:
            self._steps.batch_start()

    @_frameworks.guarded_hook("transformers.on_step_end")
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._steps is not None:
            self._steps.step_end(state.global_step)

    @_frameworks.guarded_hook("transformers.on_evaluate")
    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._resume()
        _frameworks.event(f"transformers: evaluate at step {int(state.global_step)}")

    @_frameworks.guarded_hook("transformers.on_save")
    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._resume()

    @_frameworks.guarded_hook("transformers.on_log")
    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._resume()

    @_frameworks.guarded_hook("transformers.on_train_end")
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _frameworks.event(f"transformers: train end at step {int(state.global_step)}")

    def _resume(self) -> None:
        # Logging, saving and evaluating happen between one step's end and the next one's start:
        # that time is not a wait for training data.
        if self._steps is not None:
            self._steps.resume()
