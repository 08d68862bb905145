"""The saving half of ``api.py``: argument checks, meta.json, the atomic rename, pruning."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import platform
import shutil
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulab.checkpoint.io import (
    LATEST,
    MANIFEST,
    META,
    STATE,
    TMP_PREFIX,
    WEIGHTS,
    fsync_dir,
    fsync_file,
    is_complete,
    one_line,
    pause_point,
    remove_path,
    step_of,
    write_bytes_durably,
    write_manifest,
    write_text_atomic,
)
from gpulab.checkpoint.read import load_meta, step_dirs
from gpulab.errors import CheckpointError, choices

if TYPE_CHECKING:
    import torch

# torch is imported where a torch state is saved, never at import: the TensorFlow engine commits its own
# checkpoints through this module without torch.

MODES = ("min", "max")
# ROOT/best.json: the best checkpoint by a metric known only after its save (the Trainer validates after
# checkpointing, so a failing validation never costs the epoch): {"checkpoint", "metric", "mode", "value"}.
BEST = "best.json"


def check_save_args(step: Any, state: Any, keep_last: Any, keep_best: Any) -> None:
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"step={step!r}: expected an int >= 0")
    if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
        raise CheckpointError(f"keep_last={keep_last!r}: expected None or an int >= 1")
    if keep_best is not None and (
        not isinstance(keep_best, tuple) or len(keep_best) != 2 or keep_best[1] not in MODES
    ):
        raise CheckpointError(f"keep_best={keep_best!r}: expected (metric_name, {choices(MODES)})")
    if not isinstance(state, dict):
        raise CheckpointError(f"state: expected a dict, got {type(state).__name__}")
    # what a torch state may hold is the torch engine's check (engines/torch/state/contents.py)


def check_extra_files(files: Any) -> dict[str, bytes]:
    """``files`` (name -> bytes) if each may go beside the weights: a plain name that is not one of the
    checkpoint's own files."""
    own = (WEIGHTS, STATE, META, MANIFEST)
    for name, data in files.items():
        if not isinstance(name, str) or name in own or "/" in name or name.startswith(".") or not name:
            raise CheckpointError(f"extra file {name!r}: expected a plain name other than {choices(own)}")
        if not isinstance(data, bytes):
            raise CheckpointError(f"extra file {name!r}: expected bytes, got {type(data).__name__}")
    return dict(files)


def meta_bytes(
    step: int, state: dict[str, Any], meta: dict[str, Any], versions: dict[str, str] | None = None
) -> bytes:
    """meta.json's bytes; ``versions``: the engine's framework versions (None: torch's)."""
    import gpulab

    if not isinstance(meta, dict):
        raise CheckpointError(f"meta: expected a dict, got {type(meta).__name__}")
    progress = state.get("progress") if isinstance(state.get("progress"), dict) else {}
    doc = {
        **meta,
        "step": step,
        "epoch": meta.get("epoch", progress.get("epoch")),
        "metrics": meta.get("metrics", {}),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            "gpulab": gpulab.__version__,
            **(versions if versions is not None else _torch_version()),
            "python": platform.python_version(),
        },
    }
    try:
        return (json.dumps(doc, indent=2, sort_keys=True, default=_json_scalar) + "\n").encode()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"meta is not JSON-serialisable: {one_line(exc)}") from exc


