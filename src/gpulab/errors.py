"""The project's exceptions.

A ``GpulabError`` is a *user's* mistake or an environment problem with a known fix: the CLI prints its
message as one line and exits 2, with no traceback unless ``--debug``. Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations


class GpulabError(Exception):
    """Base class: one clear line naming what is wrong and the valid choices."""

    exit_code = 2


class ConfigError(GpulabError):
    """A setting is unknown, of the wrong type, or impossible."""


class DeviceError(GpulabError):
    """A device was asked for that this machine does not have."""


class DataError(GpulabError):
    """Training data of a shape or type gpulab cannot use."""


class DeviceMemoryError(GpulabError):
    """The model itself does not fit on the device (or under the memory_limit set for it)."""


class CheckpointError(GpulabError):
    """A checkpoint is missing, incomplete, tampered with, or does not fit the run."""


class RunDirError(GpulabError):
    """The run directory is in use by another run, or holds a finished run this one would mix with."""


class ValidationFailed(GpulabError):
    """Validation raised after the step's checkpoint was written: the message names the step and that
    checkpoint. The cause is the user's own error (their metric, their model's eval path), so the CLI
    prints its traceback before the line, and the exit code is 1."""

    exit_code = 1
    show_cause = True


class Preempted(GpulabError):
    """A run stopped by SIGTERM/SIGINT after saving a checkpoint: exit 128 + N, as a process killed by N.

    Not an error: the CLI prints it as ``gpulab: stopped: ...``; an empty message prints nothing (the
    ranks other than 0 stop quietly).
    """

    label = "stopped"

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class LaunchError(GpulabError):
    """A distributed launch cannot start: bad --nnodes, no command, rendezvous port taken or unreachable."""


class WorkersFailedError(LaunchError):
    """Launched workers failed (restarts exhausted) or the launcher was stopped by a signal.

    Not a mistake in the command line, so exit code 1 (as torchrun), or 128 + N for signal N.
    """

    exit_code = 1

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class MissingPackageError(GpulabError):
    """An optional package a command needs is not installed; the message carries the pip line."""


class ParityError(GpulabError):
    """An exported model does not compute what the trained model computes: exit 1, with the figures."""

    exit_code = 1


class GpulabWarning(UserWarning):
    """Something the user should know that does not stop the run; the CLI prints it as one line."""


def choices(values) -> str:
    """Render valid choices the same way in every message: ``a|b|c``."""
    return "|".join(str(v) for v in values)
