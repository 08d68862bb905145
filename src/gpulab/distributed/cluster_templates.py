"""`gpulab launch --print slurm|k8s -- CMD`: the same launch for a cluster scheduler, printed, not run.

Both run one ``python -m gpulab launch`` per node (torchrun underneath, N processes each) with the
rendezvous on the first node:

- Slurm: an sbatch script; ``srun`` starts one task per node, node 0 is the first host of
  ``scontrol show hostnames``, the node rank is ``$SLURM_NODEID`` and the run id ``$SLURM_JOB_ID``.
- Kubernetes: a Kubeflow ``PyTorchJob`` (kubeflow.org/v1) with a Master and ``nnodes - 1`` Workers;
  the training operator injects the master's address and each pod's rank (``PET_*`` in recent
  operators, ``MASTER_ADDR``/``RANK`` in older ones), read by a shell at start-up. Each pod keeps its work:
  a PersistentVolumeClaim (``--volume-claim``, default JOB-runs, made by the user: ReadWriteMany for
  several nodes) mounted at ``--mount-path`` (default /runs) and the container's working directory, so a
  relative ``--out`` and its checkpoints outlive a restarted container; ``/dev/shm`` a memory-backed
  emptyDir (a container's default 64 MiB stops DataLoader workers); CPU and memory requests per pod
  (``--cpus-per-node``, ``--memory-per-node``); ``--image`` is required.

GPUs requested per node = processes per node, unless ``gpus_per_node`` says otherwise; 0 asks for none
(a CPU cluster: SLURM refuses a GPU request where no node has GPUs, "Invalid generic resource (gres)
specification"). The variables stay shell expansions (quoted), the user's command is quoted word by
word, so what runs is exactly the command given; a ``$SLURM_...`` variable in it is left for the node's
shell (``--out 'runs/x-$SLURM_ARRAY_TASK_ID'`` under ``--array``: each element a run of its own). The sbatch
script runs the interpreter (and virtual environment) gpulab was rendered from, in lines that say so.

Slurm requeue, as Lightning's SLURMEnvironment users expect: ``--signal=USR1@GRACE`` (SLURM's warning
GRACE seconds before the time limit, sized for ``--time``: ``slurm_time.py``; gpulab checkpoints at the next
step and requeues the job itself, ``core/requeue.py``), ``--requeue`` and ``--open-mode=append`` (each
attempt's lines are appended to the same log, after a line naming the attempt); the next attempt's
``gpulab launch`` resumes with ``--resume auto``. ``requeue=False`` (``--no-requeue``) asks for none of it.

``engine="tensorflow"`` (Slurm only): each node's task runs ``gpulab launch --engine tensorflow``, which
reads the step's nodes and its own rank from SLURM's variables (``distributed/slurm.py``) and builds every
worker's TF_CONFIG from them; TensorFlow has no rendezvous, so there is no host to export.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

import yaml

from gpulab.distributed.launch import DEFAULT_RDZV_PORT, LaunchSpec, parse_endpoint, parse_nnodes
from gpulab.distributed.slurm_time import SLURM_EARLY_S, parse_time, warning_grace
from gpulab.errors import LaunchError, choices

K8S_PORT_NAME = "pytorchjob-port"  # the port name the training operator reads MASTER_PORT from
K8S_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1035 label
SLURM_VARIABLE = re.compile(r"(\$\{?SLURM_[A-Z_]+\}?)")  # $SLURM_ARRAY_TASK_ID, ${SLURM_JOB_ID}
ARRAY_SPEC = re.compile(r"[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?")
K8S_MOUNT = "/runs"
K8S_CPUS_PER_PROCESS = 4  # default requests: what a training process and its data workers typically use
K8S_MEMORY_GI_PER_PROCESS = 16
# Kubernetes gives a stopping pod 30 s between SIGTERM and SIGKILL: the step under way fits, a large model's
# checkpoint (and a tracker's upload) often does not. 120 s, as SLURM's warning before a time limit (90 s)
# with room for a slow volume; a pod that finishes sooner ends sooner.
K8S_GRACE_S = 120
# An elastic job lives by restarts: a pod that leaves or joins restarts the group, so 0 would end the job at
# the first change. 3, as Kubeflow's own elastic examples; --max-restarts sets it (here and in elasticPolicy).
K8S_ELASTIC_RESTARTS = 3
K8S_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?([KMGTPE]i?)?")  # 32Gi, 64G, 500M


def _launcher_line(
    spec: LaunchSpec,
    nproc: int,
    *,
    nnodes: str,
    node_rank: str,
    endpoint: str,
    run_id: str,
    python: str = "python",
):
    """``python -m gpulab launch ...`` with the per-node values given as already-quoted shell words."""
    words = [
        f"exec {python} -m gpulab launch",
        f"--nnodes {nnodes}",
        f"--node-rank {node_rank}",
        f"--nproc-per-node {nproc}",
        f"--rdzv-endpoint {endpoint}",
        f"--rdzv-id {run_id}",
        f"--max-restarts {spec.max_restarts}",
    ]
    if spec.module:
        words.append("--module")
    if spec.no_python:
        words.append("--no-python")
    return " ".join(words) + " -- " + command_words(spec.command)


def command_words(command: list[str]) -> str:
    """The user's command, quoted word by word; a SLURM variable in it (``$SLURM_ARRAY_TASK_ID``) stays one
    the node's shell expands, in double quotes: the rest of the word is exactly as given."""
    return " ".join(_word(word) for word in command)


