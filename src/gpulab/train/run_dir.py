"""The run directory (``--out``) of ``gpulab train``: checked before a run starts writing into it.

A path that is a file where a directory is due is one line here, before the recipe's data is touched, rather
than an ``OSError`` from deep inside a logger or a checkpoint save.
"""

from __future__ import annotations

from pathlib import Path

from gpulab.errors import ConfigError


def check_output_dirs(out: Path, checkpoint_dir: str | None) -> None:
    """``out`` and ``checkpoint_dir`` (and every parent) must be directories or not exist yet."""
    for what, path in (("--out", out), ("checkpoint_dir", checkpoint_dir)):
        if path is None:
            continue
        blocker = next((p for p in (Path(path), *Path(path).parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise ConfigError(
                f"{what} {str(path)!r}: {str(blocker)!r} is a file, not a directory; give a directory path "
                "(or move the file away)"
            )
