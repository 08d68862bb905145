"""What the PNGs show, read from the drawn figure (issue 40): the PyTorch-vs-TensorFlow plot's workload names
do not overlap and tune's title stands over its panel."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("matplotlib")

from gpulab.bench.versus import _plot as versus_plot  # noqa: E402
from gpulab.measure.plots import figure  # noqa: E402
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
