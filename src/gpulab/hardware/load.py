"""How busy the machine is: the load average, and the share of CPU time other processes used.

On a CPU device a busy machine inflates every time badly (torch's threads wait for each other at every
parallel region: a digits run took 51 s with 2 threads instead of 6 s with one while others ran), so
``doctor`` reports the load, and ``train``, ``profile`` and ``bench`` say when the machine was busy.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

BUSY_FRACTION = 0.2  # share of the machine's CPU time others may use before a run says so


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_average() -> float | None:
    """The 1-minute load average; None where the platform has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def machine_load() -> dict[str, Any]:
    """The 1-minute load average against the cores this process may use: above 1 per core, other
    processes competed for the CPU and times are inflated."""
    cores, load = usable_cores(), load_average()
    return {"load_1min": load, "cores": cores, "busy": None if load is None else load > cores}


class OtherCpuLoad:
    """The share of the machine's CPU time that *other* processes used since this object was made.

    Busy time of all CPUs (/proc/stat, steal included: a VM's neighbours count) minus this process's
    own CPU time and its waited-for children's (and, in a launched job, its sibling ranks'), over wall
    time x cores. None where /proc/stat is not.
    A benchmark on a shared machine is only as good as this number is small.
    """

    def __init__(self) -> None:
        # A launched rank's sibling ranks (same launcher) are this job, not other processes: on 2 cores
        # the second rank alone would make every 2-rank run "busy". A plain process's siblings (whatever
        # else its shell started) stay others.
        self._siblings = _sibling_pids() if _launched() else []
        self._sibling_start = {pid: _process_cpu_s(pid) for pid in self._siblings}
        self.siblings_cpu_s = 0.0  # the sibling ranks' CPU time over the last fraction(), left out of it
        self._start = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float] | None:
        busy = _all_cpus_busy_s()
        if busy is None:
            return None
        own = sum(
            getattr(resource.getrusage(who), f)
            for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
            for f in ("ru_utime", "ru_stime")
        )
        return time.monotonic(), busy, own

    def _siblings_delta(self) -> float:
        total = 0.0
        for pid, start in self._sibling_start.items():
            end = _process_cpu_s(pid)
            if start is not None and end is not None and end >= start:  # gone or reused: not counted
                total += end - start
        return total

    def fraction(self) -> float | None:
        end = self._now()
        if self._start is None or end is None:
            return None
        wall = end[0] - self._start[0]
        cores = os.cpu_count() or 1
        if wall <= 0:
            return None
        self.siblings_cpu_s = self._siblings_delta()
        others = (end[1] - self._start[1]) - (end[2] - self._start[2]) - self.siblings_cpu_s
        return min(1.0, max(0.0, others / (wall * cores)))


def _launched() -> bool:
    """One of several processes a launcher started: torchrun's ranks, or `--engine tensorflow` workers."""
    return "LOCAL_WORLD_SIZE" in os.environ or "TF_CONFIG" in os.environ


def _sibling_pids() -> list[int]:
    """The other children of this process's parent (a launcher's other ranks), from /proc."""
    parent, me, found = os.getppid(), os.getpid(), []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        pid = int(entry)
        if pid != me and _parent_of(pid) == parent:
            found.append(pid)
    return found


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def _process_cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid`` and its waited-for children (a rank's DataLoader workers), in seconds."""
    fields = _stat_fields(pid)
    if not fields or len(fields) < 15:
        return None
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _all_cpus_busy_s() -> float | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already inside user/nice]
    values = [int(v) for v in fields[1:9]]
    busy = sum(values) - values[3] - values[4]
    return busy / os.sysconf("SC_CLK_TCK")


def load_during(others: OtherCpuLoad, *, on_cpu: bool, threads_hint: str) -> dict[str, Any]:
    """What ``train`` records about the machine over a run measured by ``others``: the load average,
    the share of CPU time other processes used, whether that made it busy, and if so a one-line note
    (``threads_hint``, from the engine, names its own threads: OMP_NUM_THREADS does not size TensorFlow's
    pools)."""
    report = machine_load()
    share = others.fraction()
    report["cpu_used_by_others"] = None if share is None else round(share, 3)
    busy = share > BUSY_FRACTION if share is not None else report["busy"]
    report["busy"] = busy
    if busy:
        used = (
            f"other processes used {share:.0%} of its CPU time"
            if share is not None
            else "load above its cores"
        )
        hint = f": times are inflated{threads_hint}" if on_cpu else ": host-side times are inflated"
        load = f"load {report['load_1min']} on {report['cores']} cores"
        report["note"] = f"the machine was busy during this run ({used}, {load}){hint}"
    return report
