"""Run in its own process by test_tf_resume.py: validation after the checkpoint on the TensorFlow engine. A
metric that raises at the first epoch's end (step 5) leaves that epoch's checkpoint, and the run resumed
from it with a working metric equals a straight run."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.recipes import mlp
from gpulab.engines.tensorflow.trainer import TfTrainer
from gpulab.errors import ValidationFailed

require_tensorflow()
ROOT = Path(sys.argv[1])
# 160 training samples at batch 32: 5 batches an epoch.
BASE = {"progress": False, "tensorboard": False, "batch_size": 32, "log_every": 5, "checkpoint_every": None}


def fit(out, recipe, resume=None):
    trainer = TfTrainer(out_dir=str(ROOT / out), max_steps=12, trajectory={"recipe": "mlp"}, **BASE)
    trainer.fit(recipe, resume=resume)
    return trainer


def broken_metric(y, output):
    raise KeyError("my_metric")


try:
    fit("valfail", dataclasses.replace(mlp({"samples": 200}), correct_fn=broken_metric))
    failure = {}
except ValidationFailed as exc:
    failure = {"message": str(exc)}
resumed = fit("valfail", mlp({"samples": 200}), resume="latest")
straight = fit("valstraight", mlp({"samples": 200}))
weights = zip(straight.model.get_weights(), resumed.model.get_weights(), strict=True)
out = {
    **failure,
    "latest_at_failure": resumed.resumed_from and Path(resumed.resumed_from).name,
    "weights_equal": all(np.array_equal(a, b) for a, b in weights),
}
print("RESULT " + json.dumps(out))
