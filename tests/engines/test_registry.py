"""The engine registry: one engine object per name, each loaded only when asked for; no verb compares an
engine's name; a run of one engine never imports the other engine's framework."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tf_numpy_recipe import NUMPY_RECIPE

from gpulab import engine_registry as engines
from gpulab.errors import ConfigError

SRC = Path(__file__).resolve().parents[2] / "src" / "gpulab"
HAS_TF = importlib.util.find_spec("tensorflow") is not None


def test_an_unknown_engine_is_one_line_naming_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        engines.get("jax")
    assert str(err.value) == f"unknown engine 'jax'; valid: {'|'.join(engines.names())}"


def test_a_checkpoint_layout_names_the_engine_that_reads_it():
    assert [engines.for_layout(x).name for x in ("full", "sharded", "tensorflow")] == [
        "torch",
        "torch",
        "tensorflow",
    ]
    with pytest.raises(ConfigError) as err:
        engines.for_layout("jax")
    assert str(err.value) == f"checkpoint layout 'jax' is no engine's; valid: {'|'.join(engines.layouts())}"


def test_the_registrys_old_path_hands_its_names_over_with_one_warning():
    """The registry moved out of engines/ (gpulab.engine_registry); a plugin's ``gpulab.engines.register``
    still works for a release, and says where it lives now."""
    import gpulab.engines
    from gpulab.moved import MovedWarning

    with pytest.warns(
        MovedWarning, match=r"gpulab\.engines\.register is deprecated.*gpulab\.engine_registry"
    ):
        assert gpulab.engines.register is engines.register
    with pytest.raises(AttributeError, match="no attribute 'jax'"):
        gpulab.engines.jax  # noqa: B018


@pytest.mark.parametrize("name", engines.names())
def test_every_engine_offers_what_the_verbs_ask(name):
    engine = engines.get(name)
    assert engine.name == name
    wanted = set(engines.Engine.__annotations__) | {
        n for n, v in vars(engines.Engine).items() if callable(v) and not n.startswith("_")
    }
    missing = sorted(n for n in wanted if not hasattr(engine, n))
    assert not missing, f"engine {name} lacks {missing}"


def test_no_verb_compares_an_engine_name():
    """Outside engines/ (and config's list of names) the engine is asked of the registry, never compared."""
    found = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("engines/") or rel.startswith("config/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and _names_an_engine(node):
                found.append(f"{rel}:{node.lineno}")
    assert not found, f"engine-name comparisons outside engines/: {found}"


def _names_an_engine(node: ast.Compare) -> bool:
    sides = [node.left, *node.comparators]
    if any(_is_sys_modules(s) for s in sides):
        return False  # "is this module loaded", not "which engine"
    for side in sides:
        if isinstance(side, ast.Constant) and side.value in engines.names():
            return True
        if isinstance(side, (ast.Tuple, ast.List, ast.Set)) and any(
            isinstance(e, ast.Constant) and e.value in engines.names() for e in side.elts
        ):
            return True
    return False


def _is_sys_modules(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules"


def _train_and_list_modules(tmp_path: Path, recipe: str, *args: str) -> str:
    """``gpulab train RECIPE ARGS`` in a fresh interpreter, then which framework modules it had loaded."""
    argv = ["gpulab", "train", recipe, "--max-steps", "2", "--out", str(tmp_path / "run"), *args]
    argv += ["--set", "progress=false"]
    (loaded,) = _list_modules(tmp_path, [argv])
    assert (tmp_path / "run" / "summary.json").exists()
    return loaded


_FRAMEWORKS = ("torch", "tensorflow", "gpulab.engines.torch", "gpulab.engines.tensorflow")


def _list_modules(cwd: Path, commands: list[list[str]]) -> list[list[str]]:
    """Each gpulab command in turn in one fresh interpreter; after each, which framework modules the
    interpreter has loaded so far (so a module first seen after command N was loaded by command N)."""
    # main(), not the console entry: a command may end its process without teardown (cli/ending.py: tune)
    code = (
        "import sys\n"
        "from gpulab.cli import main\n"
        f"for argv in {commands!r}:\n"
        "    code = main(argv[1:])\n"
        "    assert not code, (argv, code)\n"
        f"    print('LOADED', *(n for n in {_FRAMEWORKS!r} if n in sys.modules), flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("LOADED")]


def test_a_torch_run_loads_neither_tensorflow_nor_its_engine(tmp_path):
    loaded = _train_and_list_modules(tmp_path, "mlp", "--set", "options.samples=200")
    assert "torch" in loaded
    assert "tensorflow" not in loaded and "gpulab.engines.tensorflow" not in loaded


# The TensorFlow engine's verbs, each after the one before in one interpreter (one TensorFlow import for
# all): a command that loaded torch or the torch engine shows it in its own line and every line after.
TF_COMMANDS = {
    "train-own-recipe": ["train", "np_recipe:build", "--engine", "tensorflow", "--out", "own"],
    "train": ["train", "mlp", "--engine", "tensorflow", "--set", "options.samples=200", "--out", "run"],
    "checkpoint-inspect": ["checkpoint", "inspect", "run", "--json"],
    "export": ["export", "run", "--format", "savedmodel"],
    "inspect": ["inspect", "mlp", "--engine", "tensorflow", "--set", "options.samples=200"],
    "profile": [
        "profile",
        "mlp",
        "--engine",
        "tensorflow",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--active",
        "1",
        "--set",
        "options.samples=200",
        "--out",
        "profile",
    ],
    "tune": [
        "tune",
        "mlp",
        "--engine",
        "tensorflow",
        "--device",
        "cpu",
        "--budget",
        "10",
        "--steps",
        "4",
        "--set",
        "options.samples=200",
        "--out",
        "tune",
    ],
    "bench": ["bench", "matmul", "--engine", "tensorflow", "--smoke", "--device", "cpu", "--out", "bench"],
}  # fmt: skip (doctor checks torch where it is installed; without it, tests/tf_only/ runs it)
_TRAIN = ["--max-steps", "2", "--set", "progress=false"]


@pytest.fixture(scope="module")
def tf_session(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """The directory the TensorFlow commands ran in, and the framework modules loaded after each."""
    cwd = tmp_path_factory.mktemp("tf-verbs")
    (cwd / "np_recipe.py").write_text(NUMPY_RECIPE)
    commands = [["gpulab", *argv, *(_TRAIN if argv[0] == "train" else [])] for argv in TF_COMMANDS.values()]
    return cwd, dict(zip(TF_COMMANDS, _list_modules(cwd, commands), strict=True))


def no_torch(loaded: list[str]) -> bool:
    return "torch" not in loaded and "gpulab.engines.torch" not in loaded


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_tensorflow_run_loads_neither_torch_nor_its_engine(tf_session):
    cwd, loaded = tf_session
    assert "tensorflow" in loaded["train-own-recipe"]  # the first command: TensorFlow is its own import
    assert no_torch(loaded["train-own-recipe"])
    assert (cwd / "own" / "summary.json").exists()


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_checkpoint_inspect_of_a_tensorflow_run_loads_no_torch(tf_session):
    """`gpulab checkpoint inspect` reads the storage and meta.json itself and asks the engine of the
    MANIFEST's layout for the rest: a TensorFlow checkpoint's files are read by TensorFlow (as its resume
    reads them: a truncated ckpt.data once passed as valid), never by torch."""
    assert "torch" not in tf_session[1]["checkpoint-inspect"]


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_tensorflow_run_of_a_built_in_recipe_loads_no_torch(tf_session):
    cwd, loaded = tf_session
    assert no_torch(loaded["train"]) and (cwd / "run" / "summary.json").exists()


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("verb", ["export", "inspect", "profile"])
def test_the_tensorflow_engines_verbs_load_no_torch(tf_session, verb):
    """export of a TensorFlow run (parity checked in NumPy), inspect and profile: no torch."""
    cwd, loaded = tf_session
    assert no_torch(loaded[verb])
    assert "tensorflow" in loaded[verb]
    if verb == "export":
        assert (cwd / "run" / "export" / "mlp.savedmodel.parity.json").exists()
    if verb == "profile":
        assert (cwd / "profile" / "profile.json").exists()


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_tensorflow_bench_loads_no_torch_in_its_process(tf_session):
    """``gpulab bench --engine tensorflow``: device, environment and harness without torch here (the
    suites run in the TensorFlow worker process)."""
    cwd, loaded = tf_session
    assert no_torch(loaded["bench"])
    doc = json.loads((cwd / "bench" / "results.json").read_text())
    assert doc["suites"]["tf-matmul"]["status"] == "ok", doc["suites"]["tf-matmul"]
    assert doc["environment"]["bench_device"] == "cpu" and "tensorflow" in doc["environment"]


HIDE_TORCH = """
import runpy, sys
class HideTorch:  # as if torch were not installed (scripts/without_torch.py)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name="torch")
sys.meta_path.insert(0, HideTorch())
sys.argv = ["worker", sys.argv[1]]
runpy.run_module("gpulab.engines.tensorflow.bench.worker", run_name="__main__")
"""


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_the_tensorflow_bench_worker_runs_every_suite_without_torch(tmp_path):
    """The worker process (every TensorFlow suite, smoke sizes) where torch cannot be imported: its
    sweeps, sizes, tables and plots come from measure/, its device is a ``DeviceName``."""
    from gpulab.engines.tensorflow.bench import TF_PREFIX, TF_SUITES
    from gpulab.engines.tensorflow.bench.worker import RESULT_FILE

    spec = {"profile": "smoke", "device": "cpu", "warmup": 1, "repeats": 2, "memory_limit_bytes": None}
    spec |= {"threads": None, "suites": list(TF_SUITES), "out": str(tmp_path)}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-c", HIDE_TORCH, str(tmp_path / "spec.json")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    suites = json.loads((tmp_path / RESULT_FILE).read_text())["suites"]
    for name in TF_SUITES:
        assert suites[TF_PREFIX + name]["status"] == "ok", (name, suites[TF_PREFIX + name]["notes"])


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_tensorflow_tune_loads_no_torch(tf_session):
    """``gpulab tune --engine tensorflow``: the search, its trials and the knob rules (the CPU's native
    dtypes) without torch."""
    cwd, loaded = tf_session
    assert no_torch(loaded["tune"])
    doc = json.loads((cwd / "tune" / "tune.json").read_text())
    assert doc["engine"] == "tensorflow" and doc["trials"][0]["status"] == "ok", doc["trials"][0]
