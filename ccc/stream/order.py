"""The order in which a CCC stream visits corruptions.

A CCC stream walks a chain of corruption pairs: it starts with ``(n1, n2)``, follows the severity
path from "only n1" to "only n2" (:mod:`ccc.stream.paths`), then continues with ``(n2, n3)``, and so on.
:func:`reference_corruption_order` gives the chain ``n1, n2, n3, ...`` the public generator draws
for a seed, reproduced exactly. The difficulty presets (target accuracy and corruptions) belong to
the calibration table (:class:`ccc.calibration.DifficultyPreset`).

Corruption names are those of the published calibration matrices (``"elastic"``, ``"jpeg"``, ...).

Built on this: :mod:`ccc.stream.schedule` (the chain of pairs and their severity paths, step by step) and
:mod:`ccc.stream.plan` (the pure per-sample plan, ``plan_sample(plan, index)``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ccc.validation import check_non_negative_int

__all__ = ["reference_corruption_order"]


def reference_corruption_order(corruptions: Sequence[str], seed: int, count: int) -> list[str]:
    """Return the first ``count`` corruption names of the public generator's chain for ``seed``.

    The public generator seeds Python's ``random`` with ``seed`` and draws nothing else from it
    before its first ``random.choice`` (its other seeding and all image randomness use torch and
    numpy). It draws ``n1 = choice(corruptions)``, then ``n2 = choice(corruptions)`` again until
    ``n2 != n1``; each time a severity path ends, ``n1 <- n2`` and a new ``n2`` is drawn the same
    way. The returned list is ``[n1, n2, n3, ...]``: consecutive entries are the pairs visited, so
    entries ``k`` and ``k + 1`` form the ``k``-th pair. A longer ``count`` extends a shorter one.

    A private ``random.Random(seed)`` is used; the global ``random`` state is left untouched.
    ``random.choice`` on a sequence has drawn the same values for a given seed since Python 3.2.

    Args:
        corruptions: at least two distinct names, in the order of the public generator's list
            (e.g. ``RESNET50_DIFFICULTY_PRESETS["easy"].corruptions`` of :mod:`ccc.calibration`);
            duplicates are rejected.
        seed: non-negative integer (the paper uses 43, 44, 45).
        count: number of names to return, >= 0.

    Raises:
        ValueError: if an argument is invalid; the message names it and shows the received value.
    """
    names = list(corruptions) if not isinstance(corruptions, str) else None
    if names is None or not all(isinstance(name, str) for name in names):
        raise ValueError(f"corruptions must be a sequence of corruption names, got {corruptions!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"corruptions must not repeat names, got {', '.join(map(repr, repeated))} more than once")
    if len(names) < 2:
        raise ValueError(f"corruptions must hold at least 2 distinct names, got {names!r}")
    check_non_negative_int("seed", seed)
    check_non_negative_int("count", count)

    generator = random.Random(seed)
    order: list[str] = []
    current = generator.choice(names)
    while len(order) < count:
        order.append(current)
        following = generator.choice(names)
        while following == current:
            following = generator.choice(names)
        current = following
    return order
