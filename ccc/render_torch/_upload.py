"""Host tables to the render device in one copy: the one owner of a corruption call's upload.

Per-sample kernels, tap tables and parameters are built on the host from the severities and the host
draws (:meth:`~ccc.render_torch.random.SampleRandom.on_host`); :func:`upload_tables` sends all of a
call's tables as one int64 buffer (one host-to-device copy, ``non_blocking``) and views them back.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

__all__ = ["upload_tables"]


def upload_tables(device: torch.device, *tables: NDArray) -> list[Tensor]:
    """Host numpy tables → tensors of the same dtypes, shapes and values on ``device``, in one copy.

    Args:
        device: the render device.
        tables: numpy arrays (any shapes) of float64, of an integer dtype (values within int64) or bool.

    Returns:
        One tensor per table on ``device``: float64 bit for bit (its bits travel reinterpreted as
        int64), integers as int64, bools as bool.
    """
    words = []
    for table in tables:
        if table.dtype == np.float64:
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
        if table.dtype == np.float64:
            piece = piece.view(torch.float64)
        elif table.dtype == np.bool_:
            piece = piece != 0
        uploaded.append(piece)
    return uploaded
