"""The torch engine's process groups: ``process_group`` (how we were launched, the default group, teardown)
and ``watchdog`` (stalled collectives: every rank stops within the timeout and says who stalled where).
The launchers and cluster templates, which import no torch at module level, are gpulab.distributed."""
