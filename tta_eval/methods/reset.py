"""Reset policies any method can be given: never, periodic (RDumb), drift-triggered (RDumb++) and the
adaptive, selective reset of ASR.

A policy is a frozen dataclass (``NeverReset``, ``PeriodicPolicy``, ``DriftPolicy``, ``ASRPolicy``)
whose ``wrap(method)`` returns the method itself (never) or a ``ResetPolicyWrapper`` around it. Every
wrapper keeps its state (counters, running drift statistics, Fisher estimates) in plain attributes and
buffers, so a wrapped method pickles with ``torch.save``; ``reset()`` restores the wrapped method and the
policy's state to their initial values. ``last_step.reset`` is True on the batches preceded by a reset.
On the command line a policy is written ``NAME:param=value:param=value`` (``tta_eval.methods.registry``
parses it; docs/methods.md, "Reset policies").
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from tta_eval.methods.base import StepInfo, observing_predictions
from tta_eval.methods.layers import batchnorm_statistics_frozen
from tta_eval.methods.losses import softmax_entropy
from ccc.validation import check_choice, check_in_range, check_non_negative, check_positive, check_positive_int

POLICY_SEPARATOR = ":"
"""Separates a policy's name and its parameters in ``reset=NAME:param=value:param=value``."""

DRIFT_SIGNALS = ("entropy", "kl")
DRIFT_MODES = ("full", "soft")
STANDARD_DEVIATION_FLOOR = 1e-8
"""Added to the running standard deviation of the drift signal before dividing by it."""
KL_PROBABILITY_FLOOR = 1e-8
"""Probabilities are clamped to at least this value inside the KL divergence."""
ASR_ESTIMATE_MOMENTUM = 0.9
"""Weight of the old Fisher / parameter-mean estimate when a finished episode's estimate is merged (ASR code)."""


@dataclass(frozen=True)
class NeverReset:
    """No reset: ``wrap`` returns the method unchanged."""

    name: ClassVar[str] = "never"

    def wrap(self, method: nn.Module) -> nn.Module:
        """The method itself."""
        return method

    def interval(self) -> int | None:
        """Batches between periodic resets (None: not periodic)."""
        return None

    def text(self) -> str:
        """The policy as written on the command line."""
        return policy_text(self)


@dataclass(frozen=True)
class PeriodicPolicy:
    """RDumb's periodic reset: ``reset()`` before every ``every``-th batch (every: integer >= 1)."""

    name: ClassVar[str] = "periodic"
    every: int = 1000

    def __post_init__(self) -> None:
        check_positive_int("every", self.every)

    def wrap(self, method: nn.Module) -> nn.Module:
        """``PeriodicReset(method, every)``."""
        return PeriodicReset(method, self.every)

    def interval(self) -> int | None:
        """Batches between two resets."""
        return self.every

    def text(self) -> str:
        """The policy as written on the command line."""
        return policy_text(self)


@dataclass(frozen=True)
class DriftPolicy:
    """A drift-triggered reset in the spirit of RDumb++ (Mishra, arXiv 2601.15544).

    signal: "entropy" (batch mean of the per-sample softmax entropy, nats) or "kl" (KL divergence, nats,
    of the batch-mean softmax from a running reference of it); threshold > 0: reset when
    |signal − mean| / std exceeds it, mean and std being exponential moving averages of the signal;
    momentum in [0, 1): weight of the old value in those averages (and in the KL reference);
    warmup >= 1: batches after a reset before the detector may fire; mode: "full" (``reset()``) or
    "soft" (every floating-point weight and buffer s of the method ← (1 − strength) s + strength s0, s0
    its initial value; optimiser and method buffers kept); strength in (0, 1].
    """

    name: ClassVar[str] = "rdumbpp"
    signal: Literal["entropy", "kl"] = "entropy"
    threshold: float = 4.0
    momentum: float = 0.98
    warmup: int = 20
    mode: Literal["full", "soft"] = "full"
    strength: float = 0.5

    def __post_init__(self) -> None:
        check_choice("signal", self.signal, DRIFT_SIGNALS)
        check_positive("threshold", self.threshold)
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_high=False)
        check_positive_int("warmup", self.warmup)
        check_choice("mode", self.mode, DRIFT_MODES)
        check_in_range("strength", self.strength, 0.0, 1.0, include_low=False)

    def wrap(self, method: nn.Module) -> nn.Module:
        """``DriftReset(method, self)``."""
        return DriftReset(method, self)

    def interval(self) -> int | None:
        """None: not periodic."""
        return None

    def text(self) -> str:
        """The policy as written on the command line."""
        return policy_text(self)


