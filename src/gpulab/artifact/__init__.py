"""What every engine's export writes and checks, below the engines: the format registry (``formats``), the
inputs an artifact is traced with and checked on (``data``; NumPy's in ``arrays``, checked against an
artifact's declared inputs in ``input_check``), the parity check against the eager model (``parity``), the
sidecar and ``ExportResult`` (``sidecar``), the atomic write (``atomic``), which runtime loads an artifact
(``loader_choice``) and what a run directory recorded (``run_record``).
The format modules themselves are each engine's (engines/<name>/formats/; the torch formats'
shared helpers are ``engines/torch/formats/base.py``)."""
