"""Classifier loading: torchvision models by name, timm models by name (``timm:NAME``, optional extra),
local weight files, ``module:function`` factories.

Every loaded model takes float images in [0, 1] (N×3×H×W); input normalisation, when needed, is the
first step inside the model (``NormalizedClassifier``), so test-time adaptation methods and their
augmentations work in image space.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision
from torch import nn

from ccc.pickles import load_torch_file
from ccc.validation import check_choice

logger = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_MODEL = "resnet50"
DEFAULT_RESNET50_WEIGHTS = "IMAGENET1K_V1"
NORMALIZATIONS = ("auto", "imagenet", "none")
WEIGHT_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
TIMM_PREFIX = "timm:"


class NormalizedClassifier(nn.Module):
    """``classifier((images - mean) / std)`` for images in [0, 1]; mean and std per channel (buffers)."""

    def __init__(self, classifier: nn.Module, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.classifier = classifier
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×classes) for images in [0, 1] (N×C×H×W)."""
        return self.classifier((images - self.mean) / self.std)


@dataclass(frozen=True)
class ModelSpec:
    """Which classifier to evaluate.

    name: a torchvision classification model name (e.g. "resnet50"), a timm model name after
        "timm:" (e.g. "timm:vit_base_patch16_224"; needs the optional ``timm`` package) or a factory
        "module:function" called without arguments that returns an ``nn.Module``.
    weights: for torchvision models, a weights enum member name ("IMAGENET1K_V1", "DEFAULT") or
        "none" for random initialisation; for timm models "none"; for any model, a path to a local
        file holding a state_dict (optionally under a "state_dict" or "model" key). None means the
        default: IMAGENET1K_V1 for resnet50, DEFAULT for other torchvision models, timm's pretrained
        weights (downloaded by timm), the factory's own weights.
    normalization: "imagenet" (ImageNet mean/std inside the wrapper), "none", or "auto" (imagenet
        for torchvision models, the mean/std of the model's own ``pretrained_cfg`` for timm models,
        none for factories).
    """

    name: str = DEFAULT_MODEL
    weights: str | None = None
    normalization: str = "auto"

    def __post_init__(self) -> None:
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        if not self.name:
            raise ValueError("model name must be a torchvision model name or 'module:function', got ''")

    @property
    def is_timm(self) -> bool:
        """True for a timm model ``timm:NAME``."""
        return self.name.startswith(TIMM_PREFIX)

    @property
    def is_factory(self) -> bool:
        """True for a ``module:function`` factory."""
        return ":" in self.name and not self.is_timm

    @property
    def kind(self) -> str:
        """ "timm", "factory" or "torchvision"."""
        return "timm" if self.is_timm else "factory" if self.is_factory else "torchvision"


ModelSource = ModelSpec | nn.Module
"""A model to evaluate: a :class:`ModelSpec` (loaded where it runs) or a module."""


def torchvision_classification_models() -> list[str]:
    """Names of torchvision's image classification models (``torchvision.models`` namespace)."""
    return torchvision.models.list_models(module=torchvision.models)


def _build_from_factory(name: str) -> nn.Module:
    module_name, _, function_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"model factory module {module_name!r} cannot be imported: {error}") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise ValueError(f"model factory {name!r}: module {module_name!r} has no callable {function_name!r}")
    model = factory()
    if not isinstance(model, nn.Module):
        raise ValueError(f"model factory {name!r} must return a torch.nn.Module, got {type(model).__name__}")
    return model


def _build_timm(name: str, weights: str | None) -> tuple[nn.Module, tuple[float, ...], tuple[float, ...]]:
    """The timm model ``name`` and the input mean and std of its ``pretrained_cfg``.

    weights None: timm's pretrained weights (timm downloads them); "none" or a weights file (loaded
    by the caller): random initialisation.
    """
    try:
        import timm
    except ImportError:
        raise ValueError("timm is not installed: pip install timm") from None
    if not name or not timm.is_model(name):
        raise ValueError(f"unknown timm model {name!r}; timm.list_models() lists the names")
    try:
        model = timm.create_model(name, pretrained=weights is None)
    except (OSError, RuntimeError) as error:  # no internet: an OSError; a torn download a RuntimeError
        reason = " ".join(str(error).split())
        raise ValueError(
            f"could not get the pretrained weights of timm model {name!r} ({reason}); timm downloads them on first "
            "use: without internet, pass --weights FILE (a local state_dict) or --weights none"
        ) from None
    config = getattr(model, "pretrained_cfg", None) or {}
    mean, std = config.get("mean", IMAGENET_MEAN), config.get("std", IMAGENET_STD)
    return model, tuple(float(value) for value in mean), tuple(float(value) for value in std)