@dataclass(frozen=True)
class ASRPolicy:
    """ASR's adaptive, selective reset (Lim, Hwang, Lee ICLR 2026; YonseiML/asr, defaults of its conf.py).

    m0 in [0, 1]: the threshold's momentum is 1 − m0 + m0 · flip (flip: fraction of the batch whose
    prediction differs from the source model's); p0 >= 0: weight of the importance-aware regulariser,
    p0 · flip²; a0 > 0: the threshold restarts at ln(a0 · C) after a reset (C classes); r0 in [0, 1]
    and r1 >= 0: the first max(r0 − r1 · (threshold − entropy), 0) fraction of the adapted parameters
    keeps its adapted values on a reset, the rest returns to the initial values.
    """

    name: ClassVar[str] = "asr"
    m0: float = 0.15
    p0: float = 5.0
    a0: float = 0.5
    r0: float = 0.5
    r1: float = 20.0

    def __post_init__(self) -> None:
        check_in_range("m0", self.m0, 0.0, 1.0)
        check_non_negative("p0", self.p0)
        check_positive("a0", self.a0)
        check_in_range("r0", self.r0, 0.0, 1.0)
        check_non_negative("r1", self.r1)

    def wrap(self, method: nn.Module) -> nn.Module:
        """``AdaptiveSelectiveReset(method, self)``."""
        return AdaptiveSelectiveReset(method, self)

    def interval(self) -> int | None:
        """None: not periodic."""
        return None

    def text(self) -> str:
        """The policy as written on the command line."""
        return policy_text(self)


ResetPolicy = NeverReset | PeriodicPolicy | DriftPolicy | ASRPolicy
RESET_POLICIES: dict[str, type] = {policy.name: policy for policy in (NeverReset, PeriodicPolicy, DriftPolicy, ASRPolicy)}
"""Policy classes by name, in the order they are listed."""


def policy_text(policy: Any) -> str:
    """``NAME:param=value:…`` with every parameter of ``policy`` (parsed back by the registry)."""
    parts = [policy.name] + [f"{field.name}={getattr(policy, field.name)}" for field in dataclasses.fields(policy)]
    return POLICY_SEPARATOR.join(parts)


class ResetPolicyWrapper(nn.Module):
    """Base of the policy wrappers: holds the wrapped method in ``method`` and forwards its config and
    stream preparation; ``last_step`` describes the last batch."""

    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method
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
        """Forward the stream head to the wrapped method's ``prepare`` (nothing for a method without one)."""
        prepare = getattr(self.method, "prepare", None)
        if prepare is not None:
            prepare(image_batches)


class PeriodicReset(ResetPolicyWrapper):
    """Wrap a method and call its ``reset()`` before every ``every``-th batch after the last reset.

    With every = k the wrapped method adapts on batches 0 … k-1, is restored to its initial state
    (weights, buffers, optimiser state, method buffers) before batch k, adapts on k … 2k-1, and so on;
    this is the CCC paper's RDumb schedule (``total_steps % k == 0`` before the forward pass).
    ``last_step.reset`` is True on the batches that were preceded by a reset (this policy's or one
    the method made itself, e.g. SAR's model recovery).
    """

    def __init__(self, method: nn.Module, every: int) -> None:
        check_positive_int("reset_every", every)
        super().__init__(method)
        self.every = every
        self.steps_since_reset = 0

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


def kl_divergence(probabilities: torch.Tensor, reference: torch.Tensor) -> float:
    """KL(p ‖ q) in nats of two probability vectors (C,), each clamped to >= ``KL_PROBABILITY_FLOOR``."""
    p = probabilities.clamp_min(KL_PROBABILITY_FLOOR)
    q = reference.clamp_min(KL_PROBABILITY_FLOOR)
    return float((p * (p.log() - q.log())).sum())


