"""The doctor as a user meets it: exit codes, the --json contract, the table (through the CLI's main() in
the test process: exit code and output are all these read; tests/cli/test_cli_startup.py runs it as a
process of its own)."""

from __future__ import annotations

import json

from gpulab.cli import main
from gpulab.errors import ConfigError


def test_doctor_json_is_one_object_and_exit_code_follows_checks(cli, capsys):
    code, _ = cli("doctor", "--json")
    out = json.loads(capsys.readouterr().out)
    failed = any(c["status"] == "fail" for c in out["checks"])
    assert code == (1 if failed else 0)
    assert out["devices"][0]["type"] == "cpu"


def test_doctor_fails_on_bad_visible_devices(cli, capsys):
    code, _ = cli("doctor", "--json", env={"CUDA_VISIBLE_DEVICES": "0,oops", "OMP_NUM_THREADS": "1"})
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["CUDA_VISIBLE_DEVICES"]["status"] == "fail"
    assert code == 1


def test_human_output_is_a_table(cli, capsys):
    cli("doctor")
    out = capsys.readouterr().out
    assert "Checks" in out and "shm" in out


def test_unknown_verb_exits_2(cli):
    code, err = cli("doctr")
    assert code == 2
    assert "Traceback" not in err


def test_user_error_is_one_line_and_exit_2(monkeypatch, capsys):
    def boom():
        raise ConfigError("setting 'x' = 1 is invalid: valid choices: a|b")

    monkeypatch.setattr("gpulab.cli.doctor.run_doctor", boom)
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err
    assert err == "gpulab: error: setting 'x' = 1 is invalid: valid choices: a|b\n"


def test_debug_keeps_the_traceback(monkeypatch):
    import pytest

    def boom():
        raise ConfigError("bad")

    monkeypatch.setattr("gpulab.cli.doctor.run_doctor", boom)
    with pytest.raises(ConfigError):
        main(["--debug", "doctor"])


def test_a_fix_with_brackets_prints_as_written_not_as_rich_markup():
    """`pip install 'gpulab[tensorflow]'` lost its extra in the table: rich read `[tensorflow]` as a tag."""
    import io

    from rich.console import Console

    from gpulab.cli.doctor import render
    from gpulab.hardware.checks import Check
    from gpulab.hardware.doctor import Report
    from gpulab.hardware.facts import gather_facts

    fix = "pip install 'gpulab[tensorflow]' (with NVIDIA GPUs: pip install 'tensorflow[and-cuda]')"
    report = Report(gather_facts(), [Check("tensorflow", "info", "not installed [yet]", fix)])
    out = io.StringIO()
    render(report, Console(file=out, width=300))
    printed = out.getvalue()
    assert fix in printed and "not installed [yet]" in printed
