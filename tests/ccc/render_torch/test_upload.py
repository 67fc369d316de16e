"""The renderer's uploads: a batch's host tables reach the device in one copy with their dtypes, shapes and bits;
every copy to a CUDA device starts from page-locked memory."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from ccc.render_torch import _upload
from ccc.render_torch._upload import (
    BatchUpload,
    copies_beside_compute,
    host_buffer,
    pinned_for,
    to_device,
    upload_tables,
)


def test_tables_keep_their_values_bit_for_bit():
    floats = np.array([[0.1, -0.0, np.inf], [np.nan, 5e-324, -1.5]])
    integers = np.array([-(2**63), 2**63 - 1, 7], dtype=np.int64)
    small = np.arange(6, dtype=np.int32).reshape(2, 3)
    flags = np.array([True, False, True])
    uploaded = upload_tables(torch.device("cpu"), floats, integers, small, flags)
    assert [table.dtype for table in uploaded] == [torch.float64, torch.int64, torch.int64, torch.bool]
    assert torch.equal(uploaded[0].view(torch.int64), torch.from_numpy(floats.view(np.int64)))
    assert torch.equal(uploaded[1], torch.from_numpy(integers))
    assert torch.equal(uploaded[2], torch.from_numpy(small).to(torch.int64))
    assert torch.equal(uploaded[3], torch.from_numpy(flags))


def test_float_tables_arrive_as_float32_when_asked():
    floats = np.array([[0.1, 1 / 3], [-2.5, 1e-40]])
    integers = np.array([3, -4], dtype=np.int64)
    single, whole = upload_tables(torch.device("cpu"), floats, integers, float_dtype=torch.float32)
    assert single.dtype == torch.float32 and single.shape == (2, 2)
    assert torch.equal(single, torch.from_numpy(floats.astype(np.float32)))
    assert torch.equal(whole, torch.from_numpy(integers))
    with pytest.raises(ValueError, match="float_dtype must be torch.float64 or torch.float32, got torch.float16"):
        upload_tables(torch.device("cpu"), floats, float_dtype=torch.float16)


def test_tables_land_on_the_device_with_their_shapes():
    uploaded = upload_tables(torch.device("meta"), np.zeros((2, 3)), np.ones(4, dtype=bool))
    assert [(table.shape, table.device.type) for table in uploaded] == [((2, 3), "meta"), ((4,), "meta")]


def test_other_dtypes_are_refused():
    with pytest.raises(ValueError, match="tables must be float64, integer or bool, got float32"):
        upload_tables(torch.device("cpu"), np.zeros(3, dtype=np.float32))


def test_copies_to_cuda_start_from_page_locked_memory(monkeypatch: pytest.MonkeyPatch):
    assert [pinned_for(torch.device(name)) for name in ("cuda", "cuda:1", "cpu", "meta")] == [True, True, False, False]
    asked = []
    monkeypatch.setattr(torch, "empty", lambda shape, dtype, pin_memory: asked.append((shape, dtype, pin_memory)))
    host_buffer([2, 3], torch.uint8, torch.device("cuda:0"))
    host_buffer((4,), torch.int64, torch.device("cpu"))
    assert asked == [((2, 3), torch.uint8, True), ((4,), torch.int64, False)]


def test_to_device_casts_on_the_host_and_keeps_the_shape():
    values = np.array([[2.5, 1 / 3], [-1.0, 7.0]])
    on_cpu = to_device(values, torch.device("cpu"), torch.float32)
    assert on_cpu.dtype == torch.float32 and torch.equal(on_cpu, torch.from_numpy(values.astype(np.float32)))
    moved = to_device(torch.arange(6).view(2, 3), torch.device("meta"))
    assert (moved.shape, moved.dtype, moved.device.type) == ((2, 3), torch.int64, "meta")
    assert to_device(moved, torch.device("meta")) is moved  # already there: no trip through the host


def test_a_batch_stages_many_tables_and_bytes_and_sends_them_in_one_copy(monkeypatch: pytest.MonkeyPatch):
    sent = []
    monkeypatch.setattr(_upload, "send", lambda staged, device: sent.append(staged.shape) or staged)
    upload = BatchUpload("cpu")
    floats = np.array([[0.1, -0.0], [np.nan, 1 / 3]])
    odd = np.arange(5 * 3, dtype=np.uint8).reshape(5, 3)  # 15 bytes: the next section starts aligned
    first = upload.tables(floats, np.array([True, False]))
    raw = upload.raw_bytes(odd.shape, lambda target: np.copyto(target, odd))
    single = upload.tables(floats, np.array([-(2**63), 7]), float_dtype=torch.float32)
    empty = upload.tables()
    with pytest.raises(RuntimeError, match="a staged table is read before its batch is sent"):
        first.tensors()
    upload.send()
    assert sent == [(6 * 8 + 16 + 6 * 8,)]  # one word per value, the bytes padded to a word
    values, flags = first.tensors()
    assert torch.equal(values.view(torch.int64), torch.from_numpy(floats.view(np.int64)))
    assert torch.equal(flags, torch.tensor([True, False]))
    assert raw.tensor().dtype == torch.uint8 and torch.equal(raw.tensor(), torch.from_numpy(odd))
    rounded, integers = single.tensors()
    assert torch.equal(rounded.view(torch.int32), torch.from_numpy(floats.astype(np.float32).view(np.int32)))
    assert torch.equal(integers, torch.tensor([-(2**63), 7]))
    assert empty.tensors() == []


def test_a_sent_batch_takes_no_more_tables():
    upload = BatchUpload("meta")
    staged = upload.tables(np.zeros(3))
    upload.send()
    assert staged.tensor().device.type == "meta"
    with pytest.raises(RuntimeError, match="already sent: stage before BatchUpload.send"):
        upload.tables(np.zeros(3))
    with pytest.raises(RuntimeError, match="this batch's upload is already sent"):
        upload.send()
    with pytest.raises(ValueError, match="tables must be float64, integer or bool, got float32"):
        BatchUpload("cpu").tables(np.zeros(3, dtype=np.float32))


def test_copies_to_cuda_run_on_a_copy_stream_the_computing_stream_waits_for(monkeypatch: pytest.MonkeyPatch):
    """On CUDA (its stream calls replaced here, where no driver is): the copy is queued on the copy stream, the
    current stream waits for it, and its memory is recorded as used by the current stream."""
    assert [copies_beside_compute(torch.device(name)) for name in ("cuda", "cuda:1", "cpu", "meta")] == [
        True,
        True,
        False,
        False,
    ]
    events = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_stream(self, other: Stream) -> None:
            events.append(f"{self.name} waits for {other.name}")

    compute, copier = Stream("compute"), Stream("copier")
    active = [compute]

    @contextlib.contextmanager
    def stream(chosen: Stream) -> Iterator[None]:
        active.append(chosen)
        yield
        active.pop()

    original_to = torch.Tensor.to

    def to(self: torch.Tensor, *arguments: object, **options: object) -> torch.Tensor:
        events.append(f"copy on {active[-1].name}")
        return original_to(self, *arguments, **options)

    monkeypatch.setattr(_upload, "copies_beside_compute", lambda device: device.type == "meta")
    monkeypatch.setattr(_upload, "_copy_stream", lambda device: copier)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: active[-1])
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, used: events.append(f"used by {used.name}"))
    sent = _upload.send(torch.arange(4), torch.device("meta"))
    assert sent.device.type == "meta"
    assert events == ["copy on copier", "compute waits for copier", "used by compute"]
