"""CoTTA's batch augmentation, shared by CoTTA, RoTTA and CMF, and the uniform draw the augmentations use."""

from __future__ import annotations

import torch


def uniform(generator: torch.Generator, low: float, high: float) -> float:
    """One number drawn uniformly from [low, high) with ``generator`` (one torch.rand draw)."""
    return low + (high - low) * float(torch.rand((), generator=generator))


def augment_batch(
    images: torch.Tensor,
    generator: torch.Generator,
    noise_std: float,
    padding_mode: str = "edge",
    blur: bool = True,
) -> torch.Tensor:
    """CoTTA's ImageNet augmentation, one random draw for the whole batch; images in [0, 1], N×3×H×W.

    Colour jitter in random order (brightness [0.6, 1.4], contrast [0.7, 1.3], saturation
    [0.5, 1.5], hue [-0.06, 0.06], gamma [0.7, 1.3]); padding by H/2 (``padding_mode`` "edge", or
    "reflect" as in ROID/CMF); random affine (±15°, translation up to 1/16 of the padded size, scale
    [0.9, 1.1], bilinear); Gaussian blur (kernel 5, σ in [0.001, 0.5]; skipped when ``blur`` is
    False, as in ROID/CMF); centre crop back to H×W; horizontal flip with probability ½; Gaussian
    noise (std ``noise_std``); clipping to [0, 1]. All randomness comes from ``generator``.
    """
    import torchvision.transforms.v2.functional as TF  # torchvision's import costs seconds: only when used
    from torchvision.transforms import InterpolationMode

    height, width = images.shape[-2:]
    augmented = images.clamp(0.0, 1.0)
    for operation in torch.randperm(5, generator=generator).tolist():
        if operation == 0:
            augmented = TF.adjust_brightness(augmented, uniform(generator, 0.6, 1.4))
        elif operation == 1:
            augmented = TF.adjust_contrast(augmented, uniform(generator, 0.7, 1.3))
        elif operation == 2:
            augmented = TF.adjust_saturation(augmented, uniform(generator, 0.5, 1.5))
        elif operation == 3:
            augmented = TF.adjust_hue(augmented, uniform(generator, -0.06, 0.06))
        else:
            # Clamping away from 0 keeps the gamma gradient finite (as CoTTA's code does).
            augmented = TF.adjust_gamma(augmented.clamp(1e-8, 1.0), uniform(generator, 0.7, 1.3))
    padding = height // 2
    augmented = TF.pad(augmented, [padding], padding_mode=padding_mode)
    padded_height, padded_width = augmented.shape[-2:]
    translate = [
        round(uniform(generator, -padded_width / 16, padded_width / 16)),
        round(uniform(generator, -padded_height / 16, padded_height / 16)),
    ]
    augmented = TF.affine(
        augmented,
        angle=uniform(generator, -15.0, 15.0),
        translate=translate,
        scale=uniform(generator, 0.9, 1.1),
        shear=[0.0, 0.0],
        interpolation=InterpolationMode.BILINEAR,
    )
    if blur:
        sigma = uniform(generator, 0.001, 0.5)
        augmented = TF.gaussian_blur(augmented, kernel_size=[5, 5], sigma=[sigma, sigma])
    augmented = TF.center_crop(augmented, [height, width])
    if float(torch.rand((), generator=generator)) < 0.5:
        augmented = TF.horizontal_flip(augmented)
    noise = torch.randn(augmented.shape, generator=generator).to(augmented.device) * noise_std
    return (augmented + noise).clamp(0.0, 1.0)
