"""The torch engine's loop: the Trainer and its step helpers, its checkpoints and ``gpulab train``'s run.

What the engine object (``gpulab.engines.torch``) says of it is defined here, so that the Trainer needs no
import of the engine object (which reaches back into train/ when a verb asks it).
"""

NAME = "torch"  # this engine's name in the registry (gpulab.engine_registry)
THREADS_HINT = ", and torch's threads wait for each other (OMP_NUM_THREADS=1 suffers less)"
