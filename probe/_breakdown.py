"""Where a training step's wall time goes: waiting for data, forward, backward, optimizer step, the rest.

One ``StepClock`` per process (``CLOCK``). The training thread only adds to running totals (plain
attribute writes, no lock): the registered models' forwards (probe/instrument.py times the outermost
one, so a registered model inside another is not counted twice), the optimizer steps (torch's global
optimizer step hooks, installed once), and the data waits the loader timers and the framework
callbacks measure. Backward, a part of the rest, is what lies between one optimizer step's end and the next one's start,
less the forwards and data waits in it, plus a step closure's time less its forwards: the backward
pass, the loss, and the collectives run there (DDP's gradient all-reduce). Across the ranks of a job
it is what differs: the ranks wait there for the slowest one (sidecar/verdict/stragglers.py). At each step boundary it stores one tuple of those totals (``mark``); the
publisher compares the newest mark with the one at the start of its window (the same ~10 s window as
the rates, probe/_rate.py), so the figures cover whole steps only.

What a step is, strongest source first: a training step as a framework callback counts it
(Lightning, the HF Trainer), else an optimizer step (of the first optimizer seen: a GAN's two
optimizers make one step, not two), else a DataLoader batch. A stronger source, once seen, takes over
until it has counted no step for a whole window.

Standard library only; torch is handed in by the caller.
"""

from __future__ import annotations

import collections
import sys
import time
import weakref

from probe._rate import RATE_SAMPLES_PER_WINDOW, RATE_WINDOW_S

TYPE_CHECKING = False  # typing costs ~2 ms to import; annotations alone do not need it
if TYPE_CHECKING:
    from typing import Any

    # A step boundary's figures (StepClock.step): level, steps, time and the totals then, in order.
    Mark = tuple[int, int, float, float, float, float, int, float, int, int, int, float]

__all__ = ["CLOCK", "FRAMEWORK", "LOADER", "OPTIMIZER", "StepClock"]

# What marks a step boundary, weakest first.
LOADER, OPTIMIZER, FRAMEWORK = 1, 2, 3
# The fields of a mark: the totals as they stood at a step boundary.
_LEVEL, _STEPS, _T, _FWD, _OPT, _LWAIT, _LWAITS, _FWAIT, _FWAITS, _SYNCS, _SYNC_EPOCH, _BWD = range(12)
_perf = time.perf_counter
# An optimizer step "in progress" for this long raised before its post-hook: steps of other
# optimizers are no longer taken as nested in it.
STALE_STEP_S = 60.0


def _never_compiling() -> bool:
    return False


