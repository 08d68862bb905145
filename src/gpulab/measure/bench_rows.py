"""Figures and notes computed from rows, for the suites that run on both engines (the torch suites in
engines/torch/bench/ and their TensorFlow sides): each engine's suite measures, these fill in the rest the
same way. Rows only: nothing here imports an engine."""

from __future__ import annotations

from gpulab.measure.bench_profiles import ACCUMULATE_ATOL as ATOL
from gpulab.measure.bench_profiles import ACCUMULATE_RTOL as RTOL
from gpulab.measure.results import Figure, Row, SuiteResult


def accumulate_row(result: SuiteResult, cfg: dict, k: int, timing, base_time, diff: float, equivalent: bool):
    """k's row (step time, samples/s, time against k = 1); returns k = 1's step time. Both engines' suites."""
    step_time = timing.seconds("ms")
    base_time = base_time or step_time
    figures = {
        "step_time": step_time,
        "samples_per_s": timing.rate(cfg["global_batch"], "samples/s"),
        "time_vs_k1": Figure.ratio(step_time, base_time, better="lower"),
    }
    info = {"micro_batch": cfg["global_batch"] // k, "max_abs_param_diff": diff, "equivalent": equivalent}
    result.rows.append(Row({"model": cfg["model"], "k": k}, figures, info))
    if not equivalent:
        result.notes.append(f"k = {k} is NOT equivalent to k = 1: largest parameter difference {diff:.3g}")
    return base_time


def note_equivalence(result: SuiteResult) -> None:
    if all(r.info["equivalent"] for r in result.rows):
        worst = max(r.info["max_abs_param_diff"] for r in result.rows)
        result.notes.append(
            f"Every k gives the parameters of k = 1 after one step (largest difference {worst:.2g}, "
            f"tolerance rtol={RTOL:g}, atol={ATOL:g})."
        )


def launch_bound_notes(rows: list[Row]) -> list[str]:
    """Say why a model runs slower in mixed precision than in fp32, where one does (a GPU's view)."""
    notes = []
    for model in dict.fromkeys(r.key["model"] for r in rows):
        mixed = [r for r in rows if r.key["model"] == model and r.key["precision"].endswith("-mixed")]
        slower = [r.key["precision"] for r in mixed if r.figures["speedup_vs_fp32"].value < 1.0]
        if slower:
            notes.append(
                f"{model}: {' and '.join(slower)} slower than fp32: the step is too small for the tensor "
                "cores to matter (launch-bound), and autocast adds cast kernels (fp16 also the scaler's)."
            )
    return notes


def matmul_speedups(rows: list[Row]) -> None:
    """Each accelerator row gets its speedup over the CPU row of the same dtype and size."""
    cpu = {(r.key["dtype"], r.key["n"]): r for r in rows if r.key["device"] == "cpu"}
    for row in rows:
        base = cpu.get((row.key["dtype"], row.key["n"]))
        if row.key["device"] != "cpu" and base is not None:
            row.figures["speedup_vs_cpu"] = Figure.ratio(row.figures["tflops"], base.figures["tflops"])
