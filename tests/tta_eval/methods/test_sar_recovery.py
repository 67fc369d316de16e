"""SAR's model recovery: "full" (the initial state, today's default) against "public" (SAR's public code
keeps the SGD momentum buffers and the stale loss average e)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.tta_eval.tta_helpers import make_batches, states_equal
from tta_eval.methods import create

RECOVER_ALWAYS = {"entropy_margin_fraction": 1.0, "recovery_threshold": 10.0}


def momentum_buffers(method) -> list[torch.Tensor]:
    """The SGD momentum buffers of the adapted parameters, in parameter order."""
    return [method.optimizer.state[parameter]["momentum_buffer"].clone() for parameter in method.adapted_parameters]


def test_recovery_option_is_validated_in_one_line(tiny_cnn):
    with pytest.raises(ValueError, match=r"^recovery must be one of full, public; got 'partial'$"):
        create("sar", tiny_cnn, recovery="partial")


def test_public_recovery_keeps_momentum_and_the_stale_loss_average(tiny_cnn):
    first, second = (images for images, _ in make_batches(2))
    # Re-derivation of the public code: its recovery reloads the model (and SAM's own state) only, so the
    # SGD momentum and e are those right after the step, which a method that never recovers shows.
    never = create("sar", tiny_cnn, entropy_margin_fraction=1.0, recovery_threshold=0.0)
    never(first)
    kept_momentum, kept_average = momentum_buffers(never), never.loss_average

    public = create("sar", tiny_cnn, recovery="public", **RECOVER_ALWAYS)
    initial = copy.deepcopy(public.state_dict())
    public(first)
    assert states_equal(public.state_dict(), initial), "weights and BatchNorm buffers are restored"
    assert public.loss_average == kept_average
    for buffer, expected in zip(momentum_buffers(public), kept_momentum):
        assert torch.equal(buffer, expected)

    # The next batch starts from θ0 with the old momentum: buffer = 0.9·b1 + g2 and e = 0.9·e1 + 0.1·L2,
    # where g2 (the first momentum buffer) and L2 are those of a fresh method on the second batch.
    fresh = create("sar", tiny_cnn, entropy_margin_fraction=1.0, recovery_threshold=0.0)
    fresh(second)
    fresh_gradients = momentum_buffers(fresh)
    public(second)
    assert public.last_step.reset
    assert math.isclose(public.loss_average, 0.9 * kept_average + 0.1 * fresh.last_step.loss, rel_tol=1e-12)
    for buffer, first_buffer, gradient in zip(momentum_buffers(public), kept_momentum, fresh_gradients):
        torch.testing.assert_close(buffer, 0.9 * first_buffer + gradient, rtol=1e-6, atol=1e-8)


def test_full_recovery_clears_momentum_and_the_loss_average(tiny_cnn):
    method = create("sar", tiny_cnn, **RECOVER_ALWAYS)
    assert method.config.recovery == "full"
    method(make_batches(1)[0][0])
    assert method.loss_average is None
    assert method.optimizer.state_dict()["state"] == {}
