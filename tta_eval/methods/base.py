"""Common machinery of the test-time adaptation methods: per-step counters, exact reset, BatchNorm set-up
and the SGD options (the base of the methods that train normalisation layers is in ``layers.py``).

A method is an ``nn.Module`` whose ``forward(images)`` returns logits for the batch (the prediction is
taken from the forward pass that computes the adaptation loss) and then adapts. ``reset()`` restores
the state the method had right after construction: every parameter and buffer of every sub-model, the
optimiser state (momentum / Adam moments) and the method's own buffers (prediction averages, random
generator state). ``method_state_dict`` gives a used method's state as tensors and plain values (what
a run's checkpoint holds) and ``load_method_state_dict`` puts it into a method built the same way.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import nn

from ccc.validation import check_choice, check_in_range, check_non_negative, check_positive

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
        {type(module).__name__ for module in model.modules() if "Norm" in type(module).__name__ and module is not model}
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


_MODULE_INTERNALS = frozenset(vars(nn.Module())) - {"training"}
"""Attributes every ``nn.Module`` has (parameters, buffers, submodules, hooks): not a method's own state."""


_CLASS, _STATE = "__class__", "__state_dict__"
"""Keys of the saved form of an object with ``state_dict``/``load_state_dict``: its class name, its state."""


class _Constant(Exception):
    """An attribute fixed at construction (a reference to parameters, a frozen dataclass, a callable)."""


def _is_constant(value: Any) -> bool:
    frozen_dataclass = (
        dataclasses.is_dataclass(value) and not isinstance(value, type) and value.__dataclass_params__.frozen
    )
    return (
        frozen_dataclass
        or isinstance(value, (type, nn.Parameter))
        or (callable(value) and not isinstance(value, nn.Module))
    )


def _plain(value: Any, where: str) -> Any:
    """``value`` as tensors, numbers, strings, None, lists, tuples and dicts; _Constant for what
    construction fixes; TypeError naming ``where`` for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _is_constant(value):
        raise _Constant
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item, where) for item in value)
    if isinstance(value, dict) and all(isinstance(key, (str, int)) for key in value):
        return {key: _plain(item, where) for key, item in value.items()}
    if isinstance(value, torch.Generator):
        return {"generator_state": value.get_state()}
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return {_CLASS: type(value).__name__, _STATE: _plain(value.state_dict(), where)}
    raise TypeError(
        f"{where} is a {type(value).__name__}, which a checkpoint cannot hold: keep method state in buffers, "
        "parameters, plain values, torch.Generators or objects with state_dict/load_state_dict"
    )


def _owns_attributes(module: nn.Module) -> bool:
    """Modules of this package keep state in attributes; others' attributes are set at construction."""
    return type(module).__module__.startswith("tta_eval.")


def method_state_dict(method: nn.Module) -> dict[str, Any]:
    """Everything a used method holds, as tensors and plain values (readable with
    ``torch.load(weights_only=True)``): ``tensors``, the method's ``state_dict()`` (parameters and
    buffers of every network, teacher and anchor); ``attributes``, per submodule name ("" the method
    itself) its layer mode and, for modules of this package (methods, reset wrappers, their helper
    networks), every other attribute: numbers, strings, tensors, lists/tuples/dicts of them,
    ``torch.Generator`` states, and the ``state_dict()`` of objects that have ``load_state_dict``
    (optimisers, memory banks).

    Not saved, because construction restores them: references to the method's parameters, frozen
    dataclasses (configurations), callables, and ``_initial_*`` attributes (the state ``reset()``
    returns to). ``load_method_state_dict`` restores the state into a method built the same way.
    Raises TypeError naming an attribute of any other type.
    """
    attributes: dict[str, dict[str, Any]] = {}
    for name, module in method.named_modules(remove_duplicate=False):
        saved: dict[str, Any] = {"training": module.training}
        if _owns_attributes(module):
            for key, value in vars(module).items():
                if key in _MODULE_INTERNALS or key == "training" or key.startswith("_initial"):
                    continue
                with contextlib.suppress(_Constant):
                    saved[key] = _plain(value, f"{type(module).__name__}.{key}")
        attributes[name] = saved
    return {"tensors": method.state_dict(), "attributes": attributes}


def _restored(current: Any, saved: Any, module: nn.Module) -> Any:
    """The value of an attribute that was ``current`` after construction, given its saved form."""
    if isinstance(current, torch.Generator):
        current.set_state(saved["generator_state"].cpu())
        return current
    if not (isinstance(saved, dict) and set(saved) == {_CLASS, _STATE}):
        return saved
    if callable(getattr(current, "load_state_dict", None)) and type(current).__name__ == saved[_CLASS]:
        current.load_state_dict(saved[_STATE])
        return current
    # Created lazily (RoTTA's memory): the class must be one of the method's own module's.
    cls = getattr(sys.modules[type(module).__module__], saved[_CLASS], None)
    if current is not None or not callable(getattr(cls, "from_state_dict", None)):
        raise ValueError(
            f"{type(module).__name__} cannot restore a saved {saved[_CLASS]} over {type(current).__name__}"
        )
    return cls.from_state_dict(saved[_STATE])


