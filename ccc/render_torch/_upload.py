"""Host data to the render device: the one owner of every host-to-device copy of the renderer.

Per-sample kernels, tap tables and parameters are built on the host from the severities and the host
draws (:meth:`~ccc.render_torch.random.SampleRandom.on_host`), the source crops are packed there, and all
of them reach the device through this module:

- :func:`host_buffer` allocates the host side of a copy: on CUDA page-locked ("pinned") memory from
  torch's caching host allocator, which reuses a block once the copy that reads it is done. A copy from
  ordinary (pageable) memory is not asynchronous on CUDA, ``non_blocking`` or not: the driver may first
  wait for all the work queued on the stream, then stage the bytes itself (CUDA Runtime API,
  "API synchronization behavior"), so the host could never run ahead of the GPU;
- :func:`send` copies a filled buffer to the device (``non_blocking``), and :func:`to_device` one host
  tensor or array through such a buffer;
- :func:`upload_tables` sends all of a corruption call's tables as one int64 buffer (one copy) and views
  them back, float tables as the call's working dtype (float64, or float32 in the float32 mode).

On the CPU nothing is copied: the host tensors are the device's.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

__all__ = ["host_buffer", "pinned_for", "send", "to_device", "upload_tables"]


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


def send(staged: Tensor, device: torch.device) -> Tensor:
    """A filled :func:`host_buffer` on ``device``: one ``non_blocking`` copy (the buffer itself on the CPU)."""
    return staged if _on_host(device) else staged.to(device, non_blocking=True)


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


def upload_tables(device: torch.device, *tables: NDArray, float_dtype: torch.dtype = torch.float64) -> list[Tensor]:
    """Host numpy tables → tensors of the same shapes and values on ``device``, in one copy.

    Args:
        device: the render device.
        tables: numpy arrays (any shapes) of float64, of an integer dtype (values within int64) or bool.
        float_dtype: ``torch.float64`` or ``torch.float32``, the dtype the float64 tables arrive as.

    Returns:
        One tensor per table on ``device``: float64 tables as ``float_dtype`` (float64 bit for bit; float32
        rounded once on the host; their bits travel reinterpreted as int64 words, one per value),
        integers as int64, bools as bool.
    """
    if float_dtype not in (torch.float64, torch.float32):
        raise ValueError(f"float_dtype must be torch.float64 or torch.float32, got {float_dtype}")
    single = float_dtype == torch.float32
    for table in tables:
        if table.dtype != np.float64 and table.dtype != np.bool_ and not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"tables must be float64, integer or bool, got {table.dtype}")
    sizes = [table.size for table in tables]
    staged = host_buffer((sum(sizes),), torch.int64, device)
    buffer, start = staged.numpy(), 0
    for table, size in zip(tables, sizes):  # each table written into the buffer at once, converted as it is copied
        words = buffer[start : start + size].reshape(table.shape)
        start += size
        if table.dtype == np.float64 and single:
            np.copyto(words, table.astype(np.float32).view(np.int32))
        elif table.dtype == np.float64:
            np.copyto(words.view(np.float64), table)
        else:
            np.copyto(words, table, casting="unsafe")
    pieces = torch.split(send(staged, device), sizes)
    uploaded = []
    for piece, table in zip(pieces, tables):
        piece = piece if piece.shape == table.shape else piece.view(table.shape)  # 1-D: already its shape
        if table.dtype == np.float64 and single:
            piece = piece.to(torch.int32).view(torch.float32)
        elif table.dtype == np.float64:
            piece = piece.view(torch.float64)
        elif table.dtype == np.bool_:
            piece = piece != 0
        uploaded.append(piece)
    return uploaded
