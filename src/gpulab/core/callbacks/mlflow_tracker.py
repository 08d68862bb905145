"""Metrics, settings and files to MLflow (``trackers: [mlflow]``, ``pip install 'gpulab[mlflow]'``).

Through an ``MlflowClient`` only (no fluent ``mlflow.start_run``): a user's own active run, and MLflow's
process-wide state, are left alone. Parameters are the resolved settings and the recipe, flattened
(``mlflow.tracking_uri``, ``options.width``); metrics are what the JSONL logger writes, at each logged step,
handed to MLflow in batches at most every ``hand_over_s`` seconds and at the end, written by MLflow's own
asynchronous-logging thread (the values were read from the device already: nothing here synchronises it);
at the end, the fit's own figures (summary.json's samples/s, train seconds, ...) under ``run/``.
At the end of a fit the last checkpoint becomes an artifact (``checkpoints/step-N/``) when it is at most
``mlflow.checkpoint_max_mb``; ``gpulab train`` attaches summary.json and metrics.jsonl once written.

Resume: the run id goes to ``OUT/trackers.json``; a resumed fit reopens that run in the same store, so
the MLflow run goes on where the stopped one left off: the values ``metrics.jsonl`` holds and the run lacks
(a batch not yet written when SIGKILL came) are sent first, and those it holds are not sent again
(``tracker_replay.py``).
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

from gpulab.core.callbacks.hand_over import HandOverLogger
from gpulab.core.callbacks.tracker_record import (
    TrackerIds,
    cannot_start,
    closing,
    flat_settings,
    numeric,
    run_figures,
)
from gpulab.core.callbacks.tracker_replay import Acked, recorded
from gpulab.errors import GpulabError, GpulabWarning
from gpulab.redaction import redact, redacting_output

DEFAULT_EXPERIMENT = "gpulab"
_BATCH_METRICS = 1000  # MLflow's limits per log_batch call
_BATCH_PARAMS = 100
_PARAM_CHARS = 6000


class MlflowLogger(HandOverLogger):
    def __init__(self, settings: Any, out_dir: str | None, hand_over_s: float = 5.0) -> None:
        super().__init__(hand_over_s)
        self.settings = settings
        self.ids = TrackerIds(out_dir)
        self.out_dir = out_dir
        self.client = None
        self.run_id: str | None = None
        self._queued: list[Any] = []  # MLflow's RunOperations of batches still being written
        self._acked = Acked()

    # -- the run --------------------------------------------------------------------------------------
    def on_fit_start(self, trainer, state):
        import mlflow
        from mlflow import MlflowClient

        self.uri = self.settings.tracking_uri or mlflow.get_tracking_uri()  # MLFLOW_TRACKING_URI honoured
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            self.run_id = self._reopen() if trainer.context.resumed_from is not None else None
            if self.run_id is None:
                self.run_id = self._create(trainer)
            self._log_params(flat_settings(trainer.context.settings, trainer.context.trajectory))
            if trainer.context.resumed_from is not None:
                self._catch_up(state.global_step)
        except GpulabError:
            raise
        except Exception as exc:  # a server that does not answer, a store it cannot open
            fix = "check mlflow.tracking_uri / MLFLOW_TRACKING_URI"
            raise cannot_start("mlflow", self.uri, exc, fix) from exc  # redacted there
        self.ids.write("mlflow", run_id=self.run_id, tracking_uri=redact(self.uri))  # no credential
        self._last = time.monotonic()

    def _create(self, trainer) -> str:
        name = self.settings.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            try:
                experiment_id = self.client.create_experiment(name)
            except Exception:  # created by another run meanwhile
                experiment_id = self.client.get_experiment_by_name(name).experiment_id
        recipe = trainer.context.trajectory.get("recipe")
        run_name = Path(self.out_dir).name if self.out_dir else recipe
        tags = {"gpulab.engine": trainer.context.settings.engine}
        if recipe:
            tags["gpulab.recipe"] = str(recipe)
        if self.out_dir:
            tags["gpulab.out_dir"] = str(Path(self.out_dir).resolve())
        return self.client.create_run(experiment_id, tags=tags, run_name=run_name).info.run_id

    def _reopen(self) -> str | None:
        """The run this run directory logged to before, in this store; None (with a warning) otherwise."""
        entry = self.ids.read("mlflow")
        if entry is None:
            return None
        if entry.get("tracking_uri") != redact(self.uri):  # recorded without its credentials
            warnings.warn(
                f"MLflow: the resumed run logged to {entry.get('tracking_uri')!r}, this one to "
                f"{redact(self.uri)!r}: "
                "a new MLflow run starts",
                GpulabWarning,
                stacklevel=2,
            )
            return None
        try:
            self.client.get_run(entry["run_id"])
        except Exception as exc:
            warnings.warn(
                f"MLflow: run {entry['run_id']} to resume is not in {redact(self.uri)} "
                f"({type(exc).__name__}): "
                "a new MLflow run starts",
                GpulabWarning,
                stacklevel=2,
            )
            return None
        self.client.update_run(entry["run_id"], status="RUNNING")
        return entry["run_id"]

    def _log_params(self, flat: dict[str, Any]) -> None:
        from mlflow.entities import Param, RunTag

        # A resumed run keeps its parameters (MLflow refuses to change one); a changed value is a tag.
        logged = self.client.get_run(self.run_id).data.params
        params, tags = [], []
        for key, value in flat.items():
            text = str(value)[:_PARAM_CHARS]
            if key not in logged:
                params.append(Param(key, text))
            elif logged[key] != text:
                tags.append(RunTag(f"gpulab.resumed_with.{key}", text))
        for i in range(0, max(len(params), len(tags)), _BATCH_PARAMS):
            self.client.log_batch(
                self.run_id, params=params[i : i + _BATCH_PARAMS], tags=tags[i : i + _BATCH_PARAMS]
            )

    # -- metrics --------------------------------------------------------------------------------------
    def _catch_up(self, step: int) -> None:
        """A resumed run: what metrics.jsonl holds up to the checkpoint and this run lacks, sent now."""
        held = self.client.get_run(self.run_id).data.metrics
        history = self.client.get_metric_history
        self._acked = Acked({(key, m.step) for key in held for m in history(self.run_id, key)})
        for logged_step, metrics in recorded(self.out_dir, step):
            self._record(logged_step, metrics)
        self._hand_over()

    def _record(self, step: int, metrics: dict) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = self._acked.missing(step, numeric(metrics))
        self._pending += [Metric(k, v, now, step) for k, v in values.items()]
        self._due()

    def _write(self, pending: list[Any]) -> None:
        # MLflow's asynchronous logging: its own thread writes the batch. Synchronous, a batch cost the
        # training loop 64-245 ms (1-100 records, SQLite store, the 2-core VM at load 15); queued, 0.4-10 ms.
        for i in range(0, len(pending), _BATCH_METRICS):
            batch = pending[i : i + _BATCH_METRICS]
            self._queued.append(self.client.log_batch(self.run_id, metrics=batch, synchronous=False))

    def _flush(self) -> None:
        """Every record written (and a failed write raised) before the run is ended."""
        self._hand_over()
        queued, self._queued = self._queued, []
        for operation in queued:
            operation.wait()

    # -- the end --------------------------------------------------------------------------------------
    def on_fit_end(self, trainer, state, result):
        if self.client is None or self.run_id is None:
            return
        preempted = state.stop_signal is not None
        self._record(state.global_step, run_figures(result))  # the figures gpulab prints, under run/
        closing("mlflow", self._flush)
        checkpoint = getattr(trainer, "last_checkpoint", None)
        if checkpoint is not None and not preempted:  # a preempted job has seconds left: no upload
            closing("mlflow", lambda: self._log_checkpoint(Path(checkpoint)))
        closing("mlflow", lambda: self._tag_resolved(result))
        status = "KILLED" if preempted else "FINISHED"
        closing("mlflow", lambda: self._terminate(status))

    def _terminate(self, status: str) -> None:
        """The run ended; MLflow's own ``View run ... at: URL`` lines printed with the URL's credentials
        masked (it prints the tracking URI as given, password and ``?token=`` included)."""
        with redacting_output():
            self.client.set_terminated(self.run_id, status)

    def _tag_resolved(self, result) -> None:
        """What "auto" resolved to (the parameters hold the settings as given)."""
        for key in ("device", "precision", "strategy"):
            if getattr(result, key, None) is not None:
                self.client.set_tag(self.run_id, f"gpulab.{key}", str(getattr(result, key)))

    def on_exception(self, trainer, state, error):
        if self.client is None or self.run_id is None:
            return
        closing("mlflow", self._flush)
        status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
        closing("mlflow", lambda: self._terminate(status))

    def _log_checkpoint(self, path: Path) -> None:
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0
        limit = self.settings.checkpoint_max_mb * 2**20
        if not size or size > limit:
            why = "empty" if not size else f"{size / 2**20:.0f} MiB > mlflow.checkpoint_max_mb"
            self.client.set_tag(self.run_id, "gpulab.checkpoint", f"{path} (not uploaded: {why})")
            return
        self.client.log_artifacts(self.run_id, str(path), f"checkpoints/{path.name}")
        self.client.set_tag(self.run_id, "gpulab.checkpoint", f"checkpoints/{path.name}")

    def attach(self, paths: list[Path]) -> None:
        """Files written after the fit (summary.json, metrics.jsonl, plots) as artifacts of the run."""
        if self.client is None or self.run_id is None:
            return
        for path in paths:
            self.client.log_artifact(self.run_id, str(path))
