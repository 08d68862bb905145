"""The TensorFlow engine's checkpoint layout (MANIFEST ``layout: tensorflow``): variables, optimizer and
step in a ``tf.train.Checkpoint`` (``ckpt.index`` + its data shards), the host-side progress in meta.json.
Imports no TensorFlow: the engine object names it."""

from __future__ import annotations

import re
from collections.abc import Collection

from gpulab.checkpoint.io import META
from gpulab.engine_registry import CheckpointLayout

TF_LAYOUT = "tensorflow"
TF_PREFIX = "ckpt"  # tf.train.Checkpoint.write(DIR/ckpt) -> ckpt.index + ckpt.data-*
_TF_SHARD = re.compile(rf"^{TF_PREFIX}\.data-\d{{5}}-of-(\d{{5}})$")


def tf_data_shards(names: Collection[str]) -> list[str]:
    """The ``ckpt.data-*`` shard files a TensorFlow checkpoint with these files must hold: each listed
    shard names the count (``-of-NNNNN``); none listed means the one shard ``-00000-of-00001``."""
    counts = {int(m.group(1)) for n in names if (m := _TF_SHARD.match(n))} or {1}
    return [f"{TF_PREFIX}.data-{i:05d}-of-{count:05d}" for count in sorted(counts) for i in range(count)]


LAYOUTS = {TF_LAYOUT: CheckpointLayout((f"{TF_PREFIX}.index", META), implied=tf_data_shards)}
