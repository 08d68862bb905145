"""Old import paths the README or the examples once printed, kept for a release as deprecation aliases.

Each old path imports as a module that says once, in one DeprecationWarning line, where its names live
now, and hands them over from there when asked (so importing the alias loads nothing until a name is
used). No file sits at an old path: the finder below makes the alias, so a file moved with ``git mv``
keeps its history and merges follow the rename.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

from gpulab.errors import GpulabWarning
from gpulab.warning_filters import quiet

# old path -> (new path, what to write instead); a package's alias also finds its listed submodules
MOVED = {
    "gpulab.tfengine": ("gpulab.engines.tensorflow", "from gpulab import TfRecipe, TfTrainer"),
    "gpulab.runtime": ("gpulab.engines.torch.runtime", "from gpulab import Runtime"),
    "gpulab.train": ("gpulab.engines.torch.train", "from gpulab import Trainer"),
    "gpulab.train.items": ("gpulab.engines.torch.train.items", "from gpulab import mean_over_items"),
    "gpulab.train.recipes": ("gpulab.engines.torch.recipes", "gpulab.engines.torch.recipes"),
    "gpulab.train.recipes.digits": (
        "gpulab.engines.torch.recipes.digits",
        "gpulab.engines.torch.recipes.digits",
    ),
}

MESSAGE = "{old} is deprecated and goes away in a later release: use {instead}"


class MovedWarning(DeprecationWarning, GpulabWarning):
    """A DeprecationWarning that the CLI prints as its one ``gpulab: warning:`` line."""


# Python hides a DeprecationWarning raised outside __main__ (a user's recipe module is not __main__):
# show these few, once per location, as the one line they are meant to be
quiet(r"gpulab\.\S+ is deprecated", DeprecationWarning, action="default")


def _public_names(instead: str) -> set[str]:
    """The names an alias's advice tells users to take from ``gpulab`` itself (``from gpulab import A, B``):
    the alias hands those over from there (``gpulab.train``'s Trainer is not in its new package)."""
    prefix = "from gpulab import "
    if not instead.startswith(prefix):
        return set()
    return {n.strip() for n in instead.removeprefix(prefix).split(",")}


class _Alias(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new, instead = MOVED[spec.name]
        module = types.ModuleType(spec.name, f"Deprecated alias of {new}.")
        told = []

        def __getattr__(name: str) -> Any:
            if name.startswith("__"):  # importlib's own questions (__path__, __spec__, ...): the alias's
                raise AttributeError(name)
            if not told:  # once, when a name is first taken: `from old import x` says it one time
                told.append(True)
                # stacklevel 2: warnings skips importlib's frames, so this is the user's line
                warnings.warn(MESSAGE.format(old=spec.name, instead=instead), MovedWarning, stacklevel=2)
            if name in _public_names(instead):  # what the warning tells users to import: gpulab's own
                return getattr(importlib.import_module("gpulab"), name)
            return getattr(importlib.import_module(new), name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        is_package = any(other.startswith(fullname + ".") for other in MOVED)
        return importlib.machinery.ModuleSpec(fullname, _Alias(), is_package=is_package)


def install() -> None:
    """Put the finder last on ``sys.meta_path``: a real module of the same name always wins."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
