"""The six ImageNet-C frost textures, loaded once per process from an installed package.

They cannot be downloaded at run time. The MIT-licensed PyPI package ``corrupt-tta`` ships them
under ``corrupt_tta/assets/frost/``; their git blob hashes equal those of the files in the original
ImageNet-C repository (``ImageNet-C/create_c/frost*.{png,jpg}``), and the sha256 of each is checked
here so that a different copy is refused rather than silently used. Both backends load them here
(:func:`frost_textures`).
"""

from __future__ import annotations

import hashlib
import importlib.resources
from functools import lru_cache

import cv2
import numpy as np
from numpy.typing import NDArray

__all__ = ["FROST_TEXTURE_SHA256", "MissingAssetError", "frost_textures"]

FROST_TEXTURE_SHA256 = {
    "frost1.png": "ff9f907860bd7a835d459e32f9d588062b7f61ee267343cc7222b56753a14755",
    "frost2.png": "fe211a89b336999c207a852ce05818d4545d0b57c5beadd824b4cc9d9a9b6137",
    "frost3.png": "2d0d50b4a9bb213f38b024ef7768731bb83cc08d2f26b5766bbc167cdfa0e504",
    "frost4.jpg": "3f8b91ca1a9fa7167b09e773da53f5ae60d0a1fd88f02a783f6e328a72887f6e",
    "frost5.jpg": "5fc6a19df4a429ba68abdcc8f8a4278d4c9f81c9ccafd2c92ab0c8cf8992ebd2",
    "frost6.jpg": "1f92b2f48408748085b68dd81d816ef239f42cef3029c25d041fcb6760fb4f25",
}
"""File name → sha256 of the six textures, in ImageNet-C's order."""


class MissingAssetError(RuntimeError):
    """A frost texture is missing or differs from the ImageNet-C original."""


@lru_cache(maxsize=None)
def frost_textures(scale: float = 1.0) -> tuple[NDArray[np.uint8], ...]:
    """The six frost textures as read-only BGR uint8 arrays (as ``cv2.imread`` gives them).

    Args:
        scale: resize factor, > 0; at 1 the textures as stored (ImageNet), otherwise resized by
            ``cv2.resize(texture, (0, 0), fx=scale, fy=scale)`` (bilinear) as the public CIFAR (0.2)
            and 64×64 (0.3) generators do.
    """
    if scale != 1.0:
        resized = []
        for texture in frost_textures():
            small = cv2.resize(texture, (0, 0), fx=scale, fy=scale)
            small.setflags(write=False)
            resized.append(small)
        return tuple(resized)
    folder = importlib.resources.files("corrupt_tta") / "assets" / "frost"
    textures = []
    for name, expected in FROST_TEXTURE_SHA256.items():
        try:
            data = (folder / name).read_bytes()
        except (FileNotFoundError, OSError) as error:
            raise MissingAssetError(
                f"frost texture {name} not found in the corrupt-tta package ({error}); reinstall it with "
                "`pip install --force-reinstall corrupt-tta`"
            ) from error
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            raise MissingAssetError(
                f"frost texture {name} has sha256 {digest}, expected the ImageNet-C original {expected}"
            )
        texture = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
        texture.setflags(write=False)
        textures.append(texture)
    return tuple(textures)
