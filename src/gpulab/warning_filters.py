"""gpulab quiets a library's notices only where the user has not chosen what warnings do.

A filter gpulab adds goes in front of the user's: `python -W error` (or PYTHONWARNINGS=error) once
still printed, or hid, what gpulab's filters named. Here the user's own `-W`/PYTHONWARNINGS options
that reach a category win: gpulab adds its filter for that category only when there is none.
"""

from __future__ import annotations

import builtins
import sys
import warnings


def user_chose(category: type[Warning] = Warning) -> bool:
    """True when one of the user's ``-W``/PYTHONWARNINGS options applies to (part of) ``category``."""
    for option in sys.warnoptions:
        parts = option.split(":")
        name = parts[2].strip() if len(parts) > 2 else ""
        if not name or name in {cls.__name__ for cls in category.__mro__}:
            return True  # it covers the category, or one above it
        named = getattr(builtins, name, None)
        if isinstance(named, type) and issubclass(named, category):
            return True  # it covers a part of the category
    return False


def quiet(message: str = "", category: type[Warning] = Warning, action: str = "ignore") -> None:
    """``warnings.filterwarnings(action, message, category)`` unless the user chose for ``category``."""
    if not user_chose(category):
        warnings.filterwarnings(action, message=message, category=category)
