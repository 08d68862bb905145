"""`gpulab bench`'s printed tables fit 100 columns (the width used without a terminal): headers wrap at
words, rows of different kinds get a table each, notes wrap at words under their label, nothing is cut."""

from __future__ import annotations

import io

from rich.console import Console

from gpulab.cli.bench import render_suite

LONG_NOTE = (
    "Other processes used 72% of this machine's CPU time while this suite ran: CPU figures are slower and "
    "noisier than on an idle machine; multi-threaded kernels suffer most, as their threads wait for each other "
    "(--threads 1 gives steadier numbers)."
)


def _figure(value: float, unit: str) -> dict:
    return {"value": value, "unit": unit, "repeats": 3, "low": value, "high": value, "spread": "range",
            "better": "lower"}  # fmt: skip


def _suite(rows: list[tuple[dict, dict]]) -> dict:
    return {
        "title": "Host-device transfer",
        "status": "ok",
        "seconds": 0.9,
        "rows": [{"key": key, "figures": figures, "info": {}} for key, figures in rows],
        "notes": [LONG_NOTE, "A short note."],
    }


# The shape of the transfer suite on a CPU: copy rows and train-step rows with different keys and figures
# (one table of all nine columns was 150 wide).
TRANSFER = _suite(
    [
        ({"test": "copy", "direction": "host-to-host", "memory": "pageable", "size_mib": 64},
         {"bandwidth": _figure(16.2, "GB/s"), "time": _figure(4.1, "ms")}),
        ({"test": "train step", "size_mib": 0.004, "loader": "plain .to(device)"},
         {"step_time": _figure(0.496, "ms"), "samples_per_s": _figure(32337.0, "samples/s")}),
        ({"test": "train step", "size_mib": 0.004, "loader": "DevicePrefetcher"},
         {"step_time": _figure(0.276, "ms"), "samples_per_s": _figure(58730.0, "samples/s")}),
    ]
)  # fmt: skip
# The precision suite's seven columns.
PRECISION = _suite(
    [
        ({"model": "chargpt-tiny", "precision": p},
         {"step_time": _figure(11.5, "ms"), "samples_per_s": _figure(693.0, "samples/s"),
          "loss_after": _figure(4.06, "loss"), "peak_memory": _figure(89.3, "MiB"),
          "speedup_vs_fp32": _figure(1.0, "x")})
        for p in ("fp32", "tf32", "bf16-mixed", "fp16-mixed")
    ]
)  # fmt: skip


def _render(suite: dict, width: int = 100) -> list[str]:
    out = io.StringIO()
    render_suite("transfer", suite, Console(file=out, width=width))
    return out.getvalue().splitlines()


def test_tables_and_notes_fit_100_columns_and_nothing_is_cut():
    for suite in (TRANSFER, PRECISION):
        lines = _render(suite)
        assert max(len(line) for line in lines) <= 100
        assert not any("…" in line for line in lines)
        assert lines[0] == f"{suite['title']} (transfer, ok, 0.9 s)"  # the title whole, on its own line


def test_rows_of_different_kinds_get_a_table_each_with_plain_headers():
    text = "\n".join(_render(TRANSFER))
    assert text.count("┏") == 2
    assert "samples/s" in text and "samples_per_s" not in text and "step time (ms)" in text
    assert "size (MiB)" in text


def test_a_long_note_wraps_at_words_under_its_label():
    lines = _render(TRANSFER)
    start = next(i for i, line in enumerate(lines) if line.startswith("  note: Other processes"))
    wrapped = []
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 8):
            break
        wrapped.append(line)
    assert len(wrapped) >= 1
    assert " ".join(
        part.strip().removeprefix("note: ") for part in lines[start : start + 1 + len(wrapped)]
    ) == (LONG_NOTE)
