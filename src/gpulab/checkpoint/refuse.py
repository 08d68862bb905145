"""The resume refusal both engines share: a checkpoint is resumed only into the same run.

Each engine passes the settings that change its trajectory (``compared``: ``TRAJECTORY_SETTINGS`` below,
which every engine has, plus its own: torch's ``micro_batch``) and what it runs now; any difference is
one ``CheckpointError`` naming every change, unless the user forces the resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulab.errors import CheckpointError

# Settings that change which samples meet which weights on every engine: a resume with any of them changed is
# not the same run, so it is refused unless forced. An engine adds its own (torch: micro_batch).
TRAJECTORY_SETTINGS = ("batch_size", "accumulate", "seed", "precision", "clip_grad_norm")


def refuse_if_changed(
    path: Path, st: dict[str, Any], now: dict[str, Any], *, precision: str, trajectory: Any,
    has_schedule: bool, total_steps: int, world_size: int, compared: tuple[str, ...],
) -> None:  # fmt: skip
    """Refuse a resume whose run would differ from the checkpoint's (either engine): the settings that
    change the trajectory (``compared``, read from ``now``: the run's settings), the recipe, an LR
    schedule's planned length, the number of ranks or workers."""
    saved, now = dict(st["config"]), dict(now)
    if isinstance(st.get("resolved"), dict):  # compare what ran, not what was asked: auto -> fp32 is fp32
        saved.update(st["resolved"])
        now["precision"] = precision
    diffs = [f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in compared if saved.get(k) != now.get(k)]
    diffs += _changed("", st.get("trajectory"), trajectory)
    planned = st["progress"].get("total_steps")
    if has_schedule and planned is not None and planned != total_steps:
        # A schedule is a function of the planned length: run past its end, cosine climbs back up.
        diffs.append(
            f"max_steps {planned} -> {total_steps} (the LR schedule was planned for {planned} steps and "
            "cannot be stretched mid-run; keep max_steps/epochs, or start a new run from the exported "
            "weights)"
        )
    world = int(st["progress"].get("world_size", 1))
    if world != world_size:
        diffs.append(f"world_size {world} -> {world_size}")
    if diffs:
        raise CheckpointError(
            f"resume from {path} refused, the run would differ: {'; '.join(diffs)} "
            "(set force_resume=True / --set force_resume=true to resume anyway)"
        )


def _changed(prefix: str, saved: Any, now: Any) -> list[str]:
    """``key old -> new`` for every leaf that differs between two nested dicts (``options.lr 0.001 -> 0.5``).
    A checkpoint from before ``trajectory`` was recorded (None) has nothing to compare."""
    if saved is None:
        return []
    if not (isinstance(saved, dict) and isinstance(now, dict)):
        return [] if saved == now else [f"{prefix} {saved!r} -> {now!r}"]
    missing = object()
    out = []
    for key in sorted(set(saved) | set(now), key=str):
        old, new = saved.get(key, missing), now.get(key, missing)
        name = f"{prefix}.{key}" if prefix else str(key)
        if old is missing or new is missing:
            if old != new:
                out.append(f"{name} {_shown(old, missing)} -> {_shown(new, missing)}")
        else:
            out += _changed(name, old, new)
    return out


def _shown(value: Any, missing: object) -> str:
    return "(default)" if value is missing else repr(value)
