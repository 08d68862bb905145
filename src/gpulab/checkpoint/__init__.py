"""Checkpoint storage shared by both engines: atomic directories, the MANIFEST, safe formats, resume.

A checkpoint is ``ROOT/step-NNNNNNNN/`` committed atomically, with ``ROOT/latest`` naming the newest
complete one. Which engine wrote it is the MANIFEST's layout (``full``, ``sharded``, ``tensorflow``);
*what* goes inside is each engine's choice (``engines/torch/train/checkpointing.py``,
``engines/tensorflow/checkpoints.py``).

- ``io``: durable file operations, the MANIFEST, the directory names and layouts (stdlib only)
- ``read`` / ``save``: finding and deserialising a checkpoint safely; the atomic commit and pruning
- ``contents``: what ``state.pt`` and the safetensors file may hold (``save`` checks a torch state with it)
- ``rng``: the random generators' state a checkpoint keeps for exact resume
- the torch-format functions (``save_checkpoint``, ``load_checkpoint``, ``inspect_checkpoint``, ...) and
  FSDP2's sharded checkpoints are the torch engine's: ``gpulab.engines.torch.checkpoint``
- ``locate``: the checkpoint a resume starts from, verified by every rank; ``refuse``: the resume refusal

This file imports nothing, so ``import gpulab.checkpoint`` loads neither torch nor TensorFlow; no module
here imports TensorFlow.
"""
