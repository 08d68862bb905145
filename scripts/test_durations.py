"""Seconds per test file from a pytest JUnit XML report -> tests/file_seconds.json.

The suite runs on two xdist workers a file at a time (``--dist loadfile``); ``tests/conftest.py`` hands
them the longest files first, from this table, so no long file starts last while the other worker idles.
Regenerate it after adding a long test: ``make test-durations`` (a full run with ``--junitxml``).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def file_seconds(report: Path) -> dict[str, int]:
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        while parts and parts[-1][:1].isupper():  # a test class: its module is the file
            parts.pop()
        seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    return {name: round(s) for name, s in sorted(seconds.items(), key=lambda kv: -kv[1]) if s >= 1}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/test_durations.py REPORT.xml tests/file_seconds.json")
    table = file_seconds(Path(sys.argv[1]))
    Path(sys.argv[2]).write_text(json.dumps(table, indent=0) + "\n")
    print(f"{len(table)} files, {sum(table.values())} s in all -> {sys.argv[2]}")
