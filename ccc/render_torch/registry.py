"""The torch corruptions by name: one entry per registered CPU corruption, filled as the families import.

Each family module (``noise``, ``blur``, ``weather``, ``digital``: the families of
:mod:`ccc.corruptions`) ends in ``register_torch_corruption(name, function)`` for each of its
corruptions; the package ``ccc.render_torch`` imports every module (:func:`ccc.registry.import_submodules`),
so the registry is full once the package is loaded. A torch corruption is registered under the
canonical name of a CPU corruption (:func:`ccc.corruptions.get_corruption`) and listed in its order;
``tests/ccc/render_torch/test_contract.py`` requires one for every CPU corruption.

The contract of a function: ``f(images, severities, random, dtype=torch.float64) -> Tensor`` with
``images`` float32 (B, 3, H, W) holding byte levels ``k / 255`` on the render device, ``severities``
float64 (B,) in (0, 5] on the host, ``random`` a :class:`~ccc.render_torch.random.SampleRandom` of the
B samples, ``dtype`` the working float precision (``torch.float64``: the CPU path's arithmetic;
``torch.float32``: the fast mode); it returns float32 (B, 3, H, W), the reference's value before its
uint8 truncation, divided by 255.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from ccc.corruptions import get_corruption
from ccc.registry import Registry

if TYPE_CHECKING:
    from .random import SampleRandom

__all__ = [
    "REGISTRY",
    "TorchCorruption",
    "TorchCorruptionFunction",
    "register_torch_corruption",
    "torch_corruption",
    "torch_corruptions",
]

TorchCorruptionFunction = Callable[[Tensor, Tensor, "SampleRandom", torch.dtype], Tensor]
"""``f(images, severities, random, dtype) -> Tensor`` (module docstring)."""


@dataclass(frozen=True)
class TorchCorruption:
    """One registered torch corruption.

    Attributes:
        name: the canonical name of its CPU corruption.
        function: its implementation (module docstring).
        order: the CPU corruption's index in ImageNet-C's order (the registry lists by it).
        family: the CPU corruption's family (``noise``, ``blur``, ``weather``, ``digital``), which is
            also the module that registers it.
    """

    name: str
    function: TorchCorruptionFunction
    order: int
    family: str


REGISTRY: Registry[TorchCorruption] = Registry("torch corruption", ordered=True)
"""Every torch corruption, in ImageNet-C's order."""


def register_torch_corruption(name: str, function: TorchCorruptionFunction) -> TorchCorruption:
    """Register ``function`` as the torch implementation of CPU corruption ``name`` (at the end of its
    family module); ValueError for a name that is not a registered CPU corruption's canonical name, or
    one already implemented."""
    entry = get_corruption(name)
    if entry.name != name:
        raise ValueError(f"register torch corruption {name!r} under its canonical name {entry.name!r}")
    return REGISTRY.register(TorchCorruption(name, function, entry.order, entry.family))


def torch_corruption(name: str) -> TorchCorruptionFunction:
    """The torch implementation of corruption ``name`` (a registered name or alias).

    Raises:
        ValueError: for an unknown name (listing the valid ones).
        NotImplementedError: for a registered corruption without a torch implementation.
    """
    canonical = get_corruption(name).name
    if canonical not in REGISTRY:
        raise NotImplementedError(f"corruption {canonical!r} has no torch implementation yet")
    return REGISTRY.get(canonical).function


def torch_corruptions(family: str | None = None) -> dict[str, TorchCorruptionFunction]:
    """Canonical name → torch function of every registered corruption (of ``family`` alone when given:
    ``noise``, ``blur``, ``weather`` or ``digital``), in ImageNet-C's order."""
    return {entry.name: entry.function for entry in REGISTRY if family is None or entry.family == family}
