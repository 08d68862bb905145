"""What `gpulab launch` reads from SLURM (distributed/slurm.py, launch.with_slurm) and the templates' SLURM
and GPU options; no cluster needed (tests/distributed/test_slurm.py runs them on a real one)."""

from __future__ import annotations

import shlex

import pytest
import yaml

from gpulab.cli import main
from gpulab.distributed import launch as L
from gpulab.distributed.cluster_templates import render
from gpulab.distributed.slurm import outside_step_note, slurm_step
from gpulab.errors import LaunchError

# A task of `srun --ntasks-per-node=1` on the 2nd and 3rd nodes of a 3-node allocation.
STEP = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "gpu[01-03]",
    "SLURM_JOB_NUM_NODES": "3",
    "SLURM_STEP_NODELIST": "gpu[02-03]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_NODEID": "2",  # counted in the allocation: not this node's rank in the step
}


def hostnames(nodelist: str) -> list[str]:
    return {"gpu[02-03]": ["gpu02", "gpu03"], "gpu[01-03]": ["gpu01", "gpu02", "gpu03"]}[nodelist]


def test_a_step_gives_nodes_rank_hosts_and_run_id():
    step = slurm_step(STEP, hostnames)
    assert (step.nnodes, step.node_rank, step.hosts) == (2, 1, ["gpu02", "gpu03"])
    assert step.run_id == "slurm-77.0"


def test_with_slurm_places_the_launch_on_the_steps_first_host():
    spec, step = L.with_slurm(L.LaunchSpec(command=["gpulab", "train", "mlp"]), STEP, hostnames)
    assert step is not None
    assert (spec.nnodes, spec.node_rank) == ("2", 1)
    assert spec.rdzv_endpoint == f"gpu02:{L.DEFAULT_RDZV_PORT}" and spec.rdzv_id == "slurm-77.0"


def test_the_job_nodelist_serves_when_the_step_has_none():
    env = {k: v for k, v in STEP.items() if k not in ("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES")}
    env.update(SLURM_NNODES="3", SLURM_STEP_NUM_TASKS="3", SLURM_NTASKS="3", SLURM_PROCID="0")
    assert slurm_step(env, hostnames).hosts == ["gpu01", "gpu02", "gpu03"]


@pytest.mark.parametrize(
    "env",
    [
        {},  # not in SLURM
        {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"},  # the batch script / salloc shell
        {**STEP, "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1"},  # a one-node step: a plain launch
    ],
)
def test_outside_a_multi_node_step_nothing_changes(env):
    assert slurm_step(env, hostnames) is None
    spec = L.LaunchSpec(command=["t.py"])
    assert L.with_slurm(spec, env, hostnames) == (spec, None)


def test_several_tasks_per_node_is_one_line():
    with pytest.raises(LaunchError, match=r"4 tasks on 2 node\(s\).*srun --ntasks-per-node=1"):
        slurm_step({**STEP, "SLURM_STEP_NUM_TASKS": "4"}, hostnames)


def test_a_batch_script_of_several_nodes_is_told_how_to_reach_them():
    env = {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"}
    assert "srun --ntasks-per-node=1 gpulab launch" in outside_step_note(env)
    assert outside_step_note({**env, "SLURM_JOB_NUM_NODES": "1"}) is None
    assert outside_step_note(STEP) is None


def test_flags_given_win_over_slurm(monkeypatch, capsys):
    """--nnodes (or --node-rank, --rdzv-endpoint) given: SLURM's variables are not read."""
    for k, v in STEP.items():
        monkeypatch.setenv(k, v)
    seen = []
    monkeypatch.setattr(L, "launch", lambda spec: seen.append(spec))
    monkeypatch.setattr(L, "scontrol_hostnames", hostnames)
    assert main(["launch", "--nnodes", "1", "--", "t.py"]) in (0, None)
    assert seen[-1].nnodes == "1" and seen[-1].rdzv_endpoint is None


def test_print_slurm_asks_for_no_gpus_with_gpus_per_node_0(capsys):
    assert main(["launch", "--print", "slurm", "--nnodes", "2", "--nproc-per-node", "1", "--gpus-per-node", "0",
                 "--", "gpulab", "train", "mlp"]) == 0  # fmt: skip
    assert "gpus-per-node" not in capsys.readouterr().out
    spec = L.LaunchSpec(command=["t.py"], nnodes="2")
    k8s = yaml.safe_load(render("k8s", spec, 2, image="reg/g:1", gpus_per_node=0))
    resources = k8s["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]
    assert "limits" not in resources and set(resources["requests"]) == {"cpu", "memory"}  # no GPU asked


def test_print_slurm_for_tensorflow_runs_the_tensorflow_launcher_on_each_node(capsys):
    assert main(["launch", "--engine", "tensorflow", "--print", "slurm", "--nnodes", "2", "--nproc-per-node", "2",
                 "--base-port", "24000", "--", "job.py", "out"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert "#SBATCH --gpus-per-node=2" in lines and not any("RDZV" in line for line in lines)
    words = shlex.split(shlex.split(next(line for line in lines if line.startswith("srun ")))[4])
    assert words[:7] == ["exec", "$GPULAB_PYTHON", "-m", "gpulab", "launch", "--engine", "tensorflow"]
    assert words[words.index("--base-port") + 1] == "24000" and words[-3:] == ["--", "job.py", "out"]
    assert "--nnodes" not in words  # each node reads it from SLURM


def test_print_k8s_for_tensorflow_and_negative_gpus_are_one_line(capsys):
    assert main(["launch", "--engine", "tensorflow", "--print", "k8s", "--", "t.py"]) == 2
    assert (
        "--print k8s has no template for the tensorflow engine; valid for it: slurm"
        in capsys.readouterr().err
    )
    assert main(["launch", "--print", "slurm", "--gpus-per-node", "-1", "--", "t.py"]) == 2
    assert "--gpus-per-node must be >= 0" in capsys.readouterr().err
