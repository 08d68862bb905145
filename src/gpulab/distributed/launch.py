"""`gpulab launch`: run a command on several processes and nodes with torch.distributed.run (torchrun).

torchrun does the real work: rendezvous, spawning, monitoring, restarting the group. We use it through
its own API: build the argument list torchrun would get, let ``torch.distributed.run`` turn it into a
``LaunchConfig`` (so every torchrun default and check applies), and hand that to ``elastic_launch``.
What gpulab adds around it:

- defaults for this machine: one process per visible GPU (else one); the process-group backend for the
  devices in ``GPULAB_DIST_BACKEND`` (nccl on CUDA, gloo otherwise); NCCL set to tear a rank down on a
  failed or stuck collective (so torchrun sees the failure and restarts the group) and to leave a
  flight-recorder dump. A variable the user already set always wins.
- the rendezvous is always c10d, the elastic one: a single node with no endpoint gets torchrun's
  ``--standalone`` behaviour (a store on a free local port). ``--node-rank 0`` marks the node whose
  launcher hosts the store; with c10d it does not fix the ranks (the rendezvous assigns them).
- on a single node (no endpoint, or a loopback one) nothing listens beyond loopback: the rendezvous
  store, the workers' ``MASTER_ADDR`` store, Gloo and NCCL sockets are all bound to 127.0.0.1 / ``lo``
  (``loopback.py`` says how; torch alone would listen on every interface). Several nodes keep the
  addresses the user gives.
- checks before anything starts, so the common mistakes are one line and exit 2: bad ``--nnodes``, no
  command, the store's port already taken on the hosting node, the endpoint unreachable from another.
- inside a SLURM step (``srun``, one task per node) and told nothing of nodes, ranks or endpoint, it reads
  them from SLURM's variables (``with_slurm``; ``slurm.py`` says which).
- when workers fail and no restart is left, torchrun's ``ChildFailedError`` becomes one line naming
  each failed rank and its exit code (exit 1: the command line was fine, the job was not); a mistake the
  ranks met (each exited 2 with gpulab's one line) is that line, said once, exit 2 (``rank_errors.py``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from gpulab import early_signals
from gpulab.distributed import rank_errors
from gpulab.distributed.debug_dumps import flight_recorder_env, trace_buffer_env
from gpulab.distributed.loopback import LOOPBACK, is_loopback, loopback_interface_env, loopback_store
from gpulab.distributed.preflight import check_port_free, is_local_address, wait_for_endpoint
from gpulab.distributed.slurm import SlurmStep, outside_step_note, scontrol_hostnames, slurm_step
from gpulab.errors import LaunchError, WorkersFailedError
from gpulab.hardware.load import usable_cores
from gpulab.redaction import hide_credentials, redact

BACKEND_ENV = "GPULAB_DIST_BACKEND"
DEFAULT_RDZV_PORT = 29400  # torch's c10d rendezvous default

# Process-group backend per accelerator kind; anything else runs gloo on CPU tensors.
_BACKENDS = {"cuda": "nccl"}

# Set (unless already set) when the backend is NCCL. Why each:
NCCL_SAFE_DEFAULTS = {
    # End the process when a collective fails or times out, without aborting the communicator first
    # (the abort itself can hang): the rank exits, torchrun notices and restarts or fails the group,
    # instead of every rank waiting forever. 3 is torch's default, but torchrun's agent hands its
    # workers 1 unless the variable is set, so we set it (process_group.py uses 3 as well).
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    # On a watchdog timeout, dump the flight recorder (the last collectives each rank issued): the
    # record that tells which rank fell out of step. The buffer must be non-zero for the dump. Where:
    # under --log-dir when given, else under the Trainer's out_dir (never /tmp; process_group.py).
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    # (the buffer's size: debug_dumps.trace_buffer_env, under the name this torch reads)
    # Kill a rank whose watchdog thread itself is stuck (in a CUDA/NCCL call) after the heartbeat timeout.
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    # NCCL's own one-line warnings on failure, not its INFO chatter.
    "NCCL_DEBUG": "WARN",
    # TORCH_NCCL_BLOCKING_WAIT is deliberately left unset: it makes every wait() block the CPU.
}


@dataclass
class LaunchSpec:
    """What the user asked for; ``None`` means "the default for this machine"."""

    command: list[str]
    nproc_per_node: int | None = None
    nnodes: str = "1"
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_connect_timeout: float = 60.0
    local_addr: str | None = None
    max_restarts: int = 0
    monitor_interval: float = 0.1
    module: bool = False
    no_python: bool = False
    log_dir: str | None = None


@dataclass
class LaunchPlan:
    """A spec resolved against this machine: everything torchrun gets, and the env workers get."""

    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    host: str
    port: int
    standalone: bool
    loopback: bool  # one node: every socket of the job on the loopback interface
    run_id: str
    is_host: bool | None  # None: let torch decide from the endpoint's address
    backend: str
    command_flags: list[str]
    script: str
    script_args: list[str]
    env: dict[str, str] = field(default_factory=dict)  # only what is not already set

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_nnodes(text: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` with 1 <= MIN <= MAX."""
    parts = str(text).split(":")
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        lo, hi = int(parts[0]), int(parts[-1])
    except ValueError:
        raise LaunchError(f"--nnodes {text!r} is not N or MIN:MAX (e.g. 2, or 1:4 for elastic)") from None
    if not 1 <= lo <= hi:
        raise LaunchError(f"--nnodes {text!r}: need 1 <= MIN <= MAX")
    return lo, hi


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST`` (port 29400) or ``[IPv6]:PORT``."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    try:
        port = int(port_text) if port_text else DEFAULT_RDZV_PORT
    except ValueError:
        port = -1
    if not host or not 0 <= port <= 65535:
        raise LaunchError(f"--rdzv-endpoint {text!r} is not HOST:PORT (e.g. node0.cluster:29400)")
    return host, port


