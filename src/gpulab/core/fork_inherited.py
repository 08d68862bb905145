"""Descriptors a forked child must not keep. DataLoader workers are forked from the run's process and
would hold what it holds: the signal watch's pipe (its thread then never saw the pipe's end, and the run
hung after its last step) and the run directory's lock (a killed run's lingering workers refused its
resume). What is registered here is closed in every forked child, at the fork."""

from __future__ import annotations

import contextlib
import os

_REGISTERED: set[int] = set()


def close_in_children(*fds: int) -> None:
    _REGISTERED.update(fds)


def keep_in_children(*fds: int) -> None:
    """Forget ``fds`` (about to be closed here: a later descriptor of the same number is not ours)."""
    _REGISTERED.difference_update(fds)


def _close_in_child() -> None:
    for fd in list(_REGISTERED):
        with contextlib.suppress(OSError):
            os.close(fd)
    _REGISTERED.clear()


os.register_at_fork(after_in_child=_close_in_child)
