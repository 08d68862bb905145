"""Secrets kept out of what gpulab writes down: ``redacted`` masks credentials in every string of a value.

A tracker's URI may carry credentials (``http://user:password@host``, ``...?token=...``). The live
connection uses the URI as this command's settings or environment give it; every copy gpulab writes
(tracker parameters and config, ``trackers.json``, ``summary.json``, each checkpoint's ``meta.json`` and
``state.pt``, its lines) goes through ``redacted``, so a run directory can be shared or uploaded.

What a library prints with the URI in it (MLflow's ``View run ... at:`` lines) passes through
``redacting_output``; a credential on a command line gpulab starts (``gpulab launch -- gpulab train --set
mlflow.tracking_uri=...``) reaches the child through its environment (``hide_credentials``), not its argv,
which anyone on the machine can read (``ps``) and W&B records.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

MASK = "***"
# scheme://user:password@ -> scheme://user:***@ (the user name stays: it says whose credentials they were)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#@:\s]*:)(?P<secret>[^/?#@\s]+)(?=@)")
# ?token=... / &api_key=... / &X-Amz-Signature=...: a query value whose name says it is a credential
_QUERY = re.compile(
    r"(?P<head>[?&;](?:[\w.-]*?(?:token|key|secret|password|passwd|pwd|sig|signature|credential|auth)"
    r"[\w.-]*)=)(?P<secret>[^&#;\s]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the password of each URI and each credential in a query replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m["head"] + MASK, text)
    return _QUERY.sub(lambda m: m["head"] + MASK, text)


def redacted(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists, tuples, nested) with every string passed through ``redact``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(v) for v in value)
    return value


class _RedactingStream:
    """A text stream that writes each string through ``redact`` to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding: the wrapped stream's
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacting_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` redacted while a library that knows a credential prints."""
    out, err = _RedactingStream(sys.stdout), _RedactingStream(sys.stderr)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield


@contextlib.contextmanager
def redacted_argv() -> Iterator[None]:
    """``sys.argv`` without credentials while a library records it (W&B saves the program's arguments)."""
    argv = sys.argv
    sys.argv = redacted(list(argv))
    try:
        yield
    finally:
        sys.argv = argv


# The arguments of a gpulab child whose credentials were masked, by position: {"3": "original"}.
CREDENTIALS_ENV = "GPULAB_ARGV_CREDENTIALS"


def hide_credentials(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """``args`` with each credential masked, and the environment that hands the originals to the child."""
    hidden = {str(i): arg for i, arg in enumerate(args) if redact(arg) != arg}
    if not hidden:
        return list(args), {}
    return redacted(list(args)), {CREDENTIALS_ENV: json.dumps(hidden)}


def restore_credentials(args: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The arguments a parent masked (``hide_credentials``), put back from the environment; an argument
    only where it is still the masked form of its original (anything else is left as given)."""
    environ = os.environ if environ is None else environ
    try:
        hidden = json.loads(environ.get(CREDENTIALS_ENV) or "{}")
    except ValueError:
        return list(args)
    restored = list(args)
    for key, original in hidden.items() if isinstance(hidden, dict) else ():
        i = int(key) if str(key).isdigit() else -1
        if 0 <= i < len(restored) and isinstance(original, str) and restored[i] == redact(original):
            restored[i] = original
    return restored
