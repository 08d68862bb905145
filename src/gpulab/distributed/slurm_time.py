"""How long before a SLURM job's time limit its warning comes (``--signal=USR1@GRACE``), from that limit.

SLURM checks its timers about once a minute, so the warning "may be sent up to 60 seconds earlier than
specified" (sbatch(1)): a fixed 90 s on a 2-minute job comes 0-30 s after the start, before the run has a
step to save (found on a real cluster). So the grace follows ``--time``: 90 s (Lightning's default, room for
a large model's checkpoint) where the limit leaves room for it, else half of what the limit has left after
SLURM's 60 s, so that an attempt trains at least as long as it has to save; a limit leaving less than
``MIN_GRACE_S`` for that is refused in one line.
"""

from __future__ import annotations

import re

from gpulab.errors import LaunchError

REQUEUE_GRACE_S = 90  # Lightning's default: a checkpoint of a large model and the requeue fit in it
SLURM_EARLY_S = 60  # how much earlier than asked SLURM may send the signal
MIN_GRACE_S = 15  # a step, a small model's checkpoint and `scontrol requeue`
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def parse_time(text: str) -> int:
    """Seconds in a SLURM ``--time``: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    found = _TIME.fullmatch(text.strip())
    if not found:
        raise LaunchError(f"--time {text!r} is not a SLURM time limit; e.g. 30, 00:02:00 or 1-12:00:00")
    days, a, b, c = found.groups()
    if days is not None:  # D-H[:M[:S]]
        h, m, s = int(a), int(b or 0), int(c or 0)
        return ((int(days) * 24 + h) * 60 + m) * 60 + s
    if c is not None:  # H:M:S
        return (int(a) * 60 + int(b)) * 60 + int(c)
    return int(a) * 60 + int(b or 0)  # M or M:S


def _clock(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def warning_grace(limit_s: int | None, asked: int | None) -> int:
    """Seconds before the limit for ``--signal=USR1@N``: ``asked``, else from the limit (module docstring)."""
    if asked is not None:
        if asked < 1:
            raise LaunchError(f"--requeue-grace must be at least 1 second, got {asked}")
        if limit_s is not None and asked >= limit_s:
            raise LaunchError(
                f"--requeue-grace {asked} is not shorter than --time {_clock(limit_s)}: the warning would "
                "come before the job starts; give a smaller grace or a longer --time"
            )
        return asked
    if limit_s is None:
        return REQUEUE_GRACE_S
    grace = min(REQUEUE_GRACE_S, (limit_s - SLURM_EARLY_S) // 2)
    if grace < MIN_GRACE_S:
        shortest = SLURM_EARLY_S + 2 * MIN_GRACE_S
        raise LaunchError(
            f"--time {_clock(limit_s)} is too short to save a checkpoint in before it ends (SLURM's warning "
            f"may come {SLURM_EARLY_S} s early): give --time {_clock(shortest)} or more, or --no-requeue"
        )
    return grace
