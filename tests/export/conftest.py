"""Runs trained for a few steps, shared by the export tests (training is the slow part)."""

from __future__ import annotations

import pytest

from gpulab.engines.torch.train.run import run


def _train(out, recipe: str, **settings) -> object:
    user = {"recipe": recipe, "out_dir": str(out), "progress": False, "mfu": False, "tensorboard": False}
    run({**user, **settings})
    return out


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("export") / "digits", "digits", max_steps=8)


@pytest.fixture(scope="session")
def chargpt_run(tmp_path_factory):
    tiny = {"n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 16, "max_chars": 20_000}
    return _train(
        tmp_path_factory.mktemp("export") / "chargpt", "chargpt", max_steps=2, batch_size=8, options=tiny
    )
