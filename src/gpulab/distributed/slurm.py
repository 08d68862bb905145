"""What `gpulab launch` learns from SLURM when it runs as a task of an ``srun`` step, without being told.

Inside a step (``SLURM_STEP_ID`` set) with one task per node, every node's launcher reads the same facts:

- nodes: ``SLURM_STEP_NUM_NODES`` (``SLURM_NNODES`` in a step is the step's count too);
- this node's rank: ``SLURM_PROCID``, the task's rank in the step (with one task per node it is the node's
  index in the step; ``SLURM_NODEID`` counts in the whole allocation, wrong for a step on part of it);
- the hosts, in rank order: ``scontrol show hostnames`` of ``SLURM_STEP_NODELIST`` (else the job's), the
  first of which hosts torch's rendezvous; TensorFlow gets the whole list (its TF_CONFIG, ``tf_config.py``);
- the run id: ``slurm-JOB.STEP``, the same on every node and new for each step.

A batch script or an ``salloc`` shell is not a step: it runs on the first node only, so a launch from there
stays on this node (``outside_step_note`` says how to reach the others).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpulab.errors import LaunchError


@dataclass(frozen=True)
class SlurmStep:
    job_id: str
    step_id: str
    nnodes: int
    node_rank: int
    hosts: list[str]

    @property
    def run_id(self) -> str:
        return f"slurm-{self.job_id}.{self.step_id}"


def scontrol_hostnames(nodelist: str) -> list[str]:
    """SLURM's own expansion of a node list (``n[1-3],gpu07`` -> ``n1 n2 n3 gpu07``)."""
    if shutil.which("scontrol") is None:
        raise LaunchError(f"inside a SLURM step but `scontrol` is not on PATH to expand {nodelist!r}")
    r = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
    )
    if r.returncode != 0:
        raise LaunchError(f"`scontrol show hostnames {nodelist}` failed: {r.stderr.strip()}")
    return r.stdout.split()


def _int(environ: Mapping[str, str], *names: str) -> int:
    for name in names:
        if environ.get(name, "").strip():
            try:
                return int(environ[name])
            except ValueError:
                raise LaunchError(f"{name}={environ[name]!r} is not a number") from None
    raise LaunchError(f"inside a SLURM step but {' and '.join(names)} are not set")


def slurm_step(
    environ: Mapping[str, str], hostnames: Callable[[str], list[str]] = scontrol_hostnames
) -> SlurmStep | None:
    """The step this process is a task of, or None outside a step or in a one-node step (a plain launch)."""
    if not environ.get("SLURM_JOB_ID") or not environ.get("SLURM_STEP_ID"):
        return None
    nnodes = _int(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES")
    ntasks = _int(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    if nnodes == 1 and ntasks == 1:
        return None
    if ntasks != nnodes:
        raise LaunchError(
            f"SLURM step with {ntasks} tasks on {nnodes} node(s): gpulab launch starts each node's processes "
            f"itself, so it needs one task per node (srun --ntasks-per-node=1), or give --nnodes, "
            f"--node-rank and --rdzv-endpoint yourself"
        )
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "")
    hosts = hostnames(nodelist)
    if len(hosts) != nnodes:
        raise LaunchError(f"SLURM node list {nodelist!r} names {len(hosts)} host(s) for {nnodes} node(s)")
    return SlurmStep(
        job_id=environ["SLURM_JOB_ID"],
        step_id=environ["SLURM_STEP_ID"],
        nnodes=nnodes,
        node_rank=_int(environ, "SLURM_PROCID"),
        hosts=hosts,
    )


def outside_step_note(environ: Mapping[str, str]) -> str | None:
    """One line when launched from a multi-node allocation's shell (batch script, salloc), not a step."""
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    if not environ.get("SLURM_JOB_ID") or environ.get("SLURM_STEP_ID") or nodes == "1":
        return None
    return (
        f"gpulab launch: SLURM job {environ['SLURM_JOB_ID']} has {nodes} nodes but this is its batch/salloc "
        f"shell, which runs on one of them: launching on this node only; to use every node run "
        f"`srun --ntasks-per-node=1 gpulab launch ...`"
    )
