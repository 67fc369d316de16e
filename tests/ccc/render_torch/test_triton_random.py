"""The random streams' Triton kernels: the compositions' values in Triton's interpreter, bit for bit, and they
compile for an H100 (sm_90)."""

from __future__ import annotations

import re

import pytest
import torch

from ccc.render_torch import random

from .triton_kernels import compiled_for_hopper, fast_math_instructions, interpreted

kernels = pytest.importorskip("ccc.render_torch._triton.random")

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _signed(value: int) -> int:
    value &= MASK
    return value - (1 << 64) if value >> 63 else value


def _unshift(word: int, bits: int) -> int:
    """The inverse of ``word ^ (word >> bits)`` on 64-bit words."""
    value = word
    for _ in range(64 // bits + 1):
        value = word ^ (value >> bits)
    return value


def _key_of_first_word(word: int) -> int:
    """The draw key (int64) whose element 0 hashes to ``word``: splitmix64's finaliser inverted, minus γ."""
    value = _unshift(word, 31)
    value = _unshift((value * pow(0x94D049BB133111EB, -1, 1 << 64)) & MASK, 27)
    value = _unshift((value * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & MASK, 30)
    return _signed(value - GOLDEN)


WRAP_KEYS = [-1, 2**63 - 1, -(2**63), 0, _signed(-GOLDEN), _signed(-2 * GOLDEN)]
"""Keys whose sums with the offsets wrap past 2**63 or 2**64, or land on 0 (elements 0 and 1)."""


def _key_table() -> torch.Tensor:
    """int64 (5, 34): four samples' stream key tables and a sample of wrap-around keys, padded."""
    streams = random.SampleRandom(torch.tensor([3, 2**63 - 1, 10**15, 0]), stage=1)
    wrap = torch.tensor(WRAP_KEYS * 6, dtype=torch.int64)[: random.TABLED_DRAWS + 1]
    return torch.cat([streams._device_keys, wrap[None]])


def _draw_keys(draws: int) -> torch.Tensor:
    """(5, ``draws``) keys, a strided view of the table (as a stream's draws read them)."""
    return _key_table()[:, 2 : 2 + draws]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("draws", "count"), [(1, 1), (3, 7), (2, 1031), (6, 1)])
def test_uniform_draws_equal_the_composition(draws: int, count: int, dtype: torch.dtype) -> None:
    keys = _draw_keys(draws)
    with interpreted(kernels):
        ours = kernels.hashed_uniforms(keys, count, dtype)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, random._composed_uniforms(keys, count, dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_uniform_sequence_equals_the_composition(dtype: torch.dtype) -> None:
    counts = (1, 1, 1, 4, 4, 4, 16, 16, 16, 1100, 3)
    keys = _draw_keys(len(counts))
    draw, offsets = random._sequence_tables(counts, torch.device("cpu"))
    with interpreted(kernels):
        ours = kernels.hashed_uniform_sequence(keys, draw, offsets, dtype)
    expected = random._composed_uniform_sequence(keys, draw, offsets, dtype)
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("count", [1, 37, 1025])
def test_box_mullers_uniforms_equal_the_composition(count: int, dtype: torch.dtype) -> None:
    keys = _draw_keys(1)[:, 0]
    with interpreted(kernels):
        radius, angle = kernels.box_muller_uniforms(keys, count, dtype, random._ANGLE_SCALE)
    expected_radius, expected_angle = random._composed_box_muller_uniforms(keys, count, dtype)
    torch.testing.assert_close(radius, expected_radius, rtol=0, atol=0)
    torch.testing.assert_close(angle, expected_angle, rtol=0, atol=0)


def _poisson_case(rates: torch.Tensor, index: torch.Tensor, keys: torch.Tensor) -> None:
    lengths, total = random._poisson_layout(rates.reshape(-1))
    table_keys, starts = random._poisson_keys(rates.reshape(-1), lengths, total)
    width = rates.shape[1]
    with interpreted(kernels):
        ours = kernels.poisson_inversion(keys, index, table_keys, starts, lengths, width, random._LONGEST_TABLE)
    expected = random._composed_poisson_inversion(keys, index, table_keys, starts, lengths, width)
    assert torch.equal(ours, expected)


def test_poisson_counts_equal_the_composition() -> None:
    """Rates from 0 (a table of CDFs 1) to the largest exact one, and past it (rate 0's table), every sample
    looking up every table, in an odd shape."""
    rates = torch.tensor([[0.0, 0.3, 4.0, 59.0], [999.0, 1000.0, 2500.0, 0.0], [7.5, 0.0, 1000.0, 1.0]] * 2)
    rates = rates.to(torch.float64)[:5]
    index = torch.randint(0, 4, (5, 3, 13, 7), generator=torch.Generator().manual_seed(3))
    _poisson_case(rates, index, _draw_keys(1)[:, 0])


def test_poisson_counts_at_the_extreme_uniforms_equal_the_composition() -> None:
    """Uniforms 0 and 2**40 - 1 (keys made from the words): a uniform of 0 after a table of CDFs 1 (rate 0, all
    its keys equal to the next table's first), which torch.searchsorted places in that table, counts 0."""
    keys = torch.tensor([_key_of_first_word(0), _key_of_first_word(MASK), _key_of_first_word(1 << 24)])
    rates = torch.tensor([[0.0, 3.0], [0.0, 1000.0], [2.0, 0.0]], dtype=torch.float64)
    for table in range(2):
        index = torch.full((3, 5), table, dtype=torch.int64)
        _poisson_case(rates, index, keys)
    lengths, total = random._poisson_layout(rates.reshape(-1))
    table_keys, starts = random._poisson_keys(rates.reshape(-1), lengths, total)
    counts = random._composed_poisson_inversion(
        keys, torch.ones(3, 1, dtype=torch.int64), table_keys, starts, lengths, 2
    )
    assert counts[0, 0] == 0  # not the position in the rate-0 table before (negative)


def _launches() -> list[tuple[str, object]]:
    keys = _draw_keys(3)
    draw, offsets = random._sequence_tables((5, 2, 9), torch.device("cpu"))
    rates = torch.tensor([[0.0, 4.0], [2500.0, 9.0]], dtype=torch.float64)
    lengths, total = random._poisson_layout(rates.reshape(-1))
    table_keys, starts = random._poisson_keys(rates.reshape(-1), lengths, total)
    index = torch.zeros(2, 3, 4, dtype=torch.int64)
    return [
        ("uniforms", lambda: kernels.hashed_uniforms(keys, 11, torch.float32)),
        ("sequence", lambda: kernels.hashed_uniform_sequence(keys, draw, offsets, torch.float64)),
        ("box muller", lambda: kernels.box_muller_uniforms(keys[:, 0], 11, torch.float32, random._ANGLE_SCALE)),
        ("poisson", lambda: kernels.poisson_inversion(keys[:2, 0], index, table_keys, starts, lengths, 2, 1392)),
    ]


@pytest.mark.parametrize(("name", "launch"), _launches(), ids=[name for name, _ in _launches()])
def test_the_kernels_compile_for_an_h100(name: str, launch) -> None:  # noqa: ANN001
    [compiled] = compiled_for_hopper(kernels, launch)
    ptx = compiled["asm"]["ptx"]
    assert compiled["options"]["enable_fp_fusion"] is False
    assert ".target sm_90" in ptx and compiled["asm"]["cubin"]
    assert not re.search(r"\bfma\.", ptx), "no contracted product"
    assert not fast_math_instructions(compiled["asm"]["llir"])
    assert not re.search(r"shr\.s64\s+%rd\d+, %rd\d+, (16|24|27|30|31|32|40);", ptx), "logical shifts of the words"


def test_the_operators_on_meta_give_the_shapes_of_their_results() -> None:
    keys = torch.zeros(4, 3, dtype=torch.int64, device="meta")
    assert random.hashed_uniforms(keys, 5, torch.float64).shape == (4, 3, 5)
    sequence = random.hashed_uniform_sequence(keys, keys[0], keys[0], torch.float32)
    assert (sequence.shape, sequence.dtype) == ((4, 3), torch.float32)
    radius, angle = random.box_muller_uniforms(keys[:, 0], 7, torch.float32)
    assert radius.shape == angle.shape == (4, 7) and angle.dtype == torch.float32
    index = torch.zeros(4, 2, 6, dtype=torch.int64, device="meta")
    counts = random.poisson_inversion(keys[:, 0], index, keys[0], keys[0], keys[0], 3)
    assert (counts.shape, counts.dtype) == ((4, 2, 6), torch.float32)
