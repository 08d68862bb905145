"""`gpulab launch`'s flags, one typed alias each, so that the verb's function (``launch.py``) reads on a
screen: its command, where the ranks run (torchrun's), the cluster templates (``--print``), the engine."""

from __future__ import annotations

from typing import Annotated

import typer

from gpulab import engine_registry as engines

Command = Annotated[
    list[str],
    typer.Argument(help="script.py ARGS, -m MODULE ARGS, or gpulab VERB ARGS (after --)", show_default=False),
]

# -- where the ranks run (torchrun's options) --------------------------------------------------------------
NprocPerNode = Annotated[
    int, typer.Option("--nproc-per-node", help="Processes per node (default: the GPU count, else 1)")
]
Nnodes = Annotated[
    str,
    typer.Option(
        "--nnodes", help="Nodes: N, or MIN:MAX for an elastic job (default: 1, or the SLURM step's)"
    ),
]
NodeRank = Annotated[
    int,
    typer.Option(
        "--node-rank", help="This node's index; 0 hosts the rendezvous (default: from the endpoint)"
    ),
]
RdzvEndpoint = Annotated[
    str,
    typer.Option(
        "--rdzv-endpoint", help="HOST:PORT of node 0's rendezvous (default: standalone on this node)"
    ),
]
RdzvId = Annotated[str, typer.Option("--rdzv-id", help="Job id, the same on every node")]
RdzvConnectTimeout = Annotated[
    float,
    typer.Option("--rdzv-connect-timeout", help="Seconds a node waits for the rendezvous endpoint to answer"),
]
LocalAddr = Annotated[
    str,
    typer.Option("--local-addr", help="This node's address as the other nodes reach it (default: hostname)"),
]
MaxRestarts = Annotated[
    int,
    typer.Option(
        "--max-restarts",
        help="Restarts of the whole group after a failure (default: 0; 3 for an elastic --print k8s)",
    ),
]
MonitorInterval = Annotated[
    float, typer.Option("--monitor-interval", help="Seconds between checks of the workers")
]
Module = Annotated[bool, typer.Option("--module", "-m", help="CMD's first word is a module (python -m)")]
NoPython = Annotated[bool, typer.Option("--no-python", help="CMD is an executable, not Python")]
LogDir = Annotated[str, typer.Option("--log-dir", help="Directory for each rank's logs and error files")]

# -- cluster templates (--print) -------------------------------------------------------------------------
Print = Annotated[str, typer.Option("--print", help="slurm|k8s: print an sbatch script or a PyTorchJob")]
GpusPerNode = Annotated[
    int,
    typer.Option(
        "--gpus-per-node", help="GPUs a --print template asks per node (default: one per process; 0: none)"
    ),
]
JobName = Annotated[str, typer.Option("--job-name", help="Job name in a --print template")]
Requeue = Annotated[
    bool,
    typer.Option(
        "--requeue/--no-requeue", help="slurm template: SIGUSR1 before the time limit, checkpoint, requeue"
    ),
]
RequeueGrace = Annotated[
    int,
    typer.Option(
        "--requeue-grace",
        help="slurm template: seconds before the time limit that SIGUSR1 comes (default: from --time, <= 90)",
    ),
]
Time = Annotated[str, typer.Option("--time", help="slurm template: the job's time limit, e.g. 00:30:00")]
Array = Annotated[
    str,
    typer.Option("--array", help="slurm template: a job array, e.g. 0-3 (--out names $SLURM_ARRAY_TASK_ID)"),
]
Image = Annotated[str, typer.Option("--image", help="Container image in the k8s template (required there)")]
VolumeClaim = Annotated[
    str,
    typer.Option(
        "--volume-claim", help="k8s: PersistentVolumeClaim holding the work (default: JOB-NAME-runs)"
    ),
]
MountPath = Annotated[
    str, typer.Option("--mount-path", help="k8s: where the claim is mounted (the working directory)")
]
CpusPerNode = Annotated[
    int, typer.Option("--cpus-per-node", help="k8s: CPUs a pod requests (default: 4 a process)")
]
MemoryPerNode = Annotated[
    str,
    typer.Option("--memory-per-node", help="k8s: memory a pod requests, e.g. 64Gi (default: 16Gi a process)"),
]
GracePeriod = Annotated[
    int,
    typer.Option(
        "--grace-period", help="k8s: seconds a stopped pod has to save its checkpoint (Kubernetes: 30)"
    ),
]

# -- the engine --------------------------------------------------------------------------------------------
Engine = Annotated[str, typer.Option("--engine", help=engines.option_help())]
Hosts = Annotated[
    str,
    typer.Option(
        "--hosts", help="tensorflow, several nodes: every node's address, in --node-rank order (H0,H1,...)"
    ),
]
BasePort = Annotated[
    int,
    typer.Option(
        "--base-port", help="tensorflow, several nodes: worker l of each node listens on BASE_PORT+l"
    ),
]
