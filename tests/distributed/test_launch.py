"""`gpulab launch`: torchrun's own API underneath, machine defaults, one-line errors, cluster templates.

The first half checks the plan without starting anything (and that torchrun's parser accepts what we
build); the ``distributed`` half starts real launchers with real gloo workers.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_job import JOB, gpulab_launch, job_env  # noqa: E402

from gpulab.cli import main  # noqa: E402
from gpulab.distributed import launch as L  # noqa: E402
from gpulab.distributed import preflight as P  # noqa: E402
from gpulab.distributed.cluster_templates import render  # noqa: E402
from gpulab.errors import LaunchError, WorkersFailedError  # noqa: E402
from gpulab.redaction import CREDENTIALS_ENV  # noqa: E402


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setattr(L, "local_accelerator", lambda: ("cpu", 0))


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(L, "local_accelerator", lambda: ("cuda", 4))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


# --- parsing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [("1", (1, 1)), ("2", (2, 2)), ("1:4", (1, 4))])
def test_nnodes_accepts_n_and_min_max(text, expected):
    assert L.parse_nnodes(text) == expected


@pytest.mark.parametrize("text", ["", "x", "2:x", "1:2:3", "0", "3:2"])
def test_nnodes_rejects_bad_syntax_in_one_line(text):
    with pytest.raises(LaunchError, match="--nnodes") as exc:
        L.parse_nnodes(text)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("node0:29500", ("node0", 29500)), ("node0", ("node0", 29400)), ("[::1]:1234", ("::1", 1234))],
)
def test_endpoint_parsing(text, expected):
    assert L.parse_endpoint(text) == expected


@pytest.mark.parametrize("text", ["host:port", ":80", "h:99999"])
def test_bad_endpoint_is_a_launch_error(text):
    with pytest.raises(LaunchError, match="HOST:PORT"):
        L.parse_endpoint(text)


def test_command_forms():
    assert L.resolve_command([JOB, "train", "--x"]) == ([], JOB, ["train", "--x"])
    assert L.resolve_command(["gpulab", "train", "mlp"]) == (["--module"], "gpulab", ["train", "mlp"])
    assert L.resolve_command(["-m", "pkg.mod", "a"]) == (["--module"], "pkg.mod", ["a"])
    assert L.resolve_command(["pkg.mod", "a"], module=True) == (["--module"], "pkg.mod", ["a"])
    assert L.resolve_command(["python", "-u", JOB, "a"]) == ([], JOB, ["a"])
    assert L.resolve_command(["python3", "-m", "pkg"]) == (["--module"], "pkg", [])
    assert L.resolve_command(["nvidia-smi", "-L"], no_python=True) == (["--no-python"], "nvidia-smi", ["-L"])


def test_missing_command_or_script_is_one_line():
    with pytest.raises(LaunchError, match="no command to launch"):
        L.resolve_command([])
    with pytest.raises(LaunchError, match="'nope.py' is not a file.*--no-python"):
        L.resolve_command(["nope.py"])


# --- the plan: machine defaults, backend, environment -------------------------------------------------


def test_cpu_defaults_one_process_gloo_standalone(cpu_only):
    plan = L.plan_launch(L.LaunchSpec(command=[JOB]), environ={})
    assert (plan.nproc_per_node, plan.backend, plan.standalone) == (1, "gloo", True)
    assert plan.endpoint == "127.0.0.1:0" and plan.is_host is None and plan.loopback
    assert plan.env == {
        "GPULAB_DIST_BACKEND": "gloo",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "TORCH_CPP_LOG_LEVEL": "ERROR",  # no C++ backtrace per store call after a rank dies
        "GLOO_SOCKET_IFNAME": "lo",  # one node: loopback only (test_loopback.py)
    }  # no NCCL ones
    assert (
        "TORCH_CPP_LOG_LEVEL"
        not in L.plan_launch(  # a user's value wins
            L.LaunchSpec(command=[JOB]), environ={"TORCH_CPP_LOG_LEVEL": "INFO"}
        ).env
    )


def test_a_credential_reaches_a_gpulab_rank_through_its_environment_and_is_echoed_masked(cpu_only):
    uri = "mlflow.tracking_uri=http://u:pw@h:5000"
    plan = L.plan_launch(L.LaunchSpec(command=["gpulab", "train", "mlp", "--set", uri]), environ={})
    assert plan.script_args == ["train", "mlp", "--set", "mlflow.tracking_uri=http://u:***@h:5000"]
    assert json.loads(plan.env[CREDENTIALS_ENV]) == {"3": uri}
    assert "pw" not in L.describe_plan(plan)
    # A script of the user's own gets its arguments as given (it knows nothing of gpulab's environment).
    script = L.plan_launch(L.LaunchSpec(command=[JOB, "--set", uri]), environ={})
    assert script.script_args == ["--set", uri] and CREDENTIALS_ENV not in script.env
    assert "pw" not in L.describe_plan(script)


def test_gpu_defaults_one_process_per_gpu_nccl_with_safe_env(four_gpus):
    plan = L.plan_launch(L.LaunchSpec(command=[JOB]), environ={})
    assert (plan.nproc_per_node, plan.backend) == (4, "nccl")
    assert plan.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert plan.env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert int(plan.env["TORCH_FR_BUFFER_SIZE"]) > 0  # the dump needs a flight-recorder buffer
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in plan.env  # deprecated name: a warning on every rank
    assert "TORCH_NCCL_BLOCKING_WAIT" not in plan.env
    assert plan.env["GPULAB_DIST_BACKEND"] == "nccl"


def test_users_environment_wins(four_gpus):
    user = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "GPULAB_DIST_BACKEND": "gloo", "OMP_NUM_THREADS": "7"}
    plan = L.plan_launch(L.LaunchSpec(command=[JOB]), environ=user)
    assert plan.backend == "gloo"
    assert not set(user) & set(plan.env)  # nothing the user set is overwritten


def test_multinode_needs_an_endpoint_and_a_valid_node_rank(cpu_only):
    with pytest.raises(LaunchError, match="needs --rdzv-endpoint"):
        L.plan_launch(L.LaunchSpec(command=[JOB], nnodes="2"), environ={})
    with pytest.raises(LaunchError, match="--node-rank 2 is out of range"):
        L.plan_launch(L.LaunchSpec(command=[JOB], nnodes="2", node_rank=2, rdzv_endpoint="h:1"), environ={})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nproc_per_node", 0, "--nproc-per-node must be >= 1"),
        ("max_restarts", -1, "--max-restarts must be >= 0"),
    ],
)
def test_impossible_numbers_are_one_line(cpu_only, field, value, message):
    with pytest.raises(LaunchError, match=message):
        L.plan_launch(L.LaunchSpec(command=[JOB], **{field: value}), environ={})


def test_torchruns_own_parser_builds_the_config(cpu_only):
    """What we build goes through torch.distributed.run's parser and config_from_args unchanged."""
    from torch.distributed.run import config_from_args, parse_args

    spec = L.LaunchSpec(
        command=["gpulab", "train", "mlp", "--max-steps", "3"],
        nproc_per_node=2,
        nnodes="1:3",
        node_rank=0,
        rdzv_endpoint="10.1.2.3:29555",
        rdzv_id="job7",
        max_restarts=2,
        monitor_interval=0.5,
        local_addr="10.1.2.3",
    )
    plan = L.plan_launch(spec, environ={})
    config, entrypoint, args = config_from_args(parse_args(L.torchrun_argv(plan, spec)))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (1, 3, 2)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == ("c10d", "10.1.2.3:29555", "job7")
    assert config.rdzv_configs["is_host"] == "true"
    assert (config.max_restarts, config.monitor_interval, config.local_addr) == (2, 0.5, "10.1.2.3")
    assert entrypoint == sys.executable
    assert args == ["-u", "-m", "gpulab", "train", "mlp", "--max-steps", "3"]


