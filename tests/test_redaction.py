"""``redact``: a URI's password and a query's credentials masked, everything else left as it was."""

from __future__ import annotations

import pytest

from gpulab.redaction import redact, redacted


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
