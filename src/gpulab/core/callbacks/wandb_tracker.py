"""Metrics and settings to Weights & Biases (``trackers: [wandb]``, ``pip install 'gpulab[wandb]'``).

The run's files go under ``OUT/wandb/`` (``WANDB_MODE=offline`` or ``wandb.mode: offline`` writes the whole
run there, for ``wandb sync`` later, and needs no network). The config is the resolved settings and the
recipe, flattened; metrics are what the JSONL logger writes, handed over in batches at most every
``hand_over_s`` seconds (W&B's own process then sends them); the FitResult's figures become the run's
summary (the last row committed first: see ``_commit_last``). A run of its own (``reinit="create_new"``): a
user's run in the same process is left alone.

Resume: the run id goes to ``OUT/trackers.json``; a resumed fit opens the same W&B run id again
(``resume="allow"``), first sends the rows ``metrics.jsonl`` holds and W&B lacks (the steps in the run's
own files under ``OUT/wandb/``, ``wandb_history.py``, or online below its starting step: a SIGKILL keeps
the last rows from it), and skips the rows W&B has already, so its history goes on from the checkpoint's
step with no hole and no duplicate (``tracker_replay.py``).

W&B's helper process is started outside the run's process tree (``wandb_service.py``): a signal meant for
the run (scancel, ``kill -TERM`` of the run and its children) does not reach it, so it takes every row
until gpulab closes the run after its checkpoint. Where the signal reaches it all the same (SLURM with
proctrack/cgroup signals every process of the job), the rows it lost are written for ``wandb sync`` and the
run says so in one line (``wandb_rescue.py``); a resume sends them itself.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

from gpulab.core.callbacks.hand_over import HandOverLogger
from gpulab.core.callbacks.tracker_record import TrackerIds, cannot_start, closing, flat_settings, numeric
from gpulab.core.callbacks.tracker_replay import Acked, recorded
from gpulab.core.callbacks.wandb_history import held_steps
from gpulab.core.callbacks.wandb_rescue import forget, rescue
from gpulab.core.callbacks.wandb_service import start_outside_the_run
from gpulab.errors import GpulabWarning
from gpulab.redaction import redacted_argv

DEFAULT_PROJECT = "gpulab"


class WandbLogger(HandOverLogger):
    def __init__(self, settings: Any, out_dir: str | None, hand_over_s: float = 5.0) -> None:
        super().__init__(hand_over_s)
        self.settings = settings
        self.ids = TrackerIds(out_dir)
        self.out_dir = out_dir
        self.run = None
        self._acked = Acked()
        self._logged: int | None = None  # the last step handed to W&B
        self._helper: int | None = None  # wandb-core's pid, when gpulab started it

    def on_fit_start(self, trainer, state):
        import wandb

        entry = self.ids.read("wandb") if trainer.context.resumed_from is not None else None
        if self.out_dir:
            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
        self._helper = start_outside_the_run(wandb)
        try:
            with redacted_argv():  # W&B saves the program's arguments in the run (and uploads them)
                self.run = self._init(wandb, trainer, entry)
        except Exception as exc:  # no login for online mode, a server that does not answer
            mode = self.settings.mode or os.environ.get("WANDB_MODE") or "online"
            fix = "run `wandb login`, or set WANDB_MODE=offline (wandb.mode: offline)"
            raise cannot_start("wandb", f"mode {mode}", exc, fix) from exc
        self.ids.write("wandb", run_id=self.run.id, project=self.run.project or "")
        self._last = time.monotonic()
        if trainer.context.resumed_from is not None:
            self._catch_up(state.global_step)

    def _catch_up(self, step: int) -> None:
        """A resumed run: the rows metrics.jsonl holds up to the checkpoint and W&B lacks, sent now."""
        online = (getattr(self.run, "starting_step", 0) or 0) - 1  # the server's last step, resumed online
        self._acked = Acked(steps=held_steps(self.out_dir, self.run.id), through_step=online)
        for logged_step, metrics in recorded(self.out_dir, step):
            self._record(logged_step, metrics)
        self._hand_over()
        forget(self.out_dir)  # rows an earlier attempt's helper lost: sent just now

    def _init(self, wandb: Any, trainer: Any, entry: dict[str, str] | None) -> Any:
        return wandb.init(
            project=self.settings.project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            dir=self.out_dir,
            id=entry["run_id"] if entry else None,
            resume="allow" if entry else None,
            name=Path(self.out_dir).name if self.out_dir else trainer.context.trajectory.get("recipe"),
            config=flat_settings(trainer.context.settings, trainer.context.trajectory),
            allow_val_change=True,  # a resumed run may change max_steps
            mode=self.settings.mode,
            reinit="create_new",
            settings=wandb.Settings(console="off"),  # gpulab prints its own lines; no stdout wrapping
        )

    def _record(self, step: int, metrics: dict) -> None:
        values = self._acked.missing(step, numeric(metrics))
        if not values:
            return
        if self._pending and self._pending[-1][0] == step:  # validation at a logged step: one row
            self._pending[-1][1].update(values)
        else:
            self._pending.append((step, values))
        self._due()

    def _write(self, pending: list[tuple[int, dict[str, float]]]) -> None:
        for step, values in pending:
            self.run.log(values, step=step)
            self._logged = step

    def _commit_last(self) -> None:
        """W&B keeps the last step's row open for more values and writes it, and its last values into the
        run's summary, at ``finish``: after, and over, the summary gpulab sets (a run showed its last
        interval's 30,301 samples/s for the 2,493 gpulab measured). Committed first, ours stand."""
        self._hand_over()
        if self._logged is not None:
            self.run.log({}, step=self._logged, commit=True)

    def _helper_gone(self) -> bool:
        """Whether the wandb-core gpulab started has ended (a stop signal reached it too)."""
        if self._helper is None:
            return False
        try:
            os.kill(self._helper, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def _lost_helper(self, step: int) -> None:
        """wandb-core died with the rows it had not written: they go to ``OUT/wandb-unsent`` (one line)."""
        run_id, project = self.run.id, self.run.project or ""
        self.run = None
        try:
            count, where = rescue(str(self.out_dir), run_id, project, step)
        except Exception as exc:
            what = f"{exc}; a resume sends them from metrics.jsonl"
        else:
            if not count:
                return
            what = f"{count} row(s) are kept in {where}: a resume sends them, else `wandb sync {where}`"
        warnings.warn(f"wandb: its helper was stopped with the run before it wrote its last rows; {what}",
                      GpulabWarning, stacklevel=2)  # fmt: skip

    def on_fit_end(self, trainer, state, result):
        if self.run is None:
            return
        # with an out_dir the rows W&B lacks can be written again (metrics.jsonl); without, as before
        if self.out_dir and (self._helper_gone() or _connection_lost(self._commit_last)):
            self._lost_helper(state.global_step)
            return
        run, preempted = self.run, state.stop_signal is not None
        if not self.out_dir:
            closing("wandb", self._commit_last)
        closing("wandb", lambda: run.summary.update(numeric(result.to_json())))
        if preempted:  # W&B shows the run as preempted until a resume continues it
            closing("wandb", run.mark_preempting)
        closing("wandb", lambda: run.finish(exit_code=0))
        self.run = None

    def on_exception(self, trainer, state, error):
        if self.run is None:
            return
        if self.out_dir and self._helper_gone():
            self._lost_helper(state.global_step)
            return
        run = self.run
        closing("wandb", self._hand_over)
        closing("wandb", lambda: run.finish(exit_code=1))
        self.run = None


def _connection_lost(send: Any) -> bool:
    """``send()``; True when the connection to wandb-core is lost (it was killed); another error is the
    one warning ``closing`` writes."""
    try:
        send()
    except ConnectionError:
        return True
    except Exception as exc:
        closing("wandb", lambda error=exc: _raise(error))
    return False


def _raise(exc: Exception) -> None:
    raise exc
