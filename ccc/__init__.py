"""ccc: the CCC benchmark (Continuously Changing Corruptions).

The stages, in order: :mod:`ccc.corruptions` (ImageNet-C corruptions with continuous severity),
:mod:`ccc.calibration` (accuracy tables), :mod:`ccc.stream` (the plan of a stream: corruption order,
severity paths, schedule, spec, per-sample plan, source images), :mod:`ccc.render` (pixels),
:mod:`ccc.shards` (the shard format, writing, reading, manifest, verification), :mod:`ccc.generate`
(the run-folder driver) and :mod:`ccc.load` (reading streams; its main functions are importable from
here: ``from ccc import open_stream, render_stream, stream_loader``).
"""

from __future__ import annotations

from typing import Any

from ccc.version import __version__

_STREAM_EXPORTS = (
    "open_stream",
    "render_stream",
    "stream_loader",
    "CCCStream",
    "StreamError",
    "StreamSample",
    "StreamWarning",
)
__all__ = ["__version__", *_STREAM_EXPORTS]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``import ccc`` stays light (the stream API imports torch).
    if name in _STREAM_EXPORTS:
        from ccc import load

        return getattr(load, name)
    raise AttributeError(f"module 'ccc' has no attribute {name!r}")
