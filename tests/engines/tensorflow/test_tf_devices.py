"""Device and memory settings on TensorFlow's GPU path, against a recording stand-in for ``tf.config``
(this CPU machine has no GPU; the CPU path and the logical-CPU read-back run on real TensorFlow in
test_tf_engine.py). Checks what gpulab asks TensorFlow for, and what it reads back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpulab.engines.tensorflow.devices import configure_memory, device_name
from gpulab.errors import DeviceError


class FakeConfig:
    """The slice of ``tf.config`` devices.py uses, keeping what was set so it can be read back."""

    def __init__(self, gpus: int, total_bytes: int = 16 * 2**30, initialised: bool = False) -> None:
        self.gpus = [f"GPU{i}" for i in range(gpus)]
        self.growth: dict[str, bool] = {}
        self.logical: dict[str, list] = {}
        self.total = total_bytes
        self.initialised = initialised
        self.experimental = SimpleNamespace(
            set_memory_growth=self._set_growth,
            get_memory_growth=lambda g: self.growth.get(g, False),
            get_device_details=lambda g: {"memory_limit": self.total},
        )
        self.LogicalDeviceConfiguration = lambda memory_limit=None: SimpleNamespace(memory_limit=memory_limit)

    def list_physical_devices(self, kind: str) -> list:
        return self.gpus if kind == "GPU" else ["CPU0"]

    def _set_growth(self, gpu, on):
        if self.initialised:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.growth[gpu] = on

    def set_logical_device_configuration(self, gpu, configs):
        self.logical[gpu] = configs

    def get_logical_device_configuration(self, gpu):
        return self.logical.get(gpu)


def fake_tf(**kw) -> SimpleNamespace:
    return SimpleNamespace(config=FakeConfig(**kw))


def test_device_names_follow_torchs_spelling():
    assert device_name(fake_tf(gpus=0), "auto") == "/CPU:0"
    assert device_name(fake_tf(gpus=2), "auto") == "/GPU:0"
    assert device_name(fake_tf(gpus=2), "cuda:1") == "/GPU:1"
    assert device_name(fake_tf(gpus=2), "cpu") == "/CPU:0"
    with pytest.raises(DeviceError, match=r"TensorFlow sees 1 GPU\(s\); use cpu or one of cuda:0"):
        device_name(fake_tf(gpus=1), "cuda:3")


def test_growth_on_every_gpu_by_default():
    tf = fake_tf(gpus=2)
    applied = configure_memory(tf, "/GPU:0", None)
    assert tf.config.growth == {"GPU0": True, "GPU1": True}
    assert applied == {"memory_growth": True, "memory_limit_mb": None}


@pytest.mark.parametrize(("limit", "mb"), [(3 * 2**30, 3072), (0.25, 4096)])
def test_memory_limit_becomes_a_logical_device_of_that_size(limit, mb):
    tf = fake_tf(gpus=2)
    applied = configure_memory(tf, "/GPU:1", limit)
    assert applied == {"memory_growth": False, "memory_limit_mb": mb}  # a fixed size: no growth on it
    assert tf.config.growth == {"GPU0": True}  # the others still grow


def test_on_the_cpu_nothing_is_set():
    tf = fake_tf(gpus=0)
    assert configure_memory(tf, "/CPU:0", 2**30) == {"memory_growth": None, "memory_limit_mb": None}


def test_settings_after_tensorflow_initialised_its_gpus_are_one_line():
    with pytest.raises(DeviceError, match="initialised before gpulab could set memory growth"):
        configure_memory(fake_tf(gpus=1, initialised=True), "/GPU:0", None)
