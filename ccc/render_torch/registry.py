"""The torch corruptions by name: one entry per registered CPU corruption, filled as the families import.

Each family module (``noise``, ``blur``, ``weather``, ``digital``: the families of
:mod:`ccc.corruptions`) ends in ``register_torch_corruption(name, function)`` for each of its
corruptions; the package ``ccc.render_torch`` imports every module (:func:`ccc.registry.import_submodules`),
so the registry is full once the package is loaded. A torch corruption is registered under the
canonical name of a CPU corruption (:func:`ccc.corruptions.get_corruption`) and listed in its order;
``tests/ccc/render_torch/test_contract.py`` requires one for every CPU corruption.

The contract: a corruption is registered as its host half, ``prepare(severities, random, size, dtype,
upload) -> step``. ``severities`` are float64 (B,) in (0, 5] on the host, ``random`` a
:class:`~ccc.render_torch.random.SampleRandom` of the B samples on the render device, ``size`` the images'
(height, width) in pixels, ``dtype`` the working float precision (``torch.float64``: the CPU path's
arithmetic; ``torch.float32``: the fast mode) and ``upload`` the batch's
:class:`~ccc.render_torch._upload.BatchUpload`. It does the corruption's host work (parameters, tables,
host draws through ``random.on_host()``), stages what the device needs in ``upload`` and returns the device
half, ``step(images) -> Tensor``, which the pipeline calls once the batch's upload is sent: ``images``
float32 (B, 3, H, W) holding byte levels ``k / 255`` on the render device → float32 (B, 3, H, W), the
reference's value before its uint8 truncation, divided by 255. So a batch's host work all comes first and
all its host data reaches the device in one copy. A registered corruption is also callable whole,
``corruption(images, severities, random, dtype=torch.float64)`` (both halves, with an upload of its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from ccc.corruptions import get_corruption
from ccc.registry import Registry

from ._upload import BatchUpload

if TYPE_CHECKING:
    from .random import SampleRandom

__all__ = [
    "REGISTRY",
    "CorruptionStep",
    "PrepareCorruption",
    "TorchCorruption",
    "register_torch_corruption",
    "torch_corruption",
    "torch_corruptions",
]

CorruptionStep = Callable[[Tensor], Tensor]
"""A corruption's device half, ``step(images) -> Tensor`` (module docstring)."""

PrepareCorruption = Callable[[Tensor, "SampleRandom", tuple[int, int], torch.dtype, BatchUpload], CorruptionStep]
"""A corruption's host half, ``prepare(severities, random, size, dtype, upload) -> step`` (module docstring)."""


@dataclass(frozen=True)
class TorchCorruption:
    """One registered torch corruption.

    Attributes:
        name: the canonical name of its CPU corruption.
        prepare: its host half, which returns its device half (module docstring).
        order: the CPU corruption's index in ImageNet-C's order (the registry lists by it).
        family: the CPU corruption's family (``noise``, ``blur``, ``weather``, ``digital``), which is
            also the module that registers it.
    """

    name: str
    prepare: PrepareCorruption
    order: int
    family: str

    def __call__(
        self, images: Tensor, severities: Tensor, random: SampleRandom, dtype: torch.dtype = torch.float64
    ) -> Tensor:
        """The corruption of ``images`` (float32 (B, 3, H, W) byte levels ``k / 255`` on the render device) at
        host ``severities`` (float64 (B,) in (0, 5]), drawing from ``random``: both halves, the host data in
        one copy of its own. Returns float32 (B, 3, H, W) (module docstring)."""
        upload = BatchUpload(images.device)
        step = self.prepare(severities, random, tuple(images.shape[-2:]), dtype, upload)
        upload.send()
        return step(images)


REGISTRY: Registry[TorchCorruption] = Registry("torch corruption", ordered=True)
"""Every torch corruption, in ImageNet-C's order."""


def register_torch_corruption(name: str, prepare: PrepareCorruption) -> TorchCorruption:
    """Register ``prepare`` (module docstring) as the torch implementation of CPU corruption ``name`` (at the end of its
    family module); ValueError for a name that is not a registered CPU corruption's canonical name, or
    one already implemented."""
    entry = get_corruption(name)
    if entry.name != name:
        raise ValueError(f"register torch corruption {name!r} under its canonical name {entry.name!r}")
    return REGISTRY.register(TorchCorruption(name, prepare, entry.order, entry.family))


def torch_corruption(name: str) -> TorchCorruption:
    """The torch implementation of corruption ``name`` (a registered name or alias), callable whole.

    Raises:
        ValueError: for an unknown name (listing the valid ones).
        NotImplementedError: for a registered corruption without a torch implementation.
    """
    canonical = get_corruption(name).name
    if canonical not in REGISTRY:
        raise NotImplementedError(f"corruption {canonical!r} has no torch implementation yet")
    return REGISTRY.get(canonical)


def torch_corruptions(family: str | None = None) -> dict[str, TorchCorruption]:
    """Canonical name → torch corruption (callable whole) of every registered corruption (of ``family`` alone
    when given: ``noise``, ``blur``, ``weather`` or ``digital``), in ImageNet-C's order."""
    return {entry.name: entry for entry in REGISTRY if family is None or entry.family == family}
