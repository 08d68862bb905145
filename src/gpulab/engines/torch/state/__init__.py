"""The torch engine's state, captured into and restored from a checkpoint on the shared storage
(``gpulab.checkpoint``, which knows nothing of torch; when the Trainer saves and resumes is
``engines/torch/train/saving.py``): ``api`` (the torch-format functions: ``save_checkpoint``,
``load_checkpoint``, ``inspect_checkpoint``, ``export_weights``, ...),
``sharded`` / ``dcp_safe`` (FSDP2 shards through ``torch.distributed.checkpoint``, read without
unpickling), ``contents`` (what a ``state.pt`` may hold, checked before saving) and ``rng`` (the random
generators' state kept for an exact resume)."""
