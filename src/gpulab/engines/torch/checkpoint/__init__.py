"""The torch engine's checkpoints on the shared storage (gpulab.checkpoint): ``api`` (the torch-format
functions: ``save_checkpoint``, ``load_checkpoint``, ``inspect_checkpoint``, ``export_weights``, ...),
``sharded`` / ``dcp_safe`` (FSDP2 shards through ``torch.distributed.checkpoint``, read without
unpickling), ``contents`` (what a ``state.pt`` may hold, checked before saving) and ``rng`` (the random
generators' state kept for an exact resume)."""
