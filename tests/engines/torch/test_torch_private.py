"""torch's private names are used in one module, engines/torch/torch_private.py: each of its functions says
why and the torch versions it was checked on, runs on this torch, and serves a caller; no other module of
src/gpulab uses a private name of torch (an AST scan, nothing allow-listed)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from gpulab.engines.torch import torch_private as tp

SRC = Path(__file__).resolve().parents[3] / "src" / "gpulab"
MODULE = SRC / "engines" / "torch" / "torch_private.py"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _torch_private_names() -> set[str]:
    """The private names torch's objects and modules gpulab touches carry, read from this torch: an
    ``x._name`` with one of them, on anything but ``self``/``cls``, is a use of torch's internals."""
    import torch.cuda.memory
    import torch.distributed.distributed_c10d
    import torch.utils.data as data

    model = nn.Linear(2, 2)
    loader = data.DataLoader([1, 2, 3], batch_size=1)
    objects = [
        torch,
        torch.cuda,
        torch.cuda.memory,
        torch.distributed,
        torch.distributed.distributed_c10d,
        torch.nn,
        torch.optim,
        data,
        model,
        torch.compile(model),  # compiles nothing until called
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.optim.Adam(model.parameters(), fused=True),
        loader,
        iter(loader),
        torch.amp.GradScaler("cpu"),
        torch.zeros(1),
        torch.zeros(1).untyped_storage(),
    ]
    objects.append(data.dataloader._MultiProcessingDataLoaderIter)  # a worker's iterator (its class)
    names: set[str] = set()
    for obj in objects:
        names |= {n for n in dir(obj) if _private(n)} | {n for n in vars(obj) if _private(n)}
    return names


