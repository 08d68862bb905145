"""``gpulab export`` and ``gpulab infer``: a trained run as a file a serving system loads, with proof
(``parity.py``) that it computes what the trained model computes.

``api.py`` (export: the request checked, then the run's engine exports it) and ``infer.py``. The formats
are each engine's (engines/<name>/formats/, found through ``artifact/formats.py``); the inputs and the
parity check are ``gpulab.artifact``'s. The optional packages (onnx, onnxscript, onnxruntime) are imported
only by the format that needs them.
"""
