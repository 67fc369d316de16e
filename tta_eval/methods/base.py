"""Common machinery of the test-time adaptation methods: per-step counters, exact reset, BatchNorm set-up
and the SGD options (the base of the methods that train normalisation layers is in ``layers.py``).

A method is an ``nn.Module`` whose ``forward(images)`` returns logits for the batch (the prediction is
taken from the forward pass that computes the adaptation loss) and then adapts. ``reset()`` restores
the state the method had right after construction: every parameter and buffer of every sub-model, the
optimiser state (momentum / Adam moments) and the method's own buffers (prediction averages, random
generator state).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from ccc.validation import check_in_range, check_non_negative, check_positive

BATCHNORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
)


@dataclass(frozen=True)
class StepInfo:
    """What a method did on its last batch.

    samples_adapted: number of samples (>= 0) that entered the adaptation loss after the method's
        filters; for BN-statistics-only adaptation it is the batch size, for the source model 0.
    loss: value of the adaptation loss, NaN when no loss was computed (no sample passed the filters,
        or a method without a loss).
    updated: True if the optimiser took a step on this batch.
    nonfinite_loss: True if the loss was NaN or infinite; the update was then skipped.
    reset: True if the method was restored to its initial state before this batch.
    """

    samples_adapted: int = 0
    loss: float = math.nan
    updated: bool = False
    nonfinite_loss: bool = False
    reset: bool = False


@runtime_checkable
class TTAMethod(Protocol):
    """Interface every registered method satisfies (``nn.Module`` with these members)."""

    last_step: StepInfo

    def __call__(self, images: torch.Tensor) -> torch.Tensor: ...

    def reset(self) -> None: ...


@runtime_checkable
class NeedsStreamPreparation(Protocol):
    """A method that must see the first ``preparation_samples`` images of the stream before adapting.

    EATA estimates its Fisher information this way. The protocol calls ``prepare`` with batches of
    images (float tensors N×C×H×W) taken from the head of the stream; these images are evaluated
    again afterwards as part of the stream, exactly as in the CCC paper's code.
    """

    preparation_samples: int

    def prepare(self, image_batches: Iterator[torch.Tensor]) -> None: ...


_LOSS_SCALER: contextvars.ContextVar[torch.amp.GradScaler | None] = contextvars.ContextVar("loss_scaler", default=None)


@contextlib.contextmanager
def loss_scaling(scaler: torch.amp.GradScaler | None) -> Iterator[None]:
    """Within the block, gradient steps (``backward``, ``optimizer_step``) scale the loss with ``scaler``
    (float16 mixed precision, where small gradients would underflow); None: no scaling (the default).
    The run machinery enters it around each method call; methods never see the scaler."""
    token = _LOSS_SCALER.set(scaler)
    try:
        yield
    finally:
        _LOSS_SCALER.reset(token)


def backward(loss: torch.Tensor) -> None:
    """Back-propagate ``loss`` (multiplied by the active loss scale, if any) outside autocast."""
    scaler = _LOSS_SCALER.get()
    with torch.autocast(loss.device.type, enabled=False):
        (loss if scaler is None else scaler.scale(loss)).backward()


def optimizer_step(optimizer: torch.optim.Optimizer) -> bool:
    """Step ``optimizer`` on the gradients of ``backward``; returns whether it stepped.

    Under a loss scaler the gradients are unscaled first, and a step whose gradients hold inf or NaN
    (the scale was too large) is skipped and the scale lowered, as ``torch.amp.GradScaler`` does.
    """
    scaler = _LOSS_SCALER.get()
    if scaler is None:
        optimizer.step()
        return True
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= scale


_PREDICTION_OBSERVER: contextvars.ContextVar[Callable[[torch.Tensor], bool] | None] = contextvars.ContextVar(
    "prediction_observer", default=None
)


@contextlib.contextmanager
def observing_predictions(observer: Callable[[torch.Tensor], bool]) -> Iterator[None]:
    """Within the block, a method that calls ``observe_prediction`` (ETA and the entries built on it,
    ROID, CMF) shows ``observer`` the logits (N×C, detached) of its prediction pass on each batch,
    before it adapts and before any output correction (ROID's prior). ``observer`` returns True when
    it reset the method's weights; the method then predicts the batch again and adapts on that pass.
    The reset policies enter it around each call of the method they wrap; methods never see them."""
    token = _PREDICTION_OBSERVER.set(observer)
    try:
        yield
    finally:
        _PREDICTION_OBSERVER.reset(token)


def observe_prediction(logits: torch.Tensor) -> bool:
    """Show the logits (N×C) of this batch's prediction pass to the active observer (see
    ``observing_predictions``); True when it reset the method, which must then predict the batch again."""
    observer = _PREDICTION_OBSERVER.get()
    return observer is not None and observer(logits.detach())


def batchnorm_layers(model: nn.Module) -> list[nn.Module]:
    """All BatchNorm layers (1d, 2d, 3d, sync) of ``model`` in module order."""
    return [module for module in model.modules() if isinstance(module, BATCHNORM_TYPES)]


def require_batchnorm(model: nn.Module, method_name: str) -> None:
    """Raise ValueError if ``model`` has no BatchNorm layer, naming the normalisation layers it has."""
    if batchnorm_layers(model):
        return
    normalisation_types = sorted(
        {
            type(module).__name__
            for module in model.modules()
            if "Norm" in type(module).__name__ and module is not model
        }
    )
    found = ", ".join(normalisation_types) if normalisation_types else "no normalisation layer"
    raise ValueError(
        f"method '{method_name}' adapts BatchNorm layers, but the model has none (found: {found}); "
        "use a model with BatchNorm, method 'source' or a method that adapts LayerNorm and GroupNorm "
        "(docs/methods.md lists them)"
    )


def set_batchnorm_batch_statistics(model: nn.Module) -> None:
    """Put every BatchNorm layer in training mode and every other layer in evaluation mode.

    BatchNorm then normalises with the statistics of the current batch and, when the layer tracks
    running statistics, keeps updating them from the target stream (so a frozen copy of the model
    predicts with target statistics). Dropout and similar layers stay deterministic.
    """
    model.eval()
    for layer in batchnorm_layers(model):
        layer.train()


def freeze_all_but(model: nn.Module, trainable: list[nn.Parameter]) -> None:
    """Set ``requires_grad`` to True exactly for the parameters in ``trainable``."""
    model.requires_grad_(False)
    for parameter in trainable:
        parameter.requires_grad_(True)


class AdaptationMethod(nn.Module):
    """Base class: holds ``model``, an optional optimiser, the initial state and the last StepInfo.

    Subclasses configure the model and create the optimiser in ``__init__`` and then call
    ``_remember_initial_state()``; ``forward`` sets ``self.last_step``. Layer modes (which layers
    use batch statistics) are decided by the method: ``train()``/``eval()`` on the method re-apply
    the method's own layer modes instead of switching them.
    """

    def __init__(self, model: nn.Module, config: Any) -> None:
        super().__init__()
        self.model = model
        self.config = config
        self.optimizer: torch.optim.Optimizer | None = None
        self.last_step = StepInfo()
        self._initial_state: dict[str, torch.Tensor] = {}
        self._initial_optimizer_state: dict[str, Any] | None = None

    def _adapt_only(self, named: list[tuple[str, nn.Parameter]]) -> list[nn.Parameter]:
        """Make exactly the (name, parameter) pairs ``named`` trainable: record their names in
        ``adapted_parameter_names``, freeze every other parameter of the model; returns the parameters."""
        self.adapted_parameter_names = [name for name, _ in named]
        parameters = [parameter for _, parameter in named]
        freeze_all_but(self.model, parameters)
        return parameters

    def _apply_layer_modes(self) -> None:
        """Set train/eval mode of the layers; default: everything in evaluation mode."""
        self.model.eval()

    def train(self, mode: bool = True) -> AdaptationMethod:
        """Keep the method's layer modes; the ``mode`` argument is accepted for nn.Module compatibility."""
        super().train(mode)
        self._apply_layer_modes()
        return self

    def _remember_initial_state(self) -> None:
        self._apply_layer_modes()
        self._initial_state = copy.deepcopy(self.state_dict())
        if self.optimizer is not None:
            self._initial_optimizer_state = copy.deepcopy(self.optimizer.state_dict())

    def _reset_method_buffers(self) -> None:
        """Restore method-specific state that is not in ``state_dict`` (override when there is some)."""

    def restore_initial_weights(self) -> None:
        """Restore weights, buffers and optimiser state to their initial values and keep the method's own
        state (prediction averages, generator state): RDumb++'s full reset."""
        self.load_state_dict(self._initial_state)
        if self.optimizer is not None and self._initial_optimizer_state is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._initial_optimizer_state))

    def reset(self) -> None:
        """Restore weights, buffers, optimiser state and method buffers to their initial values."""
        self.restore_initial_weights()
        self._reset_method_buffers()
        self.last_step = StepInfo(reset=True)

    def _take_step(self, loss: torch.Tensor, samples_adapted: int) -> StepInfo:
        """Back-propagate ``loss`` and step the optimiser unless no sample was used or it is not finite
        (``backward`` and ``optimizer_step``: loss scaling under float16 mixed precision)."""
        if self.optimizer is None:
            raise RuntimeError(f"{type(self).__name__} has no optimiser")
        if samples_adapted == 0:
            return StepInfo(samples_adapted=0)
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            self.optimizer.zero_grad(set_to_none=True)
            return StepInfo(samples_adapted=samples_adapted, loss=loss_value, nonfinite_loss=True)
        backward(loss)
        updated = optimizer_step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return StepInfo(samples_adapted=samples_adapted, loss=loss_value, updated=updated)


def make_sgd(
    parameters: list[nn.Parameter],
    learning_rate: float,
    momentum: float,
    nesterov: bool = False,
    weight_decay: float = 0.0,
) -> torch.optim.SGD:
    """SGD with dampening 0 (the setting of Tent, EATA, CoTTA and the CCC code); multi-tensor updates."""
    return torch.optim.SGD(
        parameters,
        lr=learning_rate,
        momentum=momentum,
        nesterov=nesterov,
        weight_decay=weight_decay,
        foreach=True,
    )


def require_trainable(parameters: list[nn.Parameter], method_name: str) -> None:
    """Raise ValueError when a gradient method has nothing to optimise."""
    if not parameters:
        raise ValueError(f"method '{method_name}' found no parameters to adapt")


@dataclass(frozen=True)
class SGDConfig:
    """Optimiser fields shared by the SGD-based methods.

    learning_rate: > 0; momentum: in [0, 1); nesterov: Nesterov momentum; weight_decay: >= 0.
    """

    learning_rate: float = 2.5e-4
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        check_positive("learning_rate", self.learning_rate)
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_high=False)
        check_non_negative("weight_decay", self.weight_decay)
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0, got momentum=0")
