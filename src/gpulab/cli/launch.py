"""`gpulab launch [OPTIONS] -- CMD...`: run CMD on N processes per node under torchrun.

``--engine tensorflow`` runs TensorFlow workers with a TF_CONFIG each instead (engines/tensorflow/launch.py).
"""

from __future__ import annotations

import click
import typer

from gpulab import engine_registry as engines


def launch(
    command: list[str] = typer.Argument(
        None, help="script.py ARGS, -m MODULE ARGS, or gpulab VERB ARGS (after --)", show_default=False
    ),
    nproc_per_node: int = typer.Option(
        None, "--nproc-per-node", help="Processes per node (default: the GPU count, else 1)"
    ),
    nnodes: str = typer.Option(
        None, "--nnodes", help="Nodes: N, or MIN:MAX for an elastic job (default: 1, or the SLURM step's)"
    ),
    node_rank: int = typer.Option(
        None, "--node-rank", help="This node's index; 0 hosts the rendezvous (default: from the endpoint)"
    ),
    rdzv_endpoint: str = typer.Option(
        None, "--rdzv-endpoint", help="HOST:PORT of node 0's rendezvous (default: standalone on this node)"
    ),
    rdzv_id: str = typer.Option(None, "--rdzv-id", help="Job id, the same on every node"),
    rdzv_connect_timeout: float = typer.Option(
        60.0, "--rdzv-connect-timeout", help="Seconds a node waits for the rendezvous endpoint to answer"
    ),
    local_addr: str = typer.Option(
        None, "--local-addr", help="This node's address as the other nodes reach it (default: hostname)"
    ),
    max_restarts: int = typer.Option(
        None,
        "--max-restarts",
        help="Restarts of the whole group after a failure (default: 0; 3 for an elastic --print k8s)",
    ),
    monitor_interval: float = typer.Option(
        0.1, "--monitor-interval", help="Seconds between checks of the workers"
    ),
    module: bool = typer.Option(False, "--module", "-m", help="CMD's first word is a module (python -m)"),
    no_python: bool = typer.Option(False, "--no-python", help="CMD is an executable, not Python"),
    log_dir: str = typer.Option(None, "--log-dir", help="Directory for each rank's logs and error files"),
    print_: str = typer.Option(None, "--print", help="slurm|k8s: print an sbatch script or a PyTorchJob"),
    gpus_per_node: int = typer.Option(
        None,
        "--gpus-per-node",
        help="GPUs a --print template asks per node (default: one per process; 0: none)",
    ),
    job_name: str = typer.Option("gpulab", "--job-name", help="Job name in a --print template"),
    requeue: bool = typer.Option(
        True,
        "--requeue/--no-requeue",
        help="slurm template: SIGUSR1 before the time limit, checkpoint, requeue",
    ),
    requeue_grace: int = typer.Option(
        None,
        "--requeue-grace",
        help="slurm template: seconds before the time limit that SIGUSR1 comes (default: from --time, <= 90)",
    ),
    time: str = typer.Option(None, "--time", help="slurm template: the job's time limit, e.g. 00:30:00"),
    array: str = typer.Option(
        None, "--array", help="slurm template: a job array, e.g. 0-3 (--out names $SLURM_ARRAY_TASK_ID)"
    ),
    image: str = typer.Option("", "--image", help="Container image in the k8s template (required there)"),
    volume_claim: str = typer.Option(
        None, "--volume-claim", help="k8s: PersistentVolumeClaim holding the work (default: JOB-NAME-runs)"
    ),
    mount_path: str = typer.Option(
        "/runs", "--mount-path", help="k8s: where the claim is mounted (the working directory)"
    ),
    cpus_per_node: int = typer.Option(
        None, "--cpus-per-node", help="k8s: CPUs a pod requests (default: 4 a process)"
    ),
    memory_per_node: str = typer.Option(
        None, "--memory-per-node", help="k8s: memory a pod requests, e.g. 64Gi (default: 16Gi a process)"
    ),
    grace_period: int = typer.Option(
        120, "--grace-period", help="k8s: seconds a stopped pod has to save its checkpoint (Kubernetes: 30)"
    ),
    engine: str = typer.Option(engines.DEFAULT, "--engine", help=engines.option_help()),
    hosts: str = typer.Option(
        None,
        "--hosts",
        help="tensorflow, several nodes: every node's address, in --node-rank order (H0,H1,...)",
    ),
    base_port: int = typer.Option(
        None, "--base-port", help="tensorflow, several nodes: worker l of each node listens on BASE_PORT+l"
    ),
) -> None:
    """Run CMD on N processes per node under torchrun.

    Uses torch.distributed.run's own API: c10d rendezvous (standalone on one node), elastic restarts,
    gloo on CPUs and NCCL on GPUs. `--print slurm|k8s` prints a cluster template instead.
    """
    from gpulab.distributed.cluster_templates import default_max_restarts
    from gpulab.distributed.launch import LaunchSpec, local_accelerator, with_slurm

    _check_engine_options(engine, locals())
    if max_restarts is None:
        max_restarts = default_max_restarts(print_, nnodes)
    spec = LaunchSpec(
        command=list(command or []),
        nproc_per_node=nproc_per_node,
        nnodes=nnodes or "1",
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        rdzv_connect_timeout=rdzv_connect_timeout,
        local_addr=local_addr,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        module=module,
        no_python=no_python,
        log_dir=log_dir,
    )
    if print_ is not None:
        from gpulab.distributed.cluster_templates import K8sPod, SlurmJob, render

        # The template is for the cluster's nodes; without --nproc-per-node assume they look like this one.
        nproc = nproc_per_node or max(local_accelerator()[1], 1)
        chosen = engines.get(engine)
        pod = K8sPod(image, volume_claim, mount_path, cpus_per_node, memory_per_node, grace_period)
        job = SlurmJob(time, array, requeue, requeue_grace)
        text = render(print_, spec, nproc, job_name, image, gpus_per_node, engine, base_port,
                      chosen.launch_by_torchrun, chosen.launch_templates, job, pod)  # fmt: skip
        typer.echo(text, nl=False)
        return
    # Told nothing of where this node stands: inside a SLURM step, SLURM says.
    told = nnodes is not None or node_rank is not None or rdzv_endpoint is not None or hosts is not None
    spec, step = (spec, None) if told else with_slurm(spec)
    hosts = ",".join(step.hosts) if step else hosts
    _check_command(spec.command, module)
    from gpulab.early_signals import shared_with_workers

    with shared_with_workers():  # a signal that came before the workers start reaches them (a file)
        engines.get(engine).launch(spec, {"hosts": hosts, "base_port": base_port})