def _word(word: str) -> str:
    if not SLURM_VARIABLE.search(word):
        return shlex.quote(word)
    pieces = SLURM_VARIABLE.split(word)  # literal, variable, literal, ...
    quoted = "".join(p if i % 2 else re.sub(r'([\\"`$])', r"\\\1", p) for i, p in enumerate(pieces))
    return f'"{quoted}"'


def _port(spec: LaunchSpec) -> int:
    return parse_endpoint(spec.rdzv_endpoint)[1] if spec.rdzv_endpoint else DEFAULT_RDZV_PORT


def _engine_launcher_line(
    spec: LaunchSpec, nproc: int, engine: str, base_port: int | None, python: str = "python"
) -> str:
    """``gpulab launch --engine ENGINE`` on each node, for an engine whose launcher reads SLURM itself."""
    words = [f"exec {python} -m gpulab launch --engine {engine}", f"--nproc-per-node {nproc}"]
    if base_port is not None:
        words.append(f"--base-port {base_port}")
    if spec.module:
        words.append("--module")
    if spec.no_python:
        words.append("--no-python")
    return " ".join(words) + " -- " + command_words(spec.command)


@dataclass(frozen=True)
class SlurmJob:
    """What the sbatch script asks of SLURM besides the launch: its time limit, an array, the requeue."""

    time: str | None = None  # --time as SLURM reads it; the warning's grace follows it
    array: str | None = None  # --array=SPEC: each element a run of its own (its --out names the index)
    requeue: bool = True
    requeue_grace: int | None = None  # default: from the time limit (slurm_time.warning_grace)


