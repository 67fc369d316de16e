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

from ccc.validation import (
    check_choice,
    check_in_range,
    check_non_negative,
    check_non_negative_int,
    check_positive,
    check_positive_int,
)
from tta_eval.methods.base import StepInfo, observing_predictions
from tta_eval.methods.layers import batchnorm_statistics_frozen
from tta_eval.methods.losses import softmax_entropy

POLICY_SEPARATOR = ":"
"""Separates a policy's name and its parameters in ``reset=NAME:param=value:param=value``."""

DRIFT_SIGNALS = ("entropy", "kl")
DRIFT_MODES = ("full", "soft")
DRIFT_EPSILON = 1e-6
"""RDumb++'s constant: the variance's start, added to the variance and to its square root in the score,
and the floor of the probabilities inside the KL divergence."""
KL_REFERENCE_MOMENTUM = 0.9
"""Weight of the old reference in RDumb++'s KL signal (r ← 0.9 r + 0.1 p̄)."""
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
    """RDumb++'s drift-triggered reset (Mishra, arXiv 2601.15544; himans-iitk/Rdumbpp
    ``CCC/models/rdumbpp.py``, defaults of its ``CCC/eval.py``).

    signal: "entropy" (batch mean of the per-sample softmax entropy, nats) or "kl" (KL divergence of a
    running reference of the batch-mean softmax from this batch's, divided by the class count C);
    threshold > 0: reset when the score |s − μ| / (√(v + 1e-6) + 1e-6) exceeds it (the score is below
    1 / √(1 − variance_momentum), 1.58 with the defaults); momentum in [0, 1): weight of the old mean μ;
    variance_momentum in [0, 1): weight of the old variance v (v is updated with this batch's squared
    deviation before the score); warmup >= 0: batches from the start, and cooldown >= 0: batches after
    a reset, during which the detector neither scores nor updates; mode: "full" (weights, buffers and
    optimiser state restored, the method's own state such as ETA's class average kept) or "soft"
    (every floating-point weight and buffer s ← (1 − strength) s + strength s0, s0 its initial value;
    optimiser and method state kept); strength in (0, 1]. After a reset the batch is predicted again.
    """

    name: ClassVar[str] = "rdumbpp"
    signal: Literal["entropy", "kl"] = "entropy"
    threshold: float = 3.0
    momentum: float = 0.99
    variance_momentum: float = 0.6
    warmup: int = 50
    cooldown: int = 200
    mode: Literal["full", "soft"] = "full"
    strength: float = 0.5

    def __post_init__(self) -> None:
        check_choice("signal", self.signal, DRIFT_SIGNALS)
        check_positive("threshold", self.threshold)
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_high=False)
        check_in_range("variance_momentum", self.variance_momentum, 0.0, 1.0, include_high=False)
        check_non_negative_int("warmup", self.warmup)
        check_non_negative_int("cooldown", self.cooldown)
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
RESET_POLICIES: dict[str, type] = {
    policy.name: policy for policy in (NeverReset, PeriodicPolicy, DriftPolicy, ASRPolicy)
}
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
    """KL(p ‖ q) in nats of two probability vectors (C,), each clamped to >= ``DRIFT_EPSILON``."""
    p = probabilities.clamp_min(DRIFT_EPSILON)
    q = reference.clamp_min(DRIFT_EPSILON)
    return float((p * (p.log() - q.log())).sum())