def load_method_state_dict(method: nn.Module, state: Mapping[str, Any]) -> None:
    """Restore into ``method`` (built like the one saved, on its device) what ``method_state_dict``
    returned; ValueError of one line when the state does not fit the method."""
    modules = dict(method.named_modules(remove_duplicate=False))
    if set(state["attributes"]) != set(modules):
        raise ValueError(f"the saved state of {type(method).__name__} has other submodules than the method built now")
    try:
        method.load_state_dict(state["tensors"])
    except RuntimeError as error:
        raise ValueError(
            f"the saved state of {type(method).__name__} does not fit it: {' '.join(str(error).split())}"
        ) from None
    for name, saved in state["attributes"].items():
        module = modules[name]
        for key, value in saved.items():
            if key == "training":
                module.training = bool(value)
            else:
                object.__setattr__(module, key, _restored(getattr(module, key, None), value, module))


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
        self._initial_generator_state: torch.Tensor | None = None

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

    def _seeded_generator(self, seed: int) -> torch.Generator:
        """The method's own random generator (CPU ``torch.Generator`` seeded with ``seed``, an int >= 0),
        kept as ``self.generator``; ``reset()`` returns it to this state."""
        self.generator = torch.Generator().manual_seed(seed)
        self._initial_generator_state = self.generator.get_state()
        return self.generator

    def _reset_method_buffers(self) -> None:
        """Restore method-specific state that is not in ``state_dict`` (override when there is some)."""

    def restore_initial_weights(self) -> None:
        """Restore weights, buffers and optimiser state to their initial values and keep the method's own
        state (prediction averages, generator state): RDumb++'s full reset."""
        self.load_state_dict(self._initial_state)
        if self.optimizer is not None and self._initial_optimizer_state is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._initial_optimizer_state))

    def reset(self) -> None:
        """Restore weights, buffers, optimiser state, the generator of ``_seeded_generator`` and method
        buffers to their initial values."""
        self.restore_initial_weights()
        if self._initial_generator_state is not None:
            self.generator.set_state(self._initial_generator_state)
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


ADAM_BETA2 = 0.999
"""Adam's second-moment decay for ``optimizer="adam"`` (torch's default, and the public CIFAR code's)."""


def make_optimizer(parameters: list[nn.Parameter], config: SGDConfig) -> torch.optim.Optimizer:
    """The optimiser ``config`` describes over ``parameters``: SGD with dampening 0 (the setting of
    Tent, EATA, CoTTA and the CCC code), or Adam with betas (``config.momentum``, ``ADAM_BETA2``) as
    the public CIFAR code of Tent, CoTTA and test-time-adaptation sets it; multi-tensor updates."""
    if config.optimizer == "adam":
        return torch.optim.Adam(
            parameters,
            lr=config.learning_rate,
            betas=(config.momentum, ADAM_BETA2),
            weight_decay=config.weight_decay,
            foreach=True,
        )
    return torch.optim.SGD(
        parameters,
        lr=config.learning_rate,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
        foreach=True,
    )


def require_trainable(parameters: list[nn.Parameter], method_name: str) -> None:
    """Raise ValueError when a gradient method has nothing to optimise."""
    if not parameters:
        raise ValueError(f"method '{method_name}' found no parameters to adapt")


OPTIMIZERS = ("sgd", "adam")
"""Values of ``SGDConfig.optimizer``."""


@dataclass(frozen=True)
class SGDConfig:
    """Optimiser fields shared by the SGD-based methods (``make_optimizer``).

    learning_rate: > 0; momentum: in [0, 1), SGD's momentum, or Adam's β1 with ``optimizer="adam"``;
    nesterov: Nesterov momentum (SGD only); weight_decay: >= 0 (L2 added to the gradient); optimizer:
    "sgd" (the published ImageNet setting of every such method) or "adam" (the public CIFAR settings,
    ``tta_eval.presets``).
    """

    learning_rate: float = 2.5e-4
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    optimizer: Literal["sgd", "adam"] = "sgd"

    def __post_init__(self) -> None:
        check_positive("learning_rate", self.learning_rate)
        check_in_range("momentum", self.momentum, 0.0, 1.0, include_high=False)
        check_non_negative("weight_decay", self.weight_decay)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0, got momentum=0")
        if self.nesterov and self.optimizer != "sgd":
            raise ValueError(f"nesterov=True needs optimizer='sgd', got optimizer={self.optimizer!r}")
