"""Checkpoint storage shared by both engines: atomic directories, the MANIFEST, safe formats, resume.

A checkpoint is ``ROOT/step-NNNNNNNN/`` committed atomically, with ``ROOT/latest`` naming the newest
complete one. Which engine wrote it is the MANIFEST's layout (``full``, ``sharded``, ``tensorflow``);
*what* goes inside is each engine's choice (``engines/torch/train/saving.py``,
``engines/tensorflow/checkpoints.py``).

- ``io``: durable file operations, the MANIFEST, the directory names and layouts (stdlib only)
- ``read`` / ``save``: finding and deserialising a checkpoint safely; the atomic commit and pruning
- ``inspect``: the storage's report (files and checksums) that ``gpulab checkpoint inspect`` starts from
- ``locate``: the checkpoint a resume starts from, verified by every rank; ``refuse``: the resume refusal
- the torch format (``save_checkpoint``, ``load_checkpoint``, ...), what its ``state.pt`` may hold
  (``contents``), the RNG state it keeps (``rng``) and FSDP2's sharded checkpoints are the torch
  engine's: ``gpulab.engines.torch.state``

No module here imports torch as it loads (``read`` and ``save`` import it to read or write a torch state)
or TensorFlow.
"""
