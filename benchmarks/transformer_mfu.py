"""MFU per variant from a `gpulab bench transformer` results.json, against issue 24's target:

    python benchmarks/transformer_mfu.py RUN_DIR/results.json

GPT-2-small (bf16, H100) at >= 45 % of the datasheet peak with compile; 50 % is the goal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TARGET = 45.0  # % of the datasheet peak


def summary(results: dict) -> list[str]:
    suite = results["suites"]["transformer"]
    lines = []
    for row in suite["rows"]:
        f = row["figures"]

        def pct(name: str, f: dict = f) -> str:
            return f"{f[name]['value']:.1f} %" if name in f else "n/a"

        lines.append(
            f"{row['key']['model']} {row['key']['variant']:<18} MFU {pct('mfu')} of the datasheet peak, "
            f"{pct('mfu_measured')} of the measured; {f['tokens_per_s']['value']:,.0f} tokens/s, "
            f"{f['step_time']['value']:.1f} ms/step"
        )
    lines += [n for n in suite["notes"] if "skipped" in n or n.startswith(("MFU", "Recompiled"))]
    compiled = [
        r["figures"]["mfu"]["value"] for r in suite["rows"] if r["info"]["compiled"] and "mfu" in r["figures"]
    ]
    if compiled:
        verdict = "MET" if max(compiled) >= TARGET else "NOT MET"
        lines.append(f"issue 24 target (>= {TARGET:g} % with compile): best {max(compiled):.1f} %, {verdict}")
    else:
        lines.append(
            "issue 24 target: no compiled row with a datasheet MFU (a GPU of a known part is needed)"
        )
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/transformer_mfu.py RESULTS.json")
    print("\n".join(summary(json.loads(Path(sys.argv[1]).read_text()))))
