"""SampleRandom: per-sample streams independent of the batch, the device and the call's neighbours."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from ccc.render_torch.random import SampleRandom

MASK = (1 << 64) - 1


def _mix_reference(word: int) -> int:
    word = ((word ^ (word >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    word = ((word ^ (word >> 27)) * 0x94D049BB133111EB) & MASK
    return word ^ (word >> 31)


def _word_reference(seed: int, stage: int, draw: int, element: int) -> int:
    """The 64-bit word of (seed, stage, draw, element) in pure Python unsigned arithmetic."""
    sample_key = _mix_reference(_mix_reference(seed) ^ (((stage + 1) * 0xD1B54A32D192ED03) & MASK))
    key = _mix_reference((sample_key + (draw + 1) * 0x9E3779B97F4A7C15) & MASK)
    return _mix_reference((key + (element + 1) * 0x9E3779B97F4A7C15) & MASK)


def test_uniform_words_equal_an_unsigned_python_reimplementation():
    seeds = [0, 1, 12345, 2**63 - 1, 7 * 10**17]
    random = SampleRandom(torch.tensor(seeds), stage=1)
    random.uniform(2)
    values = random.uniform(3, 5)
    for row, seed in enumerate(seeds):
        for element in (0, 7, 14):
            expected = (_word_reference(seed, 1, 1, element) >> 40) / 2**24
            assert values[row].flatten()[element].item() == expected


def test_integers_equal_the_multiply_shift_of_the_reference_word():
    values = SampleRandom(torch.tensor([99, 2**62])).integers(-3, 1000, 6)
    for row, seed in enumerate([99, 2**62]):
        for element in range(6):
            assert values[row, element].item() == -3 + (((_word_reference(seed, 0, 0, element) >> 32) * 1003) >> 32)


def test_a_sample_draws_the_same_values_whatever_the_batch():
    alone = SampleRandom(torch.tensor([42]))
    batch = SampleRandom(torch.tensor([7, 8, 42, 9]))
    for draw in ("uniform", "normal"):
        assert torch.equal(getattr(alone, draw)(3, 4)[0], getattr(batch, draw)(3, 4)[2])
    assert torch.equal(alone.integers(0, 10, 5)[0], batch.integers(0, 10, 5)[2])
    assert torch.equal(alone.poisson(torch.full((1, 50), 4.0))[0], batch.poisson(torch.full((4, 50), 4.0))[2])


def test_the_same_construction_gives_the_same_values():
    first, second = SampleRandom(torch.arange(5), 1), SampleRandom(torch.arange(5), 1)
    assert torch.equal(first.normal(10), second.normal(10))
    rates = torch.rand(5, 10, generator=torch.Generator().manual_seed(0)) * 30
    assert torch.equal(first.poisson(rates), second.poisson(rates))


def test_seeds_stages_and_draws_differ():
    a = SampleRandom(torch.tensor([1, 2]), 0).uniform(1000)
    assert not torch.equal(a[0], a[1])
    assert not torch.equal(a, SampleRandom(torch.tensor([1, 2]), 1).uniform(1000))
    random = SampleRandom(torch.tensor([1, 2]))
    assert not torch.equal(random.uniform(1000), random.uniform(1000))


def test_a_subset_continues_the_streams_and_shares_the_draw_counter():
    whole = SampleRandom(torch.tensor([5, 6, 7]))
    reference = SampleRandom(torch.tensor([5, 6, 7]))
    reference.uniform(4)
    expected = reference.uniform(4)
    whole.uniform(4)
    part = whole.subset(torch.tensor([2, 0]))
    assert torch.equal(part.uniform(4), expected[[2, 0]])
    assert torch.equal(whole.uniform(4), reference.uniform(4))


def test_uniform_and_normal_match_their_distributions():
    random = SampleRandom(torch.arange(4))
    uniform = random.uniform(50000).double().flatten().numpy()
    normal = random.normal(50000).double().flatten().numpy()
    assert 0.0 <= uniform.min() and uniform.max() < 1.0
    assert stats.kstest(uniform, "uniform").statistic < 0.005
    assert stats.kstest(normal, "norm").statistic < 0.005
    assert abs(normal.mean()) < 0.01 and abs(normal.std() - 1) < 0.01


@pytest.mark.parametrize("rate", [0.0, 0.3, 4.0, 59.0, 999.0, 2500.0])
def test_poisson_matches_its_distribution(rate: float):
    samples = SampleRandom(torch.arange(4)).poisson(torch.full((4, 25000), rate)).double().flatten().numpy()
    assert np.all(samples == np.floor(samples)) and samples.min() >= 0
    if rate == 0.0:
        assert samples.max() == 0.0
        return
    assert abs(samples.mean() - rate) < 5 * np.sqrt(rate / samples.size)
    assert abs(samples.var() / rate - 1) < 0.05
    counts = np.arange(int(rate + 6 * np.sqrt(rate) + 6))
    empirical = np.searchsorted(np.sort(samples), counts, side="right") / samples.size
    assert np.max(np.abs(empirical - stats.poisson.cdf(counts, rate))) < 0.01


def test_mixed_rates_in_one_call_each_follow_their_rate():
    rates = torch.tensor([0.5, 20.0, 1500.0]).repeat_interleave(20000).reshape(1, -1)
    samples = SampleRandom(torch.tensor([3])).poisson(rates)[0].reshape(3, -1).double()
    assert torch.allclose(samples.mean(1), torch.tensor([0.5, 20.0, 1500.0], dtype=torch.float64), rtol=0.02)


def test_poisson_values_do_not_depend_on_the_other_rates_of_the_batch():
    rates = torch.linspace(0, 60, 400).reshape(1, -1)
    alone = SampleRandom(torch.tensor([11])).poisson(rates)
    others = torch.rand(3, 400, generator=torch.Generator().manual_seed(1)) * 900
    together = SampleRandom(torch.tensor([5, 11, 6, 7])).poisson(torch.cat([others[:1], rates, others[1:]]))
    assert torch.equal(alone[0], together[1])


def test_host_draws_equal_device_draws_and_share_the_draw_counter():
    seeds = torch.tensor([3, 99, 2**40])
    device_first, host_first = SampleRandom(seeds), SampleRandom(seeds)
    assert torch.equal(host_first.on_host().uniform(2), device_first.uniform(2))
    assert torch.equal(host_first.normal(5), device_first.normal(5))


def test_draws_land_on_the_requested_device_from_host_seeds():
    random = SampleRandom(torch.tensor([1, 2]), stage=1, device="meta")
    assert random.uniform(3).device.type == "meta" and random.on_host().uniform().device.type == "cpu"
