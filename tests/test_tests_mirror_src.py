"""``tests/`` mirrors ``src/gpulab/``: every package has its tests folder at the same path (``tests/artifact``
was missing until issue 42), so a reader finds a module's tests where its source is. A folder of tests of
no package (``tests/matrix``, ``tests/gpu``, ...) is allowed; a package without its folder is not."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "gpulab"


def packages() -> list[Path]:
    """Each package under src/gpulab, as a path relative to it (gpulab itself is tests/'s root)."""
    return sorted(p.parent.relative_to(SRC) for p in SRC.rglob("__init__.py") if p.parent != SRC)


def test_every_src_package_has_its_tests_folder_holding_tests():
    assert Path("engines/torch/state") in packages()  # the walk finds subpackages too
    missing = [str(p) for p in packages() if not any((ROOT / "tests" / p).glob("test_*.py"))]
    assert not missing, "packages without tests/<same path>/test_*.py: " + ", ".join(missing)
