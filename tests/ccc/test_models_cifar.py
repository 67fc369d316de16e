"""``--model cifar10:wrn28_10`` / ``cifar100:resnext29``: the CIFAR backbones of continual TTA, with the
state_dict keys and shapes of RobustBench's checkpoints (written out below from RobustBench's
``wide_resnet.py`` and ``resnext.py``, not from ``ccc.cifar_models``), their published parameter
counts, their input normalisation, and weights files in the layouts RobustBench and training
scripts save (bare, under "state_dict" / "model_state_dict", DataParallel's "module." prefix,
RobustBench's own ``mu`` / ``sigma`` buffers)."""

from __future__ import annotations

import pytest
import torch

from ccc.calibration.run import model_identity
from ccc.cifar_models import CifarResNeXt, WideResNet
from ccc.models import ModelSpec, NormalizedClassifier, cifar_model_names, load_model

BATCHNORM_ENTRIES = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def batchnorm_keys(prefix: str, channels: int) -> dict[str, tuple[int, ...]]:
    """The state_dict entries of an ``nn.BatchNorm2d(channels)`` named ``prefix``."""
    return {f"{prefix}.{entry}": (() if entry == "num_batches_tracked" else (channels,)) for entry in BATCHNORM_ENTRIES}


def robustbench_wide_resnet_keys(depth: int, widen_factor: int, classes: int) -> dict[str, tuple[int, ...]]:
    """RobustBench's ``WideResNet(depth, widen_factor=..., num_classes=...)`` (sub_block1=False,
    bias_last=True): conv1 3→16; block1..3 of (depth − 4) / 6 ``BasicBlock``s, each bn1 (its input), conv1,
    bn2, conv2 and, where the channel count changes (the first block of a stage), a 1×1 convShortcut;
    bn1 and fc on 64·widen_factor channels."""
    keys = {"conv1.weight": (16, 3, 3, 3)}
    widths = (16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor)
    for stage in (1, 2, 3):
        stage_in, stage_out = widths[stage - 1], widths[stage]
        for block in range((depth - 4) // 6):
            prefix = f"block{stage}.layer.{block}"
            block_in = stage_in if block == 0 else stage_out
            keys |= batchnorm_keys(f"{prefix}.bn1", block_in)
            keys[f"{prefix}.conv1.weight"] = (stage_out, block_in, 3, 3)
            keys |= batchnorm_keys(f"{prefix}.bn2", stage_out)
            keys[f"{prefix}.conv2.weight"] = (stage_out, stage_out, 3, 3)
            if block_in != stage_out:
                keys[f"{prefix}.convShortcut.weight"] = (stage_out, block_in, 1, 1)
    keys |= batchnorm_keys("bn1", widths[3])
    keys |= {"fc.weight": (classes, widths[3]), "fc.bias": (classes,)}
    return keys


def robustbench_resnext_keys(depth: int, cardinality: int, base_width: int, classes: int) -> dict[str, tuple[int, ...]]:
    """RobustBench's ``CifarResNeXt(ResNeXtBottleneck, depth, cardinality, base_width, num_classes)``:
    conv_1_3x3 3→64 and bn_1; stage_1..3 of (depth − 2) / 9 bottlenecks with planes 64, 128, 256, each
    conv_reduce (1×1 to D = floor(planes · base_width / 64) · cardinality), bn_reduce, conv_conv (3×3 in
    ``cardinality`` groups), bn, conv_expand (1×1 to 4·planes), bn_expand; the first of each stage with
    downsample.0 (1×1 conv) and downsample.1 (BatchNorm); classifier on 1024 features, with bias."""
    keys = {"conv_1_3x3.weight": (64, 3, 3, 3)} | batchnorm_keys("bn_1", 64)
    channels = 64
    for stage, planes in ((1, 64), (2, 128), (3, 256)):
        grouped = (planes * base_width // 64) * cardinality
        for block in range((depth - 2) // 9):
            prefix = f"stage_{stage}.{block}"
            keys[f"{prefix}.conv_reduce.weight"] = (grouped, channels, 1, 1)
            keys |= batchnorm_keys(f"{prefix}.bn_reduce", grouped)
            keys[f"{prefix}.conv_conv.weight"] = (grouped, grouped // cardinality, 3, 3)
            keys |= batchnorm_keys(f"{prefix}.bn", grouped)
            keys[f"{prefix}.conv_expand.weight"] = (4 * planes, grouped, 1, 1)
            keys |= batchnorm_keys(f"{prefix}.bn_expand", 4 * planes)
            if block == 0:
                keys[f"{prefix}.downsample.0.weight"] = (4 * planes, channels, 1, 1)
                keys |= batchnorm_keys(f"{prefix}.downsample.1", 4 * planes)
            channels = 4 * planes
    return keys | {"classifier.weight": (classes, 1024), "classifier.bias": (classes,)}


def shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize(
    ("name", "expected_keys", "published_millions"),
    [
        ("cifar10:wrn28_10", robustbench_wide_resnet_keys(28, 10, 10), 36.5),
        ("cifar100:wrn28_10", robustbench_wide_resnet_keys(28, 10, 100), 36.5),
        ("cifar10:wrn40_2", robustbench_wide_resnet_keys(40, 2, 10), 2.2),
        ("cifar100:wrn40_2", robustbench_wide_resnet_keys(40, 2, 100), 2.3),
        ("cifar10:resnext29", robustbench_resnext_keys(29, 4, 32, 10), 6.8),
        ("cifar100:resnext29", robustbench_resnext_keys(29, 4, 32, 100), 6.9),
    ],
)
def test_full_size_models_have_robustbench_keys_shapes_and_parameter_counts(name, expected_keys, published_millions):
    model = load_model(ModelSpec(name, weights="none"))
    network = model.classifier if isinstance(model, NormalizedClassifier) else model
    assert shapes(network) == expected_keys
    assert list(network.state_dict()) == list(expected_keys)  # RobustBench's order, too
    assert round(parameter_count(network) / 1e6, 1) == published_millions
    # The parameters (not buffers) of the expected entries: everything but BatchNorm's statistics.
    expected_parameters = sum(
        torch.Size(shape).numel()
        for key, shape in expected_keys.items()
        if not key.endswith(("running_mean", "running_var", "num_batches_tracked"))
    )
    assert parameter_count(network) == expected_parameters


@pytest.mark.parametrize(
    ("network", "expected_keys"),
    [
        (WideResNet(depth=10, widen_factor=2, num_classes=7), robustbench_wide_resnet_keys(10, 2, 7)),
        (WideResNet(depth=16, widen_factor=1, num_classes=3), robustbench_wide_resnet_keys(16, 1, 3)),
        (CifarResNeXt(depth=11, cardinality=2, base_width=4, num_classes=5), robustbench_resnext_keys(11, 2, 4, 5)),
        (CifarResNeXt(depth=20, cardinality=8, base_width=2, num_classes=3), robustbench_resnext_keys(20, 8, 2, 3)),
    ],
)
def test_small_constructors_keep_the_key_scheme(network, expected_keys):
    assert shapes(network) == expected_keys
    logits = network.eval()(torch.rand(2, 3, 32, 32))
    assert logits.shape == (2, expected_keys["fc.bias" if "fc.bias" in expected_keys else "classifier.bias"][0])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            lambda: WideResNet(depth=27),
            r"^WideResNet depth must be 6·n \+ 4 with n >= 1 \(10, 16, 22, 28, ...\), got 27$",
        ),
        (lambda: WideResNet(depth=4), r"got 4$"),
        (lambda: WideResNet(widen_factor=0), r"^WideResNet widen_factor and num_classes must be >= 1, got 0 and 10$"),
        (
            lambda: CifarResNeXt(depth=28),
            r"^CifarResNeXt depth must be 9·n \+ 2 with n >= 1 \(11, 20, 29, ...\), got 28$",
        ),
        (lambda: CifarResNeXt(cardinality=0), r"^CifarResNeXt cardinality, base_width and num_classes must be >= 1"),
    ],
)
def test_bad_architecture_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        arguments()


def test_the_names_and_their_kind():
    assert cifar_model_names() == [
        "cifar10:resnext29",
        "cifar10:wrn28_10",
        "cifar10:wrn40_2",
        "cifar100:resnext29",
        "cifar100:wrn28_10",
        "cifar100:wrn40_2",
    ]
    spec = ModelSpec("cifar100:resnext29", weights="none")
    assert spec.is_cifar and not spec.is_factory and not spec.is_timm and spec.kind == "cifar"
    assert ModelSpec("cifar10_models:build").kind == "factory"  # a module whose name starts like a dataset
    assert model_identity(spec) == ("cifar cifar100:resnext29 none", None)


def test_normalisation_is_the_published_weights_one():
    # Standard (WRN-28-10) takes [0, 1] images as they are; AugMix's ResNeXt and WRN normalise with 0.5 and 0.5.
    assert isinstance(load_model(ModelSpec("cifar10:wrn28_10", weights="none")), WideResNet)
    augmix = load_model(ModelSpec("cifar10:resnext29", weights="none"))
    assert isinstance(augmix, NormalizedClassifier) and isinstance(augmix.classifier, CifarResNeXt)
    images = torch.rand(2, 3, 32, 32)
    assert torch.equal(augmix(images), augmix.classifier((images - 0.5) / 0.5))
    assert augmix.mean.flatten().tolist() == augmix.std.flatten().tolist() == [0.5, 0.5, 0.5]
    augmix_wrn = load_model(ModelSpec("cifar100:wrn40_2", weights="none"))
    assert isinstance(augmix_wrn.classifier, WideResNet) and augmix_wrn.std.flatten().tolist() == [0.5, 0.5, 0.5]
    unnormalized = load_model(ModelSpec("cifar10:resnext29", weights="none", normalization="none"))
    assert isinstance(unnormalized, CifarResNeXt)
    imagenet = load_model(ModelSpec("cifar10:wrn28_10", weights="none", normalization="imagenet"))
    assert imagenet.mean.flatten().tolist() == pytest.approx([0.485, 0.456, 0.406])


@pytest.fixture(scope="module")
def augmix_network() -> CifarResNeXt:
    """A full-size CIFAR-10 ResNeXt-29 with random weights and BatchNorm statistics (as if trained)."""
    torch.manual_seed(3)
    network = CifarResNeXt(num_classes=10)
    for module in network.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
            module.weight.data.uniform_(0.5, 1.5)
    return network.eval()


LAYOUTS = {
    "bare": lambda state: state,
    "state_dict entry of a training checkpoint": lambda state: {
        "epoch": 200,
        "model": "resnext",
        "state_dict": state,
        "best_acc": 0.9,
    },
    "model_state_dict entry": lambda state: {"model_state_dict": state, "epoch": 3},
    "DataParallel prefix": lambda state: {"state_dict": {f"module.{key}": value for key, value in state.items()}},
    "RobustBench model's own mu and sigma": lambda state: {
        **state,
        "mu": torch.full((1, 3, 1, 1), 0.5),
        "sigma": torch.full((1, 3, 1, 1), 0.5),
    },
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_robustbench_weights_file_loads_in_every_layout(augmix_network, tmp_path, layout):
    path = tmp_path / "Hendrycks2020AugMix_ResNeXt.pt"
    torch.save(LAYOUTS[layout](augmix_network.state_dict()), path)
    model = load_model(ModelSpec("cifar10:resnext29", weights=str(path)))
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(images), augmix_network((images - 0.5) / 0.5))
    assert not model.training


@pytest.fixture(scope="module")
def augmix_file(augmix_network, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("weights") / "Hendrycks2020AugMix_ResNeXt.pt"
    torch.save(augmix_network.state_dict(), path)
    return str(path)


def test_mismatching_weights_are_named_in_one_line(augmix_network, augmix_file, tmp_path):
    with pytest.raises(ValueError) as error:
        load_model(ModelSpec("cifar100:resnext29", weights=augmix_file))
    assert str(error.value) == (
        f"weights file {augmix_file!r} does not match the model: 'classifier.weight' has shape (10, 1024) in the "
        "file and (100, 1024) in the model"
    )
    with pytest.raises(ValueError) as error:
        load_model(ModelSpec("cifar10:wrn28_10", weights=augmix_file))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"weights file {augmix_file!r} does not match the model: ")
    assert "missing keys ['conv1.weight', 'block1.layer.0.bn1.weight'" in message and "(of 155)" in message
    assert "unexpected keys ['conv_1_3x3.weight', 'bn_1.weight'" in message and "(of 188)" in message
    other_normalization = tmp_path / "other.pt"
    torch.save({**augmix_network.state_dict(), "mu": torch.zeros(3), "sigma": torch.ones(3)}, other_normalization)
    with pytest.raises(ValueError, match=r"normalises inputs with mu \[0.0, 0.0, 0.0\], but the model with \[0.5,"):
        load_model(ModelSpec("cifar10:resnext29", weights=str(other_normalization)))
    # The same file is right for the network without normalisation.
    assert isinstance(
        load_model(ModelSpec("cifar10:resnext29", weights=str(other_normalization), normalization="none")),
        CifarResNeXt,
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            ModelSpec("cifar10:wrn28_10"),
            r"^CIFAR model 'cifar10:wrn28_10' needs --weights FILE \(a local state_dict, e\.g\. RobustBench's "
            r"CIFAR-10 Standard\.pt\) or --weights none \(random weights\), got None$",
        ),
        (
            ModelSpec("cifar100:resnext29", weights="DEFAULT"),
            r"^CIFAR model 'cifar100:resnext29' needs .* got 'DEFAULT'$",
        ),
        (
            ModelSpec("cifar10:wrn-28-10", weights="none"),
            r"^unknown CIFAR model 'cifar10:wrn-28-10'; available: cifar10:resnext29, cifar10:wrn28_10, "
            r"cifar10:wrn40_2, cifar100:resnext29, cifar100:wrn28_10, cifar100:wrn40_2$",
        ),
        (ModelSpec("cifar10:wrn28_10", weights="missing/Standard.pt"), r"^weights file 'missing/Standard.pt' does not"),
    ],
)
def test_cifar_model_mistakes_are_named_in_one_line(spec, message):
    with pytest.raises(ValueError, match=message):
        load_model(spec)


