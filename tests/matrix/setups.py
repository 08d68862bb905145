"""The user setups the matrix lane runs: the axes users vary, the pairs that cannot meet, and a pairwise
covering of the rest computed here (every pair of values of any two axes is in some cell).

A new axis value is one line in ``AXES`` (and, if an engine cannot take it, one line in ``NOT_WITH``); the
recipe parts that realise it live in tests/matrix/torch_parts.py and tf_parts.py under the same name.
docs/MATRIX.md is generated from these cells (scripts/matrix_table.py), never written by hand."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

AXES: dict[str, tuple[str, ...]] = {
    "engine": ("torch", "tensorflow"),
    "data": (
        "tensors",  # in-memory tensors, gpulab's fast path
        "numpy",  # NumPy arrays
        "loader",  # a map-style Dataset in the user's DataLoader, shuffled with a generator, no workers
        "loader_workers",  # the user's DataLoader: 2 workers, persistent, pin_memory
        "gpulab_workers",  # a Dataset given to gpulab's own loader with --set num_workers=2
        "iterable",  # an IterableDataset sharded over 2 workers
        "tfdata",  # a tf.data pipeline
    ),
    "batch": ("tuple", "dict", "dataclass"),
    "model": (
        "loss_fn",  # a plain module (Keras: Sequential) and a loss_fn
        "own_loss",  # the model returns its own loss (Hugging Face style)
        "multi_input",  # two inputs (Keras: functional)
        "multi_output",  # two outputs (Keras: functional, a dict of losses)
        "keras_subclassed",  # class M(keras.Model) with call()
    ),
    "accumulate": ("1", "2"),
    "schedule": ("constant", "user_scheduler"),
    "clip": ("off", "1.0"),
    "precision": ("fp32", "bf16-mixed"),
    "ranks": ("1", "2"),  # 2: gpulab launch --nproc-per-node 2 (gloo)
    "verb": ("resume", "export", "tune", "profile"),  # after train to its end, inspect and (export) infer
}

TORCH_DATA = ("tensors", "loader", "loader_workers", "gpulab_workers", "iterable")

# Pairs no cell holds, each with why: the one place incompatible (or deliberately uncovered) pairs live.
NOT_WITH: list[tuple[str, str, str]] = [
    *(("engine=tensorflow", f"data={d}", "torch data") for d in TORCH_DATA),
    ("engine=torch", "data=tfdata", "a tf.data pipeline feeds Keras"),
    ("engine=tensorflow", "batch=dataclass", "Keras takes tuples and dicts"),
    ("engine=tensorflow", "model=own_loss", "a TfRecipe names its loss_fn"),
    ("engine=torch", "model=keras_subclassed", "a Keras model"),
    ("model=own_loss", "batch=tuple", "the model reads its labels by name"),
    # Cost, not incompatibility: a 2-worker TensorFlow run is two more TensorFlow imports per cell
    # (tests/engines/tensorflow/test_tf_multiworker.py covers it).
    ("engine=tensorflow", "ranks=2", "cost: tests/engines/tensorflow/test_tf_multiworker.py"),
]


@dataclass(frozen=True)
class Cell:
    id: str
    values: tuple[tuple[str, str], ...]  # (axis, value) in AXES' order

    def __getitem__(self, axis: str) -> str:
        return dict(self.values)[axis]

    @property
    def module(self) -> str:
        """The recipe module the lane writes for this cell."""
        return self.id.replace("-", "_")


def _forbidden() -> set[frozenset[str]]:
    known = {f"{a}={v}" for a, vs in AXES.items() for v in vs}
    pairs = set()
    for a, b, _why in NOT_WITH:
        assert a in known and b in known, f"NOT_WITH names an unknown value: {a}, {b}"
        pairs.add(frozenset((a, b)))
    return pairs


def _fits(chosen: dict[str, str], axis: str, value: str, forbidden: set[frozenset[str]]) -> bool:
    return all(frozenset((f"{a}={v}", f"{axis}={value}")) not in forbidden for a, v in chosen.items())


def _completes(chosen: dict[str, str], forbidden: set[frozenset[str]]) -> bool:
    """Whether some cell holds all of ``chosen`` (a pair two constraints exclude together has none)."""
    rest = [a for a in AXES if a not in chosen]
    if not rest:
        return True
    axis = rest[0]
    return any(
        _completes({**chosen, axis: v}, forbidden) for v in AXES[axis] if _fits(chosen, axis, v, forbidden)
    )


def _pairs() -> set[tuple[tuple[str, str], tuple[str, str]]]:
    """Every pair of values of two axes that some cell can hold."""
    forbidden, names = _forbidden(), list(AXES)
    return {
        ((a, va), (b, vb))
        for a, b in itertools.combinations(names, 2)
        for va in AXES[a]
        for vb in AXES[b]
        if _completes({a: va, b: vb}, forbidden) and _fits({a: va}, b, vb, forbidden)
    }


def _gain(chosen: dict[str, str], axis: str, value: str, uncovered: set) -> int:
    """How many uncovered pairs ``axis=value`` would cover beside ``chosen``."""
    names = list(AXES)

    def pair(x: str, vx: str) -> tuple:
        return ((x, vx), (axis, value)) if names.index(x) < names.index(axis) else ((axis, value), (x, vx))

    return sum(pair(x, vx) in uncovered for x, vx in chosen.items())


def pairwise() -> list[dict[str, str]]:
    """A greedy all-pairs covering: each new row starts from the first uncovered pair and gives every other
    axis the allowed value that covers most uncovered pairs (ties: the first in AXES). Deterministic."""
    forbidden, names = _forbidden(), list(AXES)
    uncovered = _pairs()
    rows = []
    while uncovered:
        (a, va), (b, vb) = min(uncovered, key=lambda p: (names.index(p[0][0]), names.index(p[1][0]), p))
        chosen = {a: va, b: vb}
        for axis in names:
            if axis in chosen:
                continue
            allowed = [
                v
                for v in AXES[axis]
                if _fits(chosen, axis, v, forbidden) and _completes({**chosen, axis: v}, forbidden)
            ]
            assert allowed, f"no value of {axis} fits {chosen}: NOT_WITH leaves a pair uncoverable"

            gains = [_gain(chosen, axis, v, uncovered) for v in allowed]
            chosen[axis] = allowed[gains.index(max(gains))]  # the first of equal gains
        row = {axis: chosen[axis] for axis in names}
        uncovered -= {((x, row[x]), (y, row[y])) for x, y in itertools.combinations(names, 2)}
        rows.append(row)
    return rows


def cells() -> list[Cell]:
    """The lane's cells: ``t01``... on torch, ``tf01``... on TensorFlow, in the covering's order."""
    out, count = [], {"torch": 0, "tensorflow": 0}
    for row in pairwise():
        count[row["engine"]] += 1
        prefix = "t" if row["engine"] == "torch" else "tf"
        out.append(Cell(f"{prefix}{count[row['engine']]:02d}", tuple(row.items())))
    return out


def uncovered_pairs(rows: list[dict[str, str]]) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The pairs some cell could hold that no row holds (the test of the covering: none)."""
    names = list(AXES)
    seen = {((x, r[x]), (y, r[y])) for r in rows for x, y in itertools.combinations(names, 2)}
    return sorted(_pairs() - seen)
