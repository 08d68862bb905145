"""Checkpoint storage shared by both engines: atomic directories, the MANIFEST, safe formats, resume.

A checkpoint is ``ROOT/step-NNNNNNNN/`` committed atomically, with ``ROOT/latest`` naming the newest
complete one. Which engine wrote it is the MANIFEST's layout (``full``, ``sharded``, ``tensorflow``);
*what* goes inside is each engine's choice (``train/checkpointing.py``,
``engines/tensorflow/checkpoints.py``).

- ``io``: durable file operations, the MANIFEST, the directory names and layouts (stdlib only)
- ``read`` / ``save``: finding and deserialising a checkpoint safely; the atomic commit and pruning
- ``api``: the torch-format functions (``save_checkpoint``, ``load_checkpoint``, ``inspect_checkpoint``,
  ``export_weights``, ...); ``contents``: what ``state.pt`` and the safetensors file may hold
- ``rng``: the random generators' state a checkpoint keeps for exact resume
- ``sharded`` / ``dcp_safe``: FSDP2 shards through ``torch.distributed.checkpoint``, read without unpickling
- ``locate``: the checkpoint a resume starts from, verified by every rank; ``refuse``: the resume refusal

This file imports nothing, so ``import gpulab.checkpoint`` loads neither torch nor TensorFlow; no module
here imports TensorFlow.
"""
