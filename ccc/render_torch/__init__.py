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

Public names:

- :func:`render_batch` (``ccc.render_torch.pipeline``): specs + decoded images → uint8 (B, 3, 224, 224),
  at a ``precision`` of :data:`ccc.render.RENDER_PRECISIONS` (:func:`working_dtype` maps it to a dtype);
- :func:`apply_corruption_stage`, :func:`torch_corruption`, :data:`TORCH_CORRUPTIONS` (the dispatch of
  all 19 registered corruptions);
- :func:`crop_resize_flip` (``geometry``), :func:`jpeg_round_trip` (``jpeg``);
- :class:`SampleRandom` (``random``), :func:`per_sample_parameters` (``parameters``);
- the family modules the pipeline merges, each with its ``TORCH_CORRUPTIONS``: ``noise`` (the four
  noises), ``digital`` (brightness, contrast, saturate, pixelate, jpeg), ``blur`` (defocus, glass,
  motion, zoom, gaussian), ``snow``, ``weather`` (frost, fog, spatter, and elastic from ``elastic``).
  A corruption function is ``f(images float32 (B, 3, H, W) in [0, 1], severities float64 (B,) in (0, 5],
  random: SampleRandom, dtype: torch.dtype = torch.float64) -> float32 (B, 3, H, W)``, the reference's
  value before its uint8 truncation, divided by 255. ``dtype`` is the working float dtype of the steps
  the CPU's bytes need in float64: ``torch.float64`` (the default, ``precision="float64"``) or
  ``torch.float32`` (``precision="float32"``: every such step in float32, OpenCV's fused multiply-adds
  no longer emulated; steps exact in float32 or integers run so in both modes). ``images`` and
  ``random``'s draws live on the render device; ``severities`` live on the host (they come from the
  specs), so per-sample parameters, kernels and tables are derived there (``random.on_host()`` draws
  the per-sample numbers that shape them) and copied to the device, and the
  function reads no device data back (private helpers: ``_levels`` for the byte-level conversions, ``_resample`` for
  Pillow's resampling, ``_spatter_filters`` for spatter's OpenCV filters).

Importing this package needs torch; ``ccc.corruptions``, ``ccc.render``, ``ccc.stream``
and ``ccc.shards`` never import it, and its users (``ccc.load.render_stream(device=)``,
``ccc-generate --render-device``, the calibration's torch backend) import it only inside the functions
that render on a device.
"""

from .geometry import crop_resize_flip
from .jpeg import jpeg_round_trip
from .parameters import per_sample_parameters
from .pipeline import TORCH_CORRUPTIONS, apply_corruption_stage, render_batch, torch_corruption, working_dtype
from .random import SampleRandom

__all__ = [
    "TORCH_CORRUPTIONS",
    "SampleRandom",
    "apply_corruption_stage",
    "crop_resize_flip",
    "jpeg_round_trip",
    "per_sample_parameters",
    "render_batch",
    "torch_corruption",
    "working_dtype",
]
