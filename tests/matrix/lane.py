"""Running one matrix cell through the real CLI, and what every verb of it must show: a pass, or a refusal
that is exit 2 and one line. Shared by the torch and TensorFlow test files; the verdicts go to
build/matrix/<cell>.json, from which scripts/matrix_table.py renders docs/MATRIX.md."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from setups import Cell

HERE = Path(__file__).resolve().parent
VERDICTS = HERE.parents[1] / "build" / "matrix"
STEPS, CHECKPOINT_EVERY = 12, 4
EXIT_WITHIN_S = 30  # after the run's summary.json: a process still alive then holds its nodes
PAUSE = 0.1  # seconds per forward pass in a run that is killed mid-way (the tiny model is done otherwise)
# Figures of metrics.jsonl that are clocks, not the run's arithmetic.
CLOCK_KEYS = {"time", "mfu", "mfu_measured"}  # and every key ending in _s (samples_per_s, ...)


def write_module(cell: Cell, where: Path) -> str:
    """The cell's recipe module, as the lane writes it into the cell's folder; returns ``module:build``."""
    parts = "tf_parts" if cell["engine"] == "tensorflow" else "torch_parts"
    (where / f"{cell.module}.py").write_text(
        f'"""Matrix cell {cell.id}, written by tests/matrix/lane.py."""\n\n'
        f"from {parts} import recipe\n\nCELL = {dict(cell.values)!r}\n\n\n"
        "def build(options):\n    return recipe(CELL, options)\n"
    )
    return f"{cell.module}:build"


def train_argv(cell: Cell, out: str, *extra: str, steps: int = STEPS) -> list[str]:
    """``gpulab [launch ...] train`` of the cell: its training values as the flags a user sets."""
    argv = ["train", f"{cell.module}:build", "--out", out, "--max-steps", str(steps)]
    argv += ["--set", f"checkpoint_every={CHECKPOINT_EVERY}", "--precision", cell["precision"]]
    if cell["engine"] == "tensorflow":
        argv += ["--engine", "tensorflow"]
    if cell["accumulate"] != "1":
        argv += ["--accumulate", cell["accumulate"]]
    if cell["clip"] != "off":
        argv += ["--set", f"clip_grad_norm={cell['clip']}"]
    if cell["data"] == "gpulab_workers":
        argv += ["--set", "num_workers=2"]
    argv += list(extra)
    if cell["ranks"] != "1":
        argv = ["launch", "--nproc-per-node", cell["ranks"], "--", "gpulab", *argv]
    return argv


# Defects a cell meets that are another helper's to fix (issue 39), each named once: such a cell is an
# expected failure (strict: it fails the lane once fixed, so the mark is taken off) and its verdict says so.
KNOWN_DEFECTS: list[tuple[dict[str, str], str]] = [
    # ({"engine": "tensorflow", "model": "keras_subclassed"}, "issue 39 (what fails, in a few words)"),
]  # fmt: skip


def known_defect(cell: Cell) -> str | None:
    found = [why for where, why in KNOWN_DEFECTS if all(cell[a] == v for a, v in where.items())]
    return found[0] if found else None


def params(cells: list[Cell]) -> list:
    """The cells as pytest parameters, a known defect's cell marked as an expected failure."""
    import pytest

    def marks(cell: Cell) -> list:
        why = known_defect(cell)
        return [pytest.mark.xfail(strict=True, reason=why)] if why else []

    return [pytest.param(c, id=c.id, marks=marks(c)) for c in cells]


def judged(cell: Cell, run) -> None:
    """``run()`` (which writes the cell's verdict); a known defect's failure writes its verdict first."""
    try:
        run()
    except BaseException:
        why = known_defect(cell)
        if why:
            verdict = Verdict(cell)
            verdict.notes.append(why)
            verdict.write(known=True)
        raise


def outcome(code: int, stderr: str, what: str) -> str | None:
    """None for a pass; the line of a refusal; anything else fails the cell with the stderr's tail."""
    if code == 0:
        return None
    lines = [line for line in stderr.strip().splitlines() if not NATIVE_LOG.match(line)]
    assert code == 2 and len(lines) == 1, (
        f"{what}: exit {code}, not a pass nor a one-line refusal:\n{stderr[-3000:]}"
    )
    return lines[0]


def wait_for(path: Path, proc, timeout: float = 240) -> bool:
    """Until ``path`` exists (True) or the process ended first (False)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            return path.exists()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return True


def ends_after_summary(proc, out: Path, what: str) -> tuple[int, str]:
    """Wait for the run's end: once summary.json is written, the process must exit within EXIT_WITHIN_S.
    Returns exit code and stderr."""
    wait_for(out / "summary.json", proc)
    try:
        proc.wait(EXIT_WITHIN_S)
    except Exception:
        proc.kill()
        proc.wait(60)
        raise AssertionError(f"{what}: still running {EXIT_WITHIN_S} s after its summary.json") from None
    return proc.returncode, proc.communicate()[1]


def logged(out: Path, after: int) -> dict[int, dict]:
    """metrics.jsonl's records after step ``after``, without their clock figures."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        r["step"]: {k: v for k, v in r.items() if k not in CLOCK_KEYS and not k.endswith("_s")}
        for r in records
        if r.get("step", 0) > after
    }


def latest_checkpoint(out: Path) -> Path:
    return out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()


# TensorFlow's C++ logging, printed before Python runs (TF_CPP_MIN_LOG_LEVEL does not reach it): not gpulab's.
NATIVE_LOG = re.compile(r"[IWE]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] |WARNING: All log messages before absl::")


class Verdict:
    """A cell's verdict as it goes: the refusals met (verb: line), written to build/matrix/<id>.json."""

    def __init__(self, cell: Cell) -> None:
        self.cell, self.refusals, self.notes = cell, [], []

    def step(self, verb: str, code: int, stderr: str) -> bool:
        """True when ``verb`` passed; a refusal is recorded (and False); anything else fails."""
        line = outcome(code, stderr, f"{self.cell.id} {verb}")
        if line is not None:
            self.refusals.append(f"{verb}: {line}")
        return line is None

    def write(self, known: bool = False) -> None:
        VERDICTS.mkdir(parents=True, exist_ok=True)
        verdict = "known defect" if known else "refused" if self.refusals else "passed"
        record = {"cell": self.cell.id, "values": dict(self.cell.values), "verdict": verdict,
                  "refusals": self.refusals, "notes": self.notes}  # fmt: skip
        tmp = VERDICTS / f".{self.cell.id}.json.{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(VERDICTS / f"{self.cell.id}.json")
