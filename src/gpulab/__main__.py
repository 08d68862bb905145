from gpulab.cli import entry

entry()
