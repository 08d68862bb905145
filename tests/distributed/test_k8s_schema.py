"""`gpulab launch --print k8s` manifests checked against the PyTorchJob schema (Kubeflow training-operator
v1.9.0's CRD and webhook rules, vendored minimal in schemas/pytorchjob-v1.schema.json). The manifests are
rendered and schema-checked here, never applied to a cluster."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
import yaml

from gpulab.cli import main
from gpulab.distributed.cluster_templates import render
from gpulab.distributed.launch import LaunchSpec
from gpulab.errors import LaunchError

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "pytorchjob-v1.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def errors(manifest: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(manifest)]


SPECS = {
    "one node": (LaunchSpec(command=["python", "train.py"]), 4),
    "two nodes": (LaunchSpec(command=["gpulab", "train", "mlp", "--out", "runs/a b"], nnodes="2"), 2),
    "elastic": (LaunchSpec(command=["t.py"], nnodes="2:4", max_restarts=3, rdzv_endpoint="h:29600"), 1),
    "module": (LaunchSpec(command=["pkg.train", "--lr", "1e-3"], nnodes="3", module=True), 8),
    "no python": (LaunchSpec(command=["./run.sh"], no_python=True), 1),
}


@pytest.mark.parametrize("name", SPECS)
def test_each_rendered_manifest_is_a_valid_pytorchjob(name):
    spec, nproc = SPECS[name]
    manifest = yaml.safe_load(render("k8s", spec, nproc, job_name="exp-2", image="reg.example/gpulab:1"))
    assert errors(manifest) == []


def test_the_cli_output_is_a_valid_pytorchjob():
    out = io.StringIO()
    argv = ["launch", "--print", "k8s", "--nnodes", "2", "--nproc-per-node", "2", "--job-name", "mnist",
            "--image", "reg.example/gpulab:1", "--memory-per-node", "48Gi", "--", "gpulab", "train", "digits"]  # fmt: skip
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    manifest = yaml.safe_load(out.getvalue())
    assert errors(manifest) == []
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1


def _pod(manifest: dict) -> dict:
    return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (
            lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(restartPolicy="OnFail"),
            "is not one of",
        ),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "1 was expected"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="1"), "is not of type"),
        (lambda m: m["spec"].update(nprocPerNodes="2"), "Additional properties"),
        (
            lambda m: m["spec"]["pytorchReplicaSpecs"].update(
                Chief=m["spec"]["pytorchReplicaSpecs"]["Worker"]
            ),
            "is not one of",
        ),
        (
            lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].update(
                name="main"
            ),
            "does not contain",
        ),
        (lambda m: m["metadata"].update(name="My_Job"), "does not match"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"].pop("Worker"), "'Worker' is a required property"),
        (lambda m: _pod(m)["containers"][0]["volumeMounts"][0].update(mountPath="runs"), "does not match"),
        (lambda m: _pod(m)["volumes"][0].update(emptyDir={}), "has too many properties"),
        (lambda m: _pod(m)["volumes"][1]["emptyDir"].update(medium="Disk"), "is not one of"),
        (lambda m: _pod(m)["containers"][0]["resources"]["requests"].update(memory="lots"), "does not match"),
    ],
)
def test_the_schema_refuses_what_the_cluster_would(change, complaint):
    """A control: the schema is not vacuous; each mutation is one the API server or the webhook refuses."""
    spec, nproc = SPECS["elastic"]
    manifest = yaml.safe_load(render("k8s", spec, nproc, job_name="exp", image="reg.example/gpulab:1"))
    broken = copy.deepcopy(manifest)
    change(broken)
    assert any(complaint in e for e in errors(broken)), errors(broken)


@pytest.mark.parametrize("job_name", ["My_Job", "2nd-run", "exp.1", "x" * 64])
def test_a_job_name_kubernetes_refuses_is_one_line(job_name):
    with pytest.raises(LaunchError) as err:
        render("k8s", LaunchSpec(command=["t.py"]), 1, job_name=job_name)
    assert "\n" not in str(err.value) and "--job-name" in str(err.value) and "lower-case" in str(err.value)


def _cli_manifest(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["launch", "--print", "k8s", "--image", "reg.example/gpulab:1", *args, "--", "t.py"]) == 0
    return yaml.safe_load(out.getvalue())


def _launcher_restarts(manifest: dict) -> str:
    command = _pod(manifest)["containers"][0]["command"][2].split()
    return command[command.index("--max-restarts") + 1]


def test_pods_have_a_grace_period_to_save_in_and_an_elastic_job_restarts_as_asked():
    """Kubernetes' 30 s from SIGTERM to SIGKILL is too short for a large model's checkpoint: 120 s unless told;
    an elastic job's policy and its launchers allow the same restarts: 3 by default (0 would end it at the
    first pod that leaves), --max-restarts when given."""
    elastic = _cli_manifest("--nnodes", "2:4")
    assert errors(elastic) == []
    assert _pod(elastic)["terminationGracePeriodSeconds"] == 120
    assert elastic["spec"]["elasticPolicy"]["maxRestarts"] == 3 and _launcher_restarts(elastic) == "3"

    told = _cli_manifest("--nnodes", "2:4", "--max-restarts", "7", "--grace-period", "600")
    assert errors(told) == []
    assert told["spec"]["elasticPolicy"]["maxRestarts"] == 7 and _launcher_restarts(told) == "7"
    worker = told["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert _pod(told)["terminationGracePeriodSeconds"] == worker["terminationGracePeriodSeconds"] == 600

    fixed = _cli_manifest("--nnodes", "2")  # not elastic: no policy, no restarts unless asked
    assert "elasticPolicy" not in fixed["spec"] and _launcher_restarts(fixed) == "0"

    broken = copy.deepcopy(elastic)  # the schema checks the field: a misspelt or negative one is refused
    _pod(broken)["terminationGracePeriodSecond"] = 120
    assert any("Additional properties" in e for e in errors(broken))
    _pod(broken).pop("terminationGracePeriodSecond")
    _pod(broken)["terminationGracePeriodSeconds"] = -1
    assert any("minimum" in e for e in errors(broken))


def test_a_grace_period_with_no_time_to_save_is_one_line(capsys):
    assert main(["launch", "--print", "k8s", "--image", "i", "--grace-period", "0", "--", "t.py"]) == 2
    err = capsys.readouterr().err
    assert "--grace-period must be at least 1 second to save a checkpoint in, got 0" in err
    assert len(err.strip().splitlines()) == 1
