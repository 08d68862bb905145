"""The doctor on this real machine, and the --json contract."""

from __future__ import annotations

import importlib.metadata
import importlib.util

from gpulab.cli.doctor import run_doctor  # the machine's checks and the engines'
from gpulab.hardware.facts import gather_facts


def test_gather_facts_reads_a_crafted_shm_path(tmp_path):
    facts = gather_facts(shm_path=str(tmp_path), run_compute=False, probe_tensorflow=False)
    assert facts.shm_bytes and facts.shm_bytes > 0
    absent = gather_facts(shm_path=str(tmp_path / "absent"), run_compute=False, probe_tensorflow=False)
    assert absent.shm_bytes is None


def test_report_json_contract():
    out = run_doctor().to_json()
    assert set(out) >= {"frameworks", "devices", "checks"}
    assert out["frameworks"]["torch"]["version"]
    cpu = out["devices"][0]
    assert {"index", "type", "name", "memory_total_bytes"} <= set(cpu)
    assert cpu["type"] == "cpu"
    for d in out["devices"]:
        if d["type"] == "cuda":
            assert {"compute_capability", "sm_count"} <= set(d)
    for c in out["checks"]:
        assert set(c) == {"name", "status", "detail", "fix"}
        assert c["status"] in ("ok", "info", "warn", "fail")
    assert {c["name"] for c in out["checks"]} >= {
        "torch",
        "shm",
        "threads",
        "compute",
        "CUDA_VISIBLE_DEVICES",
    }
    if importlib.util.find_spec("tensorflow") is not None:  # the real TensorFlow probe (its child process)
        tf, checks = out["frameworks"]["tensorflow"], {c["name"]: c for c in out["checks"]}
        names = {d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions()}
        (dist,) = names & {"tensorflow", "tensorflow-cpu"}
        assert tf["version"] == importlib.metadata.version(dist) and tf["error"] is None
        assert tf["gpus"] == sum(d["type"] == "cuda" for d in out["devices"])  # on a healthy machine
        assert tf["xla"] is True and checks["tensorflow-xla"]["status"] == "ok"
        assert checks["tensorflow"]["status"] == checks["tensorflow-gpus"]["status"] == "ok"
