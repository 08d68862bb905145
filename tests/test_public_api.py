"""The public API holds still: what the README, the user guide and the examples tell users to import comes from ``gpulab``
itself, the list of those names is frozen here, and a path the README once printed keeps working for a
release as an alias that says, in one DeprecationWarning line, where the name lives now."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gpulab
from gpulab import moved

ROOT = Path(__file__).resolve().parents[1]

# Every name ``from gpulab import ...`` gives; a move never changes it. A deliberate addition is added here.
PUBLIC = [
    "Callback",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DeviceError",
    "FitResult",
    "GpulabError",
    "Recipe",
    "RunConfig",
    "Runtime",
    "TfRecipe",
    "TfTrainer",
    "Trainer",
    "TrainerSettings",
    "__version__",
    "mean_over_items",
    "token_cross_entropy",
]


def _user_texts() -> dict[str, str]:
    guide = sorted((ROOT / "docs" / "guide").glob("*.md"))
    files = [ROOT / "README.md", *guide, *sorted((ROOT / "examples").glob("*.py"))]
    return {str(path.relative_to(ROOT)): path.read_text() for path in files}


def test_the_public_names_are_the_frozen_list_and_each_resolves():
    assert sorted(gpulab.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(gpulab, name) is not None, name


def test_every_name_the_readme_and_examples_import_from_gpulab_is_public():
    told = set()
    for text in _user_texts().values():
        for names in re.findall(r"^\s*from gpulab import \(?([\w, ]+)", text, re.MULTILINE):
            told |= {n.strip() for n in names.split(",") if n.strip()}
        told |= set(re.findall(r"`gpulab\.([A-Z]\w+)`", text))  # `gpulab.Recipe` in prose
    assert told, "the README tells users to import something from gpulab"
    assert told <= set(PUBLIC), f"told to users but not public: {sorted(told - set(PUBLIC))}"


def test_no_path_the_readme_or_examples_print_is_a_deprecated_alias():
    printed = set()
    for text in _user_texts().values():
        printed |= set(re.findall(r"(?:from|import) (gpulab(?:\.\w+)+)", text))
        printed |= set(re.findall(r"`(gpulab(?:\.[a-z_]\w*)+)\.\w+`", text))
    assert not printed & set(moved.MOVED), sorted(printed & set(moved.MOVED))


def test_an_old_path_imports_with_one_deprecation_line_each_in_a_users_module(tmp_path):
    """A user's recipe module (not __main__, where Python would hide a DeprecationWarning) importing each
    path the README once printed: the same objects as gpulab's, and one warning line per old path."""
    (tmp_path / "old_recipe.py").write_text(
        "from gpulab.tfengine import TfRecipe\n"
        "from gpulab.runtime import Runtime\n"
        "from gpulab.train.items import mean_over_items, token_cross_entropy\n"
        "from gpulab.train.recipes.digits import load_data\n"
    )
    code = (
        "import gpulab, old_recipe as r\n"
        "from gpulab.engines.torch.recipes import digits\n"
        "print(r.TfRecipe is gpulab.TfRecipe, r.Runtime is gpulab.Runtime,"
        " r.mean_over_items is gpulab.mean_over_items, r.load_data is digits.load_data)\n"
    )
    env = {"PYTHONPATH": f"{ROOT / 'src'}:{tmp_path}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 4
    told = [line for line in out.stderr.splitlines() if "MovedWarning" in line]
    assert [line.split(": ", 2)[2] for line in told] == [
        moved.MESSAGE.format(old=old, instead=moved.MOVED[old][1])
        for old in ("gpulab.tfengine", "gpulab.runtime", "gpulab.train.items", "gpulab.train.recipes.digits")
    ]
    assert all(line.startswith(str(tmp_path / "old_recipe.py")) for line in told), told  # the user's line


def test_the_cli_prints_the_deprecation_as_one_gpulab_warning_line():
    from gpulab.cli import _one_line_warnings

    _one_line_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.modules.pop("gpulab.tfengine", None)
        from gpulab.tfengine import TfRecipe  # noqa: F401
    (warning,) = caught
    assert issubclass(warning.category, DeprecationWarning)
    line = warnings.formatwarning(warning.message, warning.category, warning.filename, warning.lineno)
    assert line == f"gpulab: warning: {warning.message}\n"


def test_an_old_path_the_readme_never_printed_has_no_alias():
    with pytest.raises(ModuleNotFoundError):
        __import__("gpulab.train.trainer")  # the README says `from gpulab import Trainer`


def test_each_old_path_gives_the_name_its_warning_tells_users_to_import_instead():
    """``from gpulab.train import Trainer`` said "use from gpulab import Trainer" and then failed: an old
    path whose advice names a public object must still hand that object over."""
    code = (
        "import re, warnings, importlib, gpulab\n"
        "from gpulab import moved\n"
        "warnings.simplefilter('ignore')\n"
        "for old, (_, advice) in moved.MOVED.items():\n"
        "    m = re.fullmatch(r'from gpulab import (\\w+)', advice)\n"
        "    if m:\n"
        "        assert getattr(importlib.import_module(old), m[1]) is getattr(gpulab, m[1]), old\n"
        "        print(old, m[1])\n"
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "gpulab.train Trainer" in out.stdout.splitlines()
