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
    own CPU time and its waited-for children's, over wall time x cores. None where /proc/stat is not.
    A benchmark on a shared machine is only as good as this number is small.
    """

    def __init__(self) -> None:
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

    def fraction(self) -> float | None:
        end = self._now()
        if self._start is None or end is None:
            return None
        wall = end[0] - self._start[0]
        cores = os.cpu_count() or 1
        if wall <= 0:
            return None
        others = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return min(1.0, max(0.0, others / (wall * cores)))


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


def load_during(others: OtherCpuLoad, *, on_cpu: bool, engine: str = "torch") -> dict[str, Any]:
    """What ``train`` records about the machine over a run measured by ``others``: the load average,
    the share of CPU time other processes used, whether that made it busy, and if so a one-line note
    (its hint names the engine's own threads: OMP_NUM_THREADS does not size TensorFlow's pools)."""
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
        if not on_cpu:
            hint = ": host-side times are inflated"
        elif engine == "tensorflow":
            hint = ": times are inflated (TensorFlow's CPU threads competed with those processes)"
        else:
            hint = ": times are inflated, and torch's threads wait for each other"
            hint += " (OMP_NUM_THREADS=1 suffers less)"
        load = f"load {report['load_1min']} on {report['cores']} cores"
        report["note"] = f"the machine was busy during this run ({used}, {load}){hint}"
    return report
