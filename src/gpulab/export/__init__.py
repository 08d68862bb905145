"""``gpulab export`` and ``gpulab infer``: a trained run as a file a serving system loads, with proof
(``parity.py``) that it computes what the trained model computes.

``rebuild.py`` (run -> verified checkpoint -> model), ``formats/`` (one module per format), ``data.py``
(validation set or .npz, in batches), ``parity.py``, ``api.py`` (export), ``infer.py``. The optional
packages (onnx, onnxscript, onnxruntime) are imported only by the format that needs them.
"""
