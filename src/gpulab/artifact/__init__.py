"""What every engine's export writes and checks, below the engines: the format registry (``formats``), the
inputs an artifact is traced with and checked on (``data``), and the parity check against the eager model
(``parity``). The format modules themselves are each engine's (engines/<name>/formats/; the torch formats'
shared helpers are ``engines/torch/formats/base.py``)."""
