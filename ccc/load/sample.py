"""What a CCC stream yields and how it fails: :class:`StreamSample`, :class:`StreamError`, :class:`StreamWarning`."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["StreamError", "StreamSample", "StreamWarning"]


class StreamError(ValueError):
    """A stream cannot be opened or read; the message names the shard and the sample where known.

    Raised in a DataLoader worker, it reaches the main process with the same message: torch
    re-raises a worker's exception as ``StreamError("Caught StreamError in DataLoader worker …
    Original Traceback … ccc.load.sample.StreamError: MESSAGE")``, which keeps MESSAGE only.
    """

    def __init__(self, message: str) -> None:
        worker_marker = f"{type(self).__module__}.{type(self).__qualname__}: "
        if message.startswith(f"Caught {type(self).__name__} in DataLoader worker") and worker_marker in message:
            message = message.rpartition(worker_marker)[2].strip()
        super().__init__(message)


class StreamWarning(UserWarning):
    """Samples were skipped under ``on_error="skip"``; the message gives the counts."""


class StreamSample(NamedTuple):
    """One sample of a stream.

    Attributes:
        image: in the stream's ``image_format`` (see :data:`ccc.load.decode.IMAGE_FORMATS`).
        label: class index (ImageNet: 0–999 in sorted WordNet-id order).
        metadata: ``index`` (stream position), ``n1``, ``s1``, ``n2``, ``s2`` (severities in
            [0, 5]), ``path_step`` (None in published shards), ``source_path`` (``<wnid>/<file>``),
            ``calibrated_accuracy`` (percent; None in published shards and the ``cin-c`` and
            ``gradual`` kinds), ``key`` and ``shard`` (None when rendered on the fly); samples of
            the ``cin-c`` and ``gradual`` kinds add ``domain`` (their corruption) and ``severity`` (1–5).
    """

    image: Any
    label: int
    metadata: dict[str, Any]
