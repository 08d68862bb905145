"""A launched rank's one-line mistake, said once by the launcher instead of by every rank under torchrun's
failure lines.

Under ``gpulab launch -- gpulab train ...`` a mistake only the ranks meet (a user recipe that raises where
it runs, a file missing on a node) was printed by each rank, then torchrun logged the rank it stopped and
the exit code, then the launcher named the failed ranks: several lines and exit 1 for one mistake. The
launcher now hands its ranks a folder (``ENV``); a rank whose command ends in a gpulab error (exit 2, no
traceback: a mistake, not a crash) writes its lines there instead of printing them. When the job fails
and every rank that failed on its own exited 2 and left its lines, the launcher prints the first rank's,
once, and exits 2; torchrun's lines about stopping the group are left out while a rank's lines are there.
A crash (any other exit code, a signal) is reported as before, torchrun's lines and all. Each attempt of
an elastic job (``--max-restarts``) leaves its lines in a folder of its own: a restarted group is not
taken for one whose peer made a mistake, and a job that failed, restarted and finished still shows
torchrun's lines about the failure.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path

ENV = "GPULAB_RANK_ERRORS"  # the folder the launcher gave its ranks
ATTEMPT_ENV = "TORCHELASTIC_RESTART_COUNT"  # torchrun's count of the group's restarts, in each rank
WORKER_ENV = "GPULAB_WORKER_INDEX"  # a TensorFlow worker's global index (torchrun's ranks have RANK)
MISTAKE_EXIT = 2  # gpulab's exit code for a mistake said in one line (errors.GpulabError)
# torchrun's loggers that say it stopped the group and which rank failed with which code
ELASTIC_LOGGERS = (
    "torch.distributed.elastic.multiprocessing.api",
    "torch.distributed.elastic.agent.server.api",
    "torch.distributed.elastic.agent.server.local_elastic_agent",
)


def _this_attempt(folder: str | Path) -> Path:
    """This rank's attempt's folder under the launcher's."""
    return Path(folder) / f"attempt-{int(os.environ.get(ATTEMPT_ENV) or 0)}"


def record(text: str) -> bool:
    """In a rank of ``gpulab launch``: write ``text`` (the error's lines) for the launcher and return True;
    elsewhere False (the caller prints them)."""
    folder, rank = os.environ.get(ENV), os.environ.get("RANK", os.environ.get(WORKER_ENV))
    if not folder or rank is None or not Path(folder).is_dir():
        return False
    path = _this_attempt(folder) / f"rank{int(rank)}.txt"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)  # whole or absent: the launcher may read it as this rank exits
    except OSError:
        return False
    return True


def _last_attempt(folder: str | Path) -> Path | None:
    attempts = [p for p in Path(folder).glob("attempt-*") if p.name.removeprefix("attempt-").isdigit()]
    return max(attempts, key=lambda p: int(p.name.removeprefix("attempt-")), default=None)


def recorded(folder: str | Path) -> dict[int, str]:
    """Each rank's recorded lines in the last attempt that left any, by global rank."""
    found = {}
    last = _last_attempt(folder)
    for path in last.glob("rank*.txt") if last is not None else ():
        try:
            found[int(path.stem.removeprefix("rank"))] = path.read_text()
        except (OSError, ValueError):
            continue
    return found


def mistake(folder: str | Path, failures: Mapping[int, object]) -> str | None:
    """The lines the launcher says instead of the failure summary: the first rank's that left them, when
    each rank that failed either left them (and exited 2, or was stopped as it exited) or was stopped
    (SIGTERM, or 128 + SIGTERM: ``peer_made_a_mistake``'s exit) without any; None otherwise (a crash:
    torchrun's summary stands)."""
    lines = recorded(folder)
    # not SIGKILL: a rank killed -9 is a crash its peers then fail on (a collective's one line, exit 2)
    stopped = {-signal.SIGTERM, 128 + signal.SIGTERM}
    if not lines or any(
        f.exitcode not in stopped and (f.exitcode != MISTAKE_EXIT or r not in lines)
        for r, f in failures.items()
    ):
        return None
    first = min(lines)
    said = lines[first].strip()
    same = all(text.strip() == said for text in lines.values())
    return said if same else "\n".join(f"rank {first}: {line}" for line in said.splitlines())


def peer_made_a_mistake() -> bool:
    """In a rank of ``gpulab launch``: whether a rank already left its mistake (the SIGTERM that follows
    is the launcher stopping the group; with a peer gone no checkpoint can be agreed)."""
    folder = os.environ.get(ENV)
    return bool(folder) and any(_this_attempt(folder).glob("rank*.txt"))


class QuietOnMistake(logging.Filter):
    """Holds back torchrun's records once a rank left its mistake in ``folder``: they would come after the
    rank's line and bury it (``Sending process N closing signal SIGTERM``, ``failed (exitcode: 2)``).
    ``release`` logs them after all where the failure turns out to be a crash."""

    def __init__(self, folder: str | Path) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if any(self.folder.glob("attempt-*/rank*.txt")):
            self.held.append(record)
            return False
        return True


def quiet_elastic_loggers(folder: str | Path) -> list[tuple[logging.Logger, QuietOnMistake]]:
    """``QuietOnMistake`` on each of torchrun's loggers; what was added, for ``release``."""
    added = []
    for name in ELASTIC_LOGGERS:
        logger, quiet = logging.getLogger(name), QuietOnMistake(folder)
        logger.addFilter(quiet)
        added.append((logger, quiet))
    return added


def release(added: list[tuple[logging.Logger, QuietOnMistake]], log_held: bool) -> None:
    """Take the filters off; ``log_held``: log what they held back (a crash is told as torchrun tells it)."""
    for logger, quiet in added:
        logger.removeFilter(quiet)
        for record in quiet.held if log_held else ():
            logger.handle(record)
        quiet.held.clear()
