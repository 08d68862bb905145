"""The import graph of src/gpulab keeps its layers (docs/ARCHITECTURE.md, "Layers"): no package imports one
above it, and no modules import each other in a cycle. Every import counts: at module level, inside a
function, and under ``if TYPE_CHECKING:``. A known exception is listed with why, so no new one appears.
And each engine is one folder: outside engines/torch/ no module imports torch as it loads (a listed few
aside, each with why)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gpulab"

# From the top floor down; a component may import its own floor and those below. A component is a package
# under gpulab (engines' subpackages each on their own) or a top-level module.
LAYERS = [
    ("__main__", "cli"),
    ("bench", "tune", "export", "profiling"),  # the verbs, engine-neutral: each engine's part is its own
    # the engines, one folder each; engines/__init__.py is the package (the registry's old names, deprecated)
    ("engines.torch", "engines.tensorflow", "engines"),
    # core: what every engine's loop uses; artifact: what every engine's export writes and checks (format
    # registry and helpers, the inputs, parity), so an engine's export stands on it, not on the verb
    ("core", "artifact"),
    # measure: timers, FLOPs and peaks, NVML sampling, diagnosis, and what the verbs measure on every engine:
    # bench's harness, figures, plots and suite runner; profile and inspect reports; tune's knob groups
    ("measure",),
    ("distributed",),  # process groups and launchers
    # storage, the precision table, settings (and the built-in recipes' NumPy data), __version__ and the
    # deprecation aliases of moved paths (moved.py: importlib by name, the plugin seam)
    ("checkpoint", "precisions", "config", "recipe_data", "gpulab", "moved"),
    # engine_registry: the registry and the Engine protocol (no engine imported), which config, checkpoint,
    # artifact and the verbs ask; the engines it registers (engines.torch, ...) stand above;
    # engine_capabilities: the protocols of what an engine may offer a verb (export, ...)
    # hooks: the test-only switches (GPULAB_TEST_HOOKS=1) that checkpoint/ and the torch runtime read
    # early_signals: a job's stop signals held from gpulab/__init__.py's first line (standard library only)
    # warning_filters: gpulab's quieting filters, added only where the user's -W/PYTHONWARNINGS chose none
    (
        "hardware",
        "errors",
        "redaction",
        "engine_registry",
        "engine_capabilities",
        "hooks",
        "early_signals",
        "warning_filters",
    ),
]

# Upward imports allowed as exceptions, each inside a function and with why: (importing component, imported
# component). Each engine's part of a verb lives in engines/<name>/, on the machinery below the engines
# (measure/, artifact/); the verbs reach an engine through gpulab.engine_registry.
# None left: measure/harness.py, the last, now asks the device seam it is given (measure/device_seam.py).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def component(module: str) -> str:
    parts = module.split(".")[1:]  # without "gpulab"
    if not parts:
        return "gpulab"
    if parts[0] == "engines" and len(parts) > 1:
        return f"engines.{parts[1]}"
    return parts[0]


def floor(name: str) -> int:
    for depth, members in enumerate(LAYERS):
        if name in members:
            return len(LAYERS) - depth
    raise AssertionError(f"component {name!r} is in no layer: add it to LAYERS and docs/ARCHITECTURE.md")


def modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the gpulab modules it imports. A registry that loads a built-in by name through importlib
    (engines.get, artifact.formats.get, torch's bench SUITES, the built-in recipes) adds no edge: it is
    the plugin seam, loaded when asked for."""
    mods = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                # ``from package import module`` needs the module; ``from module import name``, the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target.startswith("gpulab") and target != module:
                    graph[module].add(target)
    return graph


def test_no_component_imports_one_above_it():
    found = set()
    for module, targets in import_graph().items():
        for target in targets:
            pair = (component(module), component(target))
            if floor(pair[1]) > floor(pair[0]) and pair not in KNOWN_UPWARD:
                found.add(f"{module} -> {target}")
    assert not found, "upward imports (see LAYERS):\n" + "\n".join(sorted(found))


def test_the_known_exceptions_still_exist():
    """A fixed exception leaves the list, so it cannot come back unnoticed."""
    pairs = {(component(m), component(t)) for m, ts in import_graph().items() for t in ts}
    assert not KNOWN_UPWARD - pairs, f"no longer imported, remove from KNOWN_UPWARD: {KNOWN_UPWARD - pairs}"


def test_no_import_cycle_between_modules():
    """No module reaches itself (cycles through a listed upward import aside)."""
    graph = {
        m: {t for t in ts if (component(m), component(t)) not in KNOWN_UPWARD}
        for m, ts in import_graph().items()
    }
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def package(module: str) -> str:
    """The package under gpulab a module belongs to, subpackages included (engines/torch/ is engines'):
    importing ``gpulab.engines.torch.x`` runs ``gpulab/engines/__init__.py`` first."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gpulab"


def test_no_import_cycle_between_packages():
    """No package reaches itself through others: a package's modules, its subpackages' and its
    ``__init__`` are one node (Python runs the parents' ``__init__`` of every module it imports). The
    registry once sat in engines/__init__.py, asked by config, checkpoint and artifact, which engines/torch/
    imports: a cycle the module graph did not show."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        graph[package(module)] |= {package(t) for t in targets if package(t) != package(module)}
    graph.pop("gpulab", None)  # gpulab/__init__.py: the public names, each loaded on first use by name
    graph = {m: ts - {"gpulab"} for m, ts in graph.items()}
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, "import cycles between packages:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in cycles
    )


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deeper than Python's recursion limit allows for)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in list(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                out.append(comp)
    return out


# Modules outside engines/torch/ that may import torch at module level, each with why: none now (artifact/
# data.py imports it in the functions that make tensors; the torch checkpoint state's checks and RNG state
# live in engines/torch/state/). A new one fails the test below.
TORCH_AT_MODULE_LEVEL: set[str] = set()


def _module_level_imports(body: list[ast.stmt]) -> list[str]:
    """What a module imports as it loads: its top level, inside ``try``/``if`` (not ``if TYPE_CHECKING:``),
    never inside a function or class."""
    out = []
    for node in body:
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            out += _module_level_imports(node.body) + _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            out += _module_level_imports(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                out += _module_level_imports(handler.body)
    return out


def _imports_torch_at_module_level() -> set[str]:
    found = set()
    for module, path in modules().items():
        names = _module_level_imports(ast.parse(path.read_text()).body)
        if any(name == "torch" or name.startswith("torch.") for name in names):
            found.add(module)
    return found


def test_torch_is_imported_at_module_level_only_under_engines_torch():
    """Each engine one folder: torch's code lives in engines/torch/; elsewhere torch is imported inside the
    function that runs it (the torch engine's object, a verb's torch side), so a TensorFlow run loads none."""
    outside = {m for m in _imports_torch_at_module_level() if not m.startswith("gpulab.engines.torch")}
    new = outside - TORCH_AT_MODULE_LEVEL
    assert not new, "import torch inside engines/torch/ (or inside a function):\n" + "\n".join(sorted(new))
    gone = TORCH_AT_MODULE_LEVEL - outside
    assert not gone, f"no longer imports torch at module level, remove from TORCH_AT_MODULE_LEVEL: {gone}"


def test_the_torch_engine_stands_on_core():
    """engines/torch/ is the loop's engine over the neutral core (callbacks, run state, run dir, recipes):
    it imports core, and core imports no engine (the layers above forbid it)."""
    graph = import_graph()
    torch_side = {t for m, ts in graph.items() if m.startswith("gpulab.engines.torch") for t in ts}
    assert any(t.startswith("gpulab.core.") for t in torch_side)
