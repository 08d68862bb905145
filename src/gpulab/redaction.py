"""Secrets kept out of what gpulab writes down: ``redacted`` masks credentials in every string of a value.

A tracker's URI may carry credentials (``http://user:password@host``, ``...?token=...``). The live
connection uses the URI as this command's settings or environment give it; every copy gpulab writes
(tracker parameters and config, ``trackers.json``, ``summary.json``, each checkpoint's ``meta.json`` and
``state.pt``, its lines) goes through ``redacted``, so a run directory can be shared or uploaded.
"""

from __future__ import annotations

import re
from typing import Any

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
