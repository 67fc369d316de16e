"""JPEG round trips of uint8 batches with ``torchvision.io`` (the stream's final quality-85 step and
the ``jpeg`` corruption).

On the CPU, torchvision encodes and decodes with libjpeg-turbo at its defaults (4:2:0 chroma
subsampling, islow DCT, fancy upsampling), exactly as Pillow does: the decoded pixels equal the CPU
path's (Pillow's ``optimize=True`` changes only the Huffman tables, not the pixels). On CUDA the
batch is encoded and decoded by nvJPEG on the device (close to libjpeg, not bit-equal).

torchvision 0.29 deprecates its image codecs in favour of TorchCodec (not a dependency yet); their
DeprecationWarning is silenced around the two calls only.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torchvision.io import decode_jpeg, encode_jpeg

__all__ = ["FINAL_QUALITY", "jpeg_round_trip"]

FINAL_QUALITY = 85
"""Quality of the stream's final JPEG encoding (``ccc.render.JPEG_QUALITY``)."""

_CODEC_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def jpeg_round_trip(images: Tensor, quality: int = FINAL_QUALITY) -> Tensor:
    """Encode every image as JPEG at ``quality`` and decode it.

    Args:
        images: uint8 (B, 3, H, W) RGB on any device.
        quality: JPEG quality, int in [1, 100].

    Returns:
        uint8 (B, 3, H, W) on ``images.device``. CUDA tensors are encoded and decoded on their GPU
        (nvJPEG); other devices through the CPU (libjpeg, Pillow's pixels).
    """
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be uint8 (B, 3, H, W), got {images.dtype} {tuple(images.shape)}")
    if len(images) == 0:
        return images.clone()
    device = images.device
    work = images if device.type == "cuda" else images.cpu()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CODEC_DEPRECATION, category=DeprecationWarning)
        encoded = encode_jpeg(list(work.contiguous().unbind(0)), quality=int(quality))
        decoded = decode_jpeg(encoded, device=work.device)
    return torch.stack(decoded).to(device)