PRIVATE_NAMES = _torch_private_names()


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, code) of each use of a torch-private name in ``source``: an import from a private torch module
    or of a private name; a private part in a chain that starts at a name bound to torch; ``x._name`` (or
    ``getattr(x, "_name")``) with a private name torch's objects carry; a "torch.*._*" string (a logger of
    a private module)."""
    tree = ast.parse(source)
    torch_names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    torch_names.add((alias.asname or alias.name).split(".")[0])
                    if any(_private(p) for p in alias.name.split(".")):
                        found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            torch_names |= {alias.asname or alias.name for alias in node.names}
            imported = [alias.name for alias in node.names]
            if any(_private(p) for p in node.module.split(".")) or any(_private(n) for n in imported):
                found.append((node.lineno, f"from {node.module} import {', '.join(imported)}"))
    found += [(node.lineno, ast.unparse(node)) for node in ast.walk(tree) if _reaches_in(node, torch_names)]
    return found


def _reaches_in(node: ast.AST, torch_names: set[str]) -> bool:
    """Whether ``node`` (not an import) names something private of torch's."""
    if isinstance(node, ast.Attribute) and _private(node.attr):
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        return (isinstance(root, ast.Name) and root.id in torch_names) or (
            node.attr in PRIVATE_NAMES and not on_self
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        by_name = node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1
        return by_name and isinstance(node.args[1], ast.Constant) and node.args[1].value in PRIVATE_NAMES
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("torch."):
        return any(_private(p) for p in node.value.split("."))
    return False


def test_the_scan_finds_each_kind_of_use():
    source = """
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map
from torch.optim.optimizer import _to_scalar
import torch._dynamo
torch._foreach_mul_(xs, 2)
dist.distributed_c10d._get_default_store()
loader._iterator
getattr(optimizer, "_step_supports_amp_scaling", False)
logging.getLogger("torch._dynamo.variables.ctx_manager")
self._iterator
torch.__version__
"""
    lines = sorted(line for line, _ in private_uses(source))
    assert lines == [4, 5, 6, 7, 8, 9, 10, 11]


def test_no_module_but_torch_private_uses_a_private_name_of_torch():
    uses = []
    for path in sorted(SRC.rglob("*.py")):
        if path != MODULE:
            rel = path.relative_to(SRC)
            uses += [f"{rel}:{line}: {code}" for line, code in private_uses(path.read_text())]
    assert not uses, "use engines/torch/torch_private.py (add a function there, with why):\n" + "\n".join(
        uses
    )
    assert private_uses(MODULE.read_text()), "the module holds them all, so the scan must see them there"


FUNCTIONS = [f for name, f in vars(tp).items() if inspect.isfunction(f) and f.__module__ == tp.__name__]


@pytest.mark.parametrize("function", FUNCTIONS, ids=lambda f: f.__name__)
def test_each_function_says_why_and_the_versions_it_was_checked_on(function):
    doc = inspect.getdoc(function) or ""
    versions = re.findall(r"torch (\d+\.\d+\.\d+)", doc)
    assert versions and set(versions) <= set(tp.CHECKED_ON), (
        f"{function.__name__}: name a version in CHECKED_ON"
    )
    assert len(doc.split()) >= 8, f"{function.__name__}: say why gpulab needs it"


def test_each_function_has_a_caller():
    sources = "\n".join(p.read_text() for p in SRC.rglob("*.py") if p != MODULE)
    unused = [f.__name__ for f in FUNCTIONS if not re.search(rf"\b{f.__name__}\b", sources)]
    assert not unused, f"functions nothing in src/ calls: {unused}"


# What each function does, on this torch (the ones a CPU can run; CUDA's memory history and AOTInductor are
# exercised by tests/engines/torch/devices/test_accelerators.py and the export tests).


def test_pytree_functions_round_trip_a_nested_batch():
    batch = {"x": torch.ones(2), "pair": (torch.zeros(1), 3)}
    leaves, spec = tp.tree_flatten(batch)
    assert tp.tree_leaves(batch) == leaves and len(leaves) == 3
    again = tp.tree_unflatten(leaves, spec)
    assert again["pair"][1] == 3 and torch.equal(again["x"], batch["x"])
    doubled = tp.tree_map(lambda t: t * 2 if isinstance(t, torch.Tensor) else t, batch)
    assert torch.equal(doubled["x"], torch.full((2,), 2.0))


def test_storage_key_is_one_per_storage():
    t = torch.zeros(4)
    assert tp.storage_key(t.untyped_storage()) == tp.storage_key(t[1:].untyped_storage())
    assert tp.storage_key(t.untyped_storage()) != tp.storage_key(torch.zeros(4).untyped_storage())


def test_host_read_op_is_what_item_dispatches():
    seen = []

    class Watch(tp.dispatch_mode_base()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watch():
        torch.ones(1).sum().item()
    assert tp.host_read_op() in seen


def test_fake_tensors_and_module_bases():
    with tp.fake_tensor_mode() as mode:
        fake = mode.from_tensor(torch.ones(3)) * 2
    assert fake.shape == (3,)
    assert tp.fake_tensor_limits() and all(issubclass(e, BaseException) for e in tp.fake_tensor_limits())
    assert tp.fake_tensor_log().name == "torch._subclasses.fake_tensor"
    conv, norm = tp.conv_and_norm_bases()
    assert isinstance(nn.Conv1d(1, 1, 1), conv) and isinstance(nn.InstanceNorm2d(3), norm)


def test_compiler_facts():
    assert all(issubclass(e, BaseException) for e in tp.compile_error_types())
    assert tp.inductor_has_option("fallback_random")
    assert isinstance(tp.inductor_mode_options("default"), dict)
    assert isinstance(tp.frames_compiled(), int)
    model = nn.Linear(1, 1)
    assert tp.compiled_inner(torch.compile(model)) is model and tp.compiled_inner(model) is None


def test_optimizer_step_pieces_match_step():
    model = nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), fused=True)
    assert tp.takes_scaler_handoff(opt) and not tp.has_step_hooks(opt)
    tp.set_scaler_handoff(opt, False)
    assert not tp.takes_scaler_handoff(opt)
    handle = opt.register_step_pre_hook(lambda *a: None)
    assert tp.has_step_hooks(opt)
    handle.remove()
    counters = [torch.zeros(()), torch.ones(())]
    tp.add_to_each(counters, 1)
    tp.multiply_each(counters, torch.tensor(3.0))
    assert [c.item() for c in counters] == [3.0, 6.0]
    assert tp.fused_adam_kernel(True) is not tp.fused_adam_kernel(False)
    assert tp.optimizer_scalar(torch.tensor([0.9])).dim() == 0
    tp.record_optimizer_step(opt)


def test_grad_scaler_scale_without_sync_and_restart():
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    scaler.scale(torch.ones(()))  # creates the scale tensor
    assert isinstance(tp.scale_without_sync(scaler), torch.Tensor) and tp.scale_without_sync(scaler) == 8.0
    tp.restart_scaler_step(scaler)
    assert scaler._per_optimizer_states[0]["stage"].name == "READY"


def test_a_loader_without_persistent_workers_keeps_no_iterator():
    loader = torch.utils.data.DataLoader([1, 2], batch_size=1)
    list(loader)
    assert not tp.loader_has_live_iterator(loader)
