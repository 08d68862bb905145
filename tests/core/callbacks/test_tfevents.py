"""gpulab's event file writer (tfevents.py) writes the bytes TensorBoard's protobuf and record writer would,
and TensorBoard's own loader reads its files back."""

from __future__ import annotations

import math
import sys
import types

import pytest

from gpulab.core.callbacks import tfevents

sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))  # no TF here
event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboard.compat.proto.summary_pb2")


def test_crc32c_is_castagnolis_and_masked_as_tensorboard_masks_it():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    assert tfevents.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    for data in (b"", b"\x00" * 8, bytes(range(256)), b"gpulab"):
        assert tfevents.masked_crc32c(data) == masked_crc32c(data)


def test_records_are_framed_as_tensorboards_record_writer_frames_them():
    import io

    from tensorboard.summary.writer.record_writer import RecordWriter

    theirs = io.BytesIO()
    RecordWriter(theirs).write(b"an event's bytes")
    assert tfevents.record(b"an event's bytes") == theirs.getvalue()


@pytest.mark.parametrize(
    ("step", "values"),
    [
        (0, {"loss": 0.5}),  # proto3 leaves a zero step out
        (7, {"loss": 0.25, "lr": 1e-3, "val/accuracy": 0.0}),  # a zero value is kept (a oneof)
        (2**40, {"run/samples_per_s": 2493.0}),
        (-3, {"loss": 1.0}),  # a negative int64: ten bytes of varint
        (1, {"loss": 1e40, "neg": -1e40, "nan": math.nan, "inf": math.inf}),  # float32's range: infinity
        (300, {"ünïcode tag": 2.0}),
    ],
)
def test_a_scalars_event_is_the_bytes_tensorboards_protobuf_writes(step, values):
    expected = event_pb2.Event(
        wall_time=1764355200.25,
        step=step,
        summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]
        ),
    ).SerializeToString()
    assert tfevents.scalars_event(1764355200.25, step, values) == expected


def test_the_file_opens_with_tensorboards_first_event_and_its_loader_reads_every_scalar(tmp_path):
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    writer = tfevents.EventFile(tmp_path / "tb")
    writer.add_scalars(5, {"loss": 0.5, "lr": 0.125})
    writer.flush()  # readable before the file is closed
    events = list(LegacyEventFileLoader(str(writer.path)).Load())
    assert events[0].file_version == "brain.Event:2" and events[0].step == 0
    assert [(e.step, {v.tag: v.simple_value for v in e.summary.value}) for e in events[1:]] == [
        (5, {"loss": 0.5, "lr": 0.125})
    ]
    writer.add_scalars(6, {"loss": 0.25})
    writer.close()
    assert [e.step for e in LegacyEventFileLoader(str(writer.path)).Load()] == [0, 5, 6]
    assert writer.path.name.startswith("events.out.tfevents.")
    second = tfevents.EventFile(tmp_path / "tb")  # the same second, the same process: another file
    second.close()
    assert second.path != writer.path
