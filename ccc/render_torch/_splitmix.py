"""The integer arithmetic of the renderer's random streams (splitmix64), shared by :mod:`.random` (the ATen
compositions) and its Triton kernels (:mod:`._triton.random`): the constants and the widths of the values drawn
from a 64-bit word."""

from __future__ import annotations

__all__ = ["GOLDEN", "MIX_1", "MIX_2", "POISSON_BITS", "UNIFORM_BITS", "UNIFORM_SCALE", "signed"]


def signed(value: int) -> int:
    """A Python integer modulo 2**64 as the int64 with the same bits."""
    value %= 1 << 64
    return value - (1 << 64) if value >= 1 << 63 else value


GOLDEN = signed(0x9E3779B97F4A7C15)
"""splitmix64's increment (the golden ratio's 64 fraction bits), as an int64."""
MIX_1 = signed(0xBF58476D1CE4E5B9)
"""The first multiplier of splitmix64's finaliser, as an int64."""
MIX_2 = signed(0x94D049BB133111EB)
"""The second multiplier of splitmix64's finaliser, as an int64."""
UNIFORM_BITS = 24
"""Bits of a uniform: ``k / 2**24`` for ``k`` a word's top 24 bits (exact in float32)."""
UNIFORM_SCALE = 1.0 / (1 << UNIFORM_BITS)
POISSON_BITS = 40
"""Bits of the Poisson inversion's uniforms and of its CDF tables' keys."""
