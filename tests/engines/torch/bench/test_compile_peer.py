"""`gpulab bench compile`: the launch-bound mlp's hand-written peer (the seed's loop) timed in the same run,
and each gpulab row's ratio to it."""

from __future__ import annotations

import pytest
import torch

from gpulab.engines.torch.bench import compile as compile_suite
from gpulab.engines.torch.bench.hand_mlp import SeedLoop
from gpulab.measure.harness import BenchContext


def _run():
    return compile_suite.run(BenchContext(torch.device("cpu"), "smoke", warmup=1, repeats=2, log=print))


def test_the_seed_loop_runs_beside_gpulabs_rows_with_each_rows_ratio(one_thread):
    suite = _run()
    rows = {r.key["variant"]: r for r in suite.rows if r.key["model"] == "mlp"}
    assert list(rows) == ["hand-written", "eager", "default"], suite.notes
    hand = rows.pop("hand-written")
    assert hand.info == {"backend": "eager", "compiled": False}
    assert hand.figures["step_time"].unit == "ms" and hand.figures["step_time"].repeats == 2
    assert hand.figures["samples_per_s"].value > 0
    assert "vs_hand" not in hand.figures and "compile_time" not in hand.figures
    for row in rows.values():
        # the loop's step time over the row's: > 1 means gpulab's step is faster than the seed's loop
        assert row.figures["vs_hand"].unit == "x"
        assert row.figures["vs_hand"].value == pytest.approx(
            hand.figures["step_time"].value / row.figures["step_time"].value
        )
    assert any(n.startswith("mlp hand-written: the seed's loop as a user writes it") for n in suite.notes)


def test_a_failing_hand_loop_is_a_row_with_its_error_and_gpulabs_rows_stay(monkeypatch, one_thread):
    def broken(self, xb, yb):
        raise RuntimeError("no device\nsecond line")

    monkeypatch.setattr(SeedLoop, "step", broken)
    suite = _run()
    rows = {r.key["variant"]: r for r in suite.rows}
    assert rows["hand-written"].figures == {}
    assert rows["hand-written"].info == {"error": "RuntimeError: no device"}
    assert "mlp hand-written failed (RuntimeError: no device); the gpulab rows ran." in suite.notes
    assert rows["default"].figures["step_time"].value > 0 and "vs_hand" not in rows["default"].figures


def test_the_seed_loop_steps_as_the_loop_written_out_does_across_epochs():
    """``next_step`` is one iteration of ``for xb, yb in loader:``, epoch after epoch (each reshuffled):
    7 steps over 3 batches an epoch end with the parameters of the loop written inline."""
    x, y = torch.randn(10, 3), torch.rand(10, 1).round()

    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(3, 1)

    first = model()
    torch.manual_seed(1)  # the same shuffles
    loop = SeedLoop(first, x, y, torch.device("cpu"), batch_size=4)
    batches = loop.batches()
    losses = [loop.next_step(batches).item() for _ in range(7)]

    inline = model()
    torch.manual_seed(1)
    opt = torch.optim.Adam(inline.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4, shuffle=True)
    steps = 0
    while steps < 7:
        for xb, yb in loader:
            if steps == 7:
                break
            opt.zero_grad()
            torch.nn.BCEWithLogitsLoss()(inline(xb), yb).backward()
            opt.step()
            steps += 1
    assert all(torch.equal(a, b) for a, b in zip(loop.model.parameters(), inline.parameters(), strict=True))
    assert len(losses) == 7 and all(0 < v < 10 for v in losses)