def render_slurm(
    spec: LaunchSpec,
    nproc: int,
    job_name: str = "gpulab",
    gpus_per_node: int | None = None,
    engine: str = "torch",
    base_port: int | None = None,
    torchrun: bool = True,
    job: SlurmJob | None = None,
) -> str:
    """``torchrun``: the engine's workers meet through torchrun's rendezvous on the first host; otherwise each
    node runs ``gpulab launch --engine ENGINE``, which reads the step's nodes and its rank from SLURM."""
    job = job or SlurmJob()
    limit = parse_time(job.time) if job.time is not None else None
    grace = warning_grace(limit, job.requeue_grace) if job.requeue else 0
    _check_array(spec, job.array)
    lo, hi = parse_nnodes(spec.nnodes)
    gpus = nproc if gpus_per_node is None else gpus_per_node
    header = [
        "#!/bin/bash",
        f"# Generated by `gpulab launch --print slurm`: one launcher per node, {nproc} process(es) each.",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={hi if lo == hi else f'{lo}-{hi}'}",
        "#SBATCH --ntasks-per-node=1",
        *([f"#SBATCH --gpus-per-node={gpus}"] if gpus else []),
        *([f"#SBATCH --time={job.time}"] if job.time is not None else []),
        *([f"#SBATCH --array={job.array}", "#SBATCH --output=%x-%A_%a.out"] if job.array else []),
        *([] if job.array else ["#SBATCH --output=%x-%j.out"]),
        *_requeue_lines(job.requeue, grace, limit),
        "set -euo pipefail",
        "",
        *_interpreter_lines(),
    ]
    requeue = job.requeue
    if requeue:
        header += [
            'echo "gpulab: job $SLURM_JOB_ID, attempt $((${SLURM_RESTART_COUNT:-0} + 1)), on $(hostname)"',
            "",
        ]
    python = '"$GPULAB_PYTHON"'
    if not torchrun:
        inner = _engine_launcher_line(spec, nproc, engine, base_port, python)
        body = ["# One task per node; each reads the step's nodes and its rank from SLURM's variables."]
    else:
        inner = _launcher_line(
            spec,
            nproc,
            nnodes='"$SLURM_NNODES"',
            node_rank='"$SLURM_NODEID"',
            endpoint='"$GPULAB_RDZV_HOST:$GPULAB_RDZV_PORT"',
            run_id='"$SLURM_JOB_ID"',
            python=python,
        )
        body = [
            "# The first host of the allocation hosts the rendezvous store (it runs --node-rank 0).",
            'export GPULAB_RDZV_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            f"export GPULAB_RDZV_PORT={_port(spec)}",
            "",
            "# One task per node; single quotes so each node expands its own $SLURM_NODEID.",
        ]
    srun = f"srun --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}"
    return "\n".join([*header, *body, *(_requeue_on_early_warning(srun) if requeue else [srun]), ""])


def _requeue_on_early_warning(srun: str) -> list[str]:
    """A task still starting (bash, the interpreter) when SLURM's warning comes dies of it before gpulab
    holds the signal (found on the cluster: a warning sent as the step started). Nothing of the attempt is
    lost then, so the script requeues the job as gpulab would. srun names such a task in its own line
    (``srun: error: n2: task 1: User defined signal 1``; its exit status may be another task's, killed by
    srun after it), so its lines are kept in a file too (the log gets them as before)."""
    return [
        "# srun's lines go to a file too (tee ignores SIGTERM, so the log keeps its last lines): a task it",
        "# names killed by SIGUSR1 died of the warning while starting, before gpulab held it",
        "srun_said=$(mktemp)",
        "trap 'rm -f \"$srun_said\"' EXIT",
        # tee ignores SIGTERM: scancel signals the batch step too, and srun's last lines (gpulab's stop line
        # among them) must still reach the log
        srun + """ 2>&1 | (trap '' TERM; exec tee "$srun_said") || {""",
        "    status=$?",
        '    if grep -q "^srun: error: .*: task [0-9]*: User defined signal 1$" "$srun_said"; then',
        '        echo "gpulab: SIGUSR1 came while the job was starting: requeueing SLURM job $SLURM_JOB_ID"',
        '        scontrol requeue "$SLURM_JOB_ID" || true',
        "    fi",
        '    exit "$status"',
        "}",
    ]


def _requeue_lines(requeue: bool, grace: int, limit: int | None) -> list[str]:
    if not requeue:
        return ["#SBATCH --no-requeue"]
    sized = "sized for this --time" if limit is not None else "give --print --time for a short job"
    return [
        f"# SIGUSR1 {grace} s before the time limit ({sized}; SLURM may send it {SLURM_EARLY_S} s early):",
        "# gpulab checkpoints, then requeues this job; the next attempt resumes from that checkpoint and",
        "# appends to the same log.",
        f"#SBATCH --signal=USR1@{grace}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
    ]


def _interpreter_lines() -> list[str]:
    """The interpreter (and virtual environment) gpulab runs from here: what the nodes run, unless changed."""
    python = shlex.quote(sys.executable)
    if sys.prefix == sys.base_prefix:
        return [
            "# The interpreter gpulab was rendered with; change this line if the nodes have it elsewhere.",
            f"export GPULAB_PYTHON={python}",
            "",
        ]
    venv = shlex.quote(sys.prefix)
    return [
        "# The virtual environment gpulab was rendered from, and its interpreter; change these lines if the",
        "# nodes have it elsewhere.",
        f"export VIRTUAL_ENV={venv}",
        'export PATH="$VIRTUAL_ENV/bin:$PATH"',
        f"export GPULAB_PYTHON={python}",
        "",
    ]