def _json_scalar(value: Any) -> Any:
    """Tensor and NumPy scalars become numbers, paths strings; anything else is an error."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _torch_version() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__}


def save_file(tensors: dict[str, torch.Tensor], filename: str, metadata: dict[str, str]) -> None:
    """safetensors' torch writer, imported when a torch state is saved (a module-level name, so a test can
    fake a full disk here)."""
    from safetensors.torch import save_file as write

    write(tensors, filename, metadata=metadata)


def save_weights(tensors: dict[str, torch.Tensor], path: Path) -> None:
    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except Exception as exc:  # safetensors raises its own types for unsupported tensors
        if is_disk_full(exc):
            raise
        raise CheckpointError(f"{path.name}: cannot save model weights ({one_line(exc)})") from exc
    # safetensors creates the file 0600; give it the umask's mode like every other file. The directory
    # was just made with mkdir (0777 & ~umask), so its mode without the x bits is that, race-free.
    os.chmod(path, path.parent.stat().st_mode & 0o666)
    fsync_file(path)


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT anywhere in ``exc``'s chain: torch's zip writer replaces the OSError by its own
    RuntimeError ("unexpected pos"), TensorFlow raises ResourceExhaustedError naming it, safetensors its
    own ``StorageFull``, and DCP wraps every rank's error in a CheckpointException (``failures``)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        error = todo.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(mark in str(error) for mark in _FULL_MARKS):
            return True
        failures = getattr(error, "failures", None)  # torch.distributed.checkpoint's CheckpointException
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) else f for f in failures.values()]
        todo += [error.__cause__, error.__context__]
    return False


_FULL_MARKS = ("StorageFull", "No space left", "QuotaExceeded", "Disk quota exceeded")


def _is_tensor(tree: Any) -> bool:
    torch = sys.modules.get("torch")  # no torch loaded: the trees hold no torch tensor
    return torch is not None and isinstance(tree, torch.Tensor)


def payload_bytes(*trees: Any) -> int:
    """Bytes of every tensor in ``trees``: about what a checkpoint of them needs on disk."""
    total = 0
    for tree in trees:
        if _is_tensor(tree):
            total += tree.numel() * tree.element_size()
        elif isinstance(tree, dict):
            total += payload_bytes(*tree.values())
        elif isinstance(tree, (list, tuple)):
            total += payload_bytes(*tree)
    return total


@contextlib.contextmanager
def disk_full_as_error(root: Path, name: str, needed: int) -> Iterator[None]:
    """A full disk while writing checkpoint ``name`` becomes one line naming ROOT and the bytes needed
    (the callers remove their temporary directory first, and ``latest`` has not moved)."""
    try:
        yield
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) or not is_disk_full(exc):
            raise
        free = free_bytes(root)
        raise CheckpointError(
            f"{root}: no space left on the device to write checkpoint {name} (it needs about "
            f"{needed:,} bytes, {free:,} are free); free space there, lower keep_last, or set "
            f"checkpoint_dir on a bigger disk. {read_latest_name(root)} stays the latest checkpoint"
        ) from None


def _room_for(directory: Path, needed: int) -> None:
    """ENOSPC before torch's zip writer starts when the disk visibly lacks the room: a full disk inside
    that C++ writer surfaces as its own error (``unexpected pos``), the OSError's errno only in a chained
    one, and its zip records half written; found first, it is the plain one-line full disk."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:  # no figure to go by: torch's writer finds out
        return
    if free < needed:
        raise OSError(errno.ENOSPC, f"{needed:,} bytes needed, {free:,} free", str(directory))


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem of ``path`` (its nearest existing parent); 0 when unreadable."""
    for place in (path, *path.parents):
        if place.exists():
            try:
                return shutil.disk_usage(place).free
            except OSError:
                return 0
    return 0


def read_latest_name(root: Path) -> str:
    try:
        return (root / LATEST).read_text().strip() or "nothing"
    except OSError:
        return "nothing"


def rename_into_place(tmp: Path, final: Path) -> Path:
    """Rename the finished temp dir to ``final``; an existing ``final`` (same step) is moved aside first."""
    aside = final.with_name(f"{TMP_PREFIX}old-{final.name}-{os.getpid()}") if final.exists() else None
    if aside is not None:
        os.rename(final, aside)
    try:
        os.rename(tmp, final)
    except BaseException:
        if aside is not None:
            os.rename(aside, final)
        raise
    fsync_dir(final.parent)
    if aside is not None:
        remove_path(aside)
    return final


def prune(root: Path, keep_last: int, keep_best: tuple[str, str] | None, just_saved: Path) -> None:
    """Remove complete checkpoints beyond the newest ``keep_last`` (never the best, latest or new one,
    nor the newest whose meta.json metrics are all finite: NaN checkpoints never push out the last good one).

    Directories that fail the manifest check are left for a person to inspect. Each removal renames the
    directory to a ``.tmp-`` name first, so a kill mid-removal never leaves a partial ``step-*`` dir.
    """
    complete = [d for d in step_dirs(root) if is_complete(d, hash_files=False)]
    keep = set(complete[-keep_last:]) | {just_saved}
    if keep_best is not None:
        best = _best(complete, *keep_best)
        keep |= {best} if best is not None else set()
        marked = read_best(root, *keep_best)
        keep |= {root / marked["checkpoint"]} if marked is not None else set()
    finite = _newest_finite(complete)
    keep |= {finite} if finite is not None else set()
    for directory in complete:
        if directory not in keep:
            doomed = directory.with_name(f"{TMP_PREFIX}prune-{directory.name}-{os.getpid()}")
            os.rename(directory, doomed)
            remove_path(doomed)


def read_best(root: Path, metric: str, mode: str) -> dict[str, Any] | None:
    """``ROOT/best.json`` when it names a checkpoint by this metric and mode, else None."""
    try:
        best = json.loads((root / BEST).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(best, dict) and step_of(Path(str(best.get("checkpoint")))) is not None
    return best if ok and (best.get("metric"), best.get("mode")) == (metric, mode) else None


def mark_best(root: Path, name: str, metric: str, mode: str, value: float) -> bool:
    """Record checkpoint ``name`` (already committed) as the best when ``value`` beats the recorded best
    (or that one is gone); atomic like ``latest``. Pruning keeps the checkpoint it names."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return False
    best = read_best(root, metric, mode)
    standing = best is not None and (root / best["checkpoint"]).is_dir()
    if standing and isinstance(best.get("value"), (int, float)) and not _beats(value, best["value"], mode):
        return False
    doc = {"checkpoint": name, "metric": metric, "mode": mode, "value": value}
    write_text_atomic(root / BEST, json.dumps(doc) + "\n")
    return True


