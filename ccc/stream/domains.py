"""The domain sequences of the ``cin-c`` and ``gradual`` stream kinds (no calibration table involved).

Both kinds are a sequence of *levels* ``(corruption, integer severity)``, each holding ``N`` images
(the stream's ``speed``: images per step; one level is one step):

- ``cin-c`` — concatenated ImageNet-C as continual test-time adaptation uses it (CoTTA, RDumb, the
  CCC paper's CIN-C, mariodoebler/test-time-adaptation's ``continual`` setting): the corruptions in
  order, each once at the one severity: ``(c_0, S), (c_1, S), …, (c_14, S)``.
- ``gradual`` — mariodoebler/test-time-adaptation's ``gradual`` setting for ImageNet-C (its
  ``test_time.py``: ``severities = [1, 2, 3, 4, 5, 4, 3, 2, 1]`` for every corruption when one
  severity is configured): each corruption in order at severities :data:`GRADUAL_SEVERITIES`, so
  at a corruption change the severity goes ``… 2, 1 | 1, 2, …``.

A stream longer than one pass repeats the sequence from its start (as the RDumb paper's hold-out
CIN-C, repeated to 750k images). Each sample is one corruption at one integer severity, rendered as
the pair ``(c, s, c, 0)``: the second stage at severity 0 is skipped, so the image is exactly
``ccc.corruptions.corrupt(image, c, s)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccc.stream.paths import SEVERITY_STEP
from ccc.stream.schedule import ScheduledStep
from ccc.validation import check_integer, check_non_negative_int

__all__ = [
    "CROPS",
    "DOMAIN_KINDS",
    "GRADUAL_SEVERITIES",
    "DomainSchedule",
    "center_crop",
    "domain_levels",
]

DOMAIN_KINDS: tuple[str, ...] = ("cin-c", "gradual")
"""Stream kinds made of a fixed sequence of (corruption, severity) domains."""

CROPS: tuple[str, ...] = ("random", "center", "whole")
"""How a stream crops its source images: ``random`` — the CCC stream's random-resized crop and horizontal
flip; ``center`` — ImageNet-C's ``Resize(256)`` + ``CenterCrop(224)`` (:func:`center_crop`), no flip (domain
kinds of the ``imagenet`` corruption set only); ``whole`` — the whole source image resized to the corruption
set's size (a copy when it has that size already), no flip: what the public CIFAR-10-C, Tiny-ImageNet-C and
ImageNet-64-C generators do."""

GRADUAL_SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5, 4, 3, 2, 1)
"""Severities of one corruption in the ``gradual`` kind (mariodoebler/test-time-adaptation)."""

CENTER_RESIZE = 256
"""Short side, in pixels, that ImageNet-C's ``Resize(256)`` gives the whole source image before the centre crop."""

CENTER_CROP = 224
"""Side, in pixels, of ImageNet-C's ``CenterCrop(224)`` of the resized image (the rendered size)."""


def domain_levels(kind: str, corruptions: Sequence[str], severity: int | None) -> tuple[tuple[str, int], ...]:
    """One pass of a domain kind's sequence: ``(corruption, severity)`` per level, in stream order.

    Args:
        kind: one of :data:`DOMAIN_KINDS`.
        corruptions: corruption names, in order (>= 1).
        severity: the ``cin-c`` severity, an integer in 1..5 (None for ``gradual``).
    """
    if kind == "cin-c":
        assert severity is not None
        return tuple((name, severity) for name in corruptions)
    if kind == "gradual":
        return tuple((name, level) for name in corruptions for level in GRADUAL_SEVERITIES)
    raise ValueError(f"kind must be one of {', '.join(DOMAIN_KINDS)}, got {kind!r}")


def center_crop(
    width: int, height: int, resize: int = CENTER_RESIZE, crop: int = CENTER_CROP
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """torchvision's ``Resize(resize)`` then ``CenterCrop(crop)`` on a PIL image (ImageNet-C's preprocessing
    with the defaults 256 and 224), as a resize of the whole image and a box cut from the resized image.

    The short side becomes ``resize`` and the long side ``int(resize · long / short)`` (truncated,
    as torchvision); the box is the ``crop``-pixel square whose left and top offsets are
    ``int(round(margin / 2))`` (Python's round: half to even, as torchvision). Resizing with PIL's
    bilinear filter and cropping the box gives torchvision's pixels exactly.

    Args:
        width, height: source image size in pixels, >= 1.
        resize: short side after resizing in pixels, >= ``crop``.
        crop: side of the square crop in pixels, >= 1.

    Returns:
        ``((resized width, resized height), (left, top, right, bottom))``, all in pixels; the box is in
        the resized image, right and bottom exclusive.
    """
    check_integer("width", width, 1)
    check_integer("height", height, 1)
    check_integer("crop", crop, 1)
    check_integer("resize", resize, crop)
    if width <= height:
        resized = (resize, int(resize * height / width))
    else:
        resized = (int(resize * width / height), resize)
    left = int(round((resized[0] - crop) / 2.0))
    top = int(round((resized[1] - crop) / 2.0))
    return resized, (left, top, left + crop, top + crop)


class DomainSchedule:
    """Random access to the steps of a domain stream: step ``k`` is level ``k mod L`` of :func:`domain_levels`.

    Offers what the plan needs of :class:`ccc.stream.schedule.StreamSchedule`: :meth:`step`.
    ``pair_index`` of a step counts the corruption segments of the stream (0, 1, …; one segment is
    one corruption's levels), ``path_position`` is the position inside the segment, ``cell`` is
    ``(4 · severity, 0)``, and there is no calibrated accuracy (None).
    """

    __slots__ = ("corruptions", "kind", "levels", "severity")

    def __init__(self, kind: str, corruptions: tuple[str, ...], severity: int | None) -> None:
        self.kind = kind
        self.corruptions = corruptions
        self.severity = severity
        self.levels = domain_levels(kind, corruptions, severity)

    def __reduce__(self) -> tuple[type, tuple]:
        return (DomainSchedule, (self.kind, self.corruptions, self.severity))

    @property
    def levels_per_corruption(self) -> int:
        """Consecutive steps of one corruption: 1 (``cin-c``) or 9 (``gradual``)."""
        return len(self.levels) // len(self.corruptions)

    def step(self, step: int) -> ScheduledStep:
        """The corruption and severity of step ``step`` (integer >= 0)."""
        check_non_negative_int("step", step)
        name, severity = self.levels[step % len(self.levels)]
        segment, position = divmod(step, self.levels_per_corruption)
        return ScheduledStep(
            step=step,
            pair_index=segment,
            path_position=position,
            cell=(round(severity / SEVERITY_STEP), 0),
            n1=name,
            s1=float(severity),
            n2=name,
            s2=0.0,
            calibrated_accuracy=None,  # type: ignore[arg-type]
        )
