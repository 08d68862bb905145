"""`gpulab launch --engine tensorflow`: start this node's TensorFlow workers, each with its TF_CONFIG.

torchrun cannot do this: its rendezvous and restarts speak torch's store, and TensorFlow wants the
whole cluster written into ``TF_CONFIG`` before it starts (``tf_config.py``). So this is a small
supervisor: start ``nproc_per_node`` processes, watch them, and when one dies stop the others (SIGTERM,
then SIGKILL after a grace period) and end the job in one line naming the worker and its exit code or
signal. No restarts: a MultiWorkerMirroredStrategy job cannot take a worker back mid-run. A worker that
stopped answering (suspended) is named as the cause, not the peer that died of losing it
(``launch_blame.py``).
A SIGTERM/SIGINT to the launcher goes to every worker once: they checkpoint one step together and exit.

What is shared with the torch path: the command forms (``resolve_command``), ``--nnodes``/``--node-rank``
checks, the one-line errors and their exit codes (2 for a bad command line, 1 for a failed job,
128 + N when the launcher itself is stopped by signal N).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from gpulab.distributed import rank_errors
from gpulab.distributed.launch import LaunchSpec, local_accelerator, parse_nnodes, resolve_command
from gpulab.engines.tensorflow.launch_blame import is_suspended, lost_tasks
from gpulab.engines.tensorflow.launch_config import DEFAULT_TF_PORT, cluster_workers, tf_config
from gpulab.errors import LaunchError, WorkersFailedError
from gpulab.hardware.load import usable_cores

STOP_GRACE_S = (
    30.0  # how long a stopped worker gets to exit (a checkpoint to save) before SIGKILL; torchrun's
)


@dataclass
class TFPlan:
    """This node's workers: each one's argv and the variables it gets on top of the launcher's."""

    nnodes: int
    node_rank: int
    nproc_per_node: int
    workers: list[str]  # the whole cluster's host:port, global index order
    argv: list[str]
    env: list[dict[str, str]] = field(default_factory=list)  # per local worker

    def global_index(self, local: int) -> int:
        return self.node_rank * self.nproc_per_node + local


def _argv(flags: list[str], script: str, args: list[str]) -> list[str]:
    if flags == ["--no-python"]:
        return [script, *args]
    if flags == ["--module"]:
        return [sys.executable, "-u", "-m", script, *args]
    return [sys.executable, "-u", script, *args]


def _hosts(text: str | None, nnodes: int) -> list[str] | None:
    if nnodes == 1 and not text:
        return None
    hosts = [h.strip() for h in (text or "").split(",") if h.strip()]
    if len(hosts) != nnodes:
        raise LaunchError(
            f"--engine tensorflow with --nnodes {nnodes} needs --hosts with {nnodes} address(es), one per "
            f"node in --node-rank order (got {len(hosts)}), e.g. --hosts node0,node1: TensorFlow has no "
            f"rendezvous, every worker is told every worker's address"
        )
    return hosts


