"""A stop request every TensorFlow worker agrees on (preemption), carried by the step's own all-reduce.

With several workers, a SIGTERM reaches them at different moments, yet they must stop after the same step:
the final checkpoint is written by all of them together. Each worker's request is a variable the step
reads; the step sums it over the replicas in the same ``strategy.reduce`` as the loss (the two stacked:
one collective, as before). The host reads a step's sum one step later: that step has finished by then (on
a GPU the host waits only for the previous step, as torch's ``Runtime.lagged_flag``), and every worker reads
the same sum after the same step, so they stop together. One process alone needs none of this: it reads
its own ``SignalWatch``.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class StopFlag:
    def __init__(self, tf: Any) -> None:
        self._tf = tf
        self.variable = tf.Variable(0.0, trainable=False, dtype=tf.float32, name="gpulab_stop")
        self._asked = False
        self._sums: deque[Any] = deque(maxlen=2)  # the last two steps' summed requests (tensors)

    def fold(self, loss: Any) -> Any:
        """Inside the replica's step: the loss and this worker's request, as one tensor to reduce."""
        tf = self._tf
        return tf.stack([tf.cast(loss, tf.float32), tf.identity(self.variable)])

    def record(self, summed: Any) -> None:
        """On the host after each step: the step's summed request (a tensor, not read here)."""
        self._sums.append(summed)

    def lagged(self, asked: bool) -> bool:
        """Record this worker's request (read by the next step); whether any worker had asked by the
        step before this one (the same answer on every worker)."""
        if asked and not self._asked:
            self.variable.assign(1.0)
            self._asked = True
        if len(self._sums) < 2:
            return False
        return bool(self._sums[0].numpy() > 0)