def _check_array(spec: LaunchSpec, array: str | None) -> None:
    """Each element of an array trains a run of its own: a ``gpulab train`` --out must name the index."""
    if not array:
        return
    if not ARRAY_SPEC.fullmatch(array):
        raise LaunchError(f"--array {array!r} is not a SLURM array; e.g. 0-3, 1,3,5 or 0-15%4")
    out = _out_dir(spec.command)
    if "train" in spec.command and (out is None or "SLURM_ARRAY_TASK_ID" not in out):
        raise LaunchError(
            "--array: every element would train into the same --out; put the index in it, e.g. "
            "--out 'runs/exp-$SLURM_ARRAY_TASK_ID' (single quotes: the node's shell expands it)"
        )


@dataclass(frozen=True)
class K8sPod:
    """What each pod asks for besides the command: its image, the claim holding the work, requests."""

    image: str = ""
    volume_claim: str | None = None  # default: JOB-runs
    mount_path: str = K8S_MOUNT
    cpus: int | None = None  # default: K8S_CPUS_PER_PROCESS per process
    memory: str | None = None  # default: K8S_MEMORY_GI_PER_PROCESS Gi per process
    grace_s: int = K8S_GRACE_S  # terminationGracePeriodSeconds: SIGTERM to SIGKILL, to save a checkpoint in


def default_max_restarts(kind: str | None, nnodes: str | None) -> int:
    """``--max-restarts`` when not given: K8S_ELASTIC_RESTARTS for an elastic PyTorchJob, else none."""
    elastic = nnodes is not None and len(set(parse_nnodes(nnodes))) > 1
    return K8S_ELASTIC_RESTARTS if kind == "k8s" and elastic else 0


