"""Host tables to the render device in one copy: the one owner of a corruption call's upload.

Per-sample kernels, tap tables and parameters are built on the host from the severities and the host
draws (:meth:`~ccc.render_torch.random.SampleRandom.on_host`); :func:`upload_tables` sends all of a
call's tables as one int64 buffer (one host-to-device copy, ``non_blocking``) and views them back,
float tables as the call's working dtype (float64, or float32 in the float32 mode).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

__all__ = ["upload_tables"]


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
    words = []
    for table in tables:
        if table.dtype == np.float64 and single:
            words.append(np.ascontiguousarray(table, dtype=np.float32).view(np.int32).astype(np.int64).ravel())
        elif table.dtype == np.float64:
            words.append(np.ascontiguousarray(table).view(np.int64).ravel())
        elif table.dtype == np.bool_ or np.issubdtype(table.dtype, np.integer):
            words.append(table.astype(np.int64).ravel())
        else:
            raise ValueError(f"tables must be float64, integer or bool, got {table.dtype}")
    packed = torch.from_numpy(np.concatenate(words)).to(device, non_blocking=True)
    pieces = torch.split(packed, [len(word) for word in words])
    uploaded = []
    for piece, table in zip(pieces, tables):
        piece = piece.view(table.shape)
        if table.dtype == np.float64 and single:
            piece = piece.to(torch.int32).view(torch.float32)
        elif table.dtype == np.float64:
            piece = piece.view(torch.float64)
        elif table.dtype == np.bool_:
            piece = piece != 0
        uploaded.append(piece)
    return uploaded
