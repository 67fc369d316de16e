"""The registry of corruptions: one frozen entry per corruption, looked up by name or alias.

Each family module (noise, blur, weather, digital) ends in ``register_corruption(Corruption(...))``
for each of its corruptions; the package ``ccc.corruptions`` imports every module
(:func:`ccc.registry.import_submodules`), so that the registry is full once the package is loaded and a
new family is one new module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from ccc.registry import Registry

from ._severity import ParameterTable, interpolate_table

CorruptionFunction = Callable[..., NDArray[Any]]
"""``function(image, parameters, rng, **settings)``: settings are a corruption set's structural constants."""


@dataclass(frozen=True)
class Corruption:
    """One registered corruption.

    Attributes:
        name: canonical name (CCC's short names ``elastic`` and ``jpeg``).
        family: ``"noise"``, ``"blur"``, ``"weather"`` or ``"digital"``.
        function: ``function(image uint8 HxWx3, parameters, rng, **settings) -> float or uint8 HxWx3``
            with values in [0, 255]; the caller truncates floats to uint8 as the reference does. The
            keyword ``settings`` are the structural constants a corruption set changes (fog's
            ``map_size``, frost's ``texture_scale``); their defaults are the ImageNet generator's.
        parameter_table: the ImageNet (224×224) parameters at severities 0..5 (scalars or tuples),
            interpolated linearly; other resolutions' tables are in :mod:`ccc.corruptions.sets`.
        random: whether the corruption draws from its generator.
        order: its index in ImageNet-C's order (0 gaussian_noise .. 14 jpeg, then the hold-out
            ones 15 speckle_noise .. 18 saturate); the registry, :data:`ccc.corruptions.CORRUPTIONS`
            and the seeds and calibration tables built on them follow it.
        holdout: True for the four ImageNet-C hold-out corruptions (never in CCC streams).
        aliases: other accepted names (ImageNet-C's long names).
    """

    name: str
    family: str
    function: CorruptionFunction
    parameter_table: ParameterTable
    random: bool
    order: int
    holdout: bool = False
    aliases: tuple[str, ...] = ()

    def parameters(self, severity: float, parameter_table: ParameterTable | None = None) -> Any:
        """Interpolated parameters at ``severity`` in (0, 5] (a float64 or a tuple of float64).

        ``parameter_table``: the table to interpolate (a corruption set's, of the same layout);
        ``None`` for this corruption's own (ImageNet) table. Spatter's last component (water 0 /
        mud 1) is a switch: it is taken from the upper bracketing integer severity instead of being
        interpolated.
        """
        values = self.parameters_of(np.array([severity], dtype=np.float64), parameter_table)[0]
        return values if values.ndim == 0 else tuple(values)

    def parameters_of(
        self, severities: NDArray[np.float64], parameter_table: ParameterTable | None = None
    ) -> NDArray[np.float64]:
        """:meth:`parameters` at every severity of ``severities`` (float64 (N,), each in [0, 5]) at once:
        float64 (N,) for a table of scalars, (N, P) for a table of P-tuples (rows equal, bit for bit, to
        :meth:`parameters` of each severity: :func:`~ccc.corruptions._severity.interpolate_table`)."""
        table = self.parameter_table if parameter_table is None else parameter_table
        values = interpolate_table(table, severities)
        if self.name == "spatter":
            upper = np.ceil(np.asarray(severities, dtype=np.float64)).astype(np.int64)
            values[:, -1] = np.asarray(table, dtype=np.float64)[upper, -1]
        return values


REGISTRY: Registry[Corruption] = Registry("corruption", ordered=True)
"""Every corruption, listed in ImageNet-C's order (``Corruption.order``); each family module
(``noise``, ``blur``, ``weather``, ``digital``) registers its own at its end."""


def register_corruption(corruption: Corruption) -> Corruption:
    """Add ``corruption`` (at the end of its family module); ValueError if its name or an alias is taken."""
    return REGISTRY.register(corruption)


def aliases() -> dict[str, str]:
    """Accepted alternative names → registered names (ImageNet-C's long names)."""
    return {alias: entry.name for entry in REGISTRY for alias in entry.aliases}


def canonical_name(name: object, parameter: str = "name") -> str:
    """The registered name for ``name`` or one of its aliases.

    Raises:
        ValueError: for an unknown name, listing every valid name.
    """
    if isinstance(name, str) and name in REGISTRY:
        return name
    alias_names = aliases()
    if isinstance(name, str) and name in alias_names:
        return alias_names[name]
    valid = ", ".join(REGISTRY.names() + list(alias_names))
    raise ValueError(f"unknown corruption {name!r} for {parameter}; available: {valid}")


def get_corruption(name: str) -> Corruption:
    """The registry entry for ``name`` (canonical name or alias); ValueError listing valid names otherwise."""
    return REGISTRY.get(canonical_name(name))


def list_corruptions(pattern: str = "*", include_holdout: bool = True) -> list[str]:
    """Registered names matching the shell-style ``pattern``, in registry order."""
    return [name for name in REGISTRY.names(pattern) if include_holdout or not REGISTRY.get(name).holdout]
