"""Classifier loading: torchvision models by name, timm models by name (``timm:NAME``, optional extra),
the CIFAR backbones of continual test-time adaptation (``cifar10:wrn28_10``, ``cifar100:resnext29``:
``ccc.cifar_models``) for users' RobustBench weights files, local weight files, ``module:function``
factories.

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
from torch import nn

from ccc.cifar_models import CIFAR_ARCHITECTURES, CIFAR_CLASS_COUNTS, CifarArchitecture
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
STATE_DICT_ENTRIES = ("state_dict", "model_state_dict", "model")
"""Keys under which a checkpoint dict may hold the state_dict (tried in this order)."""
DATA_PARALLEL_PREFIX = "module."
"""The prefix ``torch.nn.DataParallel`` gives every key of the state_dict it saves."""
ROBUSTBENCH_NORMALIZATION_KEYS = ("mu", "sigma")
"""RobustBench's input-normalisation buffers (mean, std), in the state_dict of its models that have them."""


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
        "timm:" (e.g. "timm:vit_base_patch16_224"; needs the optional ``timm`` package), a CIFAR
        architecture of ``ccc.cifar_models`` after its dataset, which sets the number of classes
        ("cifar10:wrn28_10", "cifar10:resnext29", "cifar100:resnext29", ...; see
        :func:`cifar_model_names`), or a factory "module:function" called without arguments that
        returns an ``nn.Module``.
    weights: for torchvision models, a weights enum member name ("IMAGENET1K_V1", "DEFAULT") or
        "none" for random initialisation; for timm and CIFAR models "none"; for any model, a path to
        a local file holding a state_dict (optionally under a "state_dict", "model_state_dict" or
        "model" key; keys may carry DataParallel's "module." prefix). None means the default:
        IMAGENET1K_V1 for resnet50, DEFAULT for other torchvision models, timm's pretrained weights
        (downloaded by timm), the factory's own weights; CIFAR models have no default (their weights
        are the user's files).
    normalization: "imagenet" (ImageNet mean/std inside the wrapper), "none", or "auto" (imagenet
        for torchvision models, the mean/std of the model's own ``pretrained_cfg`` for timm models,
        the published weights' normalisation for CIFAR models (none for wrn28_10, mean and std 0.5
        for AugMix's wrn40_2 and resnext29), none for factories).
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
    def is_cifar(self) -> bool:
        """True for a CIFAR model ``DATASET:ARCHITECTURE`` (dataset "cifar10" or "cifar100")."""
        dataset, separator, _ = self.name.partition(":")
        return bool(separator) and dataset in CIFAR_CLASS_COUNTS

    @property
    def is_factory(self) -> bool:
        """True for a ``module:function`` factory."""
        return ":" in self.name and not self.is_timm and not self.is_cifar

    @property
    def kind(self) -> str:
        """ "timm", "cifar", "factory" or "torchvision"."""
        if self.is_timm:
            return "timm"
        return "cifar" if self.is_cifar else "factory" if self.is_factory else "torchvision"


ModelSource = ModelSpec | nn.Module
"""A model to evaluate: a :class:`ModelSpec` (loaded where it runs) or a module."""


def torchvision_classification_models() -> list[str]:
    """Names of torchvision's image classification models (``torchvision.models`` namespace)."""
    import torchvision  # its import costs seconds (torch._dynamo): only for torchvision models

    return torchvision.models.list_models(module=torchvision.models)


def cifar_model_names() -> list[str]:
    """The CIFAR model names, ``DATASET:ARCHITECTURE`` for every dataset of ``CIFAR_CLASS_COUNTS`` and
    architecture of ``CIFAR_ARCHITECTURES``: by dataset (CIFAR-10 first), then by architecture."""
    return [
        f"{dataset}:{architecture}" for dataset in CIFAR_CLASS_COUNTS for architecture in sorted(CIFAR_ARCHITECTURES)
    ]


def _cifar_architecture(name: str) -> tuple[CifarArchitecture, int]:
    """The architecture entry and the number of classes of the CIFAR model ``DATASET:ARCHITECTURE``."""
    dataset, _, architecture_name = name.partition(":")
    if architecture_name not in CIFAR_ARCHITECTURES:
        raise ValueError(f"unknown CIFAR model {name!r}; available: {', '.join(cifar_model_names())}")
    return CIFAR_ARCHITECTURES[architecture_name], CIFAR_CLASS_COUNTS[dataset]


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
    import torchvision

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


def _read_state_dict_file(path: Path) -> dict[str, object]:
    """The state_dict of a weights file: the file's dict itself or its entry of ``STATE_DICT_ENTRIES``
    (checkpoints of training scripts), without DataParallel's "module." prefix when every key has it."""
    # Bounded and code-free (ccc.pickles): a weights file may come from anywhere.
    loaded = load_torch_file(path, "weights file")
    if isinstance(loaded, dict):
        for key in STATE_DICT_ENTRIES:
            if key in loaded and isinstance(loaded[key], dict):
                loaded = loaded[key]
                break
    if not isinstance(loaded, dict):
        raise ValueError(f"weights file {str(path)!r} must hold a state_dict, got {type(loaded).__name__}")
    if loaded and all(isinstance(key, str) and key.startswith(DATA_PARALLEL_PREFIX) for key in loaded):
        loaded = {key[len(DATA_PARALLEL_PREFIX) :]: value for key, value in loaded.items()}
    return loaded


def _drop_robustbench_normalization(
    state_dict: dict[str, object], mean: tuple[float, ...] | None, std: tuple[float, ...] | None, path: Path
) -> dict[str, object]:
    """``state_dict`` without RobustBench's ``mu`` and ``sigma`` buffers (the state_dict of a RobustBench
    model object), which must equal the input ``mean`` and ``std`` the model normalises with (None: none)."""
    if not any(key in state_dict for key in ROBUSTBENCH_NORMALIZATION_KEYS):
        return state_dict
    expected = (mean or (0.0, 0.0, 0.0), std or (1.0, 1.0, 1.0))
    for key, values in zip(ROBUSTBENCH_NORMALIZATION_KEYS, expected):
        found = state_dict.get(key)
        if not isinstance(found, torch.Tensor) or found.numel() != len(values):
            raise ValueError(f"weights file {str(path)!r}: {key!r} must be a tensor of {len(values)} values")
        if not torch.allclose(found.double().flatten(), torch.tensor(values, dtype=torch.float64)):
            raise ValueError(
                f"weights file {str(path)!r} normalises inputs with {key} {found.flatten().tolist()}, but the model "
                f"with {list(values)}; choose --normalization to match the weights"
            )
    return {key: value for key, value in state_dict.items() if key not in ROBUSTBENCH_NORMALIZATION_KEYS}


def _load_state_dict(model: nn.Module, state_dict: dict[str, object], path: Path) -> None:
    """Load ``state_dict`` (read from ``path``) into ``model``; ValueError of one line when its keys or
    tensor shapes differ from the model's."""
    expected = model.state_dict()
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    if missing or unexpected:
        raise ValueError(
            f"weights file {str(path)!r} does not match the model: missing keys {missing[:5]}"
            f"{f' (of {len(missing)})' if len(missing) > 5 else ''}, unexpected keys {unexpected[:5]}"
            f"{f' (of {len(unexpected)})' if len(unexpected) > 5 else ''}"
        )
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"weights file {str(path)!r}: {key!r} must be a tensor, got {type(value).__name__}")
        if value.shape != expected[key].shape:
            raise ValueError(
                f"weights file {str(path)!r} does not match the model: {key!r} has shape {tuple(value.shape)} "
                f"in the file and {tuple(expected[key].shape)} in the model"
            )
    model.load_state_dict(state_dict)


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
    elif spec.is_cifar:
        architecture, num_classes = _cifar_architecture(spec.name)
        if weights_path is None and (weights is None or weights.lower() != "none"):
            raise ValueError(
                f"CIFAR model {spec.name!r} needs --weights FILE (a local state_dict, e.g. {architecture.weights}) "
                f"or --weights none (random weights), got {weights!r}"
            )
        model = architecture.build(num_classes)
        normalization = spec.normalization
        if normalization == "auto" and (architecture.mean is None or architecture.std is None):
            normalization = "none"
        elif normalization == "auto":  # the published weights' mean and std, given to the wrapper as timm's are
            normalization, mean, std = "imagenet", architecture.mean, architecture.std
    elif spec.is_factory:
        model = _build_from_factory(spec.name)
        normalization = "none" if spec.normalization == "auto" else spec.normalization
        if weights is not None and weights_path is None and weights.lower() != "none":
            raise ValueError(f"weights for factory model {spec.name!r} must be an existing file, got {weights!r}")
    else:
        import torchvision

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
        state_dict = _read_state_dict_file(weights_path)
        if spec.is_cifar:
            normalized = normalization == "imagenet"
            state_dict = _drop_robustbench_normalization(
                state_dict, mean if normalized else None, std if normalized else None, weights_path
            )
        _load_state_dict(model, state_dict, weights_path)
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
