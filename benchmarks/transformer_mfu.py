"""MFU per variant and gpulab against the hand-written loop, from a `gpulab bench transformer` results.json,
against issue 29's targets:

    python benchmarks/transformer_mfu.py RUN_DIR/results.json

GPT-2-small (bf16, H100): gpulab's best compiled variant >= 1.0x the hand-written loop's tokens/s (1.10x
the goal) and >= 45 % of the datasheet peak (50 % the goal).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TARGET = 45.0  # % of the datasheet peak
HAND = "hand-written"


def summary(results: dict) -> list[str]:
    suite = results["suites"]["transformer"]
    lines = []
    for row in suite["rows"]:
        f, name = row["figures"], f"{row['key']['model']} {row['key']['variant']:<18}"
        if "error" in row["info"]:
            lines.append(f"{name} FAILED: {row['info']['error']}")
            continue

        def pct(key: str, f: dict = f) -> str:
            return f"{f[key]['value']:.1f} %" if key in f else "n/a"

        vs = f" = {f['vs_hand']['value']:.3f}x the hand loop" if "vs_hand" in f else ""
        lines.append(
            f"{name} MFU {pct('mfu')} of the datasheet peak, {pct('mfu_measured')} of the measured; "
            f"{f['tokens_per_s']['value']:,.0f} tokens/s, {f['step_time']['value']:.1f} ms/step{vs}"
        )
    lines += [
        n for n in suite["notes"] if "skipped" in n or "failed" in n or n.startswith(("MFU", "Recompiled"))
    ]
    ours = [r for r in suite["rows"] if r["key"]["variant"] != HAND and "error" not in r["info"]]
    compiled = [
        r["figures"]["mfu"]["value"] for r in ours if r["info"].get("compiled") and "mfu" in r["figures"]
    ]
    if compiled:
        verdict = "MET" if max(compiled) >= TARGET else "NOT MET"
        lines.append(f"MFU target (>= {TARGET:g} % with compile): best {max(compiled):.1f} %, {verdict}")
    else:
        lines.append("MFU target: no compiled row with a datasheet MFU (a GPU of a known part is needed)")
    ratios = [r["figures"]["vs_hand"]["value"] for r in ours if "vs_hand" in r["figures"]]
    if ratios:
        verdict = "MET" if max(ratios) >= 1.0 else "NOT MET"
        lines.append(
            f"hand-loop target (gpulab / hand >= 1.00, goal 1.10): best {max(ratios):.3f}x, {verdict}"
        )
    else:
        lines.append("hand-loop target: no hand-written row to compare with")
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/transformer_mfu.py RESULTS.json")
    print("\n".join(summary(json.loads(Path(sys.argv[1]).read_text()))))
