"""``redact``: a URI's password and a query's credentials masked, everything else left as it was."""

from __future__ import annotations

import sys

import pytest

from gpulab.redaction import (
    CREDENTIALS_ENV,
    hide_credentials,
    redact,
    redacted,
    redacted_argv,
    redacting_output,
    restore_credentials,
)


@pytest.mark.parametrize(
    ("given", "written"),
    [
        ("http://u:secret@host:5000", "http://u:***@host:5000"),
        ("https://user:p%40ss@mlflow.example.com/path", "https://user:***@mlflow.example.com/path"),
        ("postgresql://me:hunter2@db/mlflow", "postgresql://me:***@db/mlflow"),
        ("http://host/api?token=abc123&x=1", "http://host/api?token=***&x=1"),
        ("https://h/?access_token=a&API_KEY=b#f", "https://h/?access_token=***&API_KEY=***#f"),
        (
            "s3://b/k?X-Amz-Signature=ff&X-Amz-Credential=cc",
            "s3://b/k?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        ("http://u@host", "http://u@host"),  # no password
        ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
        ("http://host:5000/?page=2", "http://host:5000/?page=2"),
        ("plain text, a=b", "plain text, a=b"),
    ],
)
def test_redact_masks_credentials_only(given, written):
    assert redact(given) == written


def test_redacted_walks_nested_settings_and_keeps_other_values():
    settings = {
        "mlflow": {"tracking_uri": "http://u:secret@h"},
        "trackers": ["mlflow"],
        "steps": 3,
        "x": None,
    }
    assert redacted(settings) == {
        "mlflow": {"tracking_uri": "http://u:***@h"},
        "trackers": ["mlflow"],
        "steps": 3,
        "x": None,
    }
    assert settings["mlflow"]["tracking_uri"] == "http://u:secret@h"  # a copy: the live value is untouched


def test_a_library_line_printed_with_a_credential_comes_out_masked(capsys):
    with redacting_output():
        print("🏃 View run r at: http://u:pw@h:5000/#/experiments/1/runs/x")
        print("🧪 View experiment at: https://h/?token=abc/#/experiments/1", file=sys.stderr)
    out, err = capsys.readouterr()
    assert out == "🏃 View run r at: http://u:***@h:5000/#/experiments/1/runs/x\n"
    assert err == "🧪 View experiment at: https://h/?token=***#/experiments/1\n"  # the value ran to the #
    print("after")
    assert capsys.readouterr().out == "after\n"  # the streams are given back


def test_a_childs_credentials_travel_in_its_environment_and_only_back_to_their_place(monkeypatch):
    args = ["train", "mlp", "--set", "mlflow.tracking_uri=http://u:pw@h", "--out", "r"]
    shown, env = hide_credentials(args)
    assert shown == ["train", "mlp", "--set", "mlflow.tracking_uri=http://u:***@h", "--out", "r"]
    assert "pw" in env[CREDENTIALS_ENV] and hide_credentials(["train", "mlp"]) == (["train", "mlp"], {})
    assert restore_credentials(shown, env) == args
    # An argument that is not the masked form of the original stays as given.
    assert restore_credentials(["train", "mlp", "--set", "other"], env) == ["train", "mlp", "--set", "other"]
    assert restore_credentials(shown, {CREDENTIALS_ENV: "not json"}) == shown
    monkeypatch.setattr(sys, "argv", ["gpulab", *args])
    with redacted_argv():
        assert sys.argv[4] == "mlflow.tracking_uri=http://u:***@h"
    assert sys.argv[1:] == args
