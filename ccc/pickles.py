"""Bounded reading of pickles from files a user supplies: the opcode bound, and torch files read with
``weights_only=True`` after it.

Unpickling builds one object per opcode, so a small file of small opcodes (an empty set is 1 byte
in the file, 216 in memory) can make a reader build gigabytes for minutes. Every reader of a pickle
a user supplies counts its opcodes first (at most :data:`MAX_PICKLE_OPCODES`): the calibration
importer (``ccc.calibration.published``), run checkpoints (``tta_eval.checkpoint``) and source
statistics (``tta_eval.methods.ttac_nq``). Torch files are then read with ``torch.load(...,
weights_only=True)``, which builds tensors and plain values only: no code named by the file runs.

A zip's compressed entry can inflate about 1,000-fold (a 3 MB file to 3 GB), and ``torch.load``
inflates every entry whole. ``torch.save`` stores its entries as they are, so a torch zip with a
compressed entry is refused before anything is inflated: nothing read from the file is then larger
than the file itself, and the opcodes of ``data.pkl`` are counted as it streams from the file.
"""

from __future__ import annotations

import itertools
import pickle
import pickletools
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import torch

MAX_PICKLE_OPCODES = 500_000
"""Most opcodes a pickle from a user file may hold. Each builds at most one object, so this bounds what
unpickling can build from small opcodes; the published calibration matrices take about 5,000 (arrays)
to 111,500 (nested lists of floats), a checkpoint about 20 per tensor and 2 per number."""


class NotPlainDataError(ValueError):
    """A torch file names objects other than tensors and plain values (refused; nothing of it ran)."""


_UNREADABLE = (
    OSError,
    ValueError,
    RuntimeError,
    EOFError,
    zipfile.BadZipFile,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    MemoryError,
    RecursionError,
)
"""What reading a damaged torch file raises (besides pickle.UnpicklingError for a refused global)."""


def count_pickle_opcodes(data: bytes | BinaryIO, stop_after: int = MAX_PICKLE_OPCODES) -> int:
    """Opcodes of the pickle ``data`` (bytes, or a binary file read up to the pickle's end), counted
    up to ``stop_after + 1`` (>= 0; a larger count is not needed to refuse it). ValueError for bytes
    that are not a pickle."""
    count = 0
    for count, _ in enumerate(pickletools.genops(data), 1):
        if count > stop_after:
            break
    return count


LEGACY_PICKLES = 5
"""Pickles at the head of a torch file of the legacy (pre-zip) format: magic number, protocol version,
system information, the object, its storages' keys; the storages' bytes follow."""


def _torch_file_opcodes(path: Path, magic_number: int) -> int:
    """Opcodes of the pickles of a file written by ``torch.save`` (zip, or legacy when it starts with
    torch's ``magic_number``), counted up to one past the bound; ValueError for any other file, and
    for a zip with a compressed entry (``torch.save`` compresses none)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist() if name.count("/") == 1 and name.endswith("/data.pkl")]
            if len(names) != 1:
                raise ValueError("it is not a file written by torch.save (a zip archive without data.pkl)")
            compressed = [info.filename for info in archive.infolist() if info.compress_type != zipfile.ZIP_STORED]
            if compressed:
                raise ValueError(
                    f"its entry {compressed[0]!r} is compressed, which torch.save never does; refusing to inflate it"
                )
            with archive.open(names[0]) as pickle_stream:
                return count_pickle_opcodes(pickle_stream)
    with open(path, "rb") as handle:
        try:
            # The magic number's pickle is PROTO, LONG1, STOP: a few opcodes decide, whatever follows.
            head = [
                (operation.name, argument) for operation, argument, _ in itertools.islice(pickletools.genops(handle), 4)
            ]
        except ValueError:
            head = []
        if ("LONG1", magic_number) not in head or head[-1][0] != "STOP":
            raise ValueError("it is not a file written by torch.save") from None
        total = len(head)
        for _ in range(LEGACY_PICKLES - 1):
            if total > MAX_PICKLE_OPCODES:
                break
            total += count_pickle_opcodes(handle, MAX_PICKLE_OPCODES - total)
        return total


def load_torch_file(path: Path, what: str, map_location: str | torch.device = "cpu") -> Any:
    """The object ``torch.save`` wrote to ``path``, its tensors on ``map_location``.

    The file must be written by ``torch.save`` (a zip archive, or the legacy format) with at most
    :data:`MAX_PICKLE_OPCODES` opcodes in its pickles; it is then read with
    ``torch.load(weights_only=True)`` (tensors, numbers, strings, None and lists, tuples and dicts
    of them). Anything else is refused with a ValueError of one line, "WHAT 'PATH' cannot be read:
    REASON" (``NotPlainDataError`` when the file names other objects), before any of it is built;
    nothing named by the file is executed. what: how the file is
    named to the user, e.g. "checkpoint", "source_statistics file", "weights file".
    """
    import torch  # here: the calibration importer, which uses the bound alone, must not load torch

    path = Path(path)
    try:
        if _torch_file_opcodes(path, torch.serialization.MAGIC_NUMBER) > MAX_PICKLE_OPCODES:
            raise ValueError(f"its pickles hold more than {MAX_PICKLE_OPCODES:,} opcodes; refusing to unpickle them")
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise NotPlainDataError(
            f"{what} {str(path)!r} cannot be read: "
            "it holds objects other than tensors and plain values (nothing of it was run)"
        ) from None
    except _UNREADABLE as error:
        reason = " ".join(str(error).split()) or type(error).__name__
    raise ValueError(f"{what} {str(path)!r} cannot be read: {reason}")
