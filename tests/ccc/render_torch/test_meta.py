"""The torch corruptions and ``render_batch`` on the meta device, which holds no data (issue 36).

Any host read of device data (``.item()``, ``.tolist()``, ``.cpu()``, ``bool()`` of a device value,
``torch.equal``, boolean-mask indexing, ``nonzero``, ``unique``, a data-dependent shape or trip count),
any mix of host and device tensors in one operation and any CPU-only codec fails there; what passes does
its per-sample host work from the host severities and seeds only. Every copy from the host to the device
is ``non_blocking`` and starts from page-locked memory: on CUDA a blocking copy, or one from pageable memory,
waits for the GPU to finish all the work queued before it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ccc.demo.images import render_demo_image
from ccc.render_torch import _upload, torch_corruptions
from ccc.render_torch.geometry import prepare_crop_resize_flip
from ccc.render_torch.pipeline import prepare_corruption_stage, render_batch
from ccc.render_torch.random import SampleRandom
from ccc.stream.spec import SampleSpec

META_CORRUPTIONS = sorted(torch_corruptions())
"""Every torch corruption the pipeline dispatches (all 19)."""

SEVERITIES = torch.tensor([5.0, 0.1, 0.25, 2.5, 3.0, 4.75], dtype=torch.float64)
"""Mixed severities on the host, from below 1/3 (defocus's exact identity, shot noise's largest rates) to 5,
both of spatter's branches (water up to 3, mud above)."""


class _Uploads(TorchDispatchMode):
    """Counts the copies of host tensors to the meta device and records every one that is not ``non_blocking``
    or does not start from page-locked memory (``pin_memory=True``, which
    :func:`ccc.render_torch._upload.host_buffer` asks for when the patched ``pinned_for`` says the meta device
    is CUDA-like; allocated unpinned here, where no CUDA driver is, and remembered)."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: list[str] = []
        self.pinned: list[torch.Tensor] = []
        self.copies = 0

    def _is_pinned(self, tensor: torch.Tensor) -> bool:
        return any(tensor.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr() for buffer in self.pinned)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.ops.aten.empty.memory_format and kwargs.get("pin_memory"):
            buffer = func(*args, **{**kwargs, "pin_memory": False})
            self.pinned.append(buffer)
            return buffer
        if func is torch.ops.aten._to_copy.default:
            source, target = args[0], kwargs.get("device")
        elif func is torch.ops.aten.copy_.default:
            source, target = args[1], args[0].device
        else:
            source = target = None
        host_to_device = isinstance(source, torch.Tensor) and source.device.type == "cpu" and source.dim() > 0
        if host_to_device and target is not None and torch.device(target).type == "meta":
            self.copies += 1
            if not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False)):
                self.faults.append(f"a blocking {func} of {tuple(source.shape)}")
            if not self._is_pinned(source):
                self.faults.append(f"a {func} of {tuple(source.shape)} from pageable memory")
        return func(*args, **kwargs)


@pytest.fixture
def pinned_uploads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every upload to the meta device must be ``non_blocking`` and start from page-locked memory, as on CUDA
    (a copy from pageable memory may wait there for all the work queued on the stream)."""
    monkeypatch.setattr(_upload, "pinned_for", lambda device: device.type in ("cuda", "meta"))
    with _Uploads() as mode:
        yield
    assert mode.faults == []


