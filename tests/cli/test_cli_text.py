"""The verbs' wording helpers: plurals and floats as a person writes them."""

from __future__ import annotations

from gpulab.cli.text import number, plural


def test_plural():
    assert [plural(n, "epoch") for n in (0, 1, 2, 1500)] == [
        "0 epochs",
        "1 epoch",
        "2 epochs",
        "1,500 epochs",
    ]


def test_number_rounds_floats_only():
    assert number(0.0009999999999999998) == "0.001"
    assert number(0.020442616194486618) == "0.0204426"
    assert number(0.9750000238418579) == "0.975"
    assert number(12) == "12" and number("x") == "x"
