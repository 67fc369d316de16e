"""The registry of corruptions: one frozen entry per corruption, looked up by name or alias."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import numpy as np
from numpy.typing import NDArray

from . import blur, digital, noise, weather
from ._random import RandomSource
from ._severity import interpolate_scalar, interpolate_tuple

ParameterTable = Sequence[Union[float, Sequence[float]]]
CorruptionFunction = Callable[[NDArray[np.uint8], Any, RandomSource], NDArray[Any]]


@dataclass(frozen=True)
class Corruption:
    """One registered corruption.

    Attributes:
        name: canonical name (CCC's short names ``elastic`` and ``jpeg``).
        family: ``"noise"``, ``"blur"``, ``"weather"`` or ``"digital"``.
        function: ``function(image uint8 HxWx3, parameters, rng) -> float or uint8 HxWx3`` with values
            in [0, 255]; the caller truncates floats to uint8 as the reference does.
        parameter_table: parameters at severities 0..5 (scalars or tuples), interpolated linearly.
        random: whether the corruption draws from its generator.
        holdout: True for the four ImageNet-C hold-out corruptions (never in CCC streams).
        aliases: other accepted names (ImageNet-C's long names).
    """

    name: str
    family: str
    function: CorruptionFunction
    parameter_table: ParameterTable
    random: bool
    holdout: bool = False
    aliases: tuple[str, ...] = ()

    def parameters(self, severity: float) -> Any:
        """Interpolated parameters at ``severity`` in (0, 5] (a float64 or a tuple of float64).

        Spatter's last component (water 0 / mud 1) is a switch: it is taken from the upper
        bracketing integer severity instead of being interpolated.
        """
        if isinstance(self.parameter_table[0], (int, float)):
            return interpolate_scalar(self.parameter_table, severity)  # type: ignore[arg-type]
        values = interpolate_tuple(self.parameter_table, severity)  # type: ignore[arg-type]
        if self.name == "spatter":
            upper = int(np.ceil(severity))
            values = values[:-1] + (np.float64(self.parameter_table[upper][-1]),)  # type: ignore[index]
        return values


_ENTRIES = (
    Corruption("gaussian_noise", "noise", noise.gaussian_noise, noise.GAUSSIAN_NOISE_TABLE, random=True),
    Corruption("shot_noise", "noise", noise.shot_noise, noise.SHOT_NOISE_TABLE, random=True),
    Corruption("impulse_noise", "noise", noise.impulse_noise, noise.IMPULSE_NOISE_TABLE, random=True),
    Corruption("defocus_blur", "blur", blur.defocus_blur, blur.DEFOCUS_BLUR_TABLE, random=False),
    Corruption("glass_blur", "blur", blur.glass_blur, blur.GLASS_BLUR_TABLE, random=True),
    Corruption("motion_blur", "blur", blur.motion_blur, blur.MOTION_BLUR_TABLE, random=True),
    Corruption("zoom_blur", "blur", blur.zoom_blur, blur.ZOOM_BLUR_TABLE, random=False),
    Corruption("snow", "weather", weather.snow, weather.SNOW_TABLE, random=True),
    Corruption("frost", "weather", weather.frost, weather.FROST_TABLE, random=True),
    Corruption("fog", "weather", weather.fog, weather.FOG_TABLE, random=True),
    Corruption("brightness", "digital", digital.brightness, digital.BRIGHTNESS_TABLE, random=False),
    Corruption("contrast", "digital", digital.contrast, digital.CONTRAST_TABLE, random=False),
    Corruption(
        "elastic", "digital", digital.elastic, digital.ELASTIC_TABLE, random=True, aliases=("elastic_transform",)
    ),
    Corruption("pixelate", "digital", digital.pixelate, digital.PIXELATE_TABLE, random=False),
    Corruption("jpeg", "digital", digital.jpeg, digital.JPEG_TABLE, random=False, aliases=("jpeg_compression",)),
    Corruption("speckle_noise", "noise", noise.speckle_noise, noise.SPECKLE_NOISE_TABLE, random=True, holdout=True),
    Corruption("gaussian_blur", "blur", blur.gaussian_blur, blur.GAUSSIAN_BLUR_TABLE, random=False, holdout=True),
    Corruption("spatter", "weather", weather.spatter, weather.SPATTER_TABLE, random=True, holdout=True),
    Corruption("saturate", "digital", digital.saturate, digital.SATURATE_TABLE, random=False, holdout=True),
)

REGISTRY: dict[str, Corruption] = {entry.name: entry for entry in _ENTRIES}
ALIASES: dict[str, str] = {alias: entry.name for entry in _ENTRIES for alias in entry.aliases}

CORRUPTIONS: tuple[str, ...] = tuple(entry.name for entry in _ENTRIES if not entry.holdout)
"""The 15 ImageNet-C corruptions used by CCC, in ImageNet-C's (and the CCC generator's) order."""

HOLDOUT_CORRUPTIONS: tuple[str, ...] = tuple(entry.name for entry in _ENTRIES if entry.holdout)
"""The 4 ImageNet-C hold-out corruptions (for tuning hyper-parameters such as a reset interval)."""


def canonical_name(name: object, parameter: str = "name") -> str:
    """The registered name for ``name`` or one of its aliases.

    Raises:
        ValueError: for an unknown name, listing every valid name.
    """
    if isinstance(name, str):
        if name in REGISTRY:
            return name
        if name in ALIASES:
            return ALIASES[name]
    valid = ", ".join(list(REGISTRY) + list(ALIASES))
    raise ValueError(f"unknown corruption {name!r} for {parameter}; available: {valid}")


def get_corruption(name: str) -> Corruption:
    """The registry entry for ``name`` (canonical name or alias); ValueError listing valid names otherwise."""
    return REGISTRY[canonical_name(name)]


def list_corruptions(pattern: str = "*", include_holdout: bool = True) -> list[str]:
    """Registered names matching the shell-style ``pattern``, in registry order."""
    return [
        entry.name
        for entry in _ENTRIES
        if fnmatch.fnmatchcase(entry.name, pattern) and (include_holdout or not entry.holdout)
    ]
