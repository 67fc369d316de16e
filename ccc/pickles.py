"""Bounded reading of pickles from files a user supplies: the opcode bound, and torch files read with
``weights_only=True`` after it.

Unpickling builds one object per opcode, so a small file of small opcodes (an empty set is 1 byte
in the file, 216 in memory) can make a reader build gigabytes for minutes. Every reader of a pickle
a user supplies counts its opcodes first (at most :data:`MAX_PICKLE_OPCODES`): the calibration
importer (``ccc.calibration.published``), run checkpoints (``tta_eval.checkpoint``) and source
statistics (``tta_eval.methods.ttac_nq``). Torch files are then read with ``torch.load(...,
weights_only=True)``, which builds tensors and plain values only: no code named by the file runs.
"""

from __future__ import annotations

import pickle
import pickletools
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MAX_PICKLE_OPCODES = 500_000
"""Most opcodes a pickle from a user file may hold. Each builds at most one object, so this bounds what
unpickling can build from small opcodes; the published calibration matrices take about 5,000 (arrays)
to 111,500 (nested lists of floats), a checkpoint about 20 per tensor and 2 per number."""


_UNREADABLE = (OSError, ValueError, RuntimeError, EOFError, zipfile.BadZipFile, KeyError, TypeError, AttributeError, IndexError, MemoryError, RecursionError)
"""What reading a damaged torch file raises (besides pickle.UnpicklingError for a refused global)."""


def count_pickle_opcodes(data: bytes, stop_after: int = MAX_PICKLE_OPCODES) -> int:
    """Opcodes of the pickle ``data``, counted up to ``stop_after + 1`` (>= 0; a larger count is
    not needed to refuse it). ValueError for bytes that are not a pickle."""
    count = 0
    for count, _ in enumerate(pickletools.genops(data), 1):
        if count > stop_after:
            break
    return count


def _pickle_of_torch_file(path: Path) -> bytes:
    """The pickle (``<archive>/data.pkl``) of a file written by ``torch.save``; ValueError otherwise."""
    if not zipfile.is_zipfile(path):
        raise ValueError("it is not a file written by torch.save (a zip archive)")
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if name.count("/") == 1 and name.endswith("/data.pkl")]
        if len(names) != 1:
            raise ValueError("it is not a file written by torch.save (no data.pkl)")
        return archive.read(names[0])


def load_torch_file(path: Path, what: str, map_location: str | torch.device = "cpu") -> Any:
    """The object ``torch.save`` wrote to ``path``, its tensors on ``map_location``.

    The file must be a zip archive of ``torch.save`` whose pickle holds at most
    :data:`MAX_PICKLE_OPCODES` opcodes; it is then read with ``torch.load(weights_only=True)``
    (tensors, numbers, strings, None and lists, tuples and dicts of them). Anything else is refused
    with a ValueError of one line, "WHAT 'PATH' cannot be read: REASON", before any of it is built;
    nothing named by the file is executed. what: how the file is named to the user, e.g.
    "checkpoint", "source_statistics file".
    """
    import torch  # here: the calibration importer, which uses the bound alone, must not load torch

    path = Path(path)
    try:
        data = _pickle_of_torch_file(path)
        if count_pickle_opcodes(data) > MAX_PICKLE_OPCODES:
            raise ValueError(f"its pickle holds more than {MAX_PICKLE_OPCODES:,} opcodes; refusing to unpickle it")
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        reason = "it holds objects other than tensors and plain values (nothing of it was run)"
    except _UNREADABLE as error:
        reason = " ".join(str(error).split()) or type(error).__name__
    raise ValueError(f"{what} {str(path)!r} cannot be read: {reason}")