def small_wide_resnet() -> WideResNet:
    """A WRN-10-1 for 10 classes: a ``module:function`` factory for the loading tests of any model."""
    return WideResNet(depth=10, widen_factor=1, num_classes=10)


def test_any_model_loads_a_data_parallel_checkpoint_and_names_a_value_that_is_no_tensor(tmp_path):
    factory = "tests.ccc.test_models_cifar:small_wide_resnet"
    source = small_wide_resnet().eval()
    path = tmp_path / "wrn.pt"
    torch.save({"model_state_dict": {f"module.{key}": value for key, value in source.state_dict().items()}}, path)
    images = torch.rand(2, 3, 32, 32)
    assert torch.equal(load_model(ModelSpec(factory, weights=str(path)))(images), source(images))
    torch.save({**source.state_dict(), "fc.bias": 3}, path)
    with pytest.raises(ValueError, match=r"^weights file '.*wrn.pt': 'fc.bias' must be a tensor, got int$"):
        load_model(ModelSpec(factory, weights=str(path)))
    # A prefix on some keys only is not DataParallel's: the keys are named as they are.
    torch.save({"module.conv1.weight": source.conv1.weight, **source.state_dict()}, path)
    with pytest.raises(ValueError, match=r"missing keys \[\], unexpected keys \['module.conv1.weight'\]$"):
        load_model(ModelSpec(factory, weights=str(path)))