def plan_tf_launch(
    spec: LaunchSpec,
    hosts: str | None = None,
    base_port: int = DEFAULT_TF_PORT,
    environ: Mapping[str, str] | None = None,
) -> TFPlan:
    """Resolve the spec for TensorFlow; raises LaunchError on a bad one (nothing is started)."""
    environ = os.environ if environ is None else environ
    lo, hi = parse_nnodes(spec.nnodes)
    if lo != hi:
        raise LaunchError(
            f"--nnodes {spec.nnodes}: --engine tensorflow has no elastic jobs (TF_CONFIG fixes the "
            f"cluster at start); give a plain number of nodes"
        )
    flags, script, args = resolve_command(spec.command, spec.module, spec.no_python)
    node_rank = spec.node_rank or 0
    if not 0 <= node_rank < hi:
        raise LaunchError(f"--node-rank {node_rank} is out of range for --nnodes {spec.nnodes}")
    if spec.nproc_per_node is not None and spec.nproc_per_node < 1:
        raise LaunchError(f"--nproc-per-node must be >= 1, got {spec.nproc_per_node}")
    if not 1 <= base_port <= 65535 - (spec.nproc_per_node or 1):
        raise LaunchError(f"--base-port {base_port} is not a usable TCP port")
    host_list = _hosts(hosts, hi)
    _, gpus = local_accelerator()
    nproc = spec.nproc_per_node or max(gpus, 1)
    workers = cluster_workers(nproc, host_list, base_port)
    plan = TFPlan(hi, node_rank, nproc, workers, _argv(flags, script, args))
    for local in range(nproc):
        env = {"TF_CONFIG": tf_config(workers, plan.global_index(local))}
        if gpus >= nproc > 1 and "CUDA_VISIBLE_DEVICES" not in environ:
            env["CUDA_VISIBLE_DEVICES"] = str(local)  # one GPU per worker, as torchrun's LOCAL_RANK does
        if nproc > 1:  # an even share of the cores each, unless the user chose
            share = str(max(1, usable_cores() // nproc))
            for var in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
                if var not in environ:
                    env[var] = share
        plan.env.append(env)
    return plan


def describe_tf_plan(plan: TFPlan) -> str:
    return (
        f"gpulab launch: {plan.nproc_per_node} TensorFlow worker(s) per node x {plan.nnodes} node(s), "
        f"workers {','.join(plan.workers)} (worker 0 is the chief): {shlex.join(plan.argv)}"
    )


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def describe_dead(
    plan: TFPlan,
    dead: Mapping[int, int],
    stopped: list[int],
    log_dir: str | None = None,
    suspended: Sequence[int] = (),
) -> str:
    """One line: the suspended workers (the cause: their peers died of losing them), each dead worker (global
    index, node, exit code or signal, and whom TensorFlow said it lost), then the ones we stopped."""

    def who(local: int) -> str:
        return f"worker {plan.global_index(local)} (node {plan.node_rank}, local {local})"

    parts = [
        f"{who(local)} was suspended (process state T: SIGSTOP or Ctrl-Z) and stopped answering its peers; "
        "the launcher killed it"
        for local in suspended
    ]
    for local, code in sorted(dead.items()):
        lost = lost_tasks(Path(log_dir) / f"worker{plan.global_index(local)}.log") if log_dir else []
        said = (
            f" after losing worker(s) {', '.join(map(str, lost))} (TensorFlow's coordination service: "
            "stopped sending heartbeats)"
            if lost
            else ""
        )
        parts.append(f"{who(local)} {_how(code)}{said}")
    if stopped:
        parts.append(
            f"worker(s) {', '.join(str(plan.global_index(i)) for i in stopped)} stopped by the launcher"
        )
    where = f"in {log_dir}/workerN.log" if log_dir else "above"
    return f"the job failed: {'; '.join(parts)}; each worker's own output is {where}"


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def _stop(
    procs: list[subprocess.Popen], signum: int = signal.SIGTERM, grace: float = STOP_GRACE_S
) -> list[int]:
    """Send ``signum`` to the running workers, SIGKILL what is left after ``grace``; returns those stopped."""
    running = [i for i, p in enumerate(procs) if p.poll() is None]
    for i in running:
        procs[i].send_signal(signum)
    deadline = time.monotonic() + grace
    for i in running:
        try:
            procs[i].wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            procs[i].kill()
            procs[i].wait()
    return running


def run_tf_workers(plan: TFPlan, log_dir: str | None = None, monitor_interval: float = 0.1) -> None:
    """Start the workers and wait: all exit 0 -> return; one fails -> stop the rest, WorkersFailedError."""

    stopping: list[int] = []
    procs: list[subprocess.Popen] = []

    def on_signal(signum, frame):
        if not stopping:  # a second Ctrl-C while the workers are being stopped changes nothing
            stopping.append(signum)
            raise _Stopped(signum)

    def on_requeue_warning(signum, frame):
        # SIGUSR1 (SLURM's warning before a time limit): the workers checkpoint and requeue the job. Its
        # default action would end the launcher; passed on, the workers' watch takes SLURM's own copy
        # within its repeat window as the same request.
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_requeue_warning)
    logs = []
    mistakes = tempfile.mkdtemp(prefix="gpulab-rank-errors-")  # a worker's one-line mistake, said once here
    try:
        for local, env in enumerate(plan.env):
            env = {**env, rank_errors.ENV: mistakes, rank_errors.WORKER_ENV: str(plan.global_index(local))}
            out = None
            if log_dir:  # each worker's stdout+stderr in its own file, as torchrun's --log-dir
                Path(log_dir).mkdir(parents=True, exist_ok=True)
                out = open(Path(log_dir) / f"worker{plan.global_index(local)}.log", "wb")  # noqa: SIM115
                logs.append(out)
            err = subprocess.STDOUT if out else None
            # A session of its own, as torchrun does: a terminal's Ctrl-C reaches the launcher only, which
            # passes it on once (a worker saving a checkpoint on SIGINT is not interrupted twice).
            procs.append(
                subprocess.Popen(
                    plan.argv, env={**os.environ, **env}, stdout=out, stderr=err, start_new_session=True
                )
            )
        while True:
            codes = [p.poll() for p in procs]
            dead = {i: c for i, c in enumerate(codes) if c not in (None, 0)}
            if dead:
                suspended = [i for i, c in enumerate(codes) if c is None and is_suspended(procs[i].pid)]
                for i in suspended:  # a SIGTERM would wait, pending, for a SIGCONT that never comes
                    procs[i].kill()
                    procs[i].wait()
                stopped = _stop(procs)
                ended = {plan.global_index(i): SimpleNamespace(exitcode=c) for i, c in dead.items()}
                said = None if suspended else rank_errors.mistake(mistakes, ended)
                if said is not None:  # every failed worker made the same kind of mistake: its line, once
                    raise LaunchError(said)
                raise WorkersFailedError(describe_dead(plan, dead, stopped, log_dir, suspended))
            if all(c == 0 for c in codes):
                return
            time.sleep(monitor_interval)
    except _Stopped as exc:
        _stop(procs, exc.signum)
        name = signal.Signals(exc.signum).name
        raise WorkersFailedError(
            f"the launcher was stopped by {name} and passed it on to its workers", 128 + exc.signum
        ) from None
    except OSError as exc:  # the command itself cannot start (a --no-python executable not found)
        raise LaunchError(f"cannot start {plan.argv[0]!r}: {exc.strerror}") from None
    finally:
        _stop(procs)  # nothing outlives the launcher, whatever ended it (no-op when all have exited)
        shutil.rmtree(mistakes, ignore_errors=True)
        for s, handler in old.items():
            signal.signal(s, handler)
        for f in logs:
            f.close()


def _check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as exc:
            raise LaunchError(
                f"port {port} on this node is taken ({exc.strerror}); TensorFlow workers use --base-port "
                f"and the ports after it: pick a free range, e.g. --base-port {port + 100}"
            ) from None


def launch_tf(spec: LaunchSpec, hosts: str | None = None, base_port: int = DEFAULT_TF_PORT) -> None:
    """Check, then run this node's TensorFlow workers until they all finish or one fails."""
    plan = plan_tf_launch(spec, hosts, base_port)
    if plan.nnodes > 1:  # this node's fixed ports; one node's were just found free
        for local in range(plan.nproc_per_node):
            _check_port_free(base_port + local)
    print(describe_tf_plan(plan), file=sys.stderr, flush=True)
    run_tf_workers(plan, spec.log_dir, spec.monitor_interval)
