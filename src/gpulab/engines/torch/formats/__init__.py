"""The torch engine's export formats, one module each (``gpulab.artifact.formats`` finds them by name)."""
