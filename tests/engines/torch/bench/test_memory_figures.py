"""Memory figures only where they measure something: a CPU reading below its resolution gives no figure
(and no plot panel), and the memory plot marks "largest that fits" only where a batch over the limit
shows it; a sweep that stopped first marks the largest batch *tried*."""

from __future__ import annotations

import torch

from gpulab.engines.torch.bench import memory
from gpulab.measure.bench_plots import memory_plot
from gpulab.measure.harness import CPU_RESOLUTION_MIB, cpu_peak_supported, missing_memory_note, peak_memory
from gpulab.measure.results import Figure, Row

MIB = 1 << 20


def test_a_cpu_reading_below_resolution_is_no_figure_and_says_why():
    if not cpu_peak_supported():
        return  # no reading at all here (not Linux): nothing to resolve
    tiny = lambda: torch.ones(16).sum()  # noqa: E731  (64 bytes of tensors)
    tiny()  # warm-up, as peak_memory asks
    reading = peak_memory(tiny, device="cpu", repeats=2)
    assert reading.figure is None
    assert f"below the {CPU_RESOLUTION_MIB:g} MiB" in reading.kind
    big = peak_memory(lambda: torch.ones(16 * MIB // 4).sum(), device="cpu", repeats=2)  # 16 MiB
    assert big.figure is not None and 12 <= big.figure.value <= 40


def test_a_cpu_reading_is_the_calls_own_growth_after_earlier_frees():
    """Large tensors freed earlier can leave free memory resident in glibc's heap; trimmed while the
    measured call runs, it lowered the resident set below the start and a 16 MiB call read 8.7 MiB (and,
    in CI, below the 1 MiB resolution: no figure)."""
    if not cpu_peak_supported():
        return
    for mib in (30, 24):  # the first raises glibc's dynamic mmap threshold, the second then lands in the heap
        block = torch.ones(mib * MIB // 4)
        del block
    reading = peak_memory(lambda: torch.ones(16 * MIB // 4).sum(), device="cpu", repeats=2)
    assert reading.figure is not None and 15 <= reading.figure.value <= 40, reading


def test_missing_memory_note_names_the_rows_or_says_any():
    rows = [
        Row({"p": "a"}, info={"no_peak_memory": "too small"}),
        Row({"p": "b"}, {"x": Figure.single(1, "MiB")}),
    ]
    assert missing_memory_note(rows, lambda r: r.key["p"]) == ["No peak memory for a: too small."]
    assert missing_memory_note(rows[:1], lambda r: r.key["p"]) == ["No peak memory for any row: too small."]
    assert missing_memory_note(rows[1:], lambda r: r.key["p"]) == []


def _row(batch: int, mib: float, fits: bool) -> Row:
    figures = {"peak_memory": Figure.single(mib, "MiB"), "samples_per_s": Figure.single(100.0, "samples/s")}
    return Row({"batch": batch}, figures, {"fits": fits, "state_mib": 0.0})


def _marks(rows: list[Row], limit: int) -> list[str]:
    return [m["label"] for p in memory_plot(rows, limit).panels for m in p.marks]


def test_a_sweep_that_stopped_before_the_limit_marks_the_largest_tried():
    rows = [_row(b, b / 8, True) for b in (64, 128, 256)]
    notes = memory._largest(
        rows, "the profile's largest batch, 256, was reached without hitting the limit", MIB << 10
    )
    assert "largest that fits was not found" in notes[0] and notes[1].startswith("Predicted")
    assert _marks(rows, MIB << 10) == ["largest tried: 256 (the limit was not reached)"]


def test_a_sweep_stopped_by_the_limit_marks_the_largest_that_fits():
    rows = [_row(64, 8, True), _row(128, 16, True), _row(256, 32, False)]
    notes = memory._largest(rows, "batch 256 needs more than the limit", 20 * MIB)
    assert notes == ["Largest batch that fits under 20 MiB: 128 (batch 256 needs more than the limit)."]
    assert _marks(rows, 20 * MIB) == ["largest that fits: 128"]


def test_the_precision_plot_draws_no_peak_memory_panel_without_a_figure(tmp_path):
    from PIL import Image

    from gpulab.engines.torch.bench import precision
    from gpulab.measure.bench_plots import precision_plot
    from gpulab.measure.plots import render

    rows = [
        Row({"model": "digits", "precision": p},
            {"speedup_vs_fp32": Figure.single(1.0, "x"), "loss_after": Figure.single(0.7, "loss")},
            {"no_peak_memory": "below the 1 MiB a CPU reading resolves"})
        for p in precision.PRECISIONS
    ]  # fmt: skip
    path = render(precision_plot(rows, steps=20), tmp_path)
    with Image.open(path) as image:
        assert image.width == 2 * 640  # two panels of 6.4 in at 100 dpi: speedup and loss, no memory
