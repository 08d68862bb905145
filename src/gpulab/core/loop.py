"""The fit, written once for every engine: epochs of steps, checkpoints, validation, the result.

    fit = engine's set-up -> nothing left? -> for each epoch: micro-batches (accumulation windows, one
          optimizer step each: log, scheduled checkpoint, on_step_end) -> epoch-end checkpoint, then
          validation -> final log and checkpoint -> result, on_fit_end, diagnosis

An engine (the torch ``Trainer``, the TensorFlow ``TfTrainer``, a test's NumPy engine) supplies only what is
its own through ``EngineStep`` (``engine_step.py``): its batches, one micro-batch's forward and backward
(and the optimizer step when it closes a window), the logged loss, its state on disk, validation's sums,
its device facts. The loop owns the order, the counters, the callbacks, the clock and what a failure or a
preemption says.

Per micro-batch the loop adds two integer operations and one call; it reads nothing from the device: losses
stay in the engine and are read every ``log_every`` steps, and the clock synchronises only at its edges.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from gpulab.core.callbacks.base import CallbackList
from gpulab.core.clock import Clock, DataWaitMeter
from gpulab.core.engine_step import EngineStep
from gpulab.core.failure import FitPosition, add_failure_note, failure_line
from gpulab.core.loop_state import FitView, LoopState
from gpulab.core.preemption import preemption_report
from gpulab.core.state import FitResult
from gpulab.errors import DataError, GpulabError, ValidationFailed
from gpulab.hardware.load import OtherCpuLoad, load_during
from gpulab.measure.diagnosis import diagnose_fit


def fit(engine: EngineStep, setup: Callable[[], CallbackList]) -> FitResult:
    """Set up (the engine's, which returns the fit's callbacks), then the loop; a failure is told to the
    callbacks and noted (``failure.py``). What the loop keeps is its own (``LoopState``), not the engine's."""
    own = LoopState()
    loop = FitLoop(engine, own)
    try:
        own.callbacks = setup()
        return loop.run()
    except BaseException as error:
        if own.callbacks is not None:
            own.callbacks.on_exception(loop.view, engine.state, error)
            loop.note_failure(error)
        raise


