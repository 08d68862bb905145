"""chargpt exports to ONNX with a dynamic batch dimension: any batch size runs in ONNX Runtime, and the
logits agree with the eager model's within the fp32 tolerance."""

from __future__ import annotations

import json

import numpy as np
import torch

from gpulab.artifact.parity import TOLERANCES
from gpulab.engines.torch.formats.onnx import session
from gpulab.engines.torch.rebuild import rebuild
from gpulab.export.api import export


def test_chargpt_onnx_dynamic_batch_logits_within_tolerance(chargpt_run, tmp_path):
    result = export(chargpt_run, "onnx", out=tmp_path / "gpt.onnx")
    report = json.loads(result.parity_path.read_text())
    assert report["passed"] and report["max_abs_error"] <= TOLERANCES["fp32"].atol
    assert result.info["batch_dim"] == "dynamic"
    model = rebuild(chargpt_run).model
    sess = session(tmp_path / "gpt.onnx")
    for batch in (1, 3, 9):  # none of them the batch it was traced with (2)
        ids = torch.randint(0, 60, (batch, 16))
        got = sess.run(None, {"input": ids.numpy()})[0]
        with torch.no_grad():
            want = model(ids).numpy()
        assert got.shape == (batch, 16, want.shape[-1])
        np.testing.assert_allclose(got, want, atol=TOLERANCES["fp32"].atol, rtol=TOLERANCES["fp32"].rtol)
