"""The declared torch floor covers what the code imports (pyproject.toml's ``torch>=X.Y``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A torch name gpulab imports -> the first torch release with it under that public name.
FIRST_RELEASE = {
    "from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard": (2, 6),
    "from torch.distributed.tensor import DTensor": (2, 5),
}


def test_the_torch_floor_is_at_least_the_newest_name_the_code_imports():
    floor = re.search(r'"torch>=(\d+)\.(\d+)', (ROOT / "pyproject.toml").read_text())
    assert floor, "pyproject.toml declares no torch>=X.Y"
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "gpulab").rglob("*.py"))
    for line in FIRST_RELEASE:
        assert line in source, f"no longer imported, update this table: {line}"
    assert tuple(map(int, floor.groups())) >= max(FIRST_RELEASE.values())
