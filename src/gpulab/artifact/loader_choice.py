"""Which loader runs an artifact: chosen by the file itself (its name and its structure) and the user's
``--format``, never by the ``.export.json`` beside it. That sidecar is data anyone can edit: its
``"format": "aoti"`` once sent a ``.pt2`` to ``aoti_load_package``, which loads the native library inside
the package. A format that loads native code (``NATIVE``) runs only when the user names it, the consent
``train/recipes/trust.py`` asks before importing a recipe a file names.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from gpulab.artifact import formats
from gpulab.errors import ConfigError, choices

NATIVE = ("aoti",)  # loading it runs compiled code from the file
_NATIVE_MEMBERS = (".so", ".dll", ".dylib", ".cubin", ".hsaco")


def choose_format(artifact: Path, flag: str | None) -> str:
    """The format to load ``artifact`` with; one line when it cannot be told, or when it would run native
    code the user did not ask for."""
    native = has_native_code(artifact)
    if flag is not None:
        formats.get(flag)  # an unknown name: one line with the valid ones
        if native and flag not in NATIVE:
            raise ConfigError(
                f"{artifact} holds compiled native code (an AOTInductor package), not a {flag} artifact; "
                "run it with --format aoti only if you trust where it came from"
            )
        return flag
    fmt = "savedmodel" if (artifact / "saved_model.pb").is_file() else formats.by_suffix(artifact.name)
    if native or fmt in NATIVE:
        raise ConfigError(
            f"{artifact} is an AOTInductor package: loading it runs the native library inside it; pass "
            "--format aoti to run it (only a file you trust: files never decide what code runs)"
        )
    if fmt is None:
        suffixes = choices(formats.get(n).SUFFIX for n in formats.names())
        raise ConfigError(
            f"{artifact}: cannot tell its format from its name ({suffixes}); name it with --format "
            f"{choices(formats.names())}"
        )
    return fmt


def has_native_code(artifact: Path) -> bool:
    """Whether ``artifact`` is a zip (``.pt2``) carrying a shared library or GPU binary. Only the zip's
    directory is read: nothing is extracted or loaded."""
    if not artifact.is_file() or not zipfile.is_zipfile(artifact):
        return False
    try:
        with zipfile.ZipFile(artifact) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any(n.endswith(_NATIVE_MEMBERS) or "/aotinductor/" in f"/{n}" for n in names)
