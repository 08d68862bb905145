"""Checkpoint storage: layout, round trip, pruning, resolving ``latest``, and refusing damaged files."""

from __future__ import annotations

import collections
import hashlib
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from gpulab.engines.torch.state.api import (
    apply_model_state,
    capture_rng,
    export_weights,
    inspect_checkpoint,
    list_checkpoints,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from gpulab.errors import CheckpointError

FILES = {"model.safetensors", "state.pt", "meta.json", "MANIFEST.json"}


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _training_state(model: torch.nn.Module) -> dict:
    """What a Trainer stores: optimizer, scheduler, scaler, progress, sampler, rng, config, environment."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=10)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": torch.amp.GradScaler("cpu").state_dict(),
        "progress": {"epoch": 2, "global_step": 7, "batch_in_epoch": 3},
        "sampler": {"seed": 1, "permutation": torch.randperm(10), "position": 3},
        "rng": capture_rng(),
        "config": {"batch_size": 32, "precision": "fp32", "clip_grad_norm": None},
        "environment": {"torch": str(torch.__version__), "devices": ["cpu"]},
    }


def _save(root: Path, step: int, loss: float = 1.0, model: torch.nn.Module | None = None, **kw) -> Path:
    model = model or _model(step)
    return save_checkpoint(
        root,
        step=step,
        model_state=model.state_dict(),
        state={"rng": capture_rng(), "progress": {"epoch": 0, "global_step": step}},
        meta={"metrics": {"loss": loss}},
        **kw,
    )


def _assert_same_weights(a, b):
    """safetensors stores tensors sorted by name, so compare weights by name, not by order."""
    _assert_same(dict(sorted(a.items())), dict(sorted(b.items())), "model_state")


def _assert_same(a, b, where="state"):
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


def _rewrite_manifest_entry(directory: Path, name: str) -> None:
    """Make MANIFEST.json agree with the file as it now is, so a later stage has to catch the damage."""
    manifest_path = directory / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    data = (directory / name).read_bytes()
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest_path.write_text(json.dumps(manifest))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# --- layout and round trip ----------------------------------------------------------------------------


def test_round_trip_gives_identical_tensors_state_and_meta(tmp_path):
    model = _model()
    state = _training_state(model)
    path = save_checkpoint(
        tmp_path, step=7, model_state=model.state_dict(), state=state, meta={"metrics": {"loss": 0.25}}
    )
    assert path == tmp_path / "step-00000007"
    assert {p.name for p in path.iterdir()} == FILES
    assert (tmp_path / "latest").read_text().strip() == "step-00000007"
    manifest = json.loads((path / "MANIFEST.json").read_text())["files"]
    assert set(manifest) == FILES - {"MANIFEST.json"}
    assert all(manifest[n]["size"] == (path / n).stat().st_size for n in manifest)

    loaded = load_checkpoint(path)
    _assert_same_weights(model.state_dict(), loaded.model_state)
    _assert_same(state, loaded.state)
    assert loaded.path == path
    assert loaded.meta["step"] == 7 and loaded.meta["epoch"] == 2
    assert loaded.meta["metrics"] == {"loss": 0.25}
    assert loaded.meta["versions"]["torch"] == str(torch.__version__)
    assert "gpulab" in loaded.meta["versions"] and loaded.meta["created"]
    assert load_checkpoint(tmp_path).path == path  # a root resolves to latest
    assert load_checkpoint(tmp_path / "latest").path == path


def test_every_allowed_state_type_survives_weights_only(tmp_path):
    extra = {
        "dtype": torch.bfloat16,
        "device": torch.device("cpu"),
        "size": torch.Size([2, 3]),
        "tuple": (0.9, 0.999),
        "ordered": collections.OrderedDict(a=1, b=2),
        "int_keys": {0: "a", 1: None},
        "flags": [True, False, None],
        "floats": [math.inf, -0.0, float("nan")],
        "bf16": torch.ones(3, dtype=torch.bfloat16),
        "param": torch.nn.Parameter(torch.ones(2)),
        "text": "ünïcode",
    }
    state = {"rng": capture_rng(), **extra}
    loaded = load_checkpoint(
        save_checkpoint(tmp_path, step=1, model_state=_model().state_dict(), state=state, meta={})
    )
    _assert_same(state, loaded.state)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (np.float64(1.5), "state['bad']"),
        (object(), "state['bad']"),
        (torch.__version__, "state['bad']"),  # a str subclass: torch.load(weights_only) refuses it
        (collections.namedtuple("Pair", "a b")(1, 2), "state['bad']"),
        ({"nested": [1, {"deep": {1, 2}}]}, "state['bad']['nested'][1]['deep']"),
    ],
)
def test_state_that_weights_only_would_refuse_is_rejected_before_writing(tmp_path, value, where):
    with pytest.raises(CheckpointError, match=f"^{re.escape(where)}: "):
        save_checkpoint(
            tmp_path / "ck",
            step=1,
            model_state=_model().state_dict(),
            state={"rng": capture_rng(), "bad": value},
            meta={},
        )
    assert not (tmp_path / "ck").exists()


def test_state_without_rng_is_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="no 'rng' entry"):
        save_checkpoint(tmp_path, step=1, model_state=_model().state_dict(), state={}, meta={})


def test_tied_and_noncontiguous_weights_save_and_reload(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    source = Tied()
    path = save_checkpoint(
        tmp_path, step=1, model_state=source.state_dict(), state={"rng": capture_rng()}, meta={}
    )
    target = Tied()
    apply_model_state(target, load_checkpoint(path).model_state)
    assert target.head.weight is target.emb.weight
    assert torch.equal(target.emb.weight, source.emb.weight)

    transposed = {
        "w": torch.arange(6.0).reshape(2, 3).T,
        "empty_a": torch.zeros(0),
        "empty_b": torch.zeros(0),
    }
    path = save_checkpoint(tmp_path, step=2, model_state=transposed, state={"rng": capture_rng()}, meta={})
    assert torch.equal(load_checkpoint(path).model_state["w"], transposed["w"])


def test_resaving_a_step_replaces_it_and_leaves_no_temp(tmp_path):
    _save(tmp_path, 1, model=_model(1))
    second = _model(2)
    _save(tmp_path, 1, model=second)
    _assert_same_weights(second.state_dict(), load_checkpoint(tmp_path).model_state)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


# --- pruning and latest -------------------------------------------------------------------------------


def test_keep_last_prunes_older_and_latest_points_at_newest(tmp_path):
    for step in range(1, 6):
        _save(tmp_path, step, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000004", "step-00000005"]
    assert (tmp_path / "latest").read_text().strip() == "step-00000005"
    assert resolve_checkpoint(tmp_path, "latest") == tmp_path / "step-00000005"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000004", "step-00000005"]


@pytest.mark.parametrize(("mode", "best"), [("min", 2), ("max", 3)])
def test_keep_best_is_never_pruned(tmp_path, mode, best):
    losses = {1: 0.5, 2: 0.1, 3: 0.9, 4: 0.4, 5: 0.6}
    for step, loss in losses.items():
        _save(tmp_path, step, loss=loss, keep_last=2, keep_best=("loss", mode))
    kept = [int(p.name.split("-")[1]) for p in list_checkpoints(tmp_path)]
    assert kept == sorted({best, 4, 5})


def test_bad_keep_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(CheckpointError, match="keep_best"):
        _save(tmp_path, 1, keep_last=2, keep_best=("loss", "lowest"))
    with pytest.raises(CheckpointError, match="keep_last"):
        _save(tmp_path, 1, keep_last=0)


def test_latest_skips_a_checkpoint_without_a_complete_manifest(tmp_path):
    _save(tmp_path, 1)
    second = _save(tmp_path, 2)
    (second / "MANIFEST.json").unlink()
    assert resolve_checkpoint(tmp_path, "latest") == tmp_path / "step-00000001"
    assert list_checkpoints(tmp_path) == [tmp_path / "step-00000001"]
    assert load_checkpoint(tmp_path).meta["step"] == 1

    (tmp_path / "step-00000001" / "meta.json").write_text("{}")  # checksum no longer matches
    with pytest.raises(CheckpointError, match=f"{re.escape(str(tmp_path))}: no complete checkpoint"):
        resolve_checkpoint(tmp_path, "latest")


def test_latest_falls_back_when_its_file_is_missing_or_names_nothing(tmp_path):
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    (tmp_path / "latest").unlink()
    assert resolve_checkpoint(tmp_path) == tmp_path / "step-00000002"
    (tmp_path / "latest").write_text("../../etc\n")
    assert resolve_checkpoint(tmp_path) == tmp_path / "step-00000002"


def test_resolving_an_empty_root_names_the_root(tmp_path):
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(tmp_path))}: no complete checkpoint"):
        resolve_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="valid choices: latest"):
        resolve_checkpoint(tmp_path, "best")


def test_stale_temp_entries_are_removed_unless_their_owner_lives(tmp_path):
    _save(tmp_path, 1)
    dead, alive = _dead_pid(), os.getppid()
    (tmp_path / f".tmp-step-00000002-{dead}").mkdir()
    (tmp_path / f".tmp-step-00000002-{dead}" / "model.safetensors").write_bytes(b"partial")
    (tmp_path / f".tmp-latest-{dead}").write_text("step-00000002")
    (tmp_path / f".tmp-step-00000003-{alive}").mkdir()
    _save(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")) == [
        f".tmp-step-00000003-{alive}"
    ]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000002"]


def test_a_resave_killed_between_its_renames_gets_the_old_copy_back(tmp_path):
    old = _save(tmp_path, 1)
    old.rename(tmp_path / f".tmp-old-step-00000001-{_dead_pid()}")  # where the kill left it
    _save(tmp_path, 2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000002"]


# --- refusing damaged or hostile files ----------------------------------------------------------------


class _Payload:
    """Pickles as a call to exec that would create a marker file on an unsafe load."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def test_pickle_that_would_run_code_is_refused_and_never_runs(tmp_path):
    path = _save(tmp_path / "ck", 1)
    marker = tmp_path / "MARKER"
    buffer = io.BytesIO()
    torch.save({"rng": capture_rng(), "evil": _Payload(marker)}, buffer)
    (path / "state.pt").write_bytes(buffer.getvalue())
    _rewrite_manifest_entry(path, "state.pt")  # so only the unpickler stands in the way

    proof = tmp_path / "PROOF"  # the same payload is live: an unsafe load does run it
    live = io.BytesIO()
    torch.save({"evil": _Payload(proof)}, live)
    live.seek(0)
    torch.load(live, weights_only=False)
    assert proof.exists()

    with pytest.raises(CheckpointError, match=r"state\.pt: refused pickle content \(.*exec") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)
    # The reason itself, not torch's advice to turn weights_only off (which cut it off before).
    assert "GLOBAL exec was not an allowed global" in str(info.value)
    assert "weights_only" not in str(info.value).split("refused pickle content")[1]
    assert not marker.exists()
    report = inspect_checkpoint(path)
    assert not report["valid"] and "refused pickle content" in report["problems"][0]
    assert not marker.exists()


