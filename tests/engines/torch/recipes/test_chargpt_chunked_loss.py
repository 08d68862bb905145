"""chargpt's ``options.chunked_loss``: the same loss and gradients as the whole logits, less peak memory
where the logits dominate, the same compiled graph count, and a real ``gpulab train`` run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from gpulab.cli import main
from gpulab.config import parse_config
from gpulab.engines.torch.linear_cross_entropy import HeadInput
from gpulab.engines.torch.recipes.chargpt import CharGPT, next_char_loss
from gpulab.engines.torch.runtime.compile import ModelAndLoss
from gpulab.engines.torch.runtime.step_call import LossCall
from gpulab.errors import ConfigError
from gpulab.recipe_data import CharGptOptions

VOCAB = 4096  # wide against n_embd 32: the logits are most of the step's memory


def _model(chunked, **sizes) -> CharGPT:
    options = dict(n_layer=1, n_head=2, n_embd=32, block_size=64, dropout=0.0, chunked_loss=chunked)
    torch.manual_seed(0)
    return CharGPT(VOCAB, CharGptOptions(**{**options, **sizes}))


def _batch(batch=4, block=64):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, block + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def _loss_and_grads(model, x, y):
    loss = next_char_loss(model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def test_on_trains_with_the_loss_and_gradients_of_the_whole_logits_and_evaluates_to_logits():
    x, y = _batch()
    whole, chunked = _model(False), _model(True)
    assert isinstance(chunked(x), HeadInput) and isinstance(whole(x), torch.Tensor)
    loss_w, grads_w = _loss_and_grads(whole, x, y)
    loss_c, grads_c = _loss_and_grads(chunked, x, y)
    torch.testing.assert_close(loss_c, loss_w, rtol=1e-6, atol=1e-6)
    assert grads_c.keys() == grads_w.keys()
    for name, grad in grads_w.items():
        torch.testing.assert_close(grads_c[name], grad, rtol=1e-6, atol=1e-6, msg=name)
    chunked.eval(), whole.eval()  # validation, export and infer see the logits
    torch.testing.assert_close(chunked(x), whole(x))


def test_auto_is_off_until_a_gpu_measures_it_and_a_wrong_value_is_one_line():
    assert _model("auto").chunked_loss is False
    with pytest.raises(ConfigError, match="chunked_loss") as err:
        parse_config(CharGptOptions, {"chunked_loss": "sometimes"}, prefix="options.")
    assert "auto" in str(err.value) and "\n" not in str(err.value)


def _memory_script():
    path = Path(__file__).parents[4] / "benchmarks" / "chunked_ce_memory.py"
    spec = importlib.util.spec_from_file_location("chunked_ce_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_peak_memory_of_a_step_is_lower_where_the_logits_dominate(one_thread):
    """The allocator's own records (torch's profiler), so exact and the same on every run."""
    peak = _memory_script().peak_allocated_bytes
    x, y = _batch(batch=8)
    logits = x.numel() * VOCAB * 4

    def step(model):
        return lambda: next_char_loss(model(x), y).backward()

    whole, chunked = peak(step(_model(False))), peak(step(_model(True)))
    assert whole > 2 * logits  # the logits and their gradient, held together
    assert chunked < whole / 4, (chunked, whole)


@pytest.mark.parametrize("chunked", [False, True])
def test_the_forward_and_loss_region_compiles_without_a_graph_break(chunked):
    x, y = _batch()
    region = ModelAndLoss(_model(chunked), LossCall(next_char_loss))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(region)((x,), {}, (x, y))
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons


def test_gpulab_train_runs_it_validates_and_says_so_in_the_summary(tmp_path, one_thread):
    out = tmp_path / "run"
    code = main(
        ["train", "chargpt", "--device", "cpu", "--max-steps", "3", "--batch-size", "4", "--out", str(out),
         "--set", "options.chunked_loss=true", "--set", "options.max_chars=5000", "--set", "options.n_layer=1",
         "--set", "options.n_embd=32", "--set", "options.n_head=2", "--set", "options.block_size=16",
         "--set", "progress=false", "--set", "tensorboard=false"]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and 0 < summary["final_loss"] < 10
    assert 0 <= summary["accuracy"] <= 1  # validation read the logits


def test_gpulab_inspect_counts_the_same_step_flops_with_it(capsys):
    """inspect traces forward and backward under the FLOP counter, whose module tracker hooks the model's
    outputs: the head's weight goes out as a view (a leaf is refused), and the step's FLOPs are the same."""

    def flops(chunked: str) -> int:
        code = main(
            ["inspect", "chargpt", "--json", "--set", f"options.chunked_loss={chunked}", "--set",
             "options.max_chars=5000", "--set", "options.n_layer=1"]
        )  # fmt: skip
        report = json.loads(capsys.readouterr().out)
        assert code == 0 and report["failure"] is None, report["failure"]
        return report["totals"]["flops_per_step"]

    assert flops("true") == flops("false") > 0


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_gloo_ranks_train_it_as_they_train_the_whole_logits(tmp_path, strategy, gpulab_server):
    """The head's weight leaves the model in its output: under DDP and FSDP2 (which unshard and reshard
    parameters around forward) the run is the whole-logits run, step for step. The launcher is forked from
    ``gpulab_server`` (tests/conftest.py: CPU only, one thread), its ranks start as always."""

    def final_loss(chunked: str) -> float:
        out = tmp_path / chunked
        done = gpulab_server.start(
            "gpulab.cli:main",
            ["launch", "--nproc-per-node", "2", "--", sys.executable, "-m", "gpulab", "train", "chargpt",
             "--device", "cpu", "--max-steps", "3", "--batch-size", "4",
             "--out", str(out), "--set", f"strategy={strategy}", "--set", f"options.chunked_loss={chunked}",
             "--set", "options.max_chars=5000", "--set", "options.n_layer=1", "--set", "options.n_embd=32",
             "--set", "options.n_head=2", "--set", "options.block_size=16", "--set", "progress=false",
             "--set", "tensorboard=false", "--set", "mfu=false"],
            stderr=tmp_path / f"{chunked}.stderr",
        )  # fmt: skip
        _, stderr = done.communicate(timeout=300)
        assert done.returncode == 0, stderr[-3000:]
        return json.loads((out / "summary.json").read_text())["final_loss"]

    assert final_loss("true") == pytest.approx(final_loss("false"), rel=1e-5)
