"""Model helpers shared by the methods beyond the CCC paper's set.

Classifier head and penultimate features (SHOT, LAME, NEO, TTAC), normalisation-layer parameters
with excluded blocks (SAR, DeYO, CMF), forward passes that must not touch BatchNorm running
statistics (second forward passes on perturbed weights or transformed images), and BatchNorm with a
source-statistics prior (MEMO); the base of the methods that train normalisation layers (Tent, ETA,
EATA, RDumb, RPL, CPL, PL, SLR, SAR, DeYO, CMF).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ccc.options import LIST_SEPARATOR
from tta_eval.methods.base import (
    BATCHNORM_TYPES,
    AdaptationMethod,
    batchnorm_layers,
    make_optimizer,
    set_batchnorm_batch_statistics,
)

NORMALIZATION_TYPES: tuple[type[nn.Module], ...] = (*BATCHNORM_TYPES, nn.LayerNorm, nn.GroupNorm)
MODULE_LIST_SEPARATOR = LIST_SEPARATOR
NO_MODULES = "none"
"""``excluded_modules=none``: exclude no layer (an option's value cannot be empty)."""


def find_classifier_head(model: nn.Module, method_name: str) -> str:
    """Qualified name of the classifier head: the last ``nn.Linear`` module in registration order.

    Raises ValueError naming ``method_name`` when the model has no linear layer.
    """
    head_name: str | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            head_name = name
    if head_name is None:
        raise ValueError(
            f"method '{method_name}' needs the classifier's penultimate features, taken as the input of the "
            f"model's last nn.Linear layer, but {type(model).__name__} has no nn.Linear layer"
        )
    return head_name


def forward_with_features(
    model: nn.Module,
    head_name: str,
    images: torch.Tensor,
    replace_features: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N×classes) and penultimate features (N×D, the input of the head) of one forward pass.

    replace_features: optional function of the features whose result is fed to the head instead
    (NEO); the returned features are the original ones. Raises ValueError when the head's input is
    not N×D or when the head's output is not what the model returns (something follows the head).
    """
    head = model.get_submodule(head_name)
    captured: dict[str, torch.Tensor] = {}

    def capture_input(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...] | None:
        features = inputs[0]
        if features.dim() != 2:
            raise ValueError(
                f"the input of the classifier head {head_name!r} must be N×D features, "
                f"got shape {tuple(features.shape)}"
            )
        captured["features"] = features
        if replace_features is None:
            return None
        return (replace_features(features), *inputs[1:])

    def capture_output(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        captured["output"] = output

    handles = [head.register_forward_pre_hook(capture_input), head.register_forward_hook(capture_output)]
    try:
        logits = model(images)
    finally:
        for handle in handles:
            handle.remove()
    if captured.get("output") is not logits:
        raise ValueError(
            f"the output of the classifier head {head_name!r} (the last nn.Linear) must be the model's output; "
            f"{type(model).__name__} transforms it or does not call it"
        )
    return logits, captured["features"]


def parse_module_list(text: str) -> tuple[str, ...]:
    """Module name patterns from a "+"-separated list ("layer4+blocks.9"); empty entries are dropped;
    "none" (or an empty text) is no pattern."""
    if text.strip().lower() == NO_MODULES:
        return ()
    return tuple(part.strip() for part in text.split(MODULE_LIST_SEPARATOR) if part.strip())


def is_excluded(module_name: str, patterns: tuple[str, ...]) -> bool:
    """True if a pattern is a run of whole dotted components of ``module_name``.

    "layer4" matches "layer4.0.bn1" and "classifier.layer4.2.bn3" but not "layer40"; "blocks.9"
    matches "blocks.9.norm1" but not "blocks.90.norm1".
    """
    dotted = f".{module_name}."
    return any(f".{pattern}." in dotted for pattern in patterns)


def normalization_affine_parameters(
    model: nn.Module, excluded_modules: tuple[str, ...] = ()
) -> list[tuple[str, nn.Parameter]]:
    """(qualified name, parameter) of the affine weight and bias of every BatchNorm, LayerNorm and
    GroupNorm layer, except layers whose name matches one of ``excluded_modules`` (see ``is_excluded``)."""
    named: list[tuple[str, nn.Parameter]] = []
    for module_name, module in model.named_modules():
        if not isinstance(module, NORMALIZATION_TYPES) or is_excluded(module_name, excluded_modules):
            continue
        for parameter_name, parameter in module.named_parameters(recurse=False):
            if parameter_name in ("weight", "bias"):
                prefix = f"{module_name}." if module_name else ""
                named.append((prefix + parameter_name, parameter))
    return named


def require_normalization_parameters(
    parameters: list[tuple[str, nn.Parameter]],
    model: nn.Module,
    method_name: str,
    excluded_modules: tuple[str, ...] = (),
) -> None:
    """Raise ValueError when a method adapting normalisation layers found no parameter to adapt
    (``excluded_modules``: the patterns the method excluded, named in the hint when there are some)."""
    if parameters:
        return
    has_normalization = any(isinstance(module, NORMALIZATION_TYPES) for module in model.modules())
    if not has_normalization:
        reason = "the model has none; use another method"
    elif excluded_modules:
        reason = (
            "all of them are excluded or have no affine parameters; "
            "check the option excluded_modules or use another method"
        )
    else:
        reason = "none of them has affine parameters (affine=False); use another method"
    raise ValueError(
        f"method '{method_name}' adapts the affine parameters of BatchNorm, LayerNorm or GroupNorm layers, but {reason}"
    )


def parameters_outside(model: nn.Module, excluded_module_name: str) -> list[tuple[str, nn.Parameter]]:
    """(qualified name, parameter) of every parameter not inside module ``excluded_module_name``
    (none when the excluded module is the model itself, name "")."""
    if not excluded_module_name:
        return []
    prefix = f"{excluded_module_name}."
    return [(name, parameter) for name, parameter in model.named_parameters() if not name.startswith(prefix)]


def parameters_outside_head(model: nn.Module, head_name: str, method_name: str) -> list[tuple[str, nn.Parameter]]:
    """``parameters_outside(model, head_name)``; ValueError naming ``method_name`` when there are none."""
    named = parameters_outside(model, head_name)
    if not named:
        raise ValueError(f"method '{method_name}' found no parameter outside the classifier head to adapt")
    return named


@contextmanager
def batchnorm_statistics_frozen(model: nn.Module) -> Iterator[None]:
    """BatchNorm layers in training mode keep normalising with batch statistics but do not update
    their running statistics (nor ``num_batches_tracked``) inside this context.

    Used for extra forward passes (SAM's perturbed weights, DeYO's shuffled images, augmented views)
    so the running statistics of the target stream see each test batch exactly once.
    """
    switched = [layer for layer in batchnorm_layers(model) if layer.training and layer.track_running_stats]
    for layer in switched:
        layer.track_running_stats = False
    try:
        yield
    finally:
        for layer in switched:
            layer.track_running_stats = True


def values_per_channel(inputs: torch.Tensor) -> int:
    """Number of values a BatchNorm layer averages per channel for ``inputs`` (N×C×…)."""
    return inputs.numel() // max(inputs.shape[1], 1)


def batch_statistics(inputs: torch.Tensor, unbiased: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and variance of a BatchNorm input (N×C, N×C×L or N×C×H×W): all dimensions but 1.

    Raises ValueError for an unbiased variance of a single value per channel (as PyTorch's training-mode
    BatchNorm does).
    """
    if unbiased and values_per_channel(inputs) < 2:
        raise ValueError(
            f"BatchNorm batch statistics need more than 1 value per channel, got input shape {tuple(inputs.shape)}"
        )
    dimensions = [0, *range(2, inputs.dim())]
    variance, mean = torch.var_mean(inputs, dim=dimensions, correction=1 if unbiased else 0)
    return mean, variance


@contextmanager
def batchnorm_prior(model: nn.Module, prior: float) -> Iterator[None]:
    """Evaluation-mode BatchNorm normalising with prior · running + (1 - prior) · batch statistics.

    prior in [0, 1] (MEMO: N / (N + 1) with prior strength N = 16). Batch variance is unbiased and
    both batch statistics are constants (no gradient), as in MEMO's code; running statistics are
    never changed. A layer that sees a single value per channel (one image with 1×1 feature maps),
    where the batch variance is undefined, uses its running statistics alone. Layers must be in
    evaluation mode.
    """
    handles = []
    originals: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}

    def use_mixed_statistics(layer: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if values_per_channel(inputs[0]) < 2:
            return
        with torch.no_grad():
            mean, variance = batch_statistics(inputs[0], unbiased=True)
        originals[layer] = (layer.running_mean, layer.running_var)
        # New tensors (not in-place writes), so autograd's saved copies of the buffers stay valid.
        layer.running_mean = prior * layer.running_mean + (1.0 - prior) * mean
        layer.running_var = prior * layer.running_var + (1.0 - prior) * variance

    def restore_statistics(layer: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if layer in originals:
            layer.running_mean, layer.running_var = originals.pop(layer)

    for layer in batchnorm_layers(model):
        if layer.running_mean is None:
            continue
        handles.append(layer.register_forward_pre_hook(use_mixed_statistics))
        handles.append(layer.register_forward_hook(restore_statistics))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for layer, (mean, variance) in originals.items():
            layer.running_mean, layer.running_var = mean, variance


def attach_prediction_network(method: nn.Module, network: nn.Module) -> None:
    """Set ``method.prediction_network`` to ``network`` without registering it as a submodule.

    The protocols predict without adaptation (skipped batches, frozen phases) with a method's
    ``prediction_network`` when it differs from ``method.model``. Such a network wraps ``model``, so
    registering it would list the model's parameters and buffers twice in ``state_dict``.
    """
    object.__setattr__(method, "prediction_network", network)


class EvaluationModeNetwork(nn.Module):
    """Runs ``network`` with every layer in evaluation mode (BatchNorm: running statistics); the
    layers' previous modes are restored after each call."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The network's output for ``images`` in evaluation mode."""
        modes = [module.training for module in self.network.modules()]
        self.network.eval()
        try:
            return self.network(images)
        finally:
            for module, mode in zip(self.network.modules(), modes):
                module.training = mode


class BatchNormPriorNetwork(nn.Module):
    """Runs ``network`` (in evaluation mode) inside ``batchnorm_prior(network, prior)``."""

    def __init__(self, network: nn.Module, prior: float) -> None:
        super().__init__()
        self.network = network
        self.prior = prior

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The network's output with BatchNorm statistics prior · running + (1 − prior) · batch."""
        with batchnorm_prior(self.network, self.prior):
            return self.network(images)


class NormalizationGradientMethod(AdaptationMethod):
    """Base of the methods that train the affine weight and bias of the BatchNorm, LayerNorm and
    GroupNorm layers (except layers matching ``excluded_modules``, a "+"-separated list, see
    ``is_excluded``) with SGD; BatchNorm normalises with the statistics of the test batch, every other
    layer is in evaluation mode. On a model with BatchNorm only, these are its BN affine parameters;
    on a ViT, the LayerNorm ones (as the public ViT configurations of Tent, EATA, SAR, ... do).
    Subclasses may replace the optimiser with ``_make_optimizer``."""

    method_name = "normalization-gradient"

    def __init__(self, model: nn.Module, config: Any, excluded_modules: str = "") -> None:
        super().__init__(model, config)
        patterns = parse_module_list(excluded_modules)
        named = normalization_affine_parameters(model, patterns)
        require_normalization_parameters(named, model, self.method_name, patterns)
        self.adapted_parameters = self._adapt_only(named)
        self.optimizer = self._make_optimizer(self.adapted_parameters)

    def _make_optimizer(self, parameters: list[nn.Parameter]) -> torch.optim.Optimizer:
        """SGD or Adam with the options of ``config`` (an ``SGDConfig``, ``make_optimizer``)."""
        return make_optimizer(parameters, self.config)

    def _apply_layer_modes(self) -> None:
        set_batchnorm_batch_statistics(self.model)
