"""The CLI's verbs and their flags hold still (as torchtitan freezes its flags): the live typer app is
compared with the checked-in list, so a flag renamed or dropped by a move breaks this test and not a
user's script. A deliberate change updates the list: ``python tests/cli/test_cli_surface.py >
tests/cli/cli_surface.txt``."""

from __future__ import annotations

from pathlib import Path

import typer

from gpulab.cli import _register, app

FROZEN = Path(__file__).with_name("cli_surface.txt")


def surface() -> list[str]:
    """One line per command: its path, its arguments (upper case), then its options sorted."""
    _register()

    def walk(command, path: list[str]) -> list[str]:
        options = sorted(
            "/".join(p.opts + p.secondary_opts) for p in command.params if p.param_type_name == "option"
        )
        arguments = [p.name.upper() for p in command.params if p.param_type_name == "argument"]
        lines = [(" ".join(path) + ": " + " ".join(arguments + options)).rstrip()]
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            lines += walk(sub, [*path, name])
        return lines

    return walk(typer.main.get_command(app), ["gpulab"])


def test_the_verbs_and_flags_are_the_checked_in_ones():
    frozen = FROZEN.read_text().splitlines()
    live = surface()
    assert live == frozen, (
        "the CLI changed; if on purpose, regenerate tests/cli/cli_surface.txt (see this file's docstring)\n"
        + "\n".join(f"- {line}" for line in frozen if line not in live)
        + "\n"
        + "\n".join(f"+ {line}" for line in live if line not in frozen)
    )


if __name__ == "__main__":
    print("\n".join(surface()))
