"""libjpeg-turbo's fixed-point constants, shared by the integer JPEG round trip (:mod:`.jpeg`, the ATen
compositions) and its Triton kernels (:mod:`._triton.jpeg`)."""

from __future__ import annotations

__all__ = ["CONST_BITS", "FORWARD_SHIFTS", "INVERSE_SHIFTS", "fix16"]

CONST_BITS = 13
"""Fraction bits of the islow DCTs' constants."""
FORWARD_SHIFTS = (CONST_BITS - 2, CONST_BITS + 2)
"""Descale of the forward DCT's row and column passes (``CONST_BITS ∓ PASS1_BITS``, PASS1_BITS = 2)."""
INVERSE_SHIFTS = (CONST_BITS - 2, CONST_BITS + 2 + 3)
"""Descale of the inverse DCT's column and row passes (the last one also divides by 8)."""


def fix16(value: float) -> int:
    """``value`` in 16-bit fixed point, as libjpeg-turbo's colour converters round it."""
    return int(value * 65536 + 0.5)