def _beats(value: float, other: float, mode: str) -> bool:
    return value < other if mode == "min" else value > other


def _newest_finite(directories: list[Path]) -> Path | None:
    for directory in reversed(directories):
        try:
            metrics = load_meta(directory / META).get("metrics", {})
        except CheckpointError:
            continue
        values = metrics.values() if isinstance(metrics, dict) else ()
        if all(math.isfinite(v) for v in values if isinstance(v, (int, float))):
            return directory
    return None


def _best(directories: list[Path], metric: str, mode: str) -> Path | None:
    best, best_value = None, None
    for directory in directories:
        try:
            value = load_meta(directory / META).get("metrics", {}).get(metric)
        except (CheckpointError, AttributeError):
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            continue
        if best_value is None or (value < best_value if mode == "min" else value > best_value):
            best, best_value = directory, value
    return best


def commit_checkpoint(
    tmp: Path,
    root: Path,
    name: str,
    state: dict[str, Any] | None,
    meta_json: bytes,
    *,
    layout: str | None = None,
    keep_last: int | None = None,
    keep_best: tuple[str, str] | None = None,
    needed: int | None = None,
) -> Path:
    """Finish a checkpoint whose weights are already in ``tmp``: state, meta, manifest, each fsync'd;
    rename into place; only then move ``latest``; then prune. A failure removes ``tmp`` and re-raises.

    Shared by full (safetensors) and sharded (torch.distributed.checkpoint) saves, so both keep the same
    order of durable steps and the same kill points.
    """
    needed = payload_bytes(state) if needed is None else needed  # for the message of a full disk
    with disk_full_as_error(root, name, needed):
        return _commit(tmp, root, name, state, meta_json, layout, keep_last, keep_best)


def _commit(tmp, root, name, state, meta_json, layout, keep_last, keep_best) -> Path:
    try:
        pause_point("after-weights")
        if state is not None:  # None: an engine whose state lives in its own files (TensorFlow's)
            import torch

            _room_for(tmp, payload_bytes(state))
            with open(tmp / STATE, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
        write_bytes_durably(tmp / META, meta_json)
        write_manifest(tmp, **({"layout": layout} if layout else {}))
        fsync_dir(tmp)
        pause_point("before-rename")
        final = rename_into_place(tmp, root / name)
    except BaseException:
        remove_path(tmp)
        raise
    pause_point("before-latest")
    write_text_atomic(root / LATEST, name + "\n")
    if keep_last is not None:
        prune(root, keep_last, keep_best, final)
    return final
