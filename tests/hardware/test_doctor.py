"""The doctor on this real machine, and the --json contract."""

from __future__ import annotations

from gpulab.hardware.doctor import run_doctor
from gpulab.hardware.facts import gather_facts


def test_gather_facts_reads_a_crafted_shm_path(tmp_path):
    facts = gather_facts(shm_path=str(tmp_path), run_compute=False)
    assert facts.shm_bytes and facts.shm_bytes > 0
    assert gather_facts(shm_path=str(tmp_path / "absent"), run_compute=False).shm_bytes is None


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
        assert c["status"] in ("ok", "warn", "fail")
    assert {c["name"] for c in out["checks"]} >= {
        "torch",
        "shm",
        "threads",
        "compute",
        "CUDA_VISIBLE_DEVICES",
    }