class StepClock:
    """Running totals written by the training thread; figures over the window read by the publisher."""

    __slots__ = (
        "backward_s",
        "forward_s",
        "framework_wait_s",
        "framework_waits",
        "handles",
        "inside",
        "is_compiling",
        "level",
        "level_start",
        "loader_wait_s",
        "loader_waits",
        "mark",
        "opt_closure_s",
        "opt_depth",
        "opt_end_t",
        "opt_end_spent_s",
        "opt_forward0_s",
        "opt_outer",
        "opt_t0",
        "optimizer_steps",
        "optimizer_s",
        "primary_id",
        "primary_opt",
        "samples",
        "steps",
        "sync_epoch",
        "syncs",
    )

    def __init__(self) -> None:
        self.handles: tuple[Any, ...] | None = None  # torch's optimizer hook handles, once installed
        self.is_compiling: Any = _never_compiling
        self.reset()

    def reset(self) -> None:
        """Forget every total (a forked child: its parent's steps are not its own)."""
        self.inside = False  # a registered forward is being timed; forwards nested in it are not
        self.forward_s = 0.0
        self.optimizer_s = 0.0
        self.backward_s = 0.0
        # When the last outermost optimizer step ended (0.0: none yet), and the forward and data-wait
        # time then: the next step's start takes both off the time in between to find the backward.
        self.opt_end_t = 0.0
        self.opt_end_spent_s = 0.0
        self.loader_wait_s = 0.0
        self.loader_waits = 0
        self.framework_wait_s = 0.0
        self.framework_waits = 0
        self.syncs = 0
        self.sync_epoch = 0  # which counting session the sync count belongs to (0: not counting)
        self.opt_depth = 0
        self.opt_outer = 0  # id() of the optimizer whose step is being timed
        self.opt_t0 = 0.0
        self.opt_forward0_s = 0.0
        # Time inside the closure of the step being timed, less its registered forwards (counted as
        # forward time already); None while the step was given no closure.
        self.opt_closure_s: float | None = None
        self.primary_opt: Any = None  # weakref to the optimizer whose steps are counted
        self.primary_id = 0  # its id(): the weakref is only called when another optimizer steps
        self.level = 0
        self.steps = 0
        # Steps of the counted optimizer, whatever source marks the breakdown's steps: a LightningModule
        # registered without its callback counts its training steps by them (probe._steps.OptimizerSteps).
        self.optimizer_steps = 0
        self.mark: Mark | None = None
        self.level_start: Mark | None = None  # the first mark at the current level
        self.samples: collections.deque[tuple[float, Mark | None]] = collections.deque(
            [(time.monotonic(), None)], maxlen=RATE_SAMPLES_PER_WINDOW + 2
        )

    # -- training thread ------------------------------------------------------------------------
    def step(self, level: int) -> None:
        """A step boundary seen by ``level``'s source; ignored while a stronger source counts (one
        that counted no step for a whole window has stopped: a plain loop after a trainer's fit)."""
        if level < self.level:
            last = self.mark
            if last is not None and _perf() - last[_T] < RATE_WINDOW_S:
                return
        if level != self.level:
            self.level = level
            self.level_start = None
        self.steps += 1
        mark = (
            level,
            self.steps,
            _perf(),
            self.forward_s,
            self.optimizer_s,
            self.loader_wait_s,
            self.loader_waits,
            self.framework_wait_s,
            self.framework_waits,
            self.syncs,
            self.sync_epoch,
            self.backward_s,
        )
        if self.level_start is None:
            self.level_start = mark
        self.mark = mark  # one reference assignment: the publisher never sees half a mark

    def add_wait(self, wait_s: float, framework: bool) -> None:
        """A data wait measured by a framework callback (``framework``) or a DataLoader's timer; a
        DataLoader batch is also a step boundary while nothing stronger counts steps."""
        if framework:
            self.framework_wait_s += wait_s
            self.framework_waits += 1
        else:
            self.loader_wait_s += wait_s
            self.loader_waits += 1
            self.step(LOADER)

    def closure_done(self) -> None:
        """The closure an optimizer step runs (Lightning's training_step and backward) has returned:
        the optimizer's own time starts now. A closure the pre-hook timed is taken off already."""
        if self.opt_depth and self.opt_closure_s is None:
            self.opt_t0 = _perf()
            self.opt_forward0_s = self.forward_s

    def _timed_closure(self, closure: Any) -> Any:
        """``closure``, its time added to ``opt_closure_s``: what it returns or raises is unchanged."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, forward0_s = _perf(), self.forward_s
            try:
                return closure(*args, **kwargs)
            finally:
                if self.opt_closure_s is not None:
                    self.opt_closure_s += (_perf() - t0) - (self.forward_s - forward0_s)

        return timed

    def _closure_args(self, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """The step's arguments with its closure timed (Lightning runs training_step and backward in
        one inside ``optimizer.step``; LBFGS calls its own): None when it was given none."""
        if kwargs and callable(kwargs.get("closure")):
            return args, {**kwargs, "closure": self._timed_closure(kwargs["closure"])}
        # torch passes the step's positional arguments with the optimizer first: (self, closure).
        if isinstance(args, tuple) and len(args) == 2 and callable(args[1]):
            return (args[0], self._timed_closure(args[1])), kwargs
        return None

    def _forward_and_waits_s(self) -> float:
        return self.forward_s + self.loader_wait_s + self.framework_wait_s

    def _backward_until(self, now: float) -> None:
        """An optimizer step starts at ``now``: the time since the last one ended, less its forwards
        and data waits, is backward (the loss, the backward pass, the collectives in between)."""
        if self.opt_end_t:
            gap_s = (now - self.opt_end_t) - (self._forward_and_waits_s() - self.opt_end_spent_s)
            if gap_s > 0.0:
                self.backward_s += gap_s

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """torch's global optimizer step pre-hook: returns None (the step's arguments stay as given),
        or, for a step given a closure, the same arguments with the closure timed."""
        try:
            if self.is_compiling():
                return None  # a compiled optimizer step: no clock calls inside the graph
            if self.opt_depth and (self.opt_outer == id(optimizer) or _perf() - self.opt_t0 > STALE_STEP_S):
                self.opt_depth = 0  # the step being timed raised before its post-hook ran
            timed = None
            if self.opt_depth == 0:
                self._backward_until(_perf())
                self.opt_outer = id(optimizer)
                self.opt_forward0_s = self.forward_s
                timed = self._closure_args(args, kwargs)
                self.opt_closure_s = None if timed is None else 0.0
                self.opt_t0 = _perf()
            self.opt_depth += 1
            return timed
        except Exception:  # noqa: BLE001 -- a hook inside the user's optimizer step must never raise
            pass
        return None

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if self.is_compiling() or self.opt_depth <= 0:
                return
            self.opt_depth -= 1
            if self.opt_depth:
                return  # an optimizer stepped inside another one's step: the outer one is timed
            # Forwards run inside the step (a closure's) are forward time, not the optimizer's.
            # So is its closure's time (its backward): the part of a step a plain loop spends outside.
            spent_s = (_perf() - self.opt_t0) - (self.forward_s - self.opt_forward0_s) - (self.opt_closure_s or 0.0)
            if self.opt_closure_s:
                self.backward_s += self.opt_closure_s  # Lightning's backward runs in the closure
            self.opt_closure_s = None
            if spent_s > 0.0:
                self.optimizer_s += spent_s
            self.opt_end_t = _perf()
            self.opt_end_spent_s = self._forward_and_waits_s()
            if self.primary_id != id(optimizer):
                primary = self.primary_opt
                if primary is not None and primary() is not None:
                    return  # another optimizer's step (a GAN's second): the first one's count
                self.primary_opt = weakref.ref(optimizer)
                self.primary_id = id(optimizer)
            self.optimizer_steps += 1
            self.step(OPTIMIZER)
        except Exception:  # noqa: BLE001 -- a hook inside the user's optimizer step must never raise
            pass

    # -- setup ------------------------------------------------------------------------------------
    def install_optimizer_hooks(self, torch: Any, is_compiling: Any) -> bool:
        """Register the optimizer step hooks once per process; False where torch has none."""
        if self.handles is not None:
            return bool(self.handles)
        # Dynamo replaces is_dynamo_compiling with the constant True while tracing (a compiled
        # optimizer step); in eager mode it is the cheapest answer.
        compiler = getattr(torch, "compiler", None)
        self.is_compiling = getattr(compiler, "is_dynamo_compiling", None) or is_compiling
        # torch.optim deletes its submodules' names; the module itself is in sys.modules.
        module = sys.modules.get("torch.optim.optimizer") or getattr(getattr(torch, "optim", None), "optimizer", None)
        pre = getattr(module, "register_optimizer_step_pre_hook", None)
        post = getattr(module, "register_optimizer_step_post_hook", None)
        if not callable(pre) or not callable(post):
            self.handles = ()
            return False
        first = pre(self._pre_step)
        try:
            self.handles = (first, post(self._post_step))
        except BaseException:
            first.remove()
            raise
        return True

    def remove_optimizer_hooks(self) -> None:
        handles, self.handles = self.handles, None
        for handle in handles or ():
            handle.remove()

    # -- publisher --------------------------------------------------------------------------------
    def update(self, now_mono: float) -> None:
        """Called at periodic publishes: keep one mark per 1/16 of the window (as RateWindow does)."""
        s = self.samples
        start = now_mono - RATE_WINDOW_S
        while len(s) > 1 and s[1][0] <= start:
            s.popleft()
        if now_mono - s[-1][0] >= RATE_WINDOW_S / RATE_SAMPLES_PER_WINDOW:
            s.append((now_mono, self.mark))

    def figures(self) -> tuple[dict[str, Any] | None, float | None]:
        """(payload ``steps``, ``syncs_per_step``) over the window: (None, None) before the first step
        boundary; ``window_s`` is the wall time of the steps counted, 0.0 when there are none."""
        cur = self.mark
        if cur is None:
            return None, None
        base = self.samples[0][1]
        if base is None or base[_LEVEL] != cur[_LEVEL]:
            base = self.level_start  # the current source took over inside the window
        # Everything below depends on the marks alone, never on the time of the call: a periodic
        # publish with no new step publishes the same figures, which readers then skip.
        out = {
            "window_s": 0.0,
            "steps": 0,
            "step_s": None,
            "data_wait_fraction": None,
            "forward_fraction": None,
            "optimizer_fraction": None,
            "backward_fraction": None,
            "other_fraction": None,
        }
        if base is None:
            return out, None
        n = cur[_STEPS] - base[_STEPS]
        wall_s = cur[_T] - base[_T]
        if n <= 0 or wall_s <= 0.0:
            return out, None
        out["window_s"] = float(wall_s)  # from the first to the last step boundary counted
        out["steps"] = int(n)
        out["step_s"] = float(wall_s / n)
        if cur[_LEVEL] == FRAMEWORK:
            wait_s, waits = cur[_FWAIT] - base[_FWAIT], cur[_FWAITS] - base[_FWAITS]
        else:
            wait_s, waits = cur[_LWAIT] - base[_LWAIT], cur[_LWAITS] - base[_LWAITS]
        known = 0.0
        for key, spent_s, seen in (
            ("data_wait_fraction", wait_s, waits > 0),
            ("forward_fraction", cur[_FWD] - base[_FWD], cur[_FWD] > base[_FWD]),
            ("optimizer_fraction", cur[_OPT] - base[_OPT], cur[_OPT] > base[_OPT]),
        ):
            if seen:
                fraction = float(min(1.0, max(0.0, spent_s / wall_s)))
                out[key] = fraction
                known += fraction
        out["other_fraction"] = other = float(max(0.0, 1.0 - known))
        if cur[_BWD] > base[_BWD]:  # a part of the other: the four still sum to one
            out["backward_fraction"] = float(min(other, (cur[_BWD] - base[_BWD]) / wall_s))
        syncs = None
        if cur[_SYNC_EPOCH] and base[_SYNC_EPOCH] == cur[_SYNC_EPOCH]:
            syncs = float((cur[_SYNCS] - base[_SYNCS]) / n)
        return out, syncs


CLOCK = StepClock()
