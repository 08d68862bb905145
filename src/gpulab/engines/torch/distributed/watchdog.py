"""Stalled collectives: every rank stops within the timeout, and says which rank stalled where.

The failure this is for: one rank hangs (a deadlocked data worker, a stuck filesystem, a bug in one
branch) and every other rank sits in the next collective. NCCL would wait 10-30 minutes and then print
an error that names nobody.

How it works, per rank:

- ``Heartbeat``: the main thread records what it is doing -- the optimizer step, and the collective it
  is in (a sequence number and a name) -- as one tuple assignment. No lock, no I/O: it costs nothing on
  the hot path.
- A watchdog thread copies the heartbeat to the c10d store (``hb/RANK``) about once a second, only when it
  changed, and watches the shared ``abort`` key. A finished step also wakes it to publish at once
  (``Heartbeat.stepped``), at most once per ``STEP_GAP_S`` (steps in between are coalesced: a store write
  per step cost a 1 ms CPU step about 45%, measured): a rank frozen whole (SIGSTOP, a swapped-out machine)
  publishes nothing more, and a once-a-second copy then reported the step of up to a second earlier (19
  for a rank that had written its step-48 checkpoint); now it is at most ``STEP_GAP_S`` old.
- When a collective fails on a rank (Gloo raises at the timeout; a peer that died closes the connection),
  that rank reads everyone's heartbeats, names the ranks whose sequence number is behind its own (they
  never reached the collective), writes that diagnosis to ``abort``, and raises ``CollectiveError``.
- Every other rank's watchdog sees ``abort``, prints the diagnosis, and ends its process with
  ``EXIT_CODE`` -- including the stuck rank, whose main thread may never come back.
- Progress: NCCL collectives return as soon as they are queued, so on NCCL a marked region ends at once
  and a rank waits for a stalled peer later, in an unmarked ``.item()`` or synchronisation. The watchdog
  therefore also judges *progress*: a judging rank's watchdog thread reads all heartbeats (one
  ``multi_get`` a tick) and names the rank(s) whose progress -- steps done, then collectives entered --
  is behind another rank's and has not moved for ``timeout_s`` (or the longer limit of a marked phase). That
  needs no collective to block, so a stalled rank is named within ``timeout_s`` plus a few ticks on
  every backend. Only two ranks judge progress, the first and the last (on different nodes in a
  multi-node job): reading every heartbeat on every rank would be ranks² store reads a second on the
  store's host. A judge that is ahead declares the stall; a judge that is itself the stalled one (its
  main thread may be stuck, its watchdog thread is not) declares only if nobody has one tick later.
  The process group's own timeout is ``BACKEND_GRACE_S`` longer (``process_group.py``), so this
  diagnosis comes before NCCL's watchdog tears the process down without naming anyone.
- Backstop: if a collective neither returns nor raises (a hang inside a CUDA kernel; NCCL's own watchdog
  normally tears the process down first, with its flight recorder dump), the watchdog thread declares the
  failure itself once the collective is ``grace_s`` past its timeout.

A rank that dies without a word (SIGKILL) cannot write ``abort``; the others then fail on the dead
connection, or lose the store if the dead rank hosted it, and stop with that as the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TextIO

import torch.distributed as dist

from gpulab.errors import GpulabError

EXIT_CODE = 75  # EX_TEMPFAIL: a rank stopped because the job could not continue; a restart may succeed
PREFIX = "gpulab/watchdog/"
ABORT = "abort"
ACK_WAIT_S = 3.0  # how long the rank that diagnosed waits for the others to read it before going on
STEP_GAP_S = 0.05  # the least time between two step-driven publishes (see the module docstring)


class CollectiveError(GpulabError):
    """A collective timed out or failed; the message names the rank that did not reach it."""


class Heartbeat:
    """What the main thread is doing; written by it, read by the watchdog thread.

    ``step`` counts the optimizer steps done (the Runtime increments it); setting it sets ``stepped``, which
    wakes the watchdog thread to publish it.

    ``state`` is ``(seq, collective or None, step, since)``, replaced as a whole (one atomic store under
    the GIL), so the reader never sees half an update. ``seq`` counts collectives entered: ranks run the
    same program, so a rank whose ``seq`` is lower than a waiting rank's never reached its collective.
    ``last`` names the collective entered last (still known after an asynchronous one has returned).
    """

    __slots__ = ("state", "_step", "last", "stepped")

    def __init__(self) -> None:
        self.stepped = threading.Event()
        self._step = 0
        self.last: str | None = None
        self.state: tuple[int, str | None, int, float] = (0, None, 0, time.time())

    @property
    def step(self) -> int:
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = value
        if not self.stepped.is_set():  # ~1 us a step; already set: the thread has not published yet
            self.stepped.set()

    def enter(self, name: str) -> None:
        self.last = name
        self.state = (self.state[0] + 1, name, self.step, time.time())

    def leave(self) -> None:
        self.state = (self.state[0], None, self.step, time.time())

    def as_dict(self) -> dict[str, Any]:
        seq, name, _, since = self.state
        return {
            "seq": seq,
            "collective": name,
            "last": self.last,
            "step": self.step,  # live: a step without a collective is progress too
            "since": since,
            "pid": os.getpid(),
            "host": HOST,
        }


def _host() -> str:
    """This rank's node as its scheduler names it (SLURM's node name, as in "Node failure on n2"), else the
    hostname: a line about a dead peer names the machine to look at, not only a rank and an address."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


