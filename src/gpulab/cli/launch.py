"""`gpulab launch [OPTIONS] -- CMD...`: run CMD on N processes per node under torchrun.

``--engine tensorflow`` runs TensorFlow workers with a TF_CONFIG each instead (engines/tensorflow/launch.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import typer

from gpulab import engine_registry as engines
from gpulab.cli import launch_options as O


def launch(
    ctx: typer.Context,
    command: O.Command = None,
    nproc_per_node: O.NprocPerNode = None,
    nnodes: O.Nnodes = None,
    node_rank: O.NodeRank = None,
    rdzv_endpoint: O.RdzvEndpoint = None,
    rdzv_id: O.RdzvId = None,
    rdzv_connect_timeout: O.RdzvConnectTimeout = 60.0,
    local_addr: O.LocalAddr = None,
    max_restarts: O.MaxRestarts = None,
    monitor_interval: O.MonitorInterval = 0.1,
    module: O.Module = False,
    no_python: O.NoPython = False,
    log_dir: O.LogDir = None,
    print_: O.Print = None,
    gpus_per_node: O.GpusPerNode = None,
    job_name: O.JobName = "gpulab",
    requeue: O.Requeue = True,
    requeue_grace: O.RequeueGrace = None,
    time: O.Time = None,
    array: O.Array = None,
    image: O.Image = "",
    volume_claim: O.VolumeClaim = None,
    mount_path: O.MountPath = "/runs",
    cpus_per_node: O.CpusPerNode = None,
    memory_per_node: O.MemoryPerNode = None,
    grace_period: O.GracePeriod = 120,
    engine: O.Engine = engines.DEFAULT,
    hosts: O.Hosts = None,
    base_port: O.BasePort = None,
) -> None:
    """Run CMD on N processes per node under torchrun.

    Uses torch.distributed.run's own API: c10d rendezvous (standalone on one node), elastic restarts,
    gloo on CPUs and NCCL on GPUs. `--print slurm|k8s` prints a cluster template instead.
    """
    from gpulab.distributed.launch import with_slurm
    from gpulab.early_signals import shared_with_workers

    given = dict(locals())
    _check_engine_options(engine, given)
    spec = _spec(given)
    if print_ is not None:
        typer.echo(_template(spec, given), nl=False)
        return
    # Told nothing of where this node stands: inside a SLURM step, SLURM says.
    told = any(given[name] is not None for name in ("nnodes", "node_rank", "rdzv_endpoint", "hosts"))
    spec, step = (spec, None) if told else with_slurm(spec)
    hosts = ",".join(step.hosts) if step else hosts
    _check_command(spec.command, module, ctx)
    with shared_with_workers():  # a signal that came before the workers start reaches them (a file)
        engines.capability(engines.get(engine), "launch").run(spec, {"hosts": hosts, "base_port": base_port})


def _spec(given: dict) -> Any:
    """The ``LaunchSpec`` of ``launch``'s arguments (torchrun's part of them)."""
    from gpulab.distributed.cluster_templates import default_max_restarts
    from gpulab.distributed.launch import LaunchSpec

    torchrun = {f.name: given[f.name] for f in dataclasses.fields(LaunchSpec)}
    restarts = given["max_restarts"]
    if restarts is None:
        restarts = default_max_restarts(given["print_"], given["nnodes"])
    command, nnodes = list(given["command"] or []), given["nnodes"] or "1"
    return LaunchSpec(**{**torchrun, "command": command, "nnodes": nnodes, "max_restarts": restarts})


def _template(spec: Any, given: dict) -> str:
    """``--print slurm|k8s``: the cluster's job for ``spec`` and the engine's launcher."""
    from gpulab.distributed.cluster_templates import K8sPod, SlurmJob, render
    from gpulab.distributed.launch import local_accelerator

    g = given
    # The template is for the cluster's nodes; without --nproc-per-node assume they look like this one.
    nproc = g["nproc_per_node"] or max(local_accelerator()[1], 1)
    chosen = engines.capability(engines.get(g["engine"]), "launch")
    pod = K8sPod(g["image"], g["volume_claim"], g["mount_path"], g["cpus_per_node"], g["memory_per_node"],
                 g["grace_period"])  # fmt: skip
    job = SlurmJob(g["time"], g["array"], g["requeue"], g["requeue_grace"])
    return render(g["print_"], spec, nproc, g["job_name"], g["image"], g["gpus_per_node"], g["engine"],
                  g["base_port"], chosen.by_torchrun, chosen.templates, job, pod)  # fmt: skip


def _check_command(command: list[str], module: bool, ctx: typer.Context) -> None:
    """``gpulab train ...`` checked here, once, before any rank starts (recipe name, settings, config
    file, output paths): a mistake was printed by every rank, with torch's noise around it, exit 1. Its
    flags are parsed by train's own command (of the running ``gpulab``, ``ctx``'s root; nothing runs
    it); its settings go through the run's own checks."""
    words = list(command)
    if words[:1] and words[0].startswith("python"):
        words = words[1:]
    if words[:2] in (["-m", "gpulab"], ["--module", "gpulab"]) or (module and words[:1] == ["gpulab"]):
        words = words[1:]
    if words[:1] == ["gpulab"] and len(words) > 1 and not words[1].startswith("-"):
        root = ctx.find_root()
        _check_verb(words[1], root.command.list_commands(root))
    if words[:2] != ["gpulab", "train"]:
        return
    from gpulab.cli.train import check_run, run_settings

    root = ctx.find_root()
    # A usage mistake (a flag train lacks) passes up to the app, which prints it as `gpulab train` would
    # (one line, exit 2); --help prints train's help and exits 0, launching nothing.
    given = root.command.get_command(root, "train").make_context("gpulab train", words[2:]).params
    check_run(run_settings(given))  # a GpulabError passes up to main(): its one line, exit 2


def _check_verb(name: str, known: list[str]) -> None:
    """The launched ``gpulab VERB``: one of ``known`` (the running gpulab's verbs), or one line before any
    rank starts (a typo once started every rank, each failing with the same usage text, exit 1)."""
    import difflib

    from gpulab.errors import LaunchError, choices

    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise LaunchError(f"the launched command: gpulab has no verb {name!r}{hint}; valid: {choices(known)}")


def _check_engine_options(engine: str, given: dict) -> None:
    """An unknown engine, or an option only another engine's launcher has, is one line (exit 2)."""
    from gpulab.errors import LaunchError, choices

    if engine not in engines.names():
        raise LaunchError(f"--engine {engine!r} is not one of {choices(engines.names())}")
    engines.capability(engines.get(engine), "launch")  # an engine without a launcher: one line
    for other in (engines.get(name) for name in engines.names() if name != engine):
        for option, name, default in getattr(engines.offered(other, "launch"), "options", ()):
            if given[name] != default:
                raise LaunchError(
                    f"{option} does not apply to --engine {engine} "
                    f"(valid with --engine {other.name}); drop it"
                )


def register(app: typer.Typer) -> None:
    # Options stop at CMD's first word, so `gpulab launch train.py --lr 1` passes --lr to the script.
    app.command(context_settings={"allow_interspersed_args": False})(launch)
