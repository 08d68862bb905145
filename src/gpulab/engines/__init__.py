"""The training engines gpulab runs on, one sub-package each (``engines/tensorflow/``; the torch engine's
code still lives in ``train/`` and ``runtime/``). Each engine is imported only when a run asks for it."""