def with_slurm(
    spec: LaunchSpec,
    environ: Mapping[str, str] | None = None,
    hostnames: Callable[[str], list[str]] = scontrol_hostnames,
) -> tuple[LaunchSpec, SlurmStep | None]:
    """``spec`` placed by the SLURM step this process is a task of: nodes, node rank, the first host's
    rendezvous and the step's run id. Unchanged (and the step None) outside a multi-node step.

    For a spec the user gave no ``--nnodes``, ``--node-rank`` or ``--rdzv-endpoint``: what they say wins.
    """
    environ = os.environ if environ is None else environ
    step = slurm_step(environ, hostnames)
    if step is None:
        note = outside_step_note(environ)
        if note:
            print(note, file=sys.stderr, flush=True)
        return spec, None
    placed = replace(
        spec,
        nnodes=str(step.nnodes),
        node_rank=step.node_rank,
        rdzv_endpoint=f"{step.hosts[0]}:{DEFAULT_RDZV_PORT}",
        rdzv_id=spec.rdzv_id or step.run_id,
    )
    return placed, step


def resolve_command(command: list[str], module: bool = False, no_python: bool = False):
    """Split CMD into torchrun's flags, its training script and the script's arguments.

    ``script.py ARGS`` runs under this interpreter; ``-m pkg.mod ARGS`` (or ``--module``) as a module;
    ``gpulab VERB ARGS`` as ``python -m gpulab VERB ARGS``; a leading ``python`` is dropped (the
    workers always use this interpreter); ``--no-python`` runs CMD as an executable.
    """
    cmd = list(command or [])
    if not cmd:
        raise LaunchError(
            "no command to launch: put it after --, e.g. `gpulab launch --nproc-per-node 2 -- train.py "
            "--lr 0.1` or `gpulab launch -- gpulab train mlp`"
        )
    if no_python:
        return ["--no-python"], cmd[0], cmd[1:]
    if os.path.basename(cmd[0]).startswith("python"):
        cmd = [c for c in cmd[1:2] if c != "-u"] + cmd[2:]
        if not cmd:
            raise LaunchError("no script after `python`: give a script or -m MODULE")
    head, rest = cmd[0], cmd[1:]
    if head in ("-m", "--module"):
        if not rest:
            raise LaunchError("-m needs a module name, e.g. `-- -m mypkg.train --lr 0.1`")
        return ["--module"], rest[0], rest[1:]
    if head == "gpulab" or module:
        return ["--module"], head, rest
    if not os.path.isfile(head):
        raise LaunchError(
            f"{head!r} is not a file: give a Python script, `-m MODULE`, `gpulab VERB ...`, "
            "or use --no-python to run an executable"
        )
    return [], head, rest


def local_accelerator() -> tuple[str, int]:
    """``("cuda", n)`` when torch sees n GPUs, else ``("cpu", 0)``. Without torch (a TensorFlow install),
    the GPUs NVML sees, as far as ``CUDA_VISIBLE_DEVICES`` lets CUDA see them."""
    try:
        import torch
    except ImportError:
        from gpulab.hardware.nvml import parse_visible_devices, physical_gpu_count

        n = physical_gpu_count()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            n = min(n, len(parse_visible_devices(visible)))
        return ("cuda", n) if n else ("cpu", 0)
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return "cuda", torch.cuda.device_count()
    return "cpu", 0


