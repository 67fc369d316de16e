"""Periodic reset: a policy any method can be given (RDumb = ETA reset every 1000 batches)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from tta_eval.methods.base import StepInfo
from ccc.validation import check_positive_int


class PeriodicReset(nn.Module):
    """Wrap a method and call its ``reset()`` before every ``every``-th batch after the last reset.

    With every = k the wrapped method adapts on batches 0 … k-1, is restored to its initial state
    (weights, buffers, optimiser state, method buffers) before batch k, adapts on k … 2k-1, and so on;
    this is the CCC paper's RDumb schedule (``total_steps % k == 0`` before the forward pass).
    ``last_step.reset`` is True on the batches that were preceded by a reset (this policy's or one
    the method made itself, e.g. SAR's model recovery).
    """

    def __init__(self, method: nn.Module, every: int) -> None:
        check_positive_int("reset_every", every)
        super().__init__()
        self.method = method
        self.every = every
        self.steps_since_reset = 0
        self.last_step = StepInfo()

    @property
    def config(self) -> Any:
        """Hyper-parameters of the wrapped method."""
        return self.method.config

    @property
    def preparation_samples(self) -> int:
        """Stream images the wrapped method needs before adapting (0 if none)."""
        return getattr(self.method, "preparation_samples", 0)

    def prepare(self, image_batches: Iterator[torch.Tensor]) -> None:
        """Forward the stream head to the wrapped method's ``prepare``."""
        self.method.prepare(image_batches)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Reset if ``every`` batches passed since the last reset, then predict and adapt."""
        reset_now = self.steps_since_reset >= self.every
        if reset_now:
            self.method.reset()
            self.steps_since_reset = 0
        logits = self.method(images)
        self.steps_since_reset += 1
        self.last_step = dataclasses.replace(self.method.last_step, reset=reset_now or self.method.last_step.reset)
        return logits

    def reset(self) -> None:
        """Restore the wrapped method and restart the schedule."""
        self.method.reset()
        self.steps_since_reset = 0
        self.last_step = StepInfo(reset=True)
