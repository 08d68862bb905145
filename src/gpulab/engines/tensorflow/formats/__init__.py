"""The TensorFlow engine's export formats, one module each (``gpulab.artifact.formats`` finds them)."""