def test_the_upload_check_catches_a_pageable_or_blocking_copy():
    with _Uploads() as mode:
        torch.ones(3).to("meta", non_blocking=True)
        torch.empty(3, pin_memory=True).to("meta")
    assert mode.faults == [
        "a aten._to_copy.default of (3,) from pageable memory",
        "a blocking aten._to_copy.default of (3,)",
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", META_CORRUPTIONS)
def test_the_corruption_runs_on_the_meta_device(name: str, dtype: torch.dtype, pinned_uploads: None):
    batch = len(SEVERITIES)
    images = torch.empty(batch, 3, 64, 64, device="meta")
    random = SampleRandom(torch.arange(batch), 0, "meta", dtype)
    output = torch_corruptions()[name](images, SEVERITIES, random, dtype)
    assert (output.shape, output.dtype, output.device.type) == ((batch, 3, 64, 64), torch.float32, "meta")


def _spec(index: int, source: np.ndarray, n1: str, s1: float, n2: str, s2: float) -> SampleSpec:
    height, width = source.shape[:2]
    side = min(height, width) - 3 * index
    return SampleSpec(
        index=index, step=index, pair_index=0, path_position=0, path_cell=(0, 0), n1=n1, s1=s1, n2=n2, s2=s2,
        calibrated_accuracy=50.0, source_position=index, source_path=f"c/{index}.png", class_index=0,
        source_size=(width, height), crop_box=(index, 0, index + side, side), flip=bool(index % 2),
        seed=1000 + 7 * index, resize=None,
    )  # fmt: skip


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_render_batch_runs_on_the_meta_device(precision: str, pinned_uploads: None):
    """Crops, both corruption stages (every corruption above, severities 0 to 5) and the final JPEG."""
    count = len(META_CORRUPTIONS)
    sources = [render_demo_image(index % 16, np.random.default_rng(index)) for index in range(count)]
    specs = [
        _spec(index, source, name, (index % 21) / 4, META_CORRUPTIONS[(index + 5) % count], 5.0 - (index % 9) / 4)
        for index, (source, name) in enumerate(zip(sources, META_CORRUPTIONS))
    ]
    output = render_batch(specs, sources, "meta", precision=precision)
    assert (output.shape, output.dtype, output.device.type) == ((count, 3, 224, 224), torch.uint8, "meta")


def _every_corruption_in_both_stages() -> tuple[list[SampleSpec], list[np.ndarray]]:
    """One sample per corruption, each corruption in both stages (severities 1 to 5), and their sources."""
    count = len(META_CORRUPTIONS)
    sources = [render_demo_image(index % 16, np.random.default_rng(index)) for index in range(count)]
    specs = [
        _spec(index, source, name, 1.0 + (index % 17) / 4, META_CORRUPTIONS[(index + 3) % count], 4.0)
        for index, (source, name) in enumerate(zip(sources, META_CORRUPTIONS))
    ]
    return specs, sources


def test_a_batch_reaches_the_device_in_one_copy(monkeypatch: pytest.MonkeyPatch):
    """Every group of both stages, the crops and their tables: the host prepares the whole batch first, then one
    copy carries its host data (after a first batch has made the per-process copies: JPEG's and the
    random streams' constants, frost's textures)."""
    specs, sources = _every_corruption_in_both_stages()
    render_batch(specs, sources, "meta")
    monkeypatch.setattr(_upload, "pinned_for", lambda device: device.type in ("cuda", "meta"))
    with _Uploads() as mode:
        render_batch(specs[::-1], sources[::-1], "meta")
    assert mode.faults == [] and mode.copies == 1


class _DeviceOps(TorchDispatchMode):
    """Records every op that reads or makes a tensor on the meta device."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        result = func(*args, **(kwargs or {}))
        tensors = [value for value in (*args, *(kwargs or {}).values(), result) if isinstance(value, torch.Tensor)]
        if any(tensor.device.type == "meta" for tensor in tensors) or kwargs and "meta" in str(kwargs.get("device")):
            self.ops.append(str(func))
        return result


@pytest.mark.parametrize("name", META_CORRUPTIONS)
def test_a_corruptions_host_half_queues_no_device_work(name: str):
    """``prepare`` only stages host data; its step, once the upload is sent, does the device work."""
    batch = len(SEVERITIES)
    random = SampleRandom(torch.arange(batch), 0, "meta")
    upload = _upload.BatchUpload("meta")
    with _DeviceOps() as mode:
        step = torch_corruptions()[name].prepare(SEVERITIES, random, (64, 64), torch.float64, upload)
    assert mode.ops == []
    upload.send()
    output = step(torch.empty(batch, 3, 64, 64, device="meta"))
    assert (output.shape, output.device.type) == ((batch, 3, 64, 64), "meta")


def test_a_batchs_host_halves_come_first_and_queue_no_device_work():
    """What ``render_batch`` prepares before its one copy (the crops, both stages over every corruption)
    touches no device tensor."""
    specs, sources = _every_corruption_in_both_stages()
    seeds = torch.tensor([spec.seed for spec in specs])
    upload = _upload.BatchUpload("meta")
    with _DeviceOps() as mode:
        prepare_crop_resize_flip(specs, sources, upload)
        prepare_corruption_stage([s.n1 for s in specs], [s.s1 for s in specs], seeds, 0, (224, 224), "float64", upload)
        prepare_corruption_stage([s.n2 for s in specs], [s.s2 for s in specs], seeds, 1, (224, 224), "float64", upload)
    assert mode.ops == []
