"""Whether TensorFlow can read a checkpoint's own files (``ckpt.index`` + ``ckpt.data-*``), asked before a
resume restores anything and by ``gpulab checkpoint inspect``.

A MANIFEST vouches for bytes, not for their meaning: one rewritten over a truncated ``ckpt.index`` verifies,
and TensorFlow then fails deep inside ``restore`` with a long traceback. Reading every tensor here checks
what the MANIFEST cannot: the index's table format and each tensor's offset, size and crc32c in its data
shard, so a damaged checkpoint is one line and a resume falls back to the previous one.
"""

from __future__ import annotations

from pathlib import Path

from gpulab.checkpoint.io import one_line
from gpulab.engines.tensorflow.checkpoint_layout import TF_PREFIX


def unreadable(directory: Path) -> str | None:
    """Why TensorFlow cannot read ``directory``'s checkpoint files (one line), or None when it can."""
    from gpulab.engines.tensorflow.importing import require_tensorflow

    tf = require_tensorflow()
    prefix = str(directory / TF_PREFIX)
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_dtype_map():
            reader.get_tensor(name)  # the bytes, their size and crc32c against the index
    except Exception as exc:  # tf.errors.DataLossError, OutOfRangeError, ... from a damaged file
        return f"{prefix}.index/.data-*: TensorFlow cannot read them ({one_line(exc)})"
    return None