def _k8s_replica(command: str, pod: K8sPod, claim: str, gpus: int, port: int, replicas: int) -> dict:
    container = {
        "name": "pytorch",  # the container name the training operator looks for
        "image": pod.image,
        "command": ["sh", "-c", command],
        "workingDir": pod.mount_path,  # a relative --out lands on the volume
        "ports": [{"name": K8S_PORT_NAME, "containerPort": port}],
        "resources": {"requests": {"cpu": str(pod.cpus), "memory": pod.memory}},
        "volumeMounts": [
            {"name": "runs", "mountPath": pod.mount_path},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": gpus}
    volumes = [
        {"name": "runs", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},  # shared memory for DataLoader workers and NCCL
    ]
    pod_spec = {"terminationGracePeriodSeconds": pod.grace_s, "containers": [container], "volumes": volumes}
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": pod_spec}}


def _check_k8s_pod(spec: LaunchSpec, pod: K8sPod) -> None:
    """The options a manifest needs, each wrong one told in one line."""
    if not pod.image:
        raise LaunchError(
            "--print k8s needs --image: an image with gpulab and your code in it "
            "(e.g. --image registry.example.com/team/gpulab:1.0)"
        )
    if not PurePosixPath(pod.mount_path).is_absolute():
        raise LaunchError(f"--mount-path must be an absolute path in the container, got {pod.mount_path!r}")
    if pod.grace_s < 1:
        raise LaunchError(
            f"--grace-period must be at least 1 second to save a checkpoint in, got {pod.grace_s}"
        )
    if pod.cpus is not None and pod.cpus < 1:
        raise LaunchError(f"--cpus-per-node must be at least 1, got {pod.cpus}")
    if pod.memory is not None and not K8S_QUANTITY.fullmatch(pod.memory):
        raise LaunchError(f"--memory-per-node {pod.memory!r} is not a Kubernetes quantity; e.g. 64Gi or 500M")
    out = _out_dir(spec.command)
    if (
        out is not None
        and PurePosixPath(out).is_absolute()
        and not PurePosixPath(out).is_relative_to(pod.mount_path)
    ):
        raise LaunchError(
            f"--out {out} is outside the volume mounted at {pod.mount_path}: a restarted container would "
            f"lose it; give a relative --out, or --mount-path {out}"
        )


def _out_dir(command: list[str]) -> str | None:
    """The ``--out`` a ``gpulab train`` command names, if any."""
    for i, word in enumerate(command):
        if word == "--out" and i + 1 < len(command):
            return command[i + 1]
        if word.startswith("--out="):
            return word.split("=", 1)[1]
    return None


def render_k8s(
    spec: LaunchSpec,
    nproc: int,
    job_name: str = "gpulab",
    image: str = "",
    gpus_per_node: int | None = None,
    pod: K8sPod | None = None,
) -> str:
    if not K8S_NAME.fullmatch(job_name):  # the PyTorchJob webhook refuses any other name
        raise LaunchError(
            f"--job-name {job_name!r} is not a Kubernetes job name: 1-63 lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit (e.g. mnist-run-2)"
        )
    pod = replace(pod or K8sPod(), image=image or (pod.image if pod else ""))
    _check_k8s_pod(spec, pod)
    pod = replace(
        pod,
        cpus=pod.cpus or K8S_CPUS_PER_PROCESS * nproc,
        memory=pod.memory or f"{K8S_MEMORY_GI_PER_PROCESS * nproc}Gi",
    )
    claim = pod.volume_claim or f"{job_name}-runs"
    lo, hi = parse_nnodes(spec.nnodes)
    gpus = nproc if gpus_per_node is None else gpus_per_node
    port = _port(spec)
    command = _launcher_line(
        spec,
        nproc,
        nnodes=f"{lo}:{hi}" if lo != hi else str(hi),
        node_rank='"${PET_NODE_RANK:-$RANK}"',
        endpoint='"${PET_MASTER_ADDR:-$MASTER_ADDR}:${PET_MASTER_PORT:-$MASTER_PORT}"',
        run_id=shlex.quote(job_name),
    )
    replicas = {"Master": _k8s_replica(command, pod, claim, gpus, port, 1)}
    if hi > 1:
        replicas["Worker"] = _k8s_replica(command, pod, claim, gpus, port, hi - 1)
    job_spec: dict = {"nprocPerNode": str(nproc)}
    if lo != hi:
        job_spec["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "minReplicas": lo,
            "maxReplicas": hi,
            "maxRestarts": spec.max_restarts,
        }
    job_spec["pytorchReplicaSpecs"] = replicas
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job_name},
        "spec": job_spec,
    }
    access = "ReadWriteMany: every pod mounts it" if hi > 1 else "ReadWriteOnce is enough for one pod"
    header = (
        f"# Generated by `gpulab launch --print k8s`: one launcher per pod, {nproc} process(es) each.\n"
        f"# The work (--out, checkpoints) lives on PersistentVolumeClaim {claim!r}, mounted at\n"
        f"# {pod.mount_path}; create it first ({access}).\n"
        f"# A stopped pod has {pod.grace_s} s (--grace-period) to finish its step and save a checkpoint.\n"
    )
    return header + yaml.safe_dump(manifest, sort_keys=False, width=1_000_000)


TEMPLATES = {"slurm": render_slurm, "k8s": render_k8s}


def render(
    kind: str,
    spec: LaunchSpec,
    nproc: int,
    job_name: str = "gpulab",
    image: str = "",
    gpus_per_node: int | None = None,
    engine: str = "torch",
    base_port: int | None = None,
    torchrun: bool = True,
    kinds: tuple[str, ...] = TEMPLATES,
    job: SlurmJob | None = None,
    pod: K8sPod | None = None,
) -> str:
    """The sbatch script (``slurm``) or PyTorchJob manifest (``k8s``) for ``spec``; ``kinds``: those the
    engine renders, ``torchrun``: whether its workers meet through torchrun's rendezvous."""
    if kind not in TEMPLATES:
        raise LaunchError(f"--print {kind!r} is not a template; choose {choices(TEMPLATES)}")
    if not spec.command:
        raise LaunchError("no command to put in the template: give it after --")
    if gpus_per_node is not None and gpus_per_node < 0:
        raise LaunchError(f"--gpus-per-node must be >= 0 (0: a CPU cluster), got {gpus_per_node}")
    if kind not in kinds:
        raise LaunchError(
            f"--print {kind} has no template for the {engine} engine; valid for it: {choices(kinds)}"
        )
    if kind == "k8s":
        return render_k8s(spec, nproc, job_name, image, gpus_per_node, pod)
    return render_slurm(spec, nproc, job_name, gpus_per_node, engine, base_port, torchrun, job)