def at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` in float32, or in their own dtype when that is wider (float64)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


class DriftReset(ResetPolicyWrapper):
    """RDumb++ (``DriftPolicy``) around any method: reset when the prediction drifts, then predict the
    batch again.

    Per batch, the logits of the method's prediction pass (before it adapts: ``observe_prediction``) give
    the signal s, unless the batch is within the first ``warmup`` batches or within ``cooldown`` batches
    after the last reset. The first signal sets μ = s, v = 1e-6 (for "kl": the reference r = p̄, μ = 0,
    v = 1e-6) and scores 0; later ones: d = s − μ, v ← b v + (1 − b) d², score = |d| / (√(v + 1e-6) +
    1e-6), μ ← m μ + (1 − m) s (for "kl" also r ← 0.9 r + 0.1 p̄). A score above the threshold resets the
    method ("full": ``restore_initial_weights``; "soft": towards the initial weights) and the method
    predicts and adapts on the batch again; μ, v and r are kept. A method that does not show its
    prediction pass is judged on the logits it returns and, after a reset, called again on the batch
    (its own state then keeps the first call's update). ``last_step.reset`` is True on the batches
    predicted after a reset.
    """

    def __init__(self, method: nn.Module, policy: DriftPolicy) -> None:
        super().__init__(method)
        self.policy = policy
        initial = method.state_dict()
        self.anchor_names = [name for name, value in initial.items() if value.is_floating_point()]
        for index, name in enumerate(self.anchor_names):
            self.register_buffer(f"anchor_{index}", initial[name].detach().clone())
        self._clear_state()

    def _clear_state(self) -> None:
        self.batches_seen = 0
        self.batches_since_reset = 0
        self.signal_mean: float | None = None
        self.signal_variance = DRIFT_EPSILON
        self.reference: torch.Tensor | None = None
        self.last_score: float | None = None
        self.resets = 0

    def _signal(self, logits: torch.Tensor) -> float:
        """The drift signal of one batch; for "kl" the first batch sets the reference and gives 0 (μ = 0)."""
        if self.policy.signal == "entropy":
            return float(softmax_entropy(logits).mean())
        batch_mean = logits.softmax(1).mean(0)
        if self.reference is None:
            self.reference = batch_mean
            return 0.0
        value = kl_divergence(self.reference, batch_mean) / logits.shape[1]
        self.reference = KL_REFERENCE_MOMENTUM * self.reference + (1.0 - KL_REFERENCE_MOMENTUM) * batch_mean
        return value

    @torch.no_grad()
    def _score(self, logits: torch.Tensor) -> float:
        """Update μ and v with this batch's signal; the standardised deviation (0 for the first signal)."""
        first = self.signal_mean is None
        value = self._signal(at_least_float32(logits))
        if first:
            self.signal_mean = value
            self.signal_variance = DRIFT_EPSILON
            return 0.0
        deviation = value - self.signal_mean
        variance_momentum = self.policy.variance_momentum
        self.signal_variance = variance_momentum * self.signal_variance + (1.0 - variance_momentum) * deviation**2
        score = abs(deviation) / (math.sqrt(self.signal_variance + DRIFT_EPSILON) + DRIFT_EPSILON)
        self.signal_mean = self.policy.momentum * self.signal_mean + (1.0 - self.policy.momentum) * value
        return score

    @torch.no_grad()
    def _soft_reset(self) -> None:
        """Move every floating-point weight and buffer of the method towards its initial value."""
        strength = self.policy.strength
        state = self.method.state_dict()
        for index, name in enumerate(self.anchor_names):
            state[name].mul_(1.0 - strength).add_(getattr(self, f"anchor_{index}"), alpha=strength)

    def _reset_on_drift(self, logits: torch.Tensor, buffers_before: list[torch.Tensor]) -> bool:
        """Score the batch (outside warm-up and cool-down) and reset the method if it drifted; a soft
        reset starts from ``buffers_before``, the method's buffers before this batch (so that running
        statistics absorb the batch once, in the pass after the reset)."""
        if self.batches_seen < self.policy.warmup or self.batches_since_reset < self.policy.cooldown:
            return False
        self.last_score = self._score(logits)
        if self.last_score <= self.policy.threshold:
            return False
        if self.policy.mode == "full":
            self.method.restore_initial_weights()
        else:
            with torch.no_grad():
                for buffer, value in zip(self.method.buffers(), buffers_before):
                    buffer.copy_(value)
            self._soft_reset()
        self.batches_since_reset = 0
        self.resets += 1
        return True

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Decide on the method's prediction pass, reset and predict again when it drifted, adapt."""
        resets_before = self.resets
        buffers_before = (
            [buffer.detach().clone() for buffer in self.method.buffers()] if self.policy.mode == "soft" else []
        )
        shown: list[bool] = []

        def observe(prediction: torch.Tensor) -> bool:
            shown.append(True)
            return self._reset_on_drift(prediction, buffers_before)

        with observing_predictions(observe):
            logits = self.method(images)
        if not shown and self._reset_on_drift(logits, buffers_before):
            logits = self.method(images)
        self.batches_seen += 1
        self.batches_since_reset += 1
        step = self.method.last_step
        self.last_step = dataclasses.replace(step, reset=self.resets > resets_before or step.reset)
        return logits

    def reset(self) -> None:
        """Restore the wrapped method and the detector's initial state."""
        self.method.reset()
        self._clear_state()
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
            raise ValueError(
                f"reset policy 'asr' needs a method with a 'model' (an nn.Module), got {type(method).__name__}"
            )
        self.policy = policy
        self.source_model = copy.deepcopy(model).requires_grad_(False)
        self.source_modes = [module.training for module in self.source_model.modules()]
        optimizer = getattr(method, "optimizer", None)
        names = {id(parameter): name for name, parameter in model.named_parameters()}
        self.parameter_names = (
            [
                names[id(parameter)]
                for group in optimizer.param_groups
                for parameter in group["params"]
                if id(parameter) in names
            ]
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
            parameter.grad.square() if parameter.grad is not None else torch.zeros_like(parameter)
            for parameter in parameters
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
            self.parameter_mean = [
                momentum * old + (1 - momentum) * new for old, new in zip(self.parameter_mean, episode_mean)
            ]

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
            mean_logits = at_least_float32(decided_on).mean(0, keepdim=True)
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