class _SystemCall:
    def __reduce__(self):
        return (os.system, ("true",))


def test_pickle_refusal_shows_its_real_reason(tmp_path):
    """torch wraps the reason in paragraphs of advice; the one line used to end before reaching it."""
    path = _save(tmp_path / "ck", 1)
    buffer = io.BytesIO()
    torch.save({"rng": capture_rng(), "call": _SystemCall()}, buffer)
    (path / "state.pt").write_bytes(buffer.getvalue())
    _rewrite_manifest_entry(path, "state.pt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert f"unsupported GLOBAL {os.system.__module__}.system" in str(info.value)


def test_truncated_safetensors_with_matching_manifest_is_caught_by_the_parser(tmp_path):
    path = _save(tmp_path, 1)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    _rewrite_manifest_entry(path, "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt or truncated safetensors"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        export_weights(path, tmp_path / "out.safetensors")


def test_checksum_mismatch_names_the_file(tmp_path):
    path = _save(tmp_path, 1)
    data = bytearray((path / "state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "state.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"state\.pt: checksum mismatch") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: (p / "MANIFEST.json").unlink(), r"MANIFEST\.json: missing manifest"),
        (lambda p: (p / "MANIFEST.json").write_text("{not json"), "unreadable manifest"),
        (lambda p: (p / "meta.json").unlink(), r"meta\.json: missing"),
        (lambda p: (p / "model.safetensors").write_bytes(b"x"), r"model\.safetensors: size mismatch"),
    ],
)
def test_other_damage_is_a_one_line_error_naming_the_file(tmp_path, damage, message):
    path = _save(tmp_path, 1)
    damage(path)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


