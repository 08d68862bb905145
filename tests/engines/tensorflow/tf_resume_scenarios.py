"""Run in its own process by test_tf_resume.py: checkpoints and exact resume on the TensorFlow engine,
every check printed as one JSON line (one TensorFlow import for all)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.recipes import digits, mlp
from gpulab.engines.tensorflow.trainer import TfTrainer
from gpulab.errors import CheckpointError

require_tensorflow()
ROOT = Path(sys.argv[1])
# 160 training samples at batch 32: 5 batches an epoch, so step 7 stops mid-epoch 1 and step 12 is in epoch 2.
BASE = {"progress": False, "tensorboard": False, "batch_size": 32, "log_every": 5, "checkpoint_every": 3}


def fit(out, max_steps, resume=None, recipe="mlp", **settings):
    trainer = TfTrainer(
        out_dir=str(ROOT / out), max_steps=max_steps, trajectory={"recipe": recipe}, **{**BASE, **settings}
    )
    result = trainer.fit(mlp({"samples": 200}) if recipe == "mlp" else digits({}), resume=resume)
    return trainer, result


def same(a, b):
    return all(
        np.array_equal(x, y) for x, y in zip(a.model.get_weights(), b.model.get_weights(), strict=True)
    )


def opt_state(trainer):
    return [v.numpy() for v in trainer.optimizer.variables]


def refusal(out, resume, max_steps=12, **settings):
    try:
        fit(out, max_steps, resume=resume, **settings)
    except CheckpointError as exc:
        return str(exc)
    return None


out: dict = {}
straight, s_result = fit("straight", 12, keep_last=None)
fit("resumed", 7, keep_last=2)  # "interrupted" after step 7 (its end-of-fit checkpoint)
root = ROOT / "resumed" / "checkpoints"
out["after_stop"] = {
    "dirs": sorted(p.name for p in root.iterdir()),
    "latest": (root / "latest").read_text().strip(),
    "files": sorted(p.name for p in (root / "step-00000007").iterdir()),
}
resumed, r_result = fit("resumed", 12, resume="latest", keep_last=2)
out["exact"] = {
    "weights_equal": same(straight, resumed),
    "optimizer_equal": all(
        np.array_equal(a, b) for a, b in zip(opt_state(straight), opt_state(resumed), strict=True)
    ),
    "final_loss": [s_result.final_loss, r_result.final_loss],
    "steps": [s_result.steps, r_result.steps],
    "epochs": [s_result.epochs, r_result.epochs],
    "resumed_from": r_result.extras.get("resumed_from"),
    "history_at_12": [
        [h for h in t.history if h["step"] == 12 and "loss" in h][0]["loss"] for t in (straight, resumed)
    ],
    "dirs_after": sorted(p.name for p in root.iterdir()),  # keep_last=2 pruned the older ones
    "straight_dirs": sorted(p.name for p in (ROOT / "straight" / "checkpoints").iterdir()),
}

# fp16-mixed: the loss scale is in the checkpoint (2**22 overflows float16 here: the first steps are skipped
# and halve it, then steps apply; the stop at step 3 falls between).
fp16 = {"precision": "fp16-mixed", "init_scale": 2.0**22, "checkpoint_every": None}
f_straight, f_result = fit("fp16a", 8, **fp16)
fit("fp16b", 3, **fp16)
f_resumed, g_result = fit("fp16b", 8, resume="latest", **fp16)
out["fp16"] = {
    "weights_equal": same(f_straight, f_resumed),
    "loss_scale": [f_result.extras["runtime"]["loss_scale"], g_result.extras["runtime"]["loss_scale"]],
    "skipped": [f_result.skipped_steps, g_result.skipped_steps],
}

# digits: dropout (its seed generators' states are in the checkpoint) and a cosine LR schedule (planned for
# 6 steps, so the resume keeps max_steps: it starts from the straight run's step-3 checkpoint by path).
d_straight, _ = fit("digits_a", 6, recipe="digits")
d_resumed, _ = fit("digits_b", 6, resume=str(ROOT / "digits_a/checkpoints/step-00000003"), recipe="digits")
out["digits"] = {
    "weights_equal": same(d_straight, d_resumed),
    "stretched": refusal("digits_a", "latest", recipe="digits", max_steps=8),
}
# A tampered file (same size, one byte flipped) is refused, in one line naming it.
tampered = ROOT / "tampered" / "checkpoints"
shutil.copytree(ROOT / "straight" / "checkpoints", tampered)
data = next((tampered / "step-00000012").glob("ckpt.data-*"))
raw = bytearray(data.read_bytes())
raw[len(raw) // 2] ^= 0xFF
data.write_bytes(bytes(raw))


# Resuming the finished straight run: nothing to do, said in one line, weights unchanged, and nothing
# written (no duplicate metrics.jsonl line, no new TensorBoard events file: it logs to TensorBoard here).
def files(run):
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


before = files(ROOT / "straight")
again, a_result = fit("straight", 12, resume="latest", keep_last=None, tensorboard=True)
out["finished"] = {
    "message": a_result.extras.get("nothing_to_do"),
    "weights_equal": same(straight, again),
    "files_unchanged": files(ROOT / "straight") == before,
    "files": sorted(before),
}
out["tampered"] = refusal("tampered", str(tampered / "step-00000012"))
out["changed_batch"] = refusal("straight", "latest", batch_size=16)

print("RESULT " + json.dumps(out))
