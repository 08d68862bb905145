"""The torch engine's checkpoint layouts (MANIFEST ``layout``): what each must hold. Imports no torch: the
engine object names them."""

from __future__ import annotations

from gpulab.checkpoint.io import META, STATE, WEIGHTS
from gpulab.engine_registry import CheckpointLayout

DCP_METADATA = ".metadata"  # torch.distributed.checkpoint's index of the shard files
# "full": the whole model in safetensors (written by rank 0); "sharded": every rank's shard through
# torch.distributed.checkpoint (FSDP2), next to the same state.pt and meta.json.
LAYOUTS = {
    "full": CheckpointLayout((WEIGHTS, STATE, META)),
    "sharded": CheckpointLayout((DCP_METADATA, STATE, META)),
}
