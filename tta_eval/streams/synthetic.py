"""``synthetic[:key=value,…]``: the synthetic stream of ``tta_eval.synthetic``, for demos and tests
without ImageNet (its keys are ``SyntheticStreamSpec``'s; ``batch_size`` defaults to ``--batch-size``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ccc.options import parse_list, parse_options
from tta_eval.streams.batch import SizedStream
from tta_eval.streams.options import StreamOptions
from tta_eval.streams.registry import REGISTRY, StreamDescription, StreamSource

# tta_eval.synthetic needs torch; it is imported when a synthetic stream is opened.
if TYPE_CHECKING:
    from tta_eval.synthetic import SyntheticStreamSpec


def _synthetic_spec(location: str, options: StreamOptions) -> SyntheticStreamSpec:
    """The synthetic stream spec of the ``key=value,…`` options in ``location``; ValueError naming an
    unknown or invalid option."""
    from tta_eval.synthetic import SyntheticStreamSpec

    owner = "stream 'synthetic:'"
    values = parse_options(location, owner)
    values.setdefault("batch_size", options.batch_size)
    if "corruptions" in values:
        values["corruptions"] = parse_list("corruptions", values["corruptions"], owner)
    valid = [field.name for field in dataclasses.fields(SyntheticStreamSpec)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(f"unknown synthetic stream option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return SyntheticStreamSpec(**values)


def _open_synthetic(location: str, options: StreamOptions) -> SizedStream:
    """The synthetic stream of ``location``'s options, sized (``num_batches`` × ``batch_size`` samples)
    so that progress bars show its total."""
    from tta_eval.synthetic import SyntheticStream

    spec = _synthetic_spec(location, options)
    return SizedStream(SyntheticStream(spec), spec.num_batches * spec.batch_size)


def _describe_synthetic(location: str, options: StreamOptions) -> StreamDescription:
    """The synthetic stream's name, length in samples, class count and batch size (no image is made)."""
    spec = _synthetic_spec(location, options)
    name = f"synthetic:{location}" if location else "synthetic"
    return StreamDescription(
        name=name,
        samples=spec.num_batches * spec.batch_size,
        num_classes=spec.num_classes,
        batch_size=spec.batch_size,
    )


REGISTRY.register(StreamSource("synthetic", _open_synthetic, order=1, describe=_describe_synthetic))