def _torchvision_weights(name: str, weights: str) -> object | None:
    if weights.lower() == "none":
        return None
    available = torchvision.models.get_model_weights(name)
    members = {member.name: member for member in available}
    if weights == "DEFAULT":
        return available.DEFAULT
    if weights not in members:
        raise ValueError(
            f"unknown weights {weights!r} for model {name!r}; available: DEFAULT, none, {', '.join(members)}"
        )
    return members[weights]


def _load_state_dict_file(model: nn.Module, path: Path) -> None:
    # Bounded and code-free (ccc.pickles): a weights file may come from anywhere.
    loaded = load_torch_file(path, "weights file")
    if isinstance(loaded, dict):
        for key in ("state_dict", "model"):
            if key in loaded and isinstance(loaded[key], dict):
                loaded = loaded[key]
                break
    if not isinstance(loaded, dict):
        raise ValueError(f"weights file {str(path)!r} must hold a state_dict, got {type(loaded).__name__}")
    result = model.load_state_dict(loaded, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"weights file {str(path)!r} does not match the model: missing keys {list(result.missing_keys)[:5]}, "
            f"unexpected keys {list(result.unexpected_keys)[:5]}"
        )


def load_model(spec: ModelSpec, device: str | torch.device = "cpu") -> nn.Module:
    """Build the classifier described by ``spec`` on ``device``, in evaluation mode.

    Torchvision weights are fetched by torchvision (into its cache) on first use. Raises ValueError
    for unknown model names, unknown weights, unreadable or mismatching weight files.
    """
    weights = spec.weights
    weights_path = Path(weights) if weights is not None and Path(weights).is_file() else None
    if (
        weights is not None
        and weights_path is None
        and (Path(weights).suffix in WEIGHT_FILE_SUFFIXES or "/" in weights)
    ):
        raise ValueError(f"weights file {weights!r} does not exist")
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    if spec.is_timm:
        if weights is not None and weights_path is None and weights.lower() != "none":
            raise ValueError(
                f"weights for timm model {spec.name!r} must be an existing file or 'none', got {weights!r}"
            )
        model, model_mean, model_std = _build_timm(spec.name[len(TIMM_PREFIX) :], weights)
        normalization = "imagenet" if spec.normalization == "auto" else spec.normalization
        if spec.normalization == "auto":
            mean, std = model_mean, model_std
    elif spec.is_factory:
        model = _build_from_factory(spec.name)
        normalization = "none" if spec.normalization == "auto" else spec.normalization
        if weights is not None and weights_path is None and weights.lower() != "none":
            raise ValueError(f"weights for factory model {spec.name!r} must be an existing file, got {weights!r}")
    else:
        available = torchvision_classification_models()
        if spec.name not in available:
            raise ValueError(f"unknown model {spec.name!r}; torchvision classification models: {', '.join(available)}")
        normalization = "imagenet" if spec.normalization == "auto" else spec.normalization
        if weights_path is not None:
            model = torchvision.models.get_model(spec.name, weights=None)
        else:
            if weights is None:
                weights = DEFAULT_RESNET50_WEIGHTS if spec.name == DEFAULT_MODEL else "DEFAULT"
            weights_enum = _torchvision_weights(spec.name, weights)
            logger.info("building torchvision model %s with weights %s", spec.name, weights_enum)
            try:
                model = torchvision.models.get_model(spec.name, weights=weights_enum)
            except (OSError, RuntimeError) as error:  # URLError is an OSError; a torn download a RuntimeError
                reason = " ".join(str(getattr(error, "reason", None) or error).split())
                raise ValueError(
                    f"could not get the {weights} weights of {spec.name} ({reason}); "
                    "torchvision downloads them on first use: "
                    "without internet, pass --weights FILE (a local state_dict) or --weights none"
                ) from None
    if weights_path is not None:
        _load_state_dict_file(model, weights_path)
    if normalization == "imagenet":
        model = NormalizedClassifier(model, mean, std)
    return model.to(device).eval()


def resolve_device(device: str) -> torch.device:
    """torch.device for "cpu" or "cuda[:index]"; ValueError if CUDA is requested but unavailable, or
    the index names no visible GPU."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available; use cpu")
        resolved = torch.device(device)
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} requested but only {torch.cuda.device_count()} GPU(s) are visible")
        return resolved
    raise ValueError(f"device must be 'cpu' or 'cuda[:index]', got {device!r}")