def default_backend(kind: str) -> str:
    return _BACKENDS.get(kind, "gloo")


def worker_env(
    backend: str, nproc_per_node: int, environ: Mapping[str, str], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables gpulab sets for the launch (agent and workers), minus any the user already set."""
    wanted = {
        **(extra or {}),
        BACKEND_ENV: backend,
        # Since torch 2.5 the agent's rendezvous store is shared with the workers' process group by
        # default, and it outlives a restart: a restarted rank can read a peer's address left by the
        # previous attempt and fail to connect ("Gloo connectFullMesh failed ... Connection refused";
        # pytorch/pytorch#135712). Seen here in 4 of 6 restarts with torch 2.13. Not sharing gives
        # each attempt a fresh store hosted by its rank 0, as torchrun did before 2.5.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        # c10d's warnings, each with a C++ backtrace: when a rank dies (kill -9 of rank 0, which hosts the
        # store) every store call of the others logged ~20 frames (78 lines for one kill), burying the
        # watchdog's one line that names the rank and its node. Errors still print; a user's value wins.
        "TORCH_CPP_LOG_LEVEL": "ERROR",
    }
    if backend == "nccl":
        wanted.update(NCCL_SAFE_DEFAULTS)
        wanted.update(trace_buffer_env(environ))
    if nproc_per_node > 1:
        # torchrun would set 1 (with a banner); an even share of the cores is as safe and faster.
        wanted["OMP_NUM_THREADS"] = str(max(1, usable_cores() // nproc_per_node))
    return {k: v for k, v in wanted.items() if k not in environ}


def _check_numbers(spec: LaunchSpec, max_nodes: int) -> None:
    for name, value in (("--max-restarts", spec.max_restarts), ("--node-rank", spec.node_rank or 0)):
        if value < 0:
            raise LaunchError(f"{name} must be >= 0, got {value}")
    if spec.node_rank is not None and spec.node_rank >= max_nodes:
        raise LaunchError(f"--node-rank {spec.node_rank} is out of range for --nnodes {spec.nnodes}")
    if spec.nproc_per_node is not None and spec.nproc_per_node < 1:
        raise LaunchError(f"--nproc-per-node must be >= 1, got {spec.nproc_per_node}")


def _rendezvous_address(spec: LaunchSpec, max_nodes: int) -> tuple[str, int, bool]:
    """(host, port, standalone): the given endpoint, or torchrun's --standalone for one node."""
    if spec.rdzv_endpoint:
        return (*parse_endpoint(spec.rdzv_endpoint), False)
    if max_nodes == 1:
        return LOOPBACK, 0, True  # a store on a free local port
    raise LaunchError(
        f"--nnodes {spec.nnodes} needs --rdzv-endpoint HOST:PORT, the same on every node "
        f"(HOST is the node started with --node-rank 0, e.g. node0:{DEFAULT_RDZV_PORT})"
    )


def plan_launch(spec: LaunchSpec, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Resolve a spec against this machine; raises LaunchError on a bad spec (nothing is started)."""
    environ = os.environ if environ is None else environ
    min_nodes, max_nodes = parse_nnodes(spec.nnodes)
    flags, script, args = resolve_command(spec.command, spec.module, spec.no_python)
    _check_numbers(spec, max_nodes)
    host, port, standalone = _rendezvous_address(spec, max_nodes)
    kind, gpus = local_accelerator()
    nproc = spec.nproc_per_node or max(gpus, 1)
    backend = environ.get(BACKEND_ENV) or default_backend(kind)
    if backend == "nccl" and nproc > gpus:
        # Rank r would take cuda:r, which does not exist, and NCCL refuses two ranks on one GPU.
        raise LaunchError(
            f"--nproc-per-node {nproc} but this node has {gpus} GPU(s) visible: NCCL needs one process "
            f"per GPU; use --nproc-per-node {gpus}, or run on the CPU (CUDA_VISIBLE_DEVICES= or "
            f"{BACKEND_ENV}=gloo)"
        )
    loopback = max_nodes == 1 and is_loopback(host)
    extra = loopback_interface_env(backend) if loopback else {}
    if spec.log_dir and backend == "nccl":  # the flight recorder's dumps beside the ranks' logs
        extra.update(flight_recorder_env(spec.log_dir))
    if script == "gpulab":  # a credential reaches the ranks through their environment, not their argv
        args, hidden = hide_credentials(args)
        extra.update(hidden)
    return LaunchPlan(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        host=host,
        port=port,
        standalone=standalone,
        loopback=loopback,
        run_id=spec.rdzv_id or (uuid.uuid4().hex if standalone else "gpulab"),
        is_host=None if spec.node_rank is None else spec.node_rank == 0,
        backend=backend,
        command_flags=flags,
        script=script,
        script_args=args,
        env=worker_env(backend, nproc, environ, extra),
    )


def torchrun_argv(plan: LaunchPlan, spec: LaunchSpec) -> list[str]:
    """The torchrun command line for a plan (what ``torch.distributed.run.parse_args`` receives)."""
    argv = [
        f"--nnodes={plan.min_nodes}:{plan.max_nodes}",
        f"--nproc-per-node={plan.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={plan.endpoint}",
        f"--rdzv-id={plan.run_id}",
        f"--max-restarts={spec.max_restarts}",
        f"--monitor-interval={spec.monitor_interval}",
    ]
    if plan.is_host is not None or plan.loopback:
        argv.append(f"--rdzv-conf=is_host={str(plan.is_host is not False).lower()}")
    if spec.local_addr or plan.loopback:  # the workers' MASTER_ADDR: the rank-0 agent's address
        argv.append(f"--local-addr={spec.local_addr or LOOPBACK}")
    if spec.log_dir:
        argv.append(f"--log-dir={spec.log_dir}")
    return [*argv, *plan.command_flags, plan.script, *plan.script_args]


def check_rendezvous(plan: LaunchPlan, spec: LaunchSpec) -> None:
    """Port free where this node hosts the store; endpoint reachable where another node does."""
    if plan.standalone:
        return
    local = is_local_address(plan.host)
    hosting = plan.is_host if plan.is_host is not None else (local and plan.max_nodes == 1)
    joining = plan.is_host is False or (plan.is_host is None and not local)
    if hosting:
        check_port_free(plan.host, plan.port)
    elif joining:
        wait_for_endpoint(plan.host, plan.port, spec.rdzv_connect_timeout)


# --- running ------------------------------------------------------------------------------------------


@contextmanager
def _environ(updates: Mapping[str, str]) -> Iterator[None]:
    """Workers inherit the launcher's environment: set ``updates`` for the launch, then put it back."""
    old = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _failure_detail(failure) -> str:
    """The first line of what the rank recorded in its error file (``@record``), if it wrote one."""
    if not failure.error_file or failure.error_file == "<N/A>":
        return ""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return lines[0] if lines else ""


def describe_failures(failures: Mapping[int, object], max_restarts: int) -> str:
    """One line naming each failed rank (global rank) and its exit code or signal.

    When one rank fails torchrun stops the others with SIGTERM, and reports them too: those are named
    as stopped, not as causes (unless every rank died of SIGTERM, then the signal came from outside).
    """
    causes = {r: f for r, f in failures.items() if f.exitcode != -signal.SIGTERM} or dict(failures)
    parts = []
    for rank, f in sorted(causes.items()):
        how = f"was killed by {f.signal_name()}" if f.exitcode < 0 else f"exited with code {f.exitcode}"
        detail = _failure_detail(f)
        parts.append(f"rank {rank} (local rank {f.local_rank}) {how}" + (f" ({detail})" if detail else ""))
    stopped = sorted(set(failures) - set(causes))
    if stopped:
        parts.append(f"rank(s) {', '.join(map(str, stopped))} stopped by the launcher")
    tries = (
        "no restarts allowed (--max-restarts 0)" if max_restarts == 0 else f"{max_restarts} restart(s) used"
    )
    return f"the job failed: {'; '.join(parts)}; {tries}; each rank's own output is above"


def _quiet_launcher_cpp_warnings() -> None:
    """Load torch in the launcher with C++ warnings off (the workers keep the user's setting).

    The launcher's C++ side is only the rendezvous store, and its warnings are noise with stack frames:
    a joining node's store client logs a full C++ backtrace when node 0 exits first at the end of a
    successful multi-node job (its rendezvous shutdown then finds no store), and a namespace without
    DNS logs that peer hostnames cannot be resolved. Real failures still surface as Python errors,
    which become one line below. c10 reads the level once, when torch loads; a user's value wins.
    """
    if "torch" in sys.modules or "TORCH_CPP_LOG_LEVEL" in os.environ:
        return
    os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    try:
        import torch  # noqa: F401
    finally:
        del os.environ["TORCH_CPP_LOG_LEVEL"]


def describe_plan(plan: LaunchPlan) -> str:
    nodes = str(plan.max_nodes) if plan.min_nodes == plan.max_nodes else f"{plan.min_nodes}-{plan.max_nodes}"
    where = "standalone" if plan.standalone else plan.endpoint
    return (
        f"gpulab launch: {plan.nproc_per_node} process(es) per node x {nodes} node(s), backend "
        f"{plan.backend}, rendezvous {where}: {redact(shlex.join([plan.script, *plan.script_args]))}"
    )


def launch(spec: LaunchSpec) -> None:
    """Check, then run ``spec.command`` under torchrun's elastic agent until it finishes or fails."""
    _quiet_launcher_cpp_warnings()
    plan = plan_launch(spec)
    check_rendezvous(plan, spec)
    with _rendezvous_store(plan), _outlive_requeue_warning():
        print(describe_plan(plan), file=sys.stderr, flush=True)
        with _environ(plan.env):
            _run_torchrun(plan, spec)


@contextmanager
def _outlive_requeue_warning() -> Iterator[None]:
    """SIGUSR1 (SLURM's ``--signal=USR1@90``, sent to every process of the step) is for the workers: they
    checkpoint and requeue the job (``core/requeue.py``). Its default action would end the launcher and,
    with it, the workers before they saved; a handler of ours (not SIG_IGN, which the workers would
    inherit) lets it pass."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGUSR1) is early_signals.record  # recorded, shared with late workers
    ):
        yield
        return
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


@contextmanager
def _rendezvous_store(plan: LaunchPlan) -> Iterator[None]:
    """On one node, start the rendezvous store on loopback first; torchrun's then shares it (multi-tenant).

    ``plan.port`` 0 becomes the port the store got. Several nodes: torchrun creates its store itself.
    """
    if not plan.loopback:
        yield
        return
    from datetime import timedelta

    try:
        store = loopback_store(plan.host, plan.port, None, timedelta(seconds=60))
    except OSError as exc:
        raise LaunchError(
            f"rendezvous port {plan.port} on {plan.host} cannot be bound ({exc.strerror}): pick a free port "
            f"in --rdzv-endpoint, or leave it out on a single node"
        ) from None
    plan.port = store.port
    try:
        yield
    finally:
        del store


def _run_torchrun(plan: LaunchPlan, spec: LaunchSpec) -> None:
    """torchrun's parser -> LaunchConfig -> elastic_launch; its failures become one-line errors."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    # Without --log-dir torchrun makes /tmp/torchelastic_* (each rank's error file) and never removes it:
    # give it a directory of ours instead and remove it when the launch ends (failures are read by then).
    own_log_dir = None if spec.log_dir else tempfile.mkdtemp(prefix="gpulab-launch-")
    argv = torchrun_argv(plan, replace(spec, log_dir=spec.log_dir or own_log_dir))
    config, entrypoint, args = torchrun.config_from_args(torchrun.parse_args(argv))
    mistakes = tempfile.mkdtemp(prefix="gpulab-rank-errors-")  # a rank's one-line mistake, said once here
    quieted = rank_errors.quiet_elastic_loggers(mistakes)
    said = None
    try:
        with _environ({rank_errors.ENV: mistakes}):
            elastic_launch(config=config, entrypoint=entrypoint)(*args)
    except ChildFailedError as exc:
        said = rank_errors.mistake(mistakes, exc.failures)
        if said is not None:
            raise LaunchError(said) from None
        rank_errors.release(quieted, log_held=True)
        for rank, text in sorted(rank_errors.recorded(mistakes).items()):  # beside a crash: said, not lost
            for line in text.splitlines():
                print(f"gpulab: error: rank {rank}: {line}", file=sys.stderr)
        raise WorkersFailedError(describe_failures(exc.failures, spec.max_restarts)) from None
    except SignalException as exc:
        name = getattr(exc.sigval, "name", str(exc.sigval))
        raise WorkersFailedError(
            f"the launcher was stopped by {name} and passed it on to its workers", 128 + int(exc.sigval)
        ) from None
    except RendezvousError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise LaunchError(
            f"rendezvous at {plan.endpoint} failed ({type(exc).__name__}: {first}{cause}); check that every "
            f"node uses the same --rdzv-endpoint and --rdzv-id and that --nnodes {spec.nnodes} nodes started"
        ) from None
    finally:
        # torchrun's lines are dropped only where the mistake's line replaced them (a restarted job that
        # then finished, or a signal, still shows what failed)
        rank_errors.release(quieted, log_held=said is None)
        shutil.rmtree(mistakes, ignore_errors=True)
        if own_log_dir:
            shutil.rmtree(own_log_dir, ignore_errors=True)
