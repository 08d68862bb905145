"""The words of the diagnosis's fixes (``diagnosis.py``), and the settings each fix names: ``Advice``.

A fix is advice the user acts on, so it names only what the engine that ran takes, and each engine's words
are its own (its ``diagnosis`` capability, ``engines/<name>/diagnosis_advice.py``: torch's DataLoader
workers and torch.compile, TensorFlow's tf.data cache and XLA; a TensorFlow run was once advised
``--set num_workers=N``, which it refuses, and a NumPy-engine run torch's workers). An engine without that
capability is advised in ``NEUTRAL``'s words, which name only settings every engine shares. Each phrase
comes with the settings it names, so a test can put every one through the engine's validation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpulab import engine_registry as engines

Fix = tuple[str, dict[str, Any]]  # the words, the settings they name


@dataclass(frozen=True)
class Advice:
    compile: str  # how to compile the step, with its flag
    host_sync: str  # the calls that wait for the device inside a step
    input: Callable[[bool], Fix]  # on a GPU (True) or the CPU
    communication: Fix
    fewer_launches: Callable[[bool], Fix]  # compiled already (True) or not
    capacity: Fix  # free memory (after a lower precision, which diagnosis.py adds)
    scale_out: Fix  # more devices
    threads_hint: str = ""  # the busy-machine note's words on the engine's own CPU threads (hardware.load)


# An engine without a diagnosis capability: words that name no framework, settings every engine shares.
NEUTRAL = Advice(
    compile="a compiled step (--compile)",
    host_sync="reading values back to the host",
    input=lambda on_gpu: ("feed faster: load and decode samples ahead of the step, alongside compute", {}),
    communication=(
        "more work per collective: a larger batch per rank or gradient accumulation (--accumulate N)",
        {"accumulate": 4},
    ),
    fewer_launches=lambda compiled: ("fewer, larger steps", {}),
    capacity=(
        "a smaller batch (--batch-size) with gradient accumulation (--accumulate N: the same effective "
        "batch)",
        {"batch_size": 32, "accumulate": 2},
    ),
    scale_out=("more devices", {}),
)


def advice_for(engine: str | None) -> Advice:
    """The words of the engine called ``engine`` (None: the default engine's)."""
    return engines.offered(engines.get(engine), "diagnosis") or NEUTRAL