class DriftReset(ResetPolicyWrapper):
    """Reset the wrapped method when its predictions drift (``DriftPolicy``).

    After each batch the drift signal s (from the logits the method returned) is compared with the
    running mean μ and variance v of the signal: once ``warmup`` values were seen, a standardised
    deviation |s − μ| / (√v + 1e-8) above the threshold triggers a reset before the next batch, and the
    statistics (μ, v, the count n of values seen and the KL reference) start afresh. Otherwise, with
    w = max(1 − m, 1 / (n + 1)): μ ← μ + w (s − μ) and v ← (1 − w)(v + w (s − μ_old)²) (the first value
    sets μ = s, v = 0), i.e. the exact mean and variance of the first 1 / (1 − m) values, exponential
    moving averages after them. For "kl", the reference r
    (the running batch-mean softmax, r ← m r + (1 − m) p̄) is set by the first batch after a reset,
    which gives no signal.
    """

    def __init__(self, method: nn.Module, policy: DriftPolicy) -> None:
        super().__init__(method)
        self.policy = policy
        initial = method.state_dict()
        self.anchor_names = [name for name, value in initial.items() if value.is_floating_point()]
        for index, name in enumerate(self.anchor_names):
            self.register_buffer(f"anchor_{index}", initial[name].detach().clone())
        self._clear_statistics()
        self.reset_pending = False
        self.resets = 0

    def _clear_statistics(self) -> None:
        self.signal_count = 0
        self.signal_mean: float | None = None
        self.signal_variance = 0.0
        self.reference: torch.Tensor | None = None
        self.last_score: float | None = None

    def _signal(self, logits: torch.Tensor) -> float | None:
        """The drift signal of one batch (None for the batch that sets the KL reference)."""
        if self.policy.signal == "entropy":
            return float(softmax_entropy(logits).mean())
        batch_mean = logits.softmax(1).mean(0)
        if self.reference is None:
            self.reference = batch_mean
            return None
        value = kl_divergence(batch_mean, self.reference)
        momentum = self.policy.momentum
        self.reference = momentum * self.reference + (1.0 - momentum) * batch_mean
        return value

    @torch.no_grad()
    def _observe(self, logits: torch.Tensor) -> bool:
        """Update the statistics with this batch's signal; True if the detector fires."""
        value = self._signal(logits.float())
        if value is None:
            return False
        if self.signal_count >= self.policy.warmup and self.signal_mean is not None:
            self.last_score = abs(value - self.signal_mean) / (math.sqrt(self.signal_variance) + STANDARD_DEVIATION_FLOOR)
            if self.last_score > self.policy.threshold:
                return True
        if self.signal_mean is None:
            self.signal_mean = value
        else:
            weight = max(1.0 - self.policy.momentum, 1.0 / (self.signal_count + 1))
            deviation = value - self.signal_mean
            self.signal_mean = self.signal_mean + weight * deviation
            self.signal_variance = (1.0 - weight) * (self.signal_variance + weight * deviation * deviation)
        self.signal_count += 1
        return False

    @torch.no_grad()
    def _soft_reset(self) -> None:
        """Move every floating-point weight and buffer of the method towards its initial value."""
        strength = self.policy.strength
        state = self.method.state_dict()
        for index, name in enumerate(self.anchor_names):
            state[name].mul_(1.0 - strength).add_(getattr(self, f"anchor_{index}"), alpha=strength)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Predict and adapt; reset before the next batch when the signal drifts."""
        reset_before = self.reset_pending
        self.reset_pending = False
        logits = self.method(images)
        step = self.method.last_step
        if self._observe(logits):
            if self.policy.mode == "full":
                self.method.reset()
            else:
                self._soft_reset()
            self._clear_statistics()
            self.reset_pending = True
            self.resets += 1
        self.last_step = dataclasses.replace(step, reset=reset_before or step.reset)
        return logits

    def reset(self) -> None:
        """Restore the wrapped method and the detector's initial state."""
        self.method.reset()
        self._clear_statistics()
        self.reset_pending = False
        self.resets = 0
        self.last_step = StepInfo(reset=True)


