"""Whether gpulab may import a recipe that a file names: the one trust rule every verb applies.

A ``package.module:function`` recipe is code. The user's own command line and config are trusted; a name
read from a file (a checkpoint's ``trajectory``, a run's ``summary.json``, an export's ``.export.json``) is
an instruction from whoever wrote that file, and checkpoints are downloaded and shared. Such a name is
imported only when it is a built-in recipe (a name without ``:`` never imports anything), when the user
repeats it (``--recipe NAME``), or when the user passes ``--trust-recipe`` (as Hugging Face's
``trust_remote_code``). Resume needs no check here: the recipe it builds is the one the user named, and a
checkpoint recording another is refused as a changed run (``checkpoint/refuse.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.errors import ConfigError

TRUST_FLAG = "--trust-recipe"
RECIPE_FLAG = "--recipe"


class UntrustedRecipeError(ConfigError):
    """A file names code the user did not name: refused in one line, exit 2."""


@dataclass(frozen=True)
class RecipeTrust:
    """What the user said about a recipe a file names: ``named`` is --recipe NAME, ``trust_all`` is
    --trust-recipe."""

    named: str | None = None
    trust_all: bool = False


def names_code(name: str) -> bool:
    """True for ``module:function`` (imported and called); built-in names hold no ``:`` and import nothing."""
    return ":" in name


def describe(name: str) -> str:
    """``recipe 'a.b:build' (imports module 'a.b' and calls build(options))``, or the built-in's name."""
    if not names_code(name):
        return f"built-in recipe {name!r}"
    module, _, func = name.partition(":")
    return f"recipe {name!r} (imports module {module!r} and calls {func}(options))"


def refusal(name: str, source: str, trust: RecipeTrust) -> str | None:
    """Why the recipe ``name`` that ``source`` records may not be used, in one line; None when it may."""
    if trust.named is not None and trust.named != name:
        return (
            f"{RECIPE_FLAG} {trust.named!r} differs from the recipe {source} names, {name!r}; repeat that "
            f"name ({RECIPE_FLAG} {name}) to use it, or leave {RECIPE_FLAG} out"
        )
    if not names_code(name) or trust.named == name or trust.trust_all:
        return None
    return (
        f"refused: {source} names {describe(name)}; gpulab runs code a file names only if you repeat it "
        f"({RECIPE_FLAG} {name}) or pass {TRUST_FLAG}"
    )


def check_recorded(name: str, source: str, trust: RecipeTrust) -> str:
    """``name`` if the recipe ``source`` records may be imported; else ``UntrustedRecipeError``."""
    why = refusal(name, source, trust)
    if why is not None:
        raise UntrustedRecipeError(why)
    return name
