"""What every engine's export writes and checks, below the engines: the format registry (``formats``), the
helpers the format modules share (``format_base``), the inputs an artifact is traced with and checked on
(``data``), and the parity check against the eager model (``parity``). The format modules themselves are
each engine's (engines/<name>/formats/)."""