class AdaptiveSelectiveReset(ResetPolicyWrapper):
    """ASR (``ASRPolicy``) around any method: when to reset, where, and an importance-aware regulariser.

    Per batch, with z the logits of the method's prediction pass (N×C; before ROID's prior correction,
    as the public code decides: ``observe_prediction``; the returned logits for a method that does not
    show its prediction pass) and ŷ_src the predictions of a frozen copy of
    the initial model (same layer modes, BatchNorm statistics of the batch): entropy e = H(softmax(mean_n
    z_n)); flip = mean_n [argmax z_n ≠ ŷ_src,n]; m = m0 · flip + 1 − m0; the regulariser weight for the
    next batch is p0 · flip². When e < τ (τ starts at ln(a0 · C)) the method is reset selectively:
    the Fisher estimate F and parameter mean θ̄ are updated from this episode (F_ep = grad² summed over
    its optimiser steps and divided by its number of batches, as the public code's ``1 / step``;
    θ̄_ep = mean over its batches of θ before the batch; F ← 0.9 F + 0.1 F_ep,
    first episode: F = F_ep, likewise θ̄), then with scope = max(r0 − r1 (τ − e), 0) the first
    ⌈scope · P⌉ of the P adapted parameters (optimiser order: shallow layers first) keep their values and
    everything else returns to its initial state (``reset()`` of the method: weights, buffers,
    optimiser state, method buffers), and τ restarts. Otherwise τ ← m τ + (1 − m) e. Once F exists,
    each optimiser step adds the gradient of weight · Σ F (θ − θ̄)² to the method's gradients. A
    method without an optimiser is reset fully when the trigger fires.
    """

    def __init__(self, method: nn.Module, policy: ASRPolicy) -> None:
        super().__init__(method)
        model = getattr(method, "model", None)
        if not isinstance(model, nn.Module):
            raise ValueError(f"reset policy 'asr' needs a method with a 'model' (an nn.Module), got {type(method).__name__}")
        self.policy = policy
        self.source_model = copy.deepcopy(model).requires_grad_(False)
        self.source_modes = [module.training for module in self.source_model.modules()]
        optimizer = getattr(method, "optimizer", None)
        names = {id(parameter): name for name, parameter in model.named_parameters()}
        self.parameter_names = (
            [names[id(parameter)] for group in optimizer.param_groups for parameter in group["params"] if id(parameter) in names]
            if optimizer is not None
            else []
        )
        self._clear_state()

    def _clear_state(self) -> None:
        self.threshold: float | None = None
        self.steps = 0
        self.regulariser_weight = 0.0
        self.fisher_sum: list[torch.Tensor] | None = None
        self.parameter_sum: list[torch.Tensor] | None = None
        self.fisher: list[torch.Tensor] | None = None
        self.parameter_mean: list[torch.Tensor] | None = None
        self.reset_pending = False
        self.last_entropy: float | None = None
        self.last_scope: float | None = None
        self.resets = 0

    def adapted_parameters(self) -> list[nn.Parameter]:
        """The wrapped method's optimised parameters, in optimiser order."""
        return [self.method.model.get_parameter(name) for name in self.parameter_names]

    def _hook_optimizer(self) -> None:
        """Register the regulariser on the method's optimiser (again after unpickling, which drops hooks)."""
        optimizer = getattr(self.method, "optimizer", None)
        if optimizer is not None and not getattr(optimizer, "asr_hook_registered", False):
            optimizer.register_step_pre_hook(self._before_optimizer_step)
            optimizer.asr_hook_registered = True

    @torch.no_grad()
    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Accumulate grad² of the method's loss, then add the regulariser's gradient."""
        parameters = self.adapted_parameters()
        squares = [
            parameter.grad.square() if parameter.grad is not None else torch.zeros_like(parameter) for parameter in parameters
        ]
        if self.fisher_sum is None:
            self.fisher_sum = squares
        else:
            for total, square in zip(self.fisher_sum, squares):
                total.add_(square)
        if self.fisher is None or self.parameter_mean is None:
            return
        for parameter, fisher, mean in zip(parameters, self.fisher, self.parameter_mean):
            if parameter.grad is not None:
                parameter.grad.add_(2.0 * self.regulariser_weight * fisher * (parameter - mean))

    @torch.no_grad()
    def _source_predictions(self, images: torch.Tensor) -> torch.Tensor:
        for module, mode in zip(self.source_model.modules(), self.source_modes):
            module.training = mode
        with batchnorm_statistics_frozen(self.source_model):
            return self.source_model(images).argmax(1)

    @torch.no_grad()
    def _merge_episode(self) -> None:
        """Fold this episode's Fisher and parameter means into the estimates (ASR's momentum 0.9)."""
        parameters = self.adapted_parameters()
        if not parameters or self.steps == 0 or self.parameter_sum is None:
            return
        scale = 1.0 / self.steps
        fisher_sum = self.fisher_sum if self.fisher_sum is not None else [torch.zeros_like(p) for p in parameters]
        episode_fisher = [scale * total for total in fisher_sum]
        episode_mean = [scale * total for total in self.parameter_sum or []]
        if self.fisher is None or self.parameter_mean is None:
            self.fisher, self.parameter_mean = episode_fisher, episode_mean
        else:
            momentum = ASR_ESTIMATE_MOMENTUM
            self.fisher = [momentum * old + (1 - momentum) * new for old, new in zip(self.fisher, episode_fisher)]
            self.parameter_mean = [momentum * old + (1 - momentum) * new for old, new in zip(self.parameter_mean, episode_mean)]

    @torch.no_grad()
    def _selective_reset(self, entropy: float, classes: int) -> None:
        self._merge_episode()
        parameters = self.adapted_parameters()
        scope = max(self.policy.r0 - self.policy.r1 * (self.threshold - entropy), 0.0)
        kept = sum(1 for index in range(len(parameters)) if index < scope * len(parameters))
        saved = [parameter.detach().clone() for parameter in parameters[:kept]]
        self.method.reset()
        for parameter, value in zip(parameters, saved):
            parameter.copy_(value)
        self.threshold = math.log(classes * self.policy.a0)
        self.steps = 0
        self.fisher_sum = None
        self.parameter_sum = None
        self.last_scope = scope
        self.resets += 1

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Predict and adapt with the method, then decide whether (and where) to reset."""
        self._hook_optimizer()
        reset_before = self.reset_pending
        self.reset_pending = False
        with torch.no_grad():
            current = [parameter.detach().clone() for parameter in self.adapted_parameters()]
            if self.parameter_sum is None:
                self.parameter_sum = current
            else:
                for total, value in zip(self.parameter_sum, current):
                    total.add_(value)
        predictions: list[torch.Tensor] = []

        def record(prediction: torch.Tensor) -> bool:
            predictions.append(prediction)
            return False

        with observing_predictions(record):
            logits = self.method(images)
        decided_on = predictions[-1] if predictions else logits
        step = self.method.last_step
        source = self._source_predictions(images)
        self.steps += 1
        classes = decided_on.shape[1]
        if self.threshold is None:
            self.threshold = math.log(classes * self.policy.a0)
        with torch.no_grad():
            mean_logits = decided_on.to(torch.promote_types(decided_on.dtype, torch.float32)).mean(0, keepdim=True)
            entropy = float(softmax_entropy(mean_logits)[0])
            flip = float((source != decided_on.argmax(1)).float().mean())
        momentum = self.policy.m0 * flip + 1.0 - self.policy.m0
        self.regulariser_weight = self.policy.p0 * flip**2
        self.last_entropy = entropy
        if entropy < self.threshold:
            self._selective_reset(entropy, classes)
            self.reset_pending = True
        else:
            self.threshold = momentum * self.threshold + (1.0 - momentum) * entropy
        self.last_step = dataclasses.replace(step, reset=reset_before or step.reset)
        return logits

    def reset(self) -> None:
        """Restore the wrapped method and every ASR statistic (threshold, Fisher, means) to the initial state."""
        self.method.reset()
        self._clear_state()
        self.last_step = StepInfo(reset=True)
