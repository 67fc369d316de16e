"""Host data to the render device: the one owner of every host-to-device copy of the renderer.

Per-sample kernels, tap tables and parameters are built on the host from the severities and the host
draws (:meth:`~ccc.render_torch.random.SampleRandom.on_host`), the source crops are packed there, and all
of them reach the device through this module:

- :func:`host_buffer` allocates the host side of a copy: on CUDA page-locked ("pinned") memory from
  torch's caching host allocator, which reuses a block once the copy that reads it is done. A copy from
  ordinary (pageable) memory is not asynchronous on CUDA, ``non_blocking`` or not: the driver may first
  wait for all the work queued on the stream, then stage the bytes itself (CUDA Runtime API,
  "API synchronization behavior"), so the host could never run ahead of the GPU;
- :func:`send` copies a filled buffer to the device (``non_blocking``; on CUDA on a copy stream of its own,
  :func:`copies_beside_compute`, so that a batch's upload overlaps the work queued before it), and
  :func:`to_device` one host tensor or array through such a buffer;
- :class:`BatchUpload` gathers the host tables of a whole batch (the source crops, the resampling taps, the
  random streams' keys, every corruption's parameters and tables), staged by each step as it prepares, and
  sends them in one copy once every step is prepared; each step then views its tables on the device
  (float tables as its working dtype: float64, or float32 in the float32 mode);
- :func:`upload_tables` is one step's tables sent at once (a :class:`BatchUpload` of one staging).

On the CPU nothing is copied: the host buffer is the device's.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

__all__ = [
    "BatchUpload",
    "Staged",
    "copies_beside_compute",
    "host_buffer",
    "pinned_for",
    "send",
    "to_device",
    "upload_tables",
]


def pinned_for(device: torch.device) -> bool:
    """Whether copies to ``device`` start from page-locked host memory (CUDA devices, ROCm's included)."""
    return device.type == "cuda"


def host_buffer(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    """An uninitialised host tensor of ``shape`` and ``dtype`` to fill and copy to ``device``: page-locked
    where :func:`pinned_for` says so (torch's caching host allocator; the block returns to it once the
    tensor is freed and the copies recorded on it are done), ordinary memory otherwise."""
    return torch.empty(tuple(shape), dtype=dtype, pin_memory=pinned_for(device))


def _on_host(device: torch.device) -> bool:
    """Whether ``device`` is the host itself, where a host buffer is used as it is (no copy)."""
    return device.type == "cpu"


def copies_beside_compute(device: torch.device) -> bool:
    """Whether copies to ``device`` run on a copy stream of their own (CUDA devices): on the stream that
    computes, a batch's upload would wait for the previous batch's kernels and the kernels for it, one after
    the other; on its own stream it runs on the copy engine while they run, and the computing stream waits
    for it only where its own work starts."""
    return device.type == "cuda"


@lru_cache(maxsize=16)
def _copy_stream(device: torch.device) -> torch.cuda.Stream:
    """The copy stream of ``device`` (made once per process and device)."""
    return torch.cuda.Stream(device=device)


def send(staged: Tensor, device: torch.device) -> Tensor:
    """A filled :func:`host_buffer` on ``device``: one ``non_blocking`` copy (the buffer itself on the CPU).

    Where :func:`copies_beside_compute`, the copy is queued on the device's copy stream and the current
    stream waits for it before the work queued on it next; the copy's memory is recorded as used by the
    current stream, so that the allocator hands it out again only once that work is done (the host buffer's
    block, likewise, only once the copy is: torch's caching host allocator records the copy's stream)."""
    if _on_host(device):
        return staged
    if not copies_beside_compute(device):
        return staged.to(device, non_blocking=True)
    compute = torch.cuda.current_stream(device)
    copier = _copy_stream(device)
    with torch.cuda.stream(copier):
        sent = staged.to(device, non_blocking=True)
    compute.wait_stream(copier)
    sent.record_stream(compute)
    return sent


def to_device(values: Tensor | NDArray, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """A host tensor or numpy array on ``device`` as ``dtype`` (default: its own), in one ``non_blocking``
    copy from a :func:`host_buffer`; the cast, if any, is made on the host (the same IEEE conversion as on
    the device). On the CPU, or for values already on ``device``, the values themselves (cast if needed; they
    may share memory)."""
    device = torch.device(device)
    tensor = torch.as_tensor(values)
    dtype = tensor.dtype if dtype is None else dtype
    if _on_host(device) or tensor.device == device:
        return tensor.to(dtype)
    staged = host_buffer(tensor.shape, dtype, device)
    staged.copy_(tensor)
    return send(staged, device)


_WORD = 8
"""Bytes of a table value in the buffer (one int64 word each) and the alignment of every section."""


def _check_tables(tables: Sequence[NDArray], float_dtype: torch.dtype) -> None:
    if float_dtype not in (torch.float64, torch.float32):
        raise ValueError(f"float_dtype must be torch.float64 or torch.float32, got {float_dtype}")
    for table in tables:
        if table.dtype != np.float64 and table.dtype != np.bool_ and not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"tables must be float64, integer or bool, got {table.dtype}")


def _write_tables(tables: Sequence[NDArray], single: bool, words: NDArray[np.int64]) -> None:
    """Each table into its run of ``words`` (one int64 word per value), converted as it is copied."""
    start = 0
    for table in tables:
        section = words[start : start + table.size].reshape(table.shape)
        start += table.size
        if table.dtype == np.float64 and single:
            np.copyto(section, table.astype(np.float32).view(np.int32))
        elif table.dtype == np.float64:
            np.copyto(section.view(np.float64), table)
        else:
            np.copyto(section, table, casting="unsafe")


def _view_tables(words: Tensor, tables: Sequence[NDArray], single: bool) -> list[Tensor]:
    """The device tensors of :func:`_write_tables`'s words: float64 tables as float64 (float32 when
    ``single``), integers as int64, bools as bool, each of its table's shape."""
    viewed = []
    for piece, table in zip(torch.split(words, [table.size for table in tables]), tables):
        piece = piece if piece.shape == table.shape else piece.view(table.shape)  # 1-D: already its shape
        if table.dtype == np.float64 and single:
            piece = piece.to(torch.int32).view(torch.float32)
        elif table.dtype == np.float64:
            piece = piece.view(torch.float64)
        elif table.dtype == np.bool_:
            piece = piece != 0
        viewed.append(piece)
    return viewed


_Section = tuple[int, Callable[[NDArray[np.uint8]], None], Callable[[Tensor], list[Tensor]], "Staged"]
"""A staged section: its size in bytes, the writer of its host bytes, the viewer of its device bytes, its handle."""


class Staged:
    """A staging's place in its :class:`BatchUpload`: its tensors on the device once the batch is sent."""

    def __init__(self) -> None:
        self._tensors: list[Tensor] | None = None

    def tensors(self) -> list[Tensor]:
        """The staged values on the device (the order and conversions of their staging).

        Raises:
            RuntimeError: before the batch's :meth:`BatchUpload.send`.
        """
        if self._tensors is None:
            raise RuntimeError("a staged table is read before its batch is sent (BatchUpload.send)")
        return self._tensors

    def tensor(self) -> Tensor:
        """The one tensor of a staging of one table or of bytes."""
        (tensor,) = self.tensors()
        return tensor


class BatchUpload:
    """The host tables of one batch, staged as its steps are prepared and sent to ``device`` in one copy.

    A step stages what it will need (:meth:`tables`, :meth:`raw_bytes`) and reads it back through the
    :class:`Staged` it gets, once :meth:`send` has run: the host prepares every step of a batch first, then
    one ``non_blocking`` copy from one :func:`host_buffer` (pinned on CUDA) carries them all, then the
    device work is queued. Sections are 8-byte aligned; their bytes are written into the buffer at
    :meth:`send` (nothing is copied twice). On the CPU the buffer itself is the device's.

    Args:
        device: the render device.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._sections: list[_Section] = []
        self._sent = False

    def tables(self, *tables: NDArray, float_dtype: torch.dtype = torch.float64) -> Staged:
        """Stage numpy ``tables`` (float64, integer with values within int64, or bool; any shapes); their
        tensors (:meth:`Staged.tensors`): float64 tables as ``float_dtype`` (``torch.float64`` bit for bit,
        or ``torch.float32``, rounded once on the host; their bits travel as int64 words, one per value),
        integers as int64, bools as bool.

        Raises:
            ValueError: another ``float_dtype`` or table dtype, one line.
        """
        _check_tables(tables, float_dtype)
        single = float_dtype == torch.float32
        words = sum(table.size for table in tables)
        return self._stage(
            words * _WORD,
            lambda section: _write_tables(tables, single, section.view(np.int64)),
            lambda section: _view_tables(section.view(torch.int64), tables, single),
        )

    def raw_bytes(self, shape: Sequence[int], fill: Callable[[NDArray[np.uint8]], None]) -> Staged:
        """Stage a uint8 array of ``shape`` that ``fill`` writes (it gets the host array at :meth:`send`, whose
        unwritten bytes are undefined); its tensor: uint8 of ``shape``."""
        shape = tuple(int(length) for length in shape)
        size = int(np.prod(shape))
        return self._stage(
            size, lambda section: fill(section[:size].reshape(shape)), lambda section: [section[:size].view(shape)]
        )

    def _stage(
        self, size: int, write: Callable[[NDArray[np.uint8]], None], view: Callable[[Tensor], list[Tensor]]
    ) -> Staged:
        if self._sent:
            raise RuntimeError("this batch's upload is already sent: stage before BatchUpload.send")
        staged = Staged()
        self._sections.append((size, write, view, staged))
        return staged

    def send(self) -> None:
        """Write every staged section into one host buffer and copy it to the device (once per batch; nothing
        to copy when nothing is staged)."""
        if self._sent:
            raise RuntimeError("this batch's upload is already sent")
        self._sent = True
        spans = [-(-size // _WORD) * _WORD for size, *_ in self._sections]
        staged = host_buffer((sum(spans),), torch.uint8, self.device)
        host, start = staged.numpy(), 0
        for span, (_, write, _, _) in zip(spans, self._sections):
            write(host[start : start + span])
            start += span
        device_buffer = send(staged, self.device) if spans else staged
        start = 0
        for span, (_, _, view, handle) in zip(spans, self._sections):
            handle._tensors = view(device_buffer[start : start + span])
            start += span
        self._sections = []


def upload_tables(device: torch.device, *tables: NDArray, float_dtype: torch.dtype = torch.float64) -> list[Tensor]:
    """Host numpy tables → tensors of the same shapes and values on ``device``, in one copy: one
    :meth:`BatchUpload.tables` staging, sent at once (its conversions and errors)."""
    upload = BatchUpload(device)
    staged = upload.tables(*tables, float_dtype=float_dtype)
    upload.send()
    return staged.tensors()
