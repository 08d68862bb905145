"""What a recipe hands the Trainer, and how recipes are found by name or ``module:function``."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpulab.errors import ConfigError, GpulabError, choices

if TYPE_CHECKING:
    from torch import nn  # annotations only: a TensorFlow recipe is called through here without torch


@dataclass
class Recipe:
    """A model with its data, loss and optimizer factory: everything ``Trainer.fit`` needs."""

    model: nn.Module
    train_data: Any
    loss_fn: Callable | None  # None: the model's output carries its loss (engines/torch/runtime/step_call.py)
    optimizer: Callable  # params -> torch.optim.Optimizer, or model -> Optimizer (parameter named model)
    val_data: Any = None
    scheduler: Callable | None = None  # (optimizer, total_steps) -> LR scheduler
    defaults: dict[str, Any] = field(default_factory=dict)  # trainer settings this recipe wants
    info: dict[str, Any] = field(default_factory=dict)  # facts for summaries (parameter count, ...)

    def fit(self, trainer: Any, resume: str | None = None) -> Any:
        """``trainer.fit`` on this recipe's parts (as ``TfTrainer.fit(recipe)`` on the other engine)."""
        return trainer.fit(
            self.model,
            self.train_data,
            loss_fn=self.loss_fn,
            optimizer=self.optimizer,
            val_data=self.val_data,
            scheduler=self.scheduler,
            resume=resume,
        )


Builder = Callable[[dict[str, Any]], Recipe]


BUILTIN = ("mlp", "digits", "chargpt")  # modules of this package, loaded when a run names one


def _builtin() -> dict[str, Builder]:
    return {name: importlib.import_module(f"gpulab.engines.torch.recipes.{name}").build for name in BUILTIN}


def recipe_names() -> list[str]:
    return list(_builtin())


def load_recipe(name: str, options: dict[str, Any] | None = None) -> Recipe:
    """A built-in recipe by name, or a user's ``package.module:function`` returning a Recipe."""
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ConfigError(
            f"setting 'options' = {options!r:.40} is invalid: it holds the recipe's own settings, a mapping "
            "(e.g. --set options.lr=0.01, or options: {lr: 0.01} in --config)"
        )
    builtin = _builtin()
    if name in builtin:
        return builtin[name](options)
    if ":" not in name:
        raise ConfigError(f"unknown recipe {name!r}; valid: {choices(builtin)} or your own module:function")
    recipe = call_user_recipe(name, options)
    if isinstance(recipe, dict):
        recipe = Recipe(**recipe)
    if not isinstance(recipe, Recipe):
        raise ConfigError(f"recipe {name!r} returned {type(recipe).__name__}, expected gpulab Recipe or dict")
    return recipe


# Libraries a recipe may import that a gpulab extra installs: the extra is the fix to name (torchvision
# needs the torch build it was made for, which the extra's notes in pyproject.toml explain)
EXTRA_OF = {
    "torchvision": "vision",
    "timm": "vision",
    "transformers": "models",
    "onnx": "export",
    "onnxruntime": "export",
    "tensorflow": "tensorflow",
    "mlflow": "mlflow",
    "wandb": "wandb",
}


def _missing_library(module_name: str, exc: ImportError) -> str | None:
    """What to say when the recipe's module was found but a library it imports is not installed (a
    missing module of the recipe's own path is a path problem, said with PYTHONPATH instead)."""
    missing = getattr(exc, "name", None)
    if not missing or module_name == missing or module_name.startswith(missing + "."):
        return None
    top = missing.partition(".")[0]
    if top in EXTRA_OF:
        return f"needs {top}, which is not installed; fix: pip install 'gpulab[{EXTRA_OF[top]}]'"
    return f"needs {top}, which is not installed; fix: pip install the package that provides {top!r}"


def call_user_recipe(name: str, options: dict[str, Any]) -> Any:
    """``package.module:function`` imported (the working directory first on the path) and called with
    ``options``; each way it can fail is one line naming it. Returns what the function returned."""
    module_name, _, func_name = name.partition(":")
    here = _put_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = _missing_library(module_name, exc)
        if missing:
            raise ConfigError(f"recipe {name!r}: module {module_name!r} {missing}") from None
        raise ConfigError(
            f"recipe {name!r}: cannot import module {module_name!r} ({exc}); looked in the current "
            f"directory ({here}) and on sys.path (add the module's folder to PYTHONPATH)"
        ) from None
    except Exception as exc:  # the module's own code failed: a user's bug, named in one line
        raise ConfigError(f"recipe {name!r}: importing module {module_name!r} {_failed(exc)}") from exc
    if not hasattr(module, func_name):
        raise ConfigError(f"recipe {name!r}: module {module_name!r} has no function {func_name!r}")
    func = getattr(module, func_name)
    _check_signature(name, func)
    try:
        return func(options)
    except GpulabError:
        raise
    except Exception as exc:
        raise ConfigError(f"recipe {name!r}: {func_name}(options) {_failed(exc)}") from exc


SIGNATURE = "def build(options: dict) -> gpulab.Recipe"


def _check_signature(name: str, func: Any) -> None:
    """A recipe is called as ``func(options)``: say so in one line rather than let the call fail."""
    if not callable(func):
        raise ConfigError(
            f"recipe {name!r} is not a function (found {type(func).__name__} {func!r:.40}); "
            f"expected {SIGNATURE}"
        )
    try:
        inspect.signature(func).bind({})
    except TypeError as exc:
        raise ConfigError(
            f"recipe {name!r} cannot be called with the options dict ({exc}); expected {SIGNATURE}"
        ) from None
    except ValueError:  # no signature to read (some builtins): let the call itself tell
        pass


def _failed(exc: Exception) -> str:
    """``raised ValueError: bad width (--debug shows the traceback)``: the first line of the message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
    return f"raised {text} (--debug shows the traceback)"


def _put_cwd_on_path() -> str:
    """The working directory first on sys.path, as ``python -m`` has it (the ``gpulab`` console script
    puts its own bin directory there instead), so ``my_recipe:build`` finds ./my_recipe.py."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    return here


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
