"""report.html: self-contained, one section per suite with its table and its embedded plot.

The page is parsed with html.parser always; where Chromium is installed (Debian: `apt-get install
chromium`) it is also rendered headless and the screenshot checked for not being blank.
"""

from __future__ import annotations

import base64
import html
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from gpulab.bench import SUITE_NAMES as SUITES
from gpulab.bench.report import write_report
from gpulab.measure.plots import Panel, Plot, render, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult, new_document


def _suite(name: str) -> SuiteResult:
    rows = [
        Row(
            {"size": n, "dtype": "fp32"},
            {
                "time": Figure.from_samples([n * 0.9, n, n * 1.2, n * 1.1], "ms", "lower"),
                "rate": Figure.from_samples([1 / n, 1.1 / n], "items/s", "higher"),
            },
            {"ok": True},
        )
        for n in (1, 2, 4)
    ]
    panel = Panel(
        "time", "size", "ms", xscale="log2", series=[series_from_rows(rows, "fp32", "size", "time")]
    )
    return SuiteResult(
        f"Suite {name}",
        "a description",
        rows,
        [f"a note about {name} <&>"],
        [Plot(f"{name}.png", name, [panel])],
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    doc = new_document({"device": "cpu", "profile": "smoke"}, {"device_name": "test CPU", "torch": "x"})
    for name in SUITES:
        result = _suite(name)
        for plot in result.plots:
            render(plot, out)
        doc["suites"][name] = {**result.to_json(), "status": "ok", "seconds": 1.0}
    return write_report(doc, out)


class _Sections(HTMLParser):
    """Per suite section: its tables (rows counted) and its images (src kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict] = {}
        self.current: str | None = None
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for attr in ("src", "href"):
            value = attrs.get(attr)
            if value and not value.startswith(("data:", "#")):
                self.external.append(value)
        if tag == "section":
            self.current = attrs["data-suite"]
            self.sections[self.current] = {"tables": 0, "rows": 0, "images": []}
        elif self.current and tag == "table":
            self.sections[self.current]["tables"] += 1
        elif self.current and tag == "tr":
            self.sections[self.current]["rows"] += 1
        elif self.current and tag == "img":
            self.sections[self.current]["images"].append(attrs["src"])

    def handle_endtag(self, tag):
        if tag == "section":
            self.current = None


def test_every_suite_has_a_table_and_an_embedded_png(report):
    html = report.read_text()
    parser = _Sections()
    parser.feed(html)
    assert list(parser.sections) == list(SUITES)
    for name, section in parser.sections.items():
        assert section["tables"] == 1 and section["rows"] == 4, name  # header + 3 rows
        [src] = section["images"]
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :])[:8] == b"\x89PNG\r\n\x1a\n"
    assert parser.external == []  # self-contained: nothing to fetch


def test_figures_show_spread_and_repeats_and_text_is_escaped(report):
    html = report.read_text()
    assert "iqr" in html and "n=4" in html and "range" in html and "n=2" in html
    assert "a note about matmul &lt;&amp;&gt;" in html


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian: apt-get install chromium)")
def test_report_renders_in_headless_chromium(report, tmp_path):
    shot = tmp_path / "shot.png"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,2400",
        f"--screenshot={shot}",
        report.resolve().as_uri(),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), proc.stderr[-2000:]
    with Image.open(shot) as image:
        gray = image.convert("L")
        low, high = gray.getextrema()
        assert low < 80 and high > 200, "screenshot is blank"
        # Text, tables and plots: far more than a handful of shades on the page.
        assert len(gray.getcolors(maxcolors=256 * 256) or range(257)) > 16


def _precision_like() -> dict:
    """The widest table a bench writes: the precision suite's keys, five figures and six facts a row."""
    rows = [
        Row(
            {"model": model, "precision": precision},
            {
                "step_time": Figure.from_samples([34.346234, 89.499409], "ms", "lower"),
                "samples_per_s": Figure.from_samples([89.386065, 232.922188], "samples/s", "higher"),
                "loss_after": Figure.single(2.0428013801574707, "loss"),
                "peak_memory": Figure.from_samples([1.06640625, 2.44140625], "MiB", "lower"),
                "speedup_vs_fp32": Figure.from_samples(
                    [0.38375933856944033, 2.6057997799551984], "x", "higher"
                ),
            },
            {
                "loss_before": 2.3129947185516357,
                "diverged": False,
                "batch_size": 64,
                "steps": 20,
                "skipped_steps": 0,
                "no_peak_memory": "below the 1 MiB a CPU reading resolves",
            },
        )  # fmt: skip
        for model in ("digits", "chargpt-tiny")
        for precision in ("fp32", "tf32", "bf16-mixed", "fp16-mixed")
    ]
    return {**SuiteResult("Precision", "One training step per precision.", rows).to_json(), "status": "ok",
            "seconds": 19.0}  # fmt: skip


def test_the_results_table_has_a_column_per_key_and_figure_and_one_for_details(tmp_path):
    doc = new_document({"device": "cpu", "profile": "quick"}, {"device_name": "test CPU"})
    doc["suites"]["precision"] = _precision_like()
    text = write_report(doc, tmp_path).read_text()
    head = text.split('<table class="results"><thead><tr>')[1].split("</tr>")[0]
    assert head.count("<th>") == 2 + 5 + 1
    assert "step time (ms)" in head and "samples/s" in head and "_" not in head  # headers wrap at words


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian: apt-get install chromium)")
def test_the_widest_table_fits_a_1200_px_window(tmp_path):
    doc = new_document({"device": "cpu", "profile": "quick"}, {"device_name": "test CPU"})
    doc["suites"]["precision"] = _precision_like()
    page = write_report(doc, tmp_path)
    # Measured by the browser itself: the page's scrollable width against its visible width.
    probe = (
        "<script>const e = document.documentElement; document.body.dataset.probe = "
        "JSON.stringify([e.scrollWidth, e.clientWidth]);</script></body>"
    )
    page.write_text(page.read_text().replace("</body>", probe))
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900", "--dump-dom",
               page.resolve().as_uri()]  # fmt: skip
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    scroll, visible = json.loads(html.unescape(dom.split('data-probe="')[1].split('"')[0]))
    assert scroll <= visible, f"the page is {scroll} px wide in a {visible} px window"
