"""Exact, fast equivalents of the filters the reference corruptions call.

Public, as the one owner of these kernels and tables: the torch backend (:mod:`ccc.render_torch`)
builds its Gaussian kernels, zoom tables and elastic smoothing matrices from them. Each helper
documents which reference call it replaces and how close it is:

- :func:`gaussian_blur_nearest` replaces ``skimage.filters.gaussian(x, sigma, channel_axis=-1)``
  (scipy's truncated kernel, ``mode="nearest"``): same kernel weights, computed by OpenCV's separable
  filter instead of scipy's (differences of the order of 1e-16).
- :func:`gaussian_smooth_reflect` replaces ``skimage.filters.gaussian(x, sigma, mode="reflect",
  truncate=3)`` on a 2-D array, for ANY sigma: narrow kernels run as an OpenCV separable filter
  with half-sample-symmetric borders (``BORDER_REFLECT``, scipy's ``reflect``); for wide ones, a
  reflect-extended line is periodic with period ``2 * length``, so a kernel thousands of taps wide
  (elastic's sigma is 999 at severity 0) folds onto that period exactly and becomes a
  ``length x length`` matrix.
- :func:`zoom_bilinear_accumulate` replaces summing ``clipped_zoom`` (``scipy.ndimage.zoom`` with
  ``order=1`` of the central crop) over zoom factors, with scipy's coordinate mapping
  ``input = output * (in - 1) / (out - 1)`` and its interpolation weights.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np
from numpy.typing import NDArray

from ._kernels import accumulate_zooms

__all__ = [
    "gaussian_blur_nearest",
    "gaussian_smooth_reflect",
    "reflect_folded_kernel",
    "reflect_smoothing_matrix",
    "scipy_gaussian_kernel",
    "zoom_axis_table",
    "zoom_axis_tables",
    "zoom_bilinear_accumulate",
]


@lru_cache(maxsize=256)
def scipy_gaussian_kernel(sigma: float, truncate: float) -> NDArray[np.float64]:
    """The 1-D Gaussian kernel of ``scipy.ndimage.gaussian_filter`` (radius ``int(truncate*sigma+0.5)``)."""
    radius = int(truncate * float(sigma) + 0.5)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    weights = np.exp(-0.5 / (sigma * sigma) * offsets**2)
    weights /= weights.sum()
    weights.setflags(write=False)
    return weights


def gaussian_blur_nearest(image: NDArray[np.floating], sigma: float) -> NDArray[np.float64]:
    """Gaussian blur of an HxW or HxWxC float image over H and W, borders replicated.

    Args:
        image: float array, any value range.
        sigma: standard deviation in pixels, > 0.

    Returns:
        float64 array of the same shape (truncation at 4 sigma, like scikit-image's default).
    """
    kernel = scipy_gaussian_kernel(float(sigma), 4.0)
    source = np.ascontiguousarray(image, dtype=np.float64)
    return cv2.sepFilter2D(source, cv2.CV_64F, kernel, kernel, borderType=cv2.BORDER_REPLICATE)


def reflect_folded_kernel(length: int, sigma: float, truncate: float) -> NDArray[np.float64]:
    """The truncated Gaussian kernel of :func:`reflect_smoothing_matrix` folded onto one period of a
    reflect-extended line of ``length`` pixels: float64 (2 · length,), tap ``d`` at position ``d mod 2·length``.

    Row ``i``, column ``j`` of the smoothing matrix is the sum of the two folded taps that reach ``j``
    from ``i``: ``folded[(j - i) mod 2L] + folded[(2L - 1 - j - i) mod 2L]`` (two distinct positions).
    """
    kernel = scipy_gaussian_kernel(sigma, truncate)
    radius = (len(kernel) - 1) // 2
    period = 2 * length
    return np.bincount((np.arange(-radius, radius + 1) % period), weights=kernel, minlength=period)


@lru_cache(maxsize=64)
def reflect_smoothing_matrix(length: int, sigma: float, truncate: float) -> NDArray[np.float64]:
    """Gaussian smoothing along an axis of ``length`` pixels with scipy's ``mode="reflect"``, as a matrix.

    A reflect-extended line is periodic (period ``2 * length``), so the truncated kernel
    (:func:`scipy_gaussian_kernel`, radius ``int(truncate * sigma + 0.5)``) folds onto one period
    exactly, however wide it is. Shared by the CPU path and ``ccc.render_torch.digital.elastic``.

    Args:
        length: pixels along the axis (≥ 1); sigma: standard deviation in pixels, > 0; truncate: kernel
            radius in units of sigma.

    Returns:
        float64 (length, length) ``S``, read-only and cached: ``S @ line`` is
        ``scipy.ndimage.gaussian_filter1d(line, sigma, mode="reflect", truncate=truncate)`` (to rounding).
    """
    folded = reflect_folded_kernel(length, sigma, truncate)
    period = 2 * length
    rows = np.repeat(np.arange(length), period)
    positions = (rows + np.tile(np.arange(period), length)) % period
    columns = np.where(positions < length, positions, period - 1 - positions)
    matrix = np.bincount(rows * length + columns, weights=np.tile(folded, length), minlength=length * length).reshape(
        length, length
    )
    matrix.setflags(write=False)
    return matrix


_DIRECT_FILTER_MAX_RADIUS = 48

_SCIPY_SKIPPED_SIGMA = 1e-15
"""``scipy.ndimage.gaussian_filter`` leaves an axis whose sigma is at most this unfiltered."""


def gaussian_smooth_reflect(field: NDArray[np.floating], sigma: float, truncate: float = 3.0) -> NDArray[np.float64]:
    """Gaussian smoothing of a 2-D field with scipy's ``mode="reflect"`` (half-sample symmetric).

    Args:
        field: HxW float array.
        sigma: standard deviation in pixels, >= 0; any size (kernels wider than the image included).
            Up to 1e-15 the field is returned unchanged (as a float64 copy), as scipy skips such axes
            (CIFAR's elastic has sigma 0 at severity 1).
        truncate: kernel radius in units of sigma, as in scipy.

    Returns:
        float64 HxW array equal (to rounding) to ``scipy.ndimage.gaussian_filter(field, sigma,
        mode="reflect", truncate=truncate)``.
    """
    if sigma <= _SCIPY_SKIPPED_SIGMA:
        return np.array(field, dtype=np.float64)
    height, width = field.shape
    radius = int(truncate * float(sigma) + 0.5)
    if radius <= _DIRECT_FILTER_MAX_RADIUS and radius < min(height, width):
        kernel = scipy_gaussian_kernel(float(sigma), float(truncate))
        source = np.ascontiguousarray(field, dtype=np.float64)
        return cv2.sepFilter2D(source, cv2.CV_64F, kernel, kernel, borderType=cv2.BORDER_REFLECT)
    row_matrix = reflect_smoothing_matrix(height, float(sigma), float(truncate))
    column_matrix = reflect_smoothing_matrix(width, float(sigma), float(truncate))
    return row_matrix @ np.asarray(field, dtype=np.float64) @ column_matrix.T


@lru_cache(maxsize=512)
def zoom_axis_table(length: int, zoom_factor: float) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Source index and weight per output position of a centre zoom along one axis.

    Mirrors ``clipped_zoom``: crop ``ceil(length / zoom)`` centred pixels, zoom them with
    ``scipy.ndimage.zoom(order=1)`` to ``round(crop * zoom)`` pixels, and keep the centred ``length``.
    Shared by the CPU path and ``ccc.render_torch`` (:func:`zoom_axis_tables`, of many factors at once).

    Args:
        length: the axis length in pixels (≥ 1).
        zoom_factor: the zoom, ≥ 1.

    Returns:
        (index, weight), each read-only of shape (length,): output ``i`` is
        ``(1 - weight[i]) · x[index[i]] + weight[i] · x[min(index[i] + 1, length - 1)]`` (int64 source indices into the
        whole axis; float64 weights in [0, 1)).
    """
    index, weights = zoom_axis_tables(length, np.array([zoom_factor]))
    index, weights = index[0], weights[0]
    index.setflags(write=False)
    weights.setflags(write=False)
    return index, weights


def zoom_axis_tables(length: int, zoom_factors: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """:func:`zoom_axis_table` of every factor of ``zoom_factors`` (float64, any shape, each ≥ 1) at once.

    Returns:
        (index, weight) of shape (*zoom_factors.shape, length), int64 and float64: for each factor the
        values of :func:`zoom_axis_table`, made by the same float64 operations (elementwise, so equal bit
        for bit).
    """
    factors = np.asarray(zoom_factors, dtype=np.float64)
    crop = np.ceil(length / factors).astype(np.int64)
    crop_start = (length - crop) // 2
    zoomed = np.rint(crop * factors).astype(np.int64)  # Python's round: halves to even, as rint
    trim = (zoomed - length) // 2
    scale = np.where(zoomed > 1, (crop - 1) / np.maximum(zoomed - 1, 1), 0.0)
    coordinates = (trim[..., None] + np.arange(length)).astype(np.float64) * scale[..., None]
    lower = np.floor(coordinates)
    return lower.astype(np.int64) + crop_start[..., None], coordinates - lower


def zoom_bilinear_accumulate(
    image: NDArray[np.floating], zoom_factors: NDArray[np.float64], dtype: type = np.float32
) -> NDArray[np.floating]:
    """Sum over ``zoom_factors`` of the centre-zoomed copies of ``image`` (HxWxC, float).

    Each copy is ``clipped_zoom(image, z)`` of the reference: per-copy values are computed in float64,
    rounded to ``dtype`` and added in ``dtype``, as the reference adds its zoom results.

    Args:
        image: HxWxC float array.
        zoom_factors: 1-D array of zoom factors >= 1.
        dtype: accumulator dtype (float32 for zoom blur, float64 for the snow layer).

    Returns:
        HxWxC array of ``dtype``, the sum of the zoomed copies.
    """
    height, width = image.shape[:2]
    row_tables = [zoom_axis_table(height, float(z)) for z in zoom_factors]
    column_tables = [zoom_axis_table(width, float(z)) for z in zoom_factors]
    row_index = np.stack([table[0] for table in row_tables])
    row_weight = np.stack([table[1] for table in row_tables])
    column_index = np.stack([table[0] for table in column_tables])
    column_weight = np.stack([table[1] for table in column_tables])
    output = np.zeros(image.shape, dtype=dtype)
    accumulate_zooms(np.ascontiguousarray(image), row_index, row_weight, column_index, column_weight, output)
    return output
