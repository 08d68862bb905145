"""Messages that were not yet one true line (issue 40): a usage mistake was click's four lines, `checkpoint
inspect runs/nope` an empty report with exit 1, a YAML tab error did not say "tab"."""

from __future__ import annotations


def test_a_usage_mistake_is_one_line_naming_the_verb_and_its_help(cli):
    code, err = cli("train", "mlp", "--max-steps", "abc")
    assert code == 2 and err.count("\n") == 1, err
    assert (
        err.startswith("gpulab: error: train: Invalid value for '--max-steps'")
        and "(see gpulab train --help)" in err
    )
    code, err = cli("trian")
    assert (
        code == 2
        and err == "gpulab: error: No such command 'trian'. Did you mean 'train'? (see gpulab --help)\n"
    )


def test_checkpoint_inspect_of_nothing_is_one_line_not_an_empty_report(tmp_path, cli, capsys):
    code, err = cli("checkpoint", "inspect", tmp_path / "runs" / "nope")
    assert code == 2 and err.count("\n") == 1 and "no such run, checkpoints folder or checkpoint" in err
    assert capsys.readouterr().out == ""


def test_a_tab_in_the_config_is_named(tmp_path, cli):
    (tmp_path / "run.yaml").write_text("recipe: mlp\nmax_steps:\n\t3\n")
    code, err = cli("train", "--config", tmp_path / "run.yaml")
    assert code == 2 and err.count("\n") == 1 and "at line 3: a tab" in err and "indent with spaces" in err


def test_an_export_of_a_run_without_a_checkpoint_says_the_fix(tmp_path, cli):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    for verb in (["export", tmp_path / "run", "--format", "onnx"], ["checkpoint", "export", tmp_path / "run",
                                                                  "--to", tmp_path / "w.safetensors"]):  # fmt: skip
        code, err = cli(*verb)
        assert (
            code == 2
            and err.count("\n") == 1
            and "train with checkpoints on" in err.replace("it with", "with")
        )
