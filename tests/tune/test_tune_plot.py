"""tune's plot: tune.png (a bar per measured trial with its spread, the default as a dashed line) and the
bar column of the terminal table, from a TuneResult of hand-made trials (no training)."""

from __future__ import annotations

import io
import json
import sys

from PIL import Image
from rich.console import Console

from gpulab.measure.results import Figure
from gpulab.tune.plot import BAR_CELLS, DEFAULT_MARK, speed_bar, tune_plot
from gpulab.tune.report import print_report, write_outputs
from gpulab.tune.search import Decision, TuneResult, ratio
from gpulab.tune.trial import Trial


def _fig(v: float) -> Figure:
    return Figure(v, "samples/s", 5, v * 0.9, v * 1.1, "iqr", "higher")


def _result() -> TuneResult:
    default = Trial("default", {"batch_size": 64}, samples_per_s=_fig(1000.0), batch_size=64, loss=1.0)
    slower = Trial("precision=bf16-mixed", {}, samples_per_s=_fig(400.0), batch_size=64, loss=1.0)
    best = Trial("batch_size=256", {"batch_size": 256}, samples_per_s=_fig(2000.0), batch_size=256, loss=1.05)
    diverged = Trial(  # the fastest, but its loss is far worse: red, never chosen
        "compile=default",
        {"batch_size": 256, "compile": True},
        "rejected",
        "loss 2 vs the default's 1 after ~640 samples (+100%; tolerance 10%)",
        samples_per_s=_fig(4000.0),
        batch_size=256,
        loss=2.0,
    )
    oom = Trial("batch_size=4096", {"batch_size": 4096}, "failed", "does not fit: out of memory")
    return TuneResult(
        recipe="mlp",
        device="cpu",
        budget_s=60.0,
        tolerance=0.1,
        samples_per_trial=640,
        default=default,
        best=best,
        trials=[default, slower, best, diverged, oom],
        decisions=[Decision("batch_size", {"batch_size": 256}, True, "batch_size: 256 over 64: 2.00x.")],
        ratio=ratio(best.samples_per_s, default.samples_per_s),
        elapsed_s=30.0,
    )


def _report(result: TuneResult, tuned, json_path, png) -> str:
    out = io.StringIO()
    print_report(Console(file=out, width=150, soft_wrap=True), result, tuned, json_path, png)
    return out.getvalue()


def test_the_table_bars_are_proportional_to_samples_per_s_with_the_default_marked():
    result = _result()
    default, slower, best, diverged, oom = result.trials
    bars = [speed_bar(t, 4000.0, 1000.0).plain for t in result.trials]
    assert all(len(b) == BAR_CELLS for b in bars[:4])
    assert bars[3] == "█" * BAR_CELLS  # the fastest trial fills the column
    assert bars[2] == "█" * (BAR_CELLS // 2) + " " * (BAR_CELLS // 2)  # half the rate, half the bar
    assert bars[0].rstrip() == "██▌"  # a quarter: two and a half cells
    # A slower trial leaves the default's position visible: where the default's bar ends (cell 2)
    assert bars[1] == "█ " + DEFAULT_MARK + " " * (BAR_CELLS - 3)
    assert bars[4] == "-"  # no figures: no bar
    # In the table: every bar whole on its row, within 150 columns
    printed = _report(result, "t/tuned.yaml", "t/tune.json", "t/tune.png")
    lines = printed.splitlines()
    assert max(len(line) for line in lines) <= 150
    for label, bar in zip(
        ["default", "precision=bf16", "batch_size=256", "compile=default"], bars, strict=False
    ):
        assert any(label in line and bar in line for line in lines), (label, bar)
    assert "wrote t/tuned.yaml, t/tune.json and t/tune.png" in printed


def test_tune_png_has_a_bar_per_measured_trial_and_tune_json_names_it(tmp_path):
    result = _result()
    spec = tune_plot(result).panels[0]
    assert tune_plot(result).title == "gpulab tune mlp on cpu"
    by_label = {s.label: s for s in spec.series}
    assert by_label["chosen: batch_size=256"].x == ["3 batch_size=256"]
    assert by_label["rejected / failed"].x == ["4 compile=default"]
    assert by_label["accepted"].y == [1000.0, 400.0] and by_label["accepted"].low == [900.0, 360.0]
    assert spec.categories[-1] == "5 batch_size=4096 (failed, no figure)"  # named, no bar
    assert spec.hlines == [{"y": 1000.0, "label": "default 1,000 samples/s"}]

    tuned, json_path, png = write_outputs(tmp_path, {"recipe": "mlp"}, result)
    assert png == tmp_path / "tune.png" and tuned.is_file() and json_path.is_file()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as image:
        assert image.width > 300 and image.height > 200
        low, high = image.convert("L").getextrema()
        assert low < 100 < high, "blank"
    assert json.loads(json_path.read_text())["plot"] == str(png)


def test_without_matplotlib_tune_still_writes_its_files_and_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    result = _result()
    tuned, json_path, png = write_outputs(tmp_path, {"recipe": "mlp"}, result)
    assert png is None and not (tmp_path / "tune.png").exists()
    assert tuned.is_file() and json.loads(json_path.read_text())["plot"] is None
    printed = _report(result, tuned, json_path, png)
    assert "matplotlib is not installed (pip install matplotlib): no tune.png\n" in printed
    assert f"wrote {tuned} and {json_path} (" in printed
