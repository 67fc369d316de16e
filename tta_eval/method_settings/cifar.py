"""The public code's method settings for CIFAR-10-C and CIFAR-100-C (``cifar10``, ``cifar100``).

Mainly mariodoebler/test-time-adaptation (its ``classification/cfgs/cifar10_c``, ``cifar100_c`` files and
``conf.py`` defaults), whose CIFAR files agree with Tent's and CoTTA's own; TTAC's from its own CIFAR
scripts. Every value names its file; what the methods' options cannot express (a method's batch size
of its own, a loss of another form) is listed in ``MethodSettings.omitted``, with the methods that
keep their defaults and why (docs/methods.md, "CIFAR settings").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tta_eval.method_settings.registry import MethodSettings, SettingValue, register_method_settings

_TTA = "mariodoebler/test-time-adaptation"
_CONF = f"{_TTA} classification/conf.py"
CIFAR_BATCH_SIZE = 200
"""Samples per batch of every public CIFAR-C configuration of Tent, CoTTA and test-time-adaptation."""

_NO_PUBLIC_SETTING = "no public CIFAR-C setting in the code consulted: the published defaults"
_KEEPS_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "source": "nothing to set",
        "bn": f"nothing to set ({_TTA} classification/cfgs/cifar10_c/norm_test.yaml sets only the batch size)",
        "rotta": "the public CIFAR values equal the defaults (Adam 1e-3, β1 0.9; memory 64, update every 64, "
        f"ν 0.001, α 0.05: {_TTA} classification/cfgs/cifar10_c/rotta.yaml, cifar100_c/rotta.yaml and "
        f"{_CONF}; BIT-DA/RoTTA configs/adapter/rotta.yaml, whose own batch size is 64)",
        "petta": "the public CIFAR values equal the defaults (Adam 1e-3, β1 0.9; α0 0.001, λ0 10, cosine "
        "regulariser, adaptive λ and α: hthieu166/petta configs/adapter/petta/cifar10c/petta_cifar10c_default.yaml, "
        "cifar100c/petta_cifar100c_default.yaml, whose batch size is 64)",
        "adabn": _NO_PUBLIC_SETTING,
        "asr": _NO_PUBLIC_SETTING,
        "cpl": _NO_PUBLIC_SETTING,
        "neo": _NO_PUBLIC_SETTING,
        "pl": _NO_PUBLIC_SETTING,
        "rdumbpp": _NO_PUBLIC_SETTING,
        "shot": _NO_PUBLIC_SETTING,
        "shot_im": _NO_PUBLIC_SETTING,
        "slr": _NO_PUBLIC_SETTING,
    }
)


@dataclass(frozen=True)
class _CifarValues:
    """The values in which the public CIFAR-10-C and CIFAR-100-C settings differ: ETA's and EATA's
    redundancy margin ε (D_MARGIN), CoTTA's augmentation threshold (AP), TTAC's learning rate, class
    EMA length and loss scale (and the TTAC files that give them)."""

    classes: int
    redundancy_margin: float
    augmentation_threshold: float
    ttac_learning_rate: float
    ttac_class_ema_length: int
    ttac_loss_scale: float
    ttac_script: str


def _cifar_settings(values: _CifarValues) -> MethodSettings:
    """The public CIFAR-``values.classes``-C settings."""
    classes = values.classes
    folder = f"{_TTA} classification/cfgs/cifar{classes}_c"
    ttac_script = f"Gorilla-Lab-SCUT/TTAC cifar/scripts/run_ttac_cifar{classes}_no_without_queue.sh"
    ttac_code = f"Gorilla-Lab-SCUT/TTAC cifar/{values.ttac_script}"
    # The methods' own repositories agree with test-time-adaptation where they have CIFAR files.
    own_files = {
        "tent": "DequanWang/tent cfgs/tent.yaml" if classes == 10 else "qinenergy/cotta cifar/cfgs/cifar100/tent.yaml",
        "cotta": f"qinenergy/cotta cifar/cfgs/cifar{classes}/cotta.yaml",
    }

    def value(value: Any, method: str, key: str) -> SettingValue:
        """``value`` of ``key`` in the method's CIFAR file (and in its own repository's)."""
        files = "; ".join(filter(None, (f"{folder}/{method}.yaml", own_files.get(method))))
        return SettingValue(value, f"{files} ({key})")

    def adam(method: str) -> dict[str, SettingValue]:
        """The public CIFAR optimiser: Adam, learning rate 1e-3, β1 0.9."""
        return {
            "optimizer": value("adam", method, "OPTIM.METHOD"),
            "learning_rate": value(1e-3, method, "OPTIM.LR"),
            "momentum": value(0.9, method, "OPTIM.BETA, Adam's β1"),
        }

    def no_nesterov(method: str) -> dict[str, SettingValue]:
        """Nesterov off where the method's default has it on: Adam has no Nesterov momentum."""
        return {"nesterov": value(False, method, "OPTIM.METHOD Adam")}

    cotta_code = f"{_TTA} classification/methods/cotta.py; qinenergy/cotta cifar/cotta.py"
    options = {
        "tent": adam("tent"),
        "eta": {**adam("eta"), "redundancy_margin": value(values.redundancy_margin, "eta", "EATA.D_MARGIN")},
        "eata": {
            **adam("eata"),
            "redundancy_margin": value(values.redundancy_margin, "eata", "EATA.D_MARGIN"),
            "fisher_weight": value(1.0, "eata", "EATA.FISHER_ALPHA"),
            "fisher_samples": value(2000, "eata", "SOURCE.NUM_SAMPLES"),
        },
        # RDumb's CIFAR-100 file keeps CIFAR-10's margin 0.4 (ETA's and EATA's CIFAR-100 files use 0.1).
        "rdumb": {
            **adam("rdumb"),
            "redundancy_margin": value(0.4, "rdumb", "EATA.D_MARGIN"),
            "reset_every": value(1000, "rdumb", "MODEL.RESET_AFTER_NUM_UPDATES"),
        },
        "rpl": adam("rpl"),
        "deyo": adam("deyo"),
        # SAR's optimiser is SGD inside SAM whatever OPTIM.METHOD says (its setup_optimizer).
        "sar": {
            "optimizer": SettingValue("sgd", f"{_TTA} classification/methods/sar.py (setup_optimizer)"),
            "learning_rate": value(1e-3, "sar", "OPTIM.LR"),
            "momentum": SettingValue(0.9, f"{_CONF} (OPTIM.MOMENTUM)"),
        },
        "cotta": {
            **adam("cotta"),
            **no_nesterov("cotta"),
            "restore_probability": value(0.01, "cotta", "COTTA.RST"),
            "augmentation_threshold": value(values.augmentation_threshold, "cotta", "COTTA.AP"),
            "adapted_parameters": SettingValue("all", f"{cotta_code} (configure_model: every parameter trains)"),
            "loss": SettingValue("cross_entropy", f"{cotta_code} (the CIFAR loss: teacher → student cross-entropy)"),
        },
        "roid": {**adam("roid"), **no_nesterov("roid")},
        "cmf": {**adam("cmf"), **no_nesterov("cmf")},
        "memo": {
            "learning_rate": value(0.005, "memo", "OPTIM.LR"),
            "momentum": SettingValue(0.9, f"{_CONF} (OPTIM.MOMENTUM)"),
            "nesterov": SettingValue(True, f"{_CONF} (OPTIM.NESTEROV)"),
            "augmentation_count": value(32, "memo", "TEST.N_AUGMENTATIONS"),
            # BN.ALPHA 0.1: (1 − α)·source + α·batch statistics, which is N/(N+1), 1/(N+1) with N = 9.
            "prior_strength": SettingValue(9.0, f"{_CONF} (BN.ALPHA 0.1)"),
        },
        "lame": {"affinity": SettingValue("rbf", f"{_CONF} (LAME.AFFINITY)")},
        "ttac_nq": {
            "learning_rate": SettingValue(values.ttac_learning_rate, f"{ttac_script} (LR)"),
            "momentum": SettingValue(0.9, f"{ttac_code} (SGD momentum)"),
            "class_ema_length": SettingValue(values.ttac_class_ema_length, f"{ttac_code} (ema_length)"),
            "loss_scale": SettingValue(values.ttac_loss_scale, f"{ttac_code} (loss_scale)"),
        },
    }
    omitted = {
        **_KEEPS_DEFAULTS,
        "memo": f"its batch size of 1 ({folder}/memo.yaml; the method adapts per image at any batch size)",
        "lame": f"LAME.SIGMA 1.0 ({_CONF}): the public code computes σ from the k-th neighbour (rbf_sigma=0)",
        "eata": "the Fisher comes from the first stream images, not from source (training) images",
        "ttac_nq": f"the batch size 256 of {ttac_script}, and the form of the CIFAR code's class-wise term "
        "(class counts from 0, a class used from 16 samples, scaled by 1/classes), which differs from the "
        "ImageNet code implemented here",
    }
    return MethodSettings(
        name=f"cifar{classes}",
        heading=f"settings cifar{classes} (the public CIFAR-{classes}-C code's; docs/methods.md)",
        options=options,
        batch_size=SettingValue(CIFAR_BATCH_SIZE, f"{folder}/*.yaml (TEST.BATCH_SIZE)"),
        omitted=omitted,
    )


for cifar_values in (
    _CifarValues(10, 0.4, 0.92, 0.01, 128, 0.05, "TTAC_onepass_without_queue.py"),
    _CifarValues(100, 0.1, 0.72, 0.001, 64, 0.5, "TTAC_onepass2_without_queue.py"),
):
    register_method_settings(_cifar_settings(cifar_values))
