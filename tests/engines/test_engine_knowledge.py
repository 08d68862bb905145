"""What is engine-specific comes from the engine object, so a third engine edits nothing outside its folder
but the registry line: a fake engine registered at run time (``engines.register``) is taken at its word by
config's validation, the CLI's line for its missing framework, the doctor and the bench report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpulab import engine_registry as engines
from gpulab.bench.report import render_html
from gpulab.bench.versus import add_comparison
from gpulab.cli import main
from gpulab.cli.doctor import run_doctor
from gpulab.config import TrainerSettings, check_engine, parse_config
from gpulab.engine_registry import Lack
from gpulab.errors import ConfigError
from gpulab.hardware.checks import Check
from gpulab.hardware.facts import Facts
from gpulab.measure.results import Figure, Row


class AbacusDoctor:
    def checks(self, facts: Facts) -> list[Check]:
        return [Check("abacus-beads", "warn", "3 beads are stuck", "pip install 'gpulab[abacus-extra]'")]


class AbacusBenchWords:
    """What the bench report reads of an engine's bench (its suites never run here)."""

    prefix = "ab-"
    compile = ("plain", "fused")
    speedup = ("speedup_vs_plain", "bead fusion over plain beads")


class AbacusEngine:
    """Only what the verbs under test ask; its framework ``abacus_fw`` is never installed."""

    name = "abacus"
    framework = "Abacus"
    framework_module = "abacus_fw"
    extra = "abacus-extra"
    lacks = {"strategy": Lack(("auto", "single")), "compile": Lack((False,))}
    doctor = AbacusDoctor()
    bench = AbacusBenchWords()

    def resolve(self, user: dict[str, Any]) -> Any:
        raise ModuleNotFoundError("No module named 'abacus_fw'", name="abacus_fw")

    run = resolve


@pytest.fixture
def abacus(monkeypatch) -> AbacusEngine:
    monkeypatch.setattr(engines, "_REGISTRY", dict(engines._REGISTRY))  # the registration ends with the test
    engine = AbacusEngine()
    engines.register("abacus", lambda: engine, help="beads on wires")
    return engine


def sent_to(error: pytest.ExceptionInfo) -> list[str]:
    """The engines a refusal's ``or use --engine A|B`` names."""
    return str(error.value).rpartition("or use --engine ")[2].split("|")


def test_config_takes_the_registered_name_and_what_it_lacks_from_the_engine(abacus):
    assert parse_config(TrainerSettings, {"engine": "abacus"}).engine == "abacus"
    assert engines.names()[-1] == "abacus"  # the built-ins first, from the registry
    with pytest.raises(ConfigError) as err:
        parse_config(TrainerSettings, {"engine": "jax"})
    assert f"valid choices: {'|'.join(engines.names())}" in str(err.value)
    check_engine(parse_config(TrainerSettings, {"engine": "abacus", "strategy": "single", "compile": False}))
    with pytest.raises(ConfigError) as err:
        check_engine(parse_config(TrainerSettings, {"engine": "abacus", "compile": True}))
    assert str(err.value).startswith(
        "setting 'compile' = True is not available on engine 'abacus' (valid there: False); "
        "remove it, or use --engine "
    )
    assert sent_to(err) and set(sent_to(err)) <= set(engines.names()) - {"abacus"}
    # the other engines' refusals name it where it has the setting, and not where it lacks it too
    with pytest.raises(ConfigError) as err:
        check_engine(parse_config(TrainerSettings, {"engine": "tensorflow", "num_workers": 2}))
    assert "abacus" in sent_to(err)
    with pytest.raises(ConfigError) as err:
        check_engine(parse_config(TrainerSettings, {"engine": "tensorflow", "strategy": "ddp"}))
    assert "abacus" not in sent_to(err)
    assert "abacus: beads on wires" in engines.option_help()


def test_the_cli_names_its_extra_when_its_framework_is_missing(abacus, capsys):
    code = main(["train", "mlp", "--engine", "abacus", "--max-steps", "1"])
    assert code == 2
    others = "|".join(name for name in engines.names() if name != "abacus")
    assert capsys.readouterr().err.strip() == (
        "gpulab: error: Abacus is not installed and this command needs it (the abacus engine); "
        f"fix: pip install 'gpulab[abacus-extra]', or use --engine {others}"
    )


def test_the_doctor_runs_its_checks(abacus):
    checks = {c["name"]: c for c in run_doctor(Facts()).to_json()["checks"]}
    assert checks["abacus-beads"] == {
        "name": "abacus-beads",
        "status": "warn",
        "detail": "3 beads are stuck",
        "fix": "pip install 'gpulab[abacus-extra]'",
    }


def _suite(engine: str, variants: tuple[str, str], speedup: str, ms: float) -> dict[str, Any]:
    rows = [
        Row(
            {"model": "mlp", "variant": variant},
            {"step_time": Figure.from_samples([ms, ms * 1.1, ms * 0.9], "ms", "lower")}
            | ({speedup: Figure.single(2.0, "x", "higher")} if variant == variants[1] else {}),
            {"no_peak_memory": f"{engine} keeps no count"},
        ).to_json()
        for variant in variants
    ]
    return {"title": "compile", "engine": engine, "rows": rows, "status": "ok", "seconds": 1.0}


def test_the_bench_report_pairs_its_suites_and_names_its_columns(abacus, tmp_path: Path):
    doc = {
        "config": {"engines": ["torch", "abacus"]},
        "suites": {
            "compile": _suite("torch", ("eager", "default"), "speedup_vs_eager", 4.0),
            "ab-compile": _suite("abacus", ("plain", "fused"), "speedup_vs_plain", 2.0),
        },
    }
    add_comparison(doc, tmp_path, ("torch", "abacus"))
    comparison = json.loads(json.dumps(doc["comparison"]))
    assert comparison["engines"]["abacus"] == {
        "framework": "Abacus",
        "compile_speedup": "bead fusion over plain beads",
    }
    rows = comparison["rows"]
    assert [r["workload"] for r in rows] == ["compile: mlp eager / plain", "compile: mlp default / fused"]
    assert rows[1]["abacus"]["compile_speedup"]["value"] == 2.0  # its own figure's name
    assert rows[1]["torch"]["compile_speedup"]["value"] == 2.0
    assert rows[0]["abacus"]["no_peak_memory"] == "abacus keeps no count"
    html = render_html(doc, tmp_path)
    assert '<section id="comparison"><h2>PyTorch vs Abacus</h2>' in html
    assert "<th>Abacus time (ms)</th>" in html and "<th>Abacus speed vs PyTorch (x)</th>" in html
    assert "bead fusion over plain beads (Abacus)" in html