HOST = _host()


def _who(rank: int, beat: dict[str, Any]) -> str:
    """``rank 1 on n2`` (a heartbeat of an older gpulab has no host: ``rank 1``)."""
    return f"rank {rank} on {beat['host']}" if beat.get("host") else f"rank {rank}"


def _where(beat: dict[str, Any], name: str) -> str:
    """Where a rank behind is: an earlier collective of the same name is said to be one."""
    if not beat["collective"]:
        return "outside any collective"
    earlier = "an earlier " if beat["collective"] == name else ""
    return f"in {earlier}{beat['collective']!r}"


def progress(beat: dict[str, Any]) -> tuple[int, int]:
    """How far a rank has come: steps done, then collectives entered (ranks run the same program)."""
    return (beat["step"], beat["seq"])


class _Collective(AbstractContextManager):
    """``with watchdog.collective(name):`` -- marks the collective and turns its failure into a diagnosis."""

    __slots__ = ("_watchdog", "_name", "_timeout_s")

    def __init__(self, watchdog: Watchdog, name: str, timeout_s: float | None) -> None:
        self._watchdog, self._name, self._timeout_s = watchdog, name, timeout_s

    def __enter__(self) -> None:
        self._watchdog.heartbeat.enter(self._name)
        self._watchdog.phase_timeout_s = self._timeout_s

    def __exit__(self, exc_type, exc, tb) -> bool:
        failed_in = self._watchdog.heartbeat.state
        self._watchdog.heartbeat.leave()
        self._watchdog.phase_timeout_s = None
        if exc is not None and isinstance(exc, Exception) and not isinstance(exc, GpulabError):
            self._watchdog.fail(failed_in, exc)  # raises CollectiveError for a communication failure
        return False