def test_manifest_that_omits_a_file_is_refused(tmp_path):
    path = _save(tmp_path, 1)
    manifest = json.loads((path / "MANIFEST.json").read_text())
    del manifest["files"]["state.pt"]
    (path / "MANIFEST.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"manifest does not list state\.pt"):
        load_checkpoint(path)


# --- applying, inspecting, exporting ------------------------------------------------------------------


def test_apply_model_state_with_a_wrong_shape_leaves_the_model_unchanged():
    model = _model(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    incoming = {k: v + 1 for k, v in _model(1).state_dict().items()}
    incoming["2.weight"] = torch.zeros(3, 8)
    with pytest.raises(
        CheckpointError, match=r"shape mismatch: 2\.weight: checkpoint \(3, 8\) vs model \(2, 8\)"
    ):
        apply_model_state(model, incoming)
    _assert_same(before, dict(model.state_dict()))

    del incoming["2.weight"]
    incoming["extra"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match=r"missing: 2\.weight; unexpected: extra"):
        apply_model_state(model, incoming)
    _assert_same(before, dict(model.state_dict()))
    apply_model_state(model, incoming, strict=False)
    assert torch.equal(model.state_dict()["0.weight"], incoming["0.weight"])


def test_inspect_reports_and_never_raises(tmp_path):
    path = _save(tmp_path, 3, loss=0.5)
    report = inspect_checkpoint(tmp_path)
    assert report["valid"] and report["step"] == 3 and report["epoch"] == 0
    assert report["metrics"] == {"loss": 0.5} and report["problems"] == []
    assert {f["name"]: f["status"] for f in report["files"]} == {
        "model.safetensors": "ok",
        "state.pt": "ok",
        "meta.json": "ok",
    }

    (path / "state.pt").write_bytes(b"garbage")
    (path / "model.safetensors").unlink()
    report = inspect_checkpoint(path)
    assert not report["valid"]
    statuses = {f["name"]: f["status"] for f in report["files"]}
    assert statuses == {"model.safetensors": "missing", "state.pt": "mismatch", "meta.json": "ok"}

    (path / "MANIFEST.json").unlink()
    assert inspect_checkpoint(path)["valid"] is False
    assert inspect_checkpoint(tmp_path / "nowhere")["valid"] is False


def test_export_weights_writes_the_verified_safetensors(tmp_path):
    model = _model(4)
    _save(tmp_path / "ck", 1, model=model)
    out = export_weights(tmp_path / "ck", tmp_path / "weights.safetensors")
    _assert_same_weights(model.state_dict(), load_file(out))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []

    (tmp_path / "ck" / "step-00000001" / "model.safetensors").write_bytes(b"\0" * 10)
    with pytest.raises(CheckpointError):
        export_weights(tmp_path / "ck" / "step-00000001", tmp_path / "again.safetensors")
    assert not (tmp_path / "again.safetensors").exists()


def test_extra_files_go_beside_the_weights_inside_the_manifest_and_bad_names_are_refused(tmp_path):
    model = _model()
    state = {"rng": capture_rng()}
    path = save_checkpoint(
        tmp_path,
        step=1,
        model_state=model.state_dict(),
        state=state,
        meta={},
        extra_files={"config.json": b"{}"},
    )
    assert (path / "config.json").read_bytes() == b"{}"
    assert "config.json" in json.loads((path / "MANIFEST.json").read_text())["files"]
    (path / "config.json").write_bytes(b'{"n_layer": 99}')  # tampered: the manifest catches it
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(path)
    for name, data in (("state.pt", b""), ("../x", b""), ("ok.json", "text")):
        with pytest.raises(CheckpointError, match="extra file"):
            save_checkpoint(
                tmp_path,
                step=2,
                model_state=model.state_dict(),
                state=state,
                meta={},
                extra_files={name: data},
            )
    assert not (tmp_path / "step-00000002").exists()
