"""The neutral core every engine's loop stands on: callbacks, run state, run directory, signals, summary,
recipes' loading and trust. Imports no framework."""
