"""Argument checks shared by the library (ccc and tta_eval configs and entry points); each raises ValueError
naming the parameter."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Collection


def check_positive(name: str, value: float) -> None:
    """Require a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_non_negative(name: str, value: float) -> None:
    """Require a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def check_in_range(
    name: str, value: float, low: float, high: float, *, include_low: bool = True, include_high: bool = True
) -> None:
    """Require ``value`` in the interval from ``low`` to ``high`` (ends included unless told otherwise)."""
    is_number = not isinstance(value, bool) and isinstance(value, (int, float))
    above_low = is_number and (value >= low if include_low else value > low)
    below_high = is_number and (value <= high if include_high else value < high)
    if not (above_low and below_high):
        interval = f"{'[' if include_low else '('}{low:g}, {high:g}{']' if include_high else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


MAX_SAMPLES = 10**15
"""Upper bound of sample counts (windows, spans, stream limits): far beyond any stream, well inside int64."""

MAX_BATCH_SIZE = 2**16
"""Upper bound of a batch size (65,536 ImageNet images are already ~40 GB as float tensors)."""


MAX_IMAGE_SIZE = 2**14
"""Upper bound of an image side in pixels."""


def check_integer(
    name: str, value: object, minimum: int, maximum: int | None = None, *, error: type[ValueError] = ValueError
) -> int:
    """Require an integer (a Python or NumPy integer, not a bool) >= ``minimum`` (and <= ``maximum`` when
    given); returns it as a Python int.

    error: the ValueError subclass to raise, so that a module's checks raise its own error type
    (e.g. ``PlanError``).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise error(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise error(f"{name} must be an integer in [{minimum:,}, {maximum:,}], got {int(value):,}")
    return int(value)


def check_positive_int(
    name: str, value: object, at_most: int | None = None, *, error: type[ValueError] = ValueError
) -> int:
    """Require an integer >= 1 (and <= ``at_most`` when given); returns it as a Python int
    (see :func:`check_integer`)."""
    return check_integer(name, value, 1, at_most, error=error)


def check_non_negative_int(name: str, value: object, *, error: type[ValueError] = ValueError) -> int:
    """Require an integer >= 0; returns it as a Python int (see :func:`check_integer`)."""
    return check_integer(name, value, 0, error=error)


LOADER_WORKERS_PER_CPU = 4
"""DataLoader worker processes allowed per CPU of this machine (more than one: a worker may wait on the
network or the disk rather than compute)."""

MIN_LOADER_WORKERS_LIMIT = 16
"""The worker limit on a machine with few CPUs."""


def max_loader_workers() -> int:
    """Most DataLoader worker processes a stream loader may start: 4 per CPU of this machine
    (``os.cpu_count()``), or 16 where that is more. Each is a process of its own (about 15 MB, and a copy of the
    stream); torch only warns past the CPU count, and 1,000,000 forked about 1,450 before memory ran out."""
    return max(MIN_LOADER_WORKERS_LIMIT, LOADER_WORKERS_PER_CPU * (os.cpu_count() or 1))


def check_loader_workers(name: str, value: object) -> int:
    """Require a DataLoader worker count in [0, :func:`max_loader_workers`]; returns it as a Python int.
    The one check of every loader's ``num_workers`` (``stream_loader``, tta-eval's ``StreamOptions``)."""
    count = check_integer(name, value, 0)
    limit = max_loader_workers()
    if count > limit:
        raise ValueError(
            f"{name} must be an integer in [0, {limit:,}] ({LOADER_WORKERS_PER_CPU} worker processes per CPU of "
            f"this machine's {os.cpu_count() or 1}, or {MIN_LOADER_WORKERS_LIMIT} if that is more), got {count:,}"
        )
    return count


def check_choice(name: str, value: str, choices: Collection[str]) -> None:
    """Require ``value`` to be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(sorted(choices))}; got {value!r}")