def _check_command(command: list[str], module: bool) -> None:
    """``gpulab train ...`` checked here, once, before any rank starts (recipe name, settings, config
    file, output paths): a mistake was printed by every rank, with torch's noise around it, exit 1. Its
    flags are parsed by train's own command; its settings go through the run's own checks."""
    words = list(command)
    if words[:1] and words[0].startswith("python"):
        words = words[1:]
    if words[:2] in (["-m", "gpulab"], ["--module", "gpulab"]) or (module and words[:1] == ["gpulab"]):
        words = words[1:]
    if words[:2] != ["gpulab", "train"]:
        return
    from gpulab.cli import app
    from gpulab.cli.train import check_run, run_settings

    train = typer.main.get_command(app).commands["train"]
    try:
        given = train.make_context("gpulab train", words[2:]).params
    except click.exceptions.Exit:  # --help: nothing to check
        return
    except click.ClickException as mistake:  # printed as `gpulab train` prints it (usage, exit 2)
        mistake.show()
        raise typer.Exit(mistake.exit_code) from None
    check_run(run_settings(given))  # a GpulabError passes up to main(): its one line, exit 2


def _check_engine_options(engine: str, given: dict) -> None:
    """An unknown engine, or an option only another engine's launcher has, is one line (exit 2)."""
    from gpulab.errors import LaunchError, choices

    if engine not in engines.names():
        raise LaunchError(f"--engine {engine!r} is not one of {choices(engines.names())}")
    for other in (engines.get(name) for name in engines.names() if name != engine):
        for option, name, default in other.launch_options:
            if given[name] != default:
                raise LaunchError(
                    f"{option} does not apply to --engine {engine} "
                    f"(valid with --engine {other.name}); drop it"
                )


def register(app: typer.Typer) -> None:
    # Options stop at CMD's first word, so `gpulab launch train.py --lr 1` passes --lr to the script.
    app.command(context_settings={"allow_interspersed_args": False})(launch)