class Watchdog:
    """Heartbeat publisher, abort listener and diagnostician for one rank; see the module docstring.

    ``exit_fn`` and ``out`` are injectable so the logic is testable in one process.
    """

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        world_size: int,
        timeout_s: float,
        *,
        interval_s: float | None = None,
        grace_s: float = 3.0,
        ack_wait_s: float = ACK_WAIT_S,
        exit_fn: Callable[[int], Any] = os._exit,
        out: TextIO | None = None,
    ) -> None:
        self.store = dist.PrefixStore(PREFIX, store)
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.interval_s = interval_s if interval_s is not None else min(1.0, max(timeout_s / 5, 0.05))
        self.grace_s, self.ack_wait_s = grace_s, ack_wait_s
        self.heartbeat = Heartbeat()
        self.judge = rank in (0, world_size - 1)  # reads everyone's heartbeats; see the module docstring
        self.phase_timeout_s: float | None = None  # a collective with its own, longer limit
        self._exit_fn, self._out = exit_fn, out
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._published: tuple | None = None
        self._aborting = False
        self._behind: dict[int, tuple[tuple[int, int], float]] = {}  # rank -> (progress, first seen behind)
        # rank 0's node, read from its heartbeat while the store is up: rank 0 hosts the store, and once it
        # dies the line about it must still name its node
        self.store_host: str | None = HOST if rank == 0 else None

    # -- main thread ----------------------------------------------------------------------------------
    def collective(self, name: str, timeout_s: float | None = None) -> _Collective:
        return _Collective(self, name, timeout_s)

    def start(self) -> Watchdog:
        self._publish()
        self._thread = threading.Thread(target=self._run, name=f"gpulab-watchdog-{self.rank}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.heartbeat.stepped.set()  # wakes the thread
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.interval_s + 1)
        self._thread = None
        # The final state, marked done: a rank still running must not see this one as behind. The store
        # may be gone (its host exited first): then nobody is left to judge.
        with contextlib.suppress(Exception):
            self.store.set(f"hb/{self.rank}", json.dumps({**self.heartbeat.as_dict(), "done": True}))

    def aborted(self) -> bool:
        """Whether any rank declared the job failed (this one included)."""
        try:
            return self._aborting or self.store.check([ABORT])
        except Exception:
            return True

    def fail(self, state: tuple, exc: BaseException) -> None:
        """``exc`` came out of the collective in ``state``: tell every rank to stop, then raise.

        A communication failure (a distributed error type, a timeout, a closed connection) becomes a
        ``CollectiveError`` with the diagnosis. Anything else (a bug in a backward hook, say) keeps its
        own type and traceback; the other ranks are still told, since they would otherwise wait for
        this rank in the next collective until the timeout.
        """
        seq, name, step, since = state
        if _is_comm_failure(exc, time.time() - since, self.timeout_s):
            message = self.diagnose(state, cause=exc)
            self._broadcast_abort(message)
            raise CollectiveError(message) from exc
        self._broadcast_abort(
            f"rank {self.rank} raised {type(exc).__name__} in {name!r} at step {step}: {_first_line(exc)}"
        )

    def diagnose(self, state: tuple, cause: BaseException | None = None) -> str:
        """Which collective failed here, and which ranks never reached it (and where they are instead)."""
        seq, name, step, since = state
        waited = time.time() - since
        head = f"collective {name!r} failed on rank {self.rank} during step {step + 1} after {waited:.1f}s"
        if cause is not None:
            head += f" ({_first_line(cause)})"
        try:
            others = self._read_heartbeats()
        except Exception as exc:  # the store is gone: its host (rank 0 under torchrun) has exited
            lost = f"the c10d store is unreachable ({_first_line(exc)})"
            return f"{head}; {lost}: {self._store_owner()} has probably exited"
        behind, silent = [], []
        now = time.time()
        for rank, beat in others.items():
            if beat is None:
                silent.append(f"rank {rank} never sent a heartbeat")
            elif beat["seq"] < seq:
                # its heartbeat's collective is an earlier one (maybe of the same name): it never got here
                behind.append(
                    f"{_who(rank, beat)} did not reach {name!r} (it has {beat['step']} steps done; its last "
                    f"heartbeat, {now - beat['since']:.1f}s ago, found it {_where(beat, name)})"
                )
        if behind or silent:
            return f"{head}: {'; '.join(behind + silent)}"
        peers = ", ".join(_who(rank, beat) for rank, beat in sorted(others.items()) if rank != self.rank)
        return (
            f"{head}: every rank reached it, so the collective itself failed "
            f"(a rank died inside it, or the network between ranks failed; the others: {peers})"
        )

    # -- watchdog thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        tick = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            if self.heartbeat.stepped.wait(max(0.0, tick - time.monotonic())) and not self._stop.is_set():
                self.heartbeat.stepped.clear()  # before reading the step: a later one sets it again
                with contextlib.suppress(Exception):  # a lost store is the tick's to handle
                    self._publish()
                self._stop.wait(min(STEP_GAP_S, self.interval_s))
                if time.monotonic() < tick:
                    continue
            if self._stop.is_set():
                return
            tick = time.monotonic() + self.interval_s
            try:
                self._publish()
                self._learn_store_host()
                if self._check_abort() or self._watch_progress():
                    return
            except Exception as exc:  # store unreachable
                if self.heartbeat.state[1] is not None and not self._stop.is_set():
                    self._say(
                        f"lost the c10d store while in {self.heartbeat.state[1]!r} ({_first_line(exc)}): "
                        f"{self._store_owner()} has probably exited"
                    )
                    self._exit_fn(EXIT_CODE)
                    return
                continue  # between collectives (e.g. rank 0 finished first): nothing is waiting on it
            self._backstop()

    def _learn_store_host(self) -> None:
        if self.store_host is None and self.store.check(["hb/0"]):
            self.store_host = json.loads(self.store.get("hb/0")).get("host") or ""

    def _store_owner(self) -> str:
        """``rank 0 on n1``: the store's host, whose loss is named as the cause."""
        return f"rank 0 on {self.store_host}" if self.store_host else "rank 0"

    def _publish(self) -> None:
        state = (self.heartbeat.state, self.heartbeat.step, self.phase_timeout_s)
        if state != self._published:
            self.store.set(f"hb/{self.rank}", json.dumps({**self.heartbeat.as_dict(), "limit": state[2]}))
            self._published = state

    def _watch_progress(self) -> bool:
        """Name the ranks that stopped making progress while another rank moved on; True if it did.

        A rank is *stalled* when its progress is behind the furthest rank's and has not changed for
        longer than its limit: ``timeout_s``, or the longer limit of a marked phase it or the furthest
        rank is in (rank 0 writing a checkpoint). Judged from when this thread first saw it behind, on
        this machine's clock, so clocks that differ between nodes do not matter.
        """
        if self.world_size < 2 or self._aborting or not self.judge:
            return False
        keys = [f"hb/{r}" for r in range(self.world_size)]
        if not self.store.check(keys):
            return False  # some rank has not started yet
        beats = {r: json.loads(v) for r, v in enumerate(self.store.multi_get(keys))}
        beats[self.rank] = {**self.heartbeat.as_dict(), "limit": self.phase_timeout_s}
        now = time.monotonic()
        top = max(beats, key=lambda r: progress(beats[r]))
        stalled = []
        for rank, beat in beats.items():
            mark = progress(beat)
            if beat.get("done") or mark >= progress(beats[top]):
                self._behind.pop(rank, None)
                continue
            if self._behind.get(rank, (None,))[0] != mark:
                self._behind[rank] = (mark, now)
                continue
            limit = max(self.timeout_s, beat.get("limit") or 0.0, beats[top].get("limit") or 0.0)
            # The stalled rank itself waits one tick more: a rank that is ahead names it first.
            extra = self.interval_s * 2 if rank == self.rank else 0.0
            if now - self._behind[rank][1] > limit + extra:
                stalled.append(rank)
        if not stalled:
            return False
        message = self._stall_message(stalled, beats, top, now)
        self._say(message)  # first: once the others exit, this process may end any moment
        self._broadcast_abort(message)
        self._exit_fn(EXIT_CODE)
        return True

    def _stall_message(self, stalled: list[int], beats: dict, top: int, now: float) -> str:
        ahead = beats[top]
        name = ahead["last"] or "the next collective"
        parts = []
        for rank in stalled:
            beat = beats[rank]
            parts.append(
                f"{_who(rank, beat)} did not reach {name!r} (it has {beat['step']} steps done and has made "
                f"no progress for {now - self._behind[rank][1]:.1f}s, {_where(beat, name)})"
            )
        return (
            f"stalled rank(s) {', '.join(map(str, stalled))}, found by rank {self.rank}'s watchdog: "
            f"{'; '.join(parts)}; rank {top} is furthest, with {ahead['step']} steps done and "
            f"{ahead['seq']} collectives entered (limit: collective_timeout_s={self.timeout_s:g})"
        )

    def _check_abort(self) -> bool:
        if self._aborting or not self.store.check([ABORT]):
            return False
        report = json.loads(self.store.get(ABORT))
        self._aborting = True
        self._exit_on_uncaught()
        self.store.set(f"ack/{self.rank}", "1")
        self._say(f"stopping: rank {report['rank']} reported: {report['message']}")
        self._wait_for_acks()
        self._exit_fn(EXIT_CODE)
        return True

    def _backstop(self) -> None:
        """A collective past its limit that neither returned nor raised: declare the failure from here."""
        state = self.heartbeat.state
        limit = (self.phase_timeout_s or self.timeout_s) + self.grace_s
        if state[1] is None or time.time() - state[3] < limit or self._aborting:
            return
        message = self.diagnose(state) + " (no error came back: declared by the watchdog)"
        self._say(message)
        self._broadcast_abort(message)
        self._exit_fn(EXIT_CODE)

    # -- both -----------------------------------------------------------------------------------------
    def _broadcast_abort(self, message: str) -> None:
        """Write the diagnosis to ``abort`` and give the other ranks' watchdogs a moment to read it."""
        self._aborting = True
        self._exit_on_uncaught()
        try:
            if not self.store.check([ABORT]):
                self.store.set(ABORT, json.dumps({"rank": self.rank, "message": message}))
            self.store.set(f"ack/{self.rank}", "1")
        except Exception:  # the store is gone too: the others will find out on their own
            return
        self._wait_for_acks()

    def _wait_for_acks(self) -> None:
        """Until every rank has read the diagnosis (or ``ack_wait_s``): a rank that exits closes its
        connections, and a peer blocked in the backend would then fail before its watchdog reads it."""
        acks = [f"ack/{r}" for r in range(self.world_size)]
        deadline = time.time() + self.ack_wait_s
        try:
            while time.time() < deadline and not self.store.check(acks):
                time.sleep(min(0.05, self.interval_s))
        except Exception:  # the store's host has exited: nothing left to wait for
            pass

    def _exit_on_uncaught(self) -> None:
        """Once the job is declared failed, an uncaught error in the main thread (a backend wait failing
        because a peer exited) is a consequence, not news: exit with ``EXIT_CODE``, no traceback."""
        if self._exit_fn is not os._exit:  # a test's watchdog: leave the process's hook alone
            return

        def hook(exc_type, exc, tb) -> None:
            self._say(f"exiting after the job was declared failed: {exc_type.__name__}: {_first_line(exc)}")
            os._exit(EXIT_CODE)

        sys.excepthook = hook

    def _read_heartbeats(self) -> dict[int, dict[str, Any] | None]:
        out: dict[int, dict[str, Any] | None] = {}
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            key = f"hb/{rank}"
            out[rank] = json.loads(self.store.get(key)) if self.store.check([key]) else None
        return out

    def _say(self, text: str) -> None:
        out = self._out or sys.stderr
        print(f"[gpulab rank {self.rank}] {text}", file=out, flush=True)


_COMM_WORDS = ("timed out", "timeout", "connection", "peer", "gloo", "nccl", "socket", "broken pipe")


def _is_comm_failure(exc: BaseException, waited_s: float, timeout_s: float) -> bool:
    if isinstance(exc, dist.DistError) or waited_s >= 0.5 * timeout_s:
        return True
    text = str(exc).lower()
    return any(word in text for word in _COMM_WORDS)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."
