"""The TensorFlow profile says when the machine was busy, as torch's does (issue 40): both views print the
note from the report's ``machine_load``."""

from __future__ import annotations

import io

from rich.console import Console

from gpulab.cli.profile import render_steps

BUSY = {"busy": True, "load_1min": 5.2, "cores": 2}


def _tf_report(load: dict) -> dict:
    """A TensorFlow profile report (engines/tensorflow/profile.py's keys the view reads)."""
    step = 0.004
    return {
        "engine": "tensorflow",
        "recipe": "mlp",
        "device": "cpu",
        "precision": "fp32",
        "compiled": False,
        "batch_size": 64,
        "timed_steps": 20,
        "outlier_steps": [],
        "breakdown_s": {"data": 0.001, "compute": 0.003, "step": step},
        "breakdown_fraction": {"data": 0.25, "compute": 0.75},
        "step_s_median": step,
        "samples_per_s": 64 / step,
        "flops_per_step": None,
        "flops_method": "none",
        "achieved_flops_per_s": None,
        "memory": {"peak_bytes": 2**20, "kind": "host"},
        "not_available": {"mfu": "no peak"},
        "trace_dir": "runs/p/trace",
        "machine_load": load,
    }


def _printed(report: dict) -> str:
    out = io.StringIO()
    render_steps(report, Console(file=out, width=200))
    return out.getvalue()


def test_the_tensorflow_profile_says_the_machine_was_busy():
    assert (
        "note: the machine was busy (load 5.2 on 2 cores): other processes competed for the CPU"
        in _printed(_tf_report(BUSY))
    )


def test_a_quiet_machine_gets_no_note():
    assert "busy" not in _printed(_tf_report({"busy": False, "load_1min": 0.1, "cores": 2}))
