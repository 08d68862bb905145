"""The neutral core every engine's loop stands on: callbacks, run state, run directory, signals, summary."""