class FitLoop:
    """One fit's loop over ``engine`` (see the module); it writes ``own``, never the engine."""

    def __init__(self, engine: EngineStep, own: LoopState) -> None:
        self.engine, self.own = engine, own
        self.view = FitView(engine, own)  # what the callbacks receive as their trainer
        self.position = FitPosition()  # named under the traceback if the fit fails
        self.val_metrics: dict[str, float] = {}

    # -- the story ------------------------------------------------------------------------------------
    def run(self) -> FitResult:
        e, own, view = self.engine, self.own, self.view
        self.state, self.settings, self.callbacks = e.state, e.settings, own.callbacks
        if e.resumed_from is not None and self._done():
            return self._nothing_left()
        state, callbacks = self.state, self.callbacks
        e.reset_peak_memory()
        self.clock = Clock(e.synchronize)
        self.data_wait = DataWaitMeter()
        self.others = OtherCpuLoad()  # did other processes compete for the CPU during the run?
        e.on_loop_start(self.clock)
        own.context = e.fit_context()
        callbacks.on_fit_start(view, state)
        n = e.plan.batches_per_epoch
        while not self._done():
            ran_out = self._train_epoch()
            self.position.between()
            epoch_complete = ran_out or (n is not None and state.batch_in_epoch >= n)
            # Preempted (stop_signal): no final log or validation, only the checkpoint, whose loss window
            # stays whole so that the resumed run logs what this one would have.
            finishing = self._done() and state.stop_signal is None
            if finishing:
                self._flush_log()  # before the epoch counter moves, so the record names its own epoch
            # Checkpoint first, then validate: a validation that fails (a user's metric, an eval path
            # that differs) never costs the epoch's training.
            # Checkpoints and validation are not training: their time is left out of the clock, so
            # samples/s, MFU and the diagnosis describe the steps (a compiled GPT-2-small run once read
            # "host-bound" at 8 % MFU, its validations and checkpoint writes counted as idle steps).
            if epoch_complete:
                self._save_at_next_epoch()  # resumes at the next epoch's start
            elif finishing and not self._saved_this_step():
                self._save()
            if (epoch_complete or finishing) and e.has_validation:
                with self.clock.excluding():
                    self.val_metrics = self._validate_after_save()
            if epoch_complete:
                callbacks.on_epoch_end(view, state)
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        if state.stop_signal is None:
            self._flush_log()
        if not self._saved_this_step():
            self._save()
        result = self._result()
        e.before_fit_end(result)
        callbacks.on_fit_end(view, state, result)  # MFU and NVML callbacks add their reports to extras
        diagnosis = diagnose_fit(result, own.context.device_type, e.native_dtypes(), own.context.engine)
        result.extras["diagnosis"] = diagnosis.to_json()
        return result

    # -- steps ----------------------------------------------------------------------------------------
    def _train_epoch(self) -> bool:
        """Train on this epoch's remaining batches; True when they ran out (False: the fit is done)."""
        e, state = self.engine, self.state
        plan, micro_step = e.plan, e.micro_step
        start = state.batch_in_epoch
        batches = self.data_wait.wrap(e.epoch_batches())
        for batch in self.position.track("training", batches, start):
            i = state.batch_in_epoch
            window = plan.window(i)
            closes = plan.closes(i, window)
            state.samples_seen += micro_step(batch, window, closes)
            state.batch_in_epoch = i + 1
            if closes:
                self._after_step()
                if self._done():
                    return False
        if plan.batches_per_epoch is None:
            self._end_of_stream(state.batch_in_epoch - start)
        return True

    def _end_of_stream(self, batches: int) -> None:
        """A stream's epoch ended: refuse one that gave nothing (the fit would never reach max_steps), and
        drop a partial accumulation window (stepping on it would need a collective the others never join)."""
        state, per_step = self.state, self.engine.plan.batches_per_step
        if batches == 0:
            raise DataError(
                f"the training stream gave no batch in epoch {state.epoch}, so max_steps "
                f"({state.total_steps}) cannot be reached; make its __iter__ start over on each pass"
            )
        pending = state.batch_in_epoch % per_step
        if pending:
            self.engine.drop_window()
            if self.engine.is_rank_zero:
                warnings.warn(
                    f"the training stream ended {pending} micro-batch(es) into an accumulation window of "
                    f"{per_step}: their gradients were dropped (no optimizer step)",
                    stacklevel=3,
                )

    def _after_step(self) -> None:
        """What follows every optimizer step: counters, clock, log, scheduled checkpoint, callbacks."""
        e, state = self.engine, self.state
        state.global_step += 1
        if self.clock.t0 is None:  # the first step pays compile and autotune: not timed
            state.first_loss = e.first_step()  # one read, where the clock synchronises anyway
            self.clock.start(state.samples_seen)
            self.data_wait.seconds = 0.0  # nor its data (worker start-up): waits count from here too
        if state.global_step % self.settings.log_every == 0:
            self._flush_log()
        if e.checkpointer is not None and e.plan.checkpoint_due(state.global_step):
            self._save()
        self.callbacks.on_step_end(self.view, state)

    def _flush_log(self) -> None:
        """Read the training metrics (one host sync) and hand them to the loggers."""
        e, state = self.engine, self.state
        loss = e.read_loss()
        if loss is None:
            return
        metrics = {"loss": loss, "lr": e.learning_rate()}
        speed = self.clock.interval_rate(state.samples_seen)
        if speed is not None:
            metrics["samples_per_s"] = speed * e.sample_scale
        state.metrics.update(metrics)
        if e.is_rank_zero:
            self.callbacks.on_log(self.view, state, metrics)  # may add to metrics (mfu, GPU utilisation) ...
        e.history.append({"step": state.global_step, "epoch": state.epoch, **metrics})  # ... kept here

    def _done(self) -> bool:
        state = self.engine.state
        return state.global_step >= state.total_steps or state.should_stop

    # -- checkpoints and validation ---------------------------------------------------------------------
    def _save(self) -> None:
        e = self.engine
        if e.checkpointer is not None and self.settings.checkpoints:
            with self.clock.excluding():
                self.own.last_checkpoint = e.save_checkpoint()

    def _save_at_next_epoch(self) -> None:
        """The checkpoint records the state as the next epoch starts; validation and ``on_epoch_end`` still
        see the epoch that ended."""
        state = self.state
        kept = state.epoch, state.batch_in_epoch
        state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        try:
            self._save()
        finally:
            state.epoch, state.batch_in_epoch = kept

    def _saved_this_step(self) -> bool:
        ckpt = self.engine.checkpointer
        return ckpt is None or ckpt.last_saved_step == self.state.global_step

    def _validate_after_save(self) -> dict[str, float]:
        """Validation after the checkpoint; a failure names itself and the checkpoint that keeps the
        training (the user's own error is its cause); a best metric is recorded for ``keep_best``."""
        e, state = self.engine, self.state
        try:
            metrics = e.validate(lambda batches: self.position.track("validation", batches))
        except Exception as exc:
            raise ValidationFailed(self._validation_failure(exc)) from exc
        if not metrics:  # no validation batch
            return {}
        state.metrics.update(metrics)
        e.history.append({"step": state.global_step, "epoch": state.epoch, **metrics})
        if e.is_rank_zero:
            self.callbacks.on_validation_end(self.view, state, metrics)
        if self._wrote_this_step() and e.is_rank_zero and self.settings.keep_best:
            e.checkpointer.record_validation(state.global_step, metrics)
        return metrics

    def _wrote_this_step(self) -> bool:
        ckpt = self.engine.checkpointer
        return (
            ckpt is not None and self.settings.checkpoints and ckpt.last_saved_step == self.state.global_step
        )

    def _validation_failure(self, exc: BaseException) -> str:
        state, last = self.state, self.own.last_checkpoint
        where = (
            f"checkpoint {last} holds the training up to it: fix the validation, then continue with "
            "--resume latest"
            if self._wrote_this_step() and last is not None
            else "no checkpoint holds this step (checkpoints are off)"
        )
        return (
            f"validation failed at step {state.global_step} (epoch {state.epoch}): "
            f"{self.engine.describe_error(exc)}; {where}"
        )

    # -- failures -------------------------------------------------------------------------------------
    def note_failure(self, error: BaseException) -> None:
        """Under a bug's traceback (a user's forward raising, a batch of another shape, memory running
        out), one line naming the step, the batch and the checkpoint to resume from. A GpulabError is
        already one line that says what to do; an interrupt is not a failure. A failed validation is
        noted on the user's own error under it (the traceback the CLI prints): its batch and shapes."""
        e = self.engine
        if isinstance(error, ValidationFailed) and isinstance(error.__cause__, Exception):
            error = error.__cause__
        if not isinstance(error, Exception) or isinstance(error, GpulabError):
            return
        try:
            line = failure_line(
                self.position,
                step=e.state.global_step,
                epoch=e.state.epoch,
                batches_per_epoch=e.plan.batches_per_epoch,
                checkpoint=self.own.last_checkpoint or e.resumed_from,
                checkpoints_off=self._checkpoints_off(),
                out_of_memory=e.is_out_of_memory(error),
                describe=e.describe_batch,
            )
        except Exception:  # an odd batch we cannot describe: never put our error in place of the user's
            return
        add_failure_note(error, line)

    def _checkpoints_off(self) -> str | None:
        if self.engine.checkpointer is None:
            return "no out_dir or checkpoint_dir to write them to"
        return None if self.engine.settings.checkpoints else "checkpoints are off"

    # -- results --------------------------------------------------------------------------------------
    def _result(self) -> FitResult:
        e, state = self.engine, self.state
        seconds, rate = self.clock.total(state.samples_seen)
        peak, memory = e.memory()
        return FitResult(
            **self._where_and_how_far(),
            final_loss=state.metrics.get("loss"),
            samples_per_s=None if rate is None else rate * e.sample_scale,
            peak_memory_bytes=peak,
            train_seconds=seconds,
            val_loss=self.val_metrics.get("val_loss"),
            accuracy=self.val_metrics.get("val_accuracy"),
            skipped_steps=e.skipped_steps(),
            compiled=e.compiled(),
            history=e.history,
            extras={
                **e.extras,
                **e.result_extras(),
                "data_wait_s": self.data_wait.seconds,
                # left out of samples_per_s and MFU: checkpoints, validation, recompiles after step 1
                "untimed_s": self.clock.excluded,
                "memory": memory,
                "machine_load": load_during(
                    self.others, on_cpu=self.own.context.device_type == "cpu", threads_hint=e.threads_hint
                ),
                **({"preempted": self._preempted()} if state.stop_signal is not None else {}),
            },
        )

    def _nothing_left(self) -> FitResult:
        """The checkpoint resumed from already reached the planned length: no callback starts (no
        metrics.jsonl line, no TensorBoard events file), no step, no log, no save.

        The result carries the checkpoint's own figures and ``extras["nothing_to_do"]``, one line saying so
        (``gpulab train`` prints it and leaves the finished run's files as they are)."""
        e, state = self.engine, self.state
        further = (  # a schedule cannot be stretched (the checkpoint refuses another length)
            "its LR schedule is complete: start a new run to train further"
            if e.has_schedule
            else "raise max_steps (or epochs) to train further"
        )
        message = (
            f"nothing to do: {e.resumed_from} is at step {state.global_step} of {state.total_steps}; "
            + further
        )
        return FitResult(
            **self._where_and_how_far(),
            final_loss=state.metrics.get("loss"),
            samples_per_s=None,
            peak_memory_bytes=0,
            train_seconds=0.0,
            val_loss=state.metrics.get("val_loss"),
            accuracy=state.metrics.get("val_accuracy"),
            extras={**e.extras, "nothing_to_do": message},
        )

    def _where_and_how_far(self) -> dict[str, Any]:
        """The result's fields every fit has, run or not: device, precision, strategy, progress."""
        state = self.state
        return {
            **self.engine.result_facts(),
            "steps": state.global_step,
            "epochs": state.epoch + (1 if state.batch_in_epoch else 0),
        }

    def _preempted(self) -> dict[str, Any]:
        saved = self.own.last_checkpoint if self._wrote_this_step() else None
        return preemption_report(self.state.stop_signal, self.state.global_step, saved)
