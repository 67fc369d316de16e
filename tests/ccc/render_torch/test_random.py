"""SampleRandom: per-sample streams independent of the batch, the device and the call's neighbours."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from ccc.render_torch._upload import BatchUpload
from ccc.render_torch.random import TABLED_DRAWS, SampleRandom

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


def test_consecutive_draws_in_one_computation_equal_the_draws_one_by_one():
    seeds = torch.tensor([3, 2**63 - 1, 10**15])
    one_by_one, at_once = SampleRandom(seeds, stage=1), SampleRandom(seeds, stage=1)
    one_by_one.uniform(2)
    at_once.uniform(2)
    expected = torch.stack([one_by_one.uniform(4, 3) for _ in range(5)], dim=1)
    assert torch.equal(at_once.uniform_draws(5, 4, 3), expected)
    assert torch.equal(at_once.normal(6), one_by_one.normal(6))  # the counter moved on by five draws
    assert (at_once.uniform_draws(2, 7)[:, 1].flatten()[4] * 2**24).item() == _word_reference(
        seeds[0].item(), 1, 8, 4
    ) >> 40


def test_draws_past_the_key_table_hash_their_keys_to_the_same_words():
    seeds = torch.tensor([5, 2**63 - 1])
    one_by_one, at_once = SampleRandom(seeds, stage=0), SampleRandom(seeds, stage=0)
    expected = torch.stack([one_by_one.uniform(3) for _ in range(TABLED_DRAWS + 3)], dim=1)
    at_once.uniform_draws(TABLED_DRAWS - 2, 3)
    assert torch.equal(at_once.uniform_draws(5, 3), expected[:, TABLED_DRAWS - 2 :])  # straddles the table's end
    for draw in (TABLED_DRAWS - 1, TABLED_DRAWS, TABLED_DRAWS + 2):
        assert (expected[1, draw, 2] * 2**24).item() == _word_reference(2**63 - 1, 0, draw, 2) >> 40


@pytest.mark.parametrize("before", [0, TABLED_DRAWS - 3])
def test_a_sequence_of_draws_of_different_shapes_equals_the_calls_one_by_one(before: int):
    """In the key table and, from ``TABLED_DRAWS - 3`` draws in, across its end."""
    seeds = torch.tensor([11, 2**63 - 1, 10**12])
    one_by_one, at_once = SampleRandom(seeds, stage=1), SampleRandom(seeds, stage=1)
    calls = [(3, (1, 1)), (1, (4,)), (2, (2, 3))]
    if before:
        for random in (one_by_one, at_once):
            random.uniform_draws(before, 2)
    expected = [one_by_one.uniform_draws(draws, *shape, dtype=torch.float64) for draws, shape in calls]
    drawn = at_once.uniform_sequence(calls, dtype=torch.float64)
    assert [tuple(values.shape) for values in drawn] == [(3, 3, 1, 1), (3, 1, 4), (3, 2, 2, 3)]
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(drawn, expected))
    assert torch.equal(at_once.uniform(5), one_by_one.uniform(5))  # the counter moved on by six draws


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
    index = torch.zeros(4, 50, dtype=torch.int64)
    four = torch.full((4, 1), 4.0, dtype=torch.float64)
    assert torch.equal(alone.poisson(four[:1], index[:1])[0], batch.poisson(four, index)[2])


def test_the_same_construction_gives_the_same_values():
    first, second = SampleRandom(torch.arange(5), 1), SampleRandom(torch.arange(5), 1)
    assert torch.equal(first.normal(10), second.normal(10))
    rates = torch.rand(5, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 30
    index = torch.arange(10).expand(5, 10)
    assert torch.equal(first.poisson(rates, index), second.poisson(rates, index))


def test_seeds_stages_and_draws_differ():
    a = SampleRandom(torch.tensor([1, 2]), 0).uniform(1000)
    assert not torch.equal(a[0], a[1])
    assert not torch.equal(a, SampleRandom(torch.tensor([1, 2]), 1).uniform(1000))
    random = SampleRandom(torch.tensor([1, 2]))
    assert not torch.equal(random.uniform(1000), random.uniform(1000))


def test_a_group_draws_what_its_samples_draw_alone_from_a_fresh_counter():
    whole = SampleRandom(torch.tensor([5, 6, 7]), stage=1)
    whole.uniform(4)
    upload = BatchUpload("cpu")
    part = whole.staged_group([2, 0], upload)
    with pytest.raises(RuntimeError, match="before its batch is sent"):
        part.uniform(4)
    upload.send()
    alone = SampleRandom(torch.tensor([7, 5]), stage=1)
    assert torch.equal(part.uniform(4), alone.uniform(4))
    assert torch.equal(part.on_host().normal(3), alone.normal(3))
    reference = SampleRandom(torch.tensor([5, 6, 7]), stage=1)
    reference.uniform(4)
    assert torch.equal(whole.uniform(4), reference.uniform(4)), "the group's draws left the batch's counter alone"


def test_a_group_needs_host_streams_and_lands_on_the_uploads_device():
    upload = BatchUpload("meta")
    part = SampleRandom(torch.tensor([5, 6, 7])).staged_group([1], upload)
    upload.send()
    assert part.uniform(2).device.type == "meta"
    with pytest.raises(ValueError, match="staged_group needs streams on the host, got meta"):
        SampleRandom(torch.tensor([5]), device="meta").staged_group([0], BatchUpload("meta"))


def test_reserved_draws_keep_their_numbers_whatever_the_order_they_are_made_in():
    """Snow draws its flakes (draw 0) on the device after its angle (draw 1) on the host."""
    in_order = SampleRandom(torch.tensor([3, 4]))
    flakes, angle = in_order.normal(5), in_order.uniform()
    reordered = SampleRandom(torch.tensor([3, 4]))
    reserved = reordered.reserve(1)
    assert torch.equal(reordered.on_host().uniform(), angle)
    assert torch.equal(reserved.normal(5), flakes)
    assert torch.equal(reordered.uniform(), in_order.uniform()), "the reserved draw was consumed once"


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
    table = torch.full((4, 1), rate, dtype=torch.float64)
    samples = SampleRandom(torch.arange(4)).poisson(table, torch.zeros(4, 25000, dtype=torch.int64))
    samples = samples.double().flatten().numpy()
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
    rates = torch.tensor([[0.5, 20.0, 1500.0]], dtype=torch.float64)
    index = torch.arange(3).repeat_interleave(20000).reshape(1, -1)
    samples = SampleRandom(torch.tensor([3])).poisson(rates, index)[0].reshape(3, -1).double()
    assert torch.allclose(samples.mean(1), torch.tensor([0.5, 20.0, 1500.0], dtype=torch.float64), rtol=0.02)


def test_poisson_values_do_not_depend_on_the_other_rates_of_the_batch():
    rates = torch.linspace(0, 60, 400, dtype=torch.float64).reshape(1, -1)
    index = torch.arange(400).expand(4, 400)
    alone = SampleRandom(torch.tensor([11])).poisson(rates, index[:1])
    others = torch.rand(3, 400, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 900
    together = SampleRandom(torch.tensor([5, 11, 6, 7])).poisson(torch.cat([others[:1], rates, others[1:]]), index)
    assert torch.equal(alone[0], together[1])


def test_poisson_values_are_those_of_the_looked_up_rates():
    """A value drawn through the table equals the value drawn at its rate laid out in full (same draw)."""
    rates = torch.tensor([[0.0, 2.5, 40.0, 1200.0], [7.0, 0.1, 999.0, 3.0]], dtype=torch.float64)
    index = torch.randint(0, 4, (2, 3, 5, 6), generator=torch.Generator().manual_seed(2))
    looked_up = SampleRandom(torch.tensor([4, 9])).poisson(rates, index)
    full = torch.stack([row[sample_index] for row, sample_index in zip(rates, index)]).reshape(2, -1)
    laid_out = SampleRandom(torch.tensor([4, 9])).poisson(full, torch.arange(full.shape[1]).expand(2, -1))
    assert torch.equal(looked_up, laid_out.reshape(looked_up.shape))


def test_poisson_refuses_a_device_rate_table():
    with pytest.raises(ValueError, match=r"rates must be a host tensor of shape \(2, R\), got \(2, 3\) on meta"):
        SampleRandom(torch.tensor([1, 2])).poisson(
            torch.empty(2, 3, device="meta"), torch.zeros(2, 1, dtype=torch.int64)
        )


def test_host_draws_equal_device_draws_and_share_the_draw_counter():
    seeds = torch.tensor([3, 99, 2**40])
    device_first, host_first = SampleRandom(seeds), SampleRandom(seeds)
    assert torch.equal(host_first.on_host().uniform(2), device_first.uniform(2))
    assert torch.equal(host_first.normal(5), device_first.normal(5))


def test_draws_land_on_the_requested_device_from_host_seeds():
    random = SampleRandom(torch.tensor([1, 2]), stage=1, device="meta")
    assert random.uniform(3).device.type == "meta" and random.on_host().uniform().device.type == "cpu"
    counts = random.poisson(
        torch.tensor([[1.0, 2000.0], [3.0, 4.0]]), torch.zeros(2, 3, 4, dtype=torch.int64, device="meta")
    )
    assert (counts.shape, counts.dtype, counts.device.type) == ((2, 3, 4), torch.float32, "meta")
