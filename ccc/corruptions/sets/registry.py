"""The registry of corruption sets: one public generator's parameters for one image resolution.

ImageNet-C's corruptions were published for several resolutions, each by its own script with its own
parameter tables: ImageNet at 224×224 (``make_imagenet_c.py``), CIFAR-10/100 at 32×32
(``make_cifar_c.py``), Tiny-ImageNet and down-sampled ImageNet at 64×64 (``make_tinyimagenet_c.py``,
``make_imagenet_64_c.py``). The functions are the same; what differs is data — the parameter table of
every corruption and a few structural constants (fog's plasma map size, frost's texture scale). A
:class:`CorruptionSet` holds that data; :func:`ccc.corruptions.corrupt` applies a corruption with the
set named by its ``corruption_set`` argument. Each module of this package registers one set (or sets
sharing their tables) at its end with :func:`register_corruption_set`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ccc.registry import Registry

from ..registry import Corruption, ParameterTable


@dataclass(frozen=True)
class CorruptionSet:
    """The parameters of every corruption for one resolution.

    Attributes:
        name: the set's name (``"imagenet"``, ``"cifar"``, ...).
        image_size: side in pixels of the square images the set's public generator corrupts.
        any_size: True when images of any size from 32×32 are accepted, parameters kept in pixels
            (the ``imagenet`` set, exact at 224×224); False when only ``image_size`` × ``image_size``
            images are (their scripts hard-code that size).
        order: position in :func:`list_corruption_sets`.
        source: the public script the numbers come from.
        parameter_tables: corruption name → its parameter table at severities 0..5 (same layout as
            the registered corruption's); ``None`` for the tables registered with the corruptions
            (ImageNet's, :attr:`ccc.corruptions.Corruption.parameter_table`).
        settings: corruption name → keyword arguments its function takes in this set (structural
            constants; a corruption not listed runs with its function's ImageNet defaults).
        python_floats: whether interpolated parameters are handed over as Python floats (the
            public resolution scripts' literals) instead of numpy float64 scalars (what the CCC
            generator's ``interp1d`` gives for ImageNet). The numbers are the same; under numpy 2
            (NEP 50) a numpy float64 times a float32 array is float64, a Python float times it
            float32, which moves some values by one level after truncation (snow's blend). Under
            numpy 1, for which the generators were written, the two behaved alike.
    """

    name: str
    image_size: int
    any_size: bool
    order: int
    source: str
    parameter_tables: Mapping[str, ParameterTable] | None = None
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    python_floats: bool = False

    def parameter_table(self, corruption: Corruption) -> ParameterTable:
        """The table of ``corruption`` in this set; ValueError if the set has none for it."""
        if self.parameter_tables is None:
            return corruption.parameter_table
        if corruption.name not in self.parameter_tables:
            raise ValueError(
                f"corruption_set {self.name!r} has no parameters for {corruption.name!r}; "
                f"it defines: {', '.join(self.parameter_tables)}"
            )
        return self.parameter_tables[corruption.name]

    def parameters(self, corruption: Corruption, severity: float) -> Any:
        """``corruption``'s interpolated parameters in this set at ``severity`` in (0, 5]: a scalar or a
        tuple, of numpy float64 or (``python_floats``) Python floats."""
        values = corruption.parameters(severity, self.parameter_table(corruption))
        if not self.python_floats:
            return values
        if isinstance(values, tuple):
            return tuple(float(value) for value in values)
        return float(values)

    def function_settings(self, corruption: Corruption) -> Mapping[str, Any]:
        """Keyword arguments for ``corruption.function`` in this set (empty: the ImageNet defaults)."""
        return self.settings.get(corruption.name, MappingProxyType({}))

    def check_image_size(self, height: int, width: int, parameter: str = "image") -> None:
        """ValueError, naming ``parameter``, the set and its size, for an image the set is not defined for."""
        if not self.any_size and (height, width) != (self.image_size, self.image_size):
            raise ValueError(
                f"{parameter} must be {self.image_size}x{self.image_size} pixels for corruption_set "
                f"{self.name!r} (defined for that size only, by {self.source}), got {height}x{width}"
            )


REGISTRY: Registry[CorruptionSet] = Registry("corruption_set", ordered=True)
"""Every corruption set, listed by ``CorruptionSet.order``; each module of this package registers its own."""


def register_corruption_set(corruption_set: CorruptionSet) -> CorruptionSet:
    """Add ``corruption_set`` (at the end of its module); ValueError if its name or order is taken."""
    return REGISTRY.register(corruption_set)


def get_corruption_set(name: str) -> CorruptionSet:
    """The set called ``name``; ValueError listing the valid names otherwise."""
    return REGISTRY.get(name)


def list_corruption_sets(pattern: str = "*") -> list[str]:
    """Names of the registered sets matching the shell-style ``pattern``, in registry order."""
    return REGISTRY.names(pattern)
