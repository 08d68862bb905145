"""What the PNGs show, read from the drawn figure (issue 40): the PyTorch-vs-TensorFlow plot's workload names
do not overlap, tune's title stands over its panel, and the data-parallel chart draws no speed-up that more
processes than ran could not give (a busy machine drew DDP 55x faster than one process on 2 cores)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("matplotlib")

from gpulab.bench.versus import _plot as versus_plot  # noqa: E402
from gpulab.measure.plots import figure  # noqa: E402
from gpulab.measure.results import Figure, Row  # noqa: E402
from gpulab.tune.plot import tune_plot  # noqa: E402

NAMES = ["mlp fp32", "mlp tf32", "mlp bf16-mixed", "mlp fp16-mixed", "cnn fp32", "cnn bf16-mixed"]


def _drawn(plot):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = figure(plot)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the constrained layout places everything at draw time
    return fig, canvas.get_renderer()


def _texts(fig, part: str) -> list:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if part in t.get_text()]


def _versus(names: list[str]):
    def t(v: float) -> dict[str, float]:
        return {"value": v, "low": 0.9 * v, "high": 1.1 * v}

    rows = [
        {
            "suite": "train",
            "workload": f"train: {n}",
            "torch": {"time": t(3.0 + i)},
            "tensorflow": {"time": t(5.0)},
        }
        for i, n in enumerate(names)
    ]
    sides = {"torch": {"framework": "PyTorch"}, "tensorflow": {"framework": "TensorFlow"}}
    return versus_plot(rows, "train", sides)


@pytest.mark.parametrize("names", [NAMES, NAMES[:4], ["compile: mlp 256 default / jit_compile"] * 3])
def test_the_versus_plots_workload_names_do_not_overlap(names):
    fig, renderer = _drawn(_versus([f"{n} {i}" for i, n in enumerate(names)]))
    for ax in fig.axes:
        boxes = [label.get_window_extent(renderer) for label in ax.get_xticklabels() if label.get_text()]
        assert len(boxes) == len(names)
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), [label.get_text() for label in ax.get_xticklabels()]


def test_tunes_title_is_centred_over_its_panel():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "tune"))
    from test_tune_plot import _result

    fig, renderer = _drawn(tune_plot(_result()))
    (ax,) = fig.axes
    box = ax.get_window_extent(renderer)
    titles = _texts(fig, "gpulab tune mlp on cpu")
    assert titles
    for title in titles:
        extent = title.get_window_extent(renderer)
        assert abs((extent.x0 + extent.x1) / 2 - (box.x0 + box.x1) / 2) < 2  # pixels


def _parallel_rows(ddp_ms: float):
    def f(v: float, unit: str, better: str) -> Figure:
        return Figure(v, unit, 5, 0.9 * v, 1.1 * v, "iqr", better)

    single = Row(
        {"mode": "single", "processes": 1, "devices": "cpu"},
        {"step_time": f(550.0, "ms", "lower"), "samples_per_s": f(465.0, "samples/s", "higher")},
    )
    ddp = Row(
        {"mode": "ddp", "processes": 2, "devices": "cpu x2"},
        {"step_time": f(ddp_ms, "ms", "lower"), "samples_per_s": f(256e3 / ddp_ms, "samples/s", "higher")},
        {"max_abs_param_diff": 0.0, "equal_to_single": True},
    )
    return [single, ddp]


def _bars(fig) -> list[int]:
    return [len(ax.patches) for ax in fig.axes]


def test_a_speedup_beyond_the_processes_is_named_not_drawn():
    from gpulab.engines.torch.bench.parallel import _plot

    plot = _plot(_parallel_rows(10.0))  # 55x on 2 processes: one process ran on a busier machine
    assert "ddp (cpu x2): not drawn: 55x faster than one process" in plot.note
    fig, renderer = _drawn(plot)
    assert _bars(fig) == [1, 1]  # one process only
    assert all(ax.get_xlim() == (-0.5, 1.5) for ax in fig.axes)  # ddp's slot stays, named and empty
    assert _texts(fig, "not drawn: 55x faster")


def test_a_speedup_the_processes_can_give_is_drawn():
    from gpulab.engines.torch.bench.parallel import _plot

    plot = _plot(_parallel_rows(300.0))  # 1.8x on 2 processes
    assert plot.note == ""
    fig, _ = _drawn(plot)
    assert _bars(fig) == [2, 2]
