"""Torch rendering backend: a batch of decoded source images → CCC's corrupted 224×224 images on a device.

Beside the CPU reference path (``ccc.render`` + ``ccc.corruptions``, the default, byte-reproducible
and untouched), the same steps run on torch tensors for a whole batch, on ``cpu`` or ``cuda``:
crop/resize/flip → corruption pair ``(n1, s1, n2, s2)`` with per-sample severities and seeds →
JPEG quality-85 round trip → uint8 (B, 3, 224, 224).

Its bytes differ from the CPU path's: the random corruptions draw from :class:`SampleRandom` (a
counter-based hash of ``(seed, stage, draw, element)``) instead of ``numpy.random.default_rng(spec.seed)``.
What matches the CPU path exactly (same bytes, on the CPU device): the crop, bilinear resize and flip
(Pillow's fixed-point resampling as integer gathers over per-sample tap tables), the deterministic
corruptions (brightness, contrast, saturate, pixelate, jpeg, defocus_blur from severity 1/3, zoom_blur,
gaussian_blur) and the
final JPEG round trip (libjpeg-turbo's integer arithmetic as tensor operations, on every device). The
random corruptions other than the four noises (glass_blur, motion_blur, snow, frost, fog, spatter, elastic)
give the CPU's bytes when handed the same draws, so they are equal in distribution; the noises are equal
in distribution. Per corruption: ``docs/fidelity.md``, "The torch backend (``ccc.render_torch``)". A
sample's bytes depend only on its spec and its source image: never on the batch size or the other
samples; they are reproducible on the same device type (the integer random streams are identical on
every device; float transcendental functions may differ in the last bit between devices).

Layout, as :mod:`ccc.corruptions`'s: one module per family of corruptions, ``noise`` (the four noises),
``blur`` (defocus, glass, motion, zoom, gaussian), ``weather`` (snow, frost, fog, spatter) and ``digital``
(brightness, contrast, saturate, pixelate, jpeg, elastic), each ending in ``register_torch_corruption(name,
prepare_<name>)`` (:mod:`.registry`: the contract, and :func:`torch_corruption`, the lookup by name or alias);
:mod:`.numerics` for what several families share (byte levels, OpenCV's separable filter, scipy's Gaussian
kernels, the zoom and motion-blur tables); private helpers ``_resample`` (Pillow's resampling),
``_spatter_filters`` (spatter's OpenCV filters), ``_upload`` (every host-to-device copy: ``non_blocking``,
from page-locked memory on CUDA, one per batch) and ``_triton`` (the fused kernels: the hottest steps are
torch operators ``ccc::<name>`` whose default is their ATen composition and which run one Triton kernel each
on CUDA, with the same bits; ``CCC_TORCH_KERNELS=aten`` keeps the compositions there). ``images`` and
``random``'s draws live on the render device; ``severities`` live on the host (they come from the specs), so
per-sample parameters, kernels and tables are derived there (``random.on_host()`` draws the per-sample numbers
that shape them), and no function reads device data back. Every step comes in two halves: the host half
prepares (checks, parameters, tables, host draws) and stages its host data in the batch's
:class:`~._upload.BatchUpload`; the device half runs once the batch's one copy is sent, so a batch's host work
all comes first and its data travels in one upload. Adding a corruption: its CPU entry in ``ccc.corruptions``
and its torch halves registered in the module of the same family here
(``tests/ccc/render_torch/test_contract.py`` requires both).

Public names:

- :func:`render_batch` (``ccc.render_torch.pipeline``): specs + decoded images → uint8 (B, 3, 224, 224),
  at a ``precision`` of :data:`ccc.render.RENDER_PRECISIONS` (:func:`working_dtype` maps it to a dtype);
- :func:`apply_corruption_stage`; :func:`torch_corruption` (one corruption, callable whole; its host half
  is ``.prepare``) and :func:`torch_corruptions` (name → corruption of all 19, or of one family), from
  :mod:`.registry`;
- :func:`crop_resize_flip` (``geometry``), :func:`jpeg_round_trip` (``jpeg``);
- :class:`SampleRandom` (``random``), :func:`per_sample_parameters` (``parameters``);
- :class:`BatchUpload` (``_upload``): the host data of a batch, staged by the host halves and sent in one
  copy (what a corruption's ``prepare`` stages into, for one registered from outside).

Importing this package needs torch; ``ccc.corruptions``, ``ccc.render``, ``ccc.stream``
and ``ccc.shards`` never import it, and its users (``ccc.load.render_stream(device=)``,
``ccc-generate --render-device``, the calibration's torch backend) import it only inside the functions
that render on a device.
"""

from ccc.registry import import_submodules

from ._upload import BatchUpload
from .geometry import crop_resize_flip
from .jpeg import jpeg_round_trip
from .parameters import per_sample_parameters
from .pipeline import apply_corruption_stage, check_torch_corruption_set, render_batch, working_dtype
from .random import SampleRandom
from .registry import torch_corruption, torch_corruptions

import_submodules(__name__, __path__)

__all__ = [
    "BatchUpload",
    "SampleRandom",
    "apply_corruption_stage",
    "crop_resize_flip",
    "jpeg_round_trip",
    "per_sample_parameters",
    "check_torch_corruption_set",
    "render_batch",
    "torch_corruption",
    "torch_corruptions",
    "working_dtype",
]
