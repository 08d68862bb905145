"""Run in its own process by test_tune_tf.py: ``gpulab tune`` on the TensorFlow engine (the mlp recipe,
tiny), then ``gpulab train --config tuned.yaml`` in the same process (TensorFlow's import costs seconds).
Prints one JSON line: the tune's tune.json and the train's summary.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpulab.cli import main
from gpulab.tune.report import write_outputs
from gpulab.tune.search import Search

out = Path(sys.argv[1])
user = {"recipe": "mlp", "engine": "tensorflow", "options": {"samples": 400}}
# min_interval_s=0: trials of a few steps (the CLI lengthens them to time each repeat for >= 0.2 s).
result = Search(user, budget_s=90, steps=6, min_interval_s=0, log=lambda line: print(line)).run()
tuned, tune_json, _ = write_outputs(out / "tune", user, result)
code = main(["train", "--config", str(tuned), "--out", str(out / "run"), "--set", "max_steps=3",
             "--set", "progress=false"])  # fmt: skip
summary = json.loads((out / "run" / "summary.json").read_text()) if code == 0 else None
print(
    "RESULT "
    + json.dumps({"tune": json.loads(tune_json.read_text()), "train_code": code, "summary": summary})
)