def test_node_rank_decides_who_hosts_the_store(cpu_only):
    spec = L.LaunchSpec(command=[JOB], nnodes="2", rdzv_endpoint="h:1")
    assert L.plan_launch(spec, environ={}).is_host is None  # torch decides from the address
    spec.node_rank = 1
    assert L.plan_launch(spec, environ={}).is_host is False


# --- one-line failures --------------------------------------------------------------------------------


def test_port_in_use_is_detected_before_launching():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(LaunchError, match=f"rendezvous port {port} on 127.0.0.1 is already in use"):
            P.check_port_free("127.0.0.1", port)


def test_unreachable_endpoint_waits_a_bounded_time_then_one_line():
    port = _free_port()
    with pytest.raises(LaunchError, match=f"127.0.0.1:{port} unreachable after 0.5 s") as exc:
        P.wait_for_endpoint("127.0.0.1", port, timeout=0.5)
    assert "\n" not in str(exc.value)


def _resolver_that_learns_the_name_late(monkeypatch, name: str, misses: int) -> list[str]:
    """socket.getaddrinfo where ``name`` fails ``misses`` times (a pod not up yet), then is 127.0.0.1."""
    real, asked = socket.getaddrinfo, []

    def fake(host, *args, **kwargs):
        if host != name:
            return real(host, *args, **kwargs)
        asked.append(host)
        if len(asked) <= misses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real("127.0.0.1", *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return asked


def test_a_host_name_that_appears_late_is_waited_for(monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        asked = _resolver_that_learns_the_name_late(monkeypatch, "job-master-0.job", misses=3)
        P.wait_for_endpoint("job-master-0.job", server.getsockname()[1], timeout=10)
    assert len(asked) == 4  # three misses, retried, then the connection


def test_a_host_name_that_never_appears_is_one_line_after_the_timeout(monkeypatch):
    _resolver_that_learns_the_name_late(monkeypatch, "job-master-0.job", misses=10**6)
    with pytest.raises(LaunchError, match="'job-master-0.job' could not be resolved within 0.6 s") as exc:
        P.wait_for_endpoint("job-master-0.job", 29400, timeout=0.6)
    assert "\n" not in str(exc.value)


def test_failures_name_the_rank_and_exit_code_not_the_ranks_torchrun_stopped():
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    failures = {
        0: ProcessFailure(local_rank=0, pid=11, exitcode=-signal.SIGTERM, error_file=""),
        1: ProcessFailure(local_rank=1, pid=12, exitcode=3, error_file=""),
    }
    line = L.describe_failures(failures, max_restarts=0)
    assert line.startswith("the job failed: rank 1 (local rank 1) exited with code 3; rank(s) 0 stopped")
    assert "--max-restarts 0" in line and "\n" not in line
    killed = {1: ProcessFailure(local_rank=1, pid=12, exitcode=-signal.SIGKILL, error_file="")}
    assert "rank 1 (local rank 1) was killed by SIGKILL" in L.describe_failures(killed, max_restarts=2)


def test_failure_detail_comes_from_the_ranks_error_file(tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    error_file = tmp_path / "error.json"
    error_file.write_text(
        json.dumps({"message": {"message": "ValueError: bad batch\nmore", "extraInfo": {"timestamp": "1"}}})
    )
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))
    assert "rank 0 (local rank 0) exited with code 1 (ValueError: bad batch)" in L.describe_failures(
        {0: failure}, 0
    )


def test_cli_bad_input_is_one_line_exit_2(capsys):
    assert main(["launch", "--nnodes", "2:x", "--", JOB]) == 2
    assert capsys.readouterr().err.strip() == (
        "gpulab: error: --nnodes '2:x' is not N or MIN:MAX (e.g. 2, or 1:4 for elastic)"
    )
    assert main(["launch"]) == 2
    assert "no command to launch" in capsys.readouterr().err


def test_workers_failed_is_exit_1_not_a_usage_error():
    assert WorkersFailedError("x").exit_code == 1 and LaunchError("x").exit_code == 2


# --- cluster templates --------------------------------------------------------------------------------


def test_print_slurm_is_an_sbatch_script_for_the_same_command(capsys):
    assert main(["launch", "--print", "slurm", "--nnodes", "4", "--nproc-per-node", "8", "--max-restarts", "1",
                 "--job-name", "exp1", "--", "gpulab", "train", "mlp", "--set", "lr=0.1 x"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in ["#SBATCH --job-name=exp1", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gpus-per-node=8"]:  # fmt: skip
        assert line in lines
    assert 'export GPULAB_RDZV_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in lines
    srun = next(line for line in lines if line.startswith("srun "))
    words = shlex.split(srun)
    assert words[:4] == ["srun", "--kill-on-bad-exit=1", "bash", "-c"]
    inner = shlex.split(words[4])  # what each node's bash runs
    assert inner[:5] == ["exec", "$GPULAB_PYTHON", "-m", "gpulab", "launch"]
    assert f"export GPULAB_PYTHON={shlex.quote(sys.executable)}" in lines  # gpulab's own interpreter
    assert inner[inner.index("--nnodes") + 1] == "$SLURM_NNODES"
    assert inner[inner.index("--node-rank") + 1] == "$SLURM_NODEID"
    assert inner[inner.index("--rdzv-endpoint") + 1] == "$GPULAB_RDZV_HOST:$GPULAB_RDZV_PORT"
    assert inner[inner.index("--nproc-per-node") + 1] == "8"
    assert inner[inner.index("--max-restarts") + 1] == "1"
    assert inner[inner.index("--") + 1 :] == ["gpulab", "train", "mlp", "--set", "lr=0.1 x"]


def test_print_slurm_asks_for_the_requeue_warning_unless_told_not_to(capsys):
    assert main(["launch", "--print", "slurm", "--requeue-grace", "120", "--", "gpulab", "train", "mlp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for line in ["#SBATCH --signal=USR1@120", "#SBATCH --requeue", "#SBATCH --open-mode=append"]:
        assert line in lines
    assert lines.index("#SBATCH --open-mode=append") < lines.index("set -euo pipefail")  # read by sbatch
    assert any(line.startswith('echo "gpulab: job $SLURM_JOB_ID, attempt ') for line in lines)

    assert main(["launch", "--print", "slurm", "--no-requeue", "--", "gpulab", "train", "mlp"]) == 0
    text = capsys.readouterr().out
    assert "#SBATCH --no-requeue" in text.splitlines() and "--signal" not in text and "append" not in text

    assert main(["launch", "--print", "slurm", "--requeue-grace", "0", "--", "gpulab", "train", "mlp"]) == 2
    assert "--requeue-grace must be at least 1 second, got 0" in capsys.readouterr().err


def test_print_k8s_is_a_pytorchjob_for_the_same_command():
    spec = L.LaunchSpec(command=["train.py", "--lr", "0.1"], nnodes="3", rdzv_endpoint="x:29511")
    manifest = yaml.safe_load(render("k8s", spec, 4, job_name="exp2", image="reg/gpulab:1"))
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert manifest["metadata"]["name"] == "exp2"
    assert manifest["spec"]["nprocPerNode"] == "4"
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for role in ("Master", "Worker"):
        (container,) = replicas[role]["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"] == "reg/gpulab:1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
        assert container["resources"]["requests"] == {"cpu": "16", "memory": "64Gi"}  # 4 CPUs, 16Gi a process
        assert container["workingDir"] == "/runs"  # a relative --out lands on the claim
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"runs": "/runs", "dshm": "/dev/shm"}
        volumes = {v["name"]: v for v in replicas[role]["template"]["spec"]["volumes"]}
        assert volumes["runs"]["persistentVolumeClaim"] == {"claimName": "exp2-runs"}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 29511}]
        assert container["command"][:2] == ["sh", "-c"]
        words = shlex.split(container["command"][2])
        assert words[:5] == ["exec", "python", "-m", "gpulab", "launch"]
        assert words[words.index("--nnodes") + 1] == "3"
        assert words[words.index("--node-rank") + 1] == "${PET_NODE_RANK:-$RANK}"
        assert words[words.index("--") + 1 :] == ["train.py", "--lr", "0.1"]
    assert "elasticPolicy" not in manifest["spec"]


def test_print_k8s_takes_the_pods_claim_and_requests_and_refuses_what_would_lose_work(capsys):
    args = ["launch", "--print", "k8s", "--image", "reg/g:1", "--volume-claim", "team-runs", "--mount-path", "/w",
            "--cpus-per-node", "6", "--memory-per-node", "40Gi", "--", "gpulab", "train", "mlp", "--out", "/w/a"]  # fmt: skip
    assert main(args) == 0
    pod = yaml.safe_load(capsys.readouterr().out)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (
        container["resources"]["requests"] == {"cpu": "6", "memory": "40Gi"}
        and container["workingDir"] == "/w"
    )
    assert pod["volumes"][0] == {"name": "runs", "persistentVolumeClaim": {"claimName": "team-runs"}}

    refused = {
        "--print k8s needs --image: an image with gpulab and your code in it": ["--image", ""],
        "--out /tmp/x is outside the volume mounted at /runs": [
            "--",
            "gpulab",
            "train",
            "mlp",
            "--out",
            "/tmp/x",
        ],
        "--memory-per-node 'lots' is not a Kubernetes quantity; e.g. 64Gi or 500M": [
            "--memory-per-node",
            "lots",
        ],
        "--mount-path must be an absolute path in the container, got 'runs'": ["--mount-path", "runs"],
    }
    for line, change in refused.items():
        argv = ["launch", "--print", "k8s", "--image", "reg/g:1"]
        argv = [*argv, *change] if change[0] == "--" else [*argv, *change, "--", "gpulab", "train", "mlp"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert line in err and len(err.strip().splitlines()) == 1, err


def test_print_k8s_elastic_and_single_node():
    elastic = yaml.safe_load(render("k8s", L.LaunchSpec(command=["t.py"], nnodes="2:4"), 1, image="i"))
    assert elastic["spec"]["elasticPolicy"]["minReplicas"] == 2
    assert elastic["spec"]["elasticPolicy"]["maxReplicas"] == 4
    single = yaml.safe_load(render("k8s", L.LaunchSpec(command=["t.py"]), 1, image="i"))
    assert list(single["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_print_unknown_template_is_one_line(capsys):
    assert main(["launch", "--print", "pbs", "--", "t.py"]) == 2
    assert "--print 'pbs' is not a template; choose slurm|k8s" in capsys.readouterr().err


# --- real launches ------------------------------------------------------------------------------------


@pytest.mark.distributed
def test_two_processes_run_with_world_size_2_and_gloo(tmp_path, gpulab_server):
    env = job_env()
    env.pop("OMP_NUM_THREADS")
    r = gpulab_launch(
        "--nproc-per-node", "2", "--", JOB, "allreduce", str(tmp_path), env=env, server=gpulab_server
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    cores = len(os.sched_getaffinity(0))
    for rank, s in enumerate(seen):
        assert (s["rank"], s["local_rank"], s["world_size"], s["env_world_size"]) == (rank, rank, 2, 2)
        assert s["sum"] == 3.0  # 1 + 2: the all_reduce really crossed both processes
        assert s["backend"] == s["pg_backend"] == "gloo"
        assert s["omp_num_threads"] == str(max(1, cores // 2))


@pytest.mark.distributed
def test_port_in_use_gives_one_line_and_exit_2(tmp_path, gpulab_server):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = gpulab_launch("--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--", JOB,
                          "allreduce", str(tmp_path), server=gpulab_server)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"gpulab: error: rendezvous port {port} on 127.0.0.1 is already in use (another job, or a launcher "
        f"still running?): pick a free port, e.g. --rdzv-endpoint 127.0.0.1:{port + 1}, or stop what holds it "
        f"(`ss -ltnp 'sport = :{port}'`)"
    ]
    assert not list(tmp_path.iterdir())  # nothing ran


@pytest.mark.distributed
def test_unreachable_endpoint_gives_one_line_and_exit_2(tmp_path, gpulab_server):
    port = _free_port()
    r = gpulab_launch("--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", f"127.0.0.1:{port}",
                      "--rdzv-connect-timeout", "1", "--", JOB, "allreduce", str(tmp_path),
                      server=gpulab_server)  # fmt: skip
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"gpulab: error: rendezvous endpoint 127.0.0.1:{port} unreachable after 1 s")


@pytest.mark.distributed
def test_failed_rank_with_no_restarts_names_rank_and_exit_code(tmp_path, gpulab_server):
    r = gpulab_launch("--nproc-per-node", "2", "--max-restarts", "0", "--", JOB, "exit", str(tmp_path),
                      "--fail-rank", "1", "--code", "3", server=gpulab_server)  # fmt: skip
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert _last_line(r.stderr).startswith(
        "gpulab: error: the job failed: rank 1 (local rank 1) exited with code 3; rank(s) 0 stopped by the "
        "launcher; no restarts allowed (--max-restarts 0)"
    )


@pytest.mark.distributed
def test_launch_runs_gpulab_train(tmp_path, gpulab_server):
    out = tmp_path / "run"
    r = gpulab_launch("--nproc-per-node", "1", "--", "gpulab", "train", "mlp", "--max-steps", "3",
                      "--out", str(out), server=gpulab_server)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["steps"] == 3


def test_more_processes_than_gpus_is_refused_before_anything_starts(monkeypatch):
    # On an H100 box, `gpulab launch --nproc-per-node 2` started two NCCL ranks for one GPU.
    monkeypatch.setattr(L, "local_accelerator", lambda: ("cuda", 1))
    with pytest.raises(
        LaunchError, match=r"--nproc-per-node 2 but this node has 1 GPU\(s\).*--nproc-per-node 1"
    ):
        L.plan_launch(L.LaunchSpec(command=[JOB], nproc_per_node=2), environ={})
    plan = L.plan_launch(L.LaunchSpec(command=[JOB], nproc_per_node=2), environ={L.BACKEND_ENV: "gloo"})
    assert plan.backend == "gloo" and plan.nproc_per_node == 2  # a CPU job on a GPU box stays possible


@pytest.mark.distributed
def test_launch_leaves_no_torchelastic_tree_in_tmp(tmp_path, gpulab_server):
    """torchrun alone leaves TMPDIR/torchelastic_* (its rank error files) behind after every launch."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ok = gpulab_launch(
        "--nproc-per-node",
        "1",
        "--",
        JOB,
        "allreduce",
        str(tmp_path),
        env=job_env(TMPDIR=str(tmp)),
        server=gpulab_server,
    )
    failed = gpulab_launch("--nproc-per-node", "1", "--", JOB, "exit", str(tmp_path), "--fail-rank", "0",
                           "--code", "3", env=job_env(TMPDIR=str(tmp)), server=gpulab_server)  # fmt: skip
    assert (ok.returncode, failed.returncode) == (0, 1), ok.stderr[-2000:] + failed.stderr[-2000:]
    assert "exited with code 3" in failed.stderr  # the error files were still read before the clean-up
    assert sorted(p.name for p in tmp.iterdir()) == []
