"""Compiled inner loops (numba) for the corruptions whose reference is a per-pixel loop.

Each kernel reproduces the arithmetic of the reference operation in the same order and precision
(float64 where the reference computes in float64), so the results are bit-identical or differ by
a rounding of the last bit. Compiled code is cached on disk by numba (``cache=True``).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def copy_displaced_pixels(image, offsets, max_delta):  # pragma: no cover - compiled
    """Glass blur's local pixel "swaps", in place, in the reference's scan order.

    For each iteration, rows h from ``H - max_delta`` down to ``max_delta + 1`` and, inside, columns
    w likewise, with ``(dx, dy) = offsets[iteration, row_step, column_step]``. The reference writes
    the swap as a tuple assignment of two numpy views, which copies pixel ``(h + dy, w + dx)`` onto
    ``(h, w)`` and leaves the source unchanged; that is what is reproduced here.
    """
    height, width, channels = image.shape
    for iteration in range(offsets.shape[0]):
        row_step = 0
        for h in range(height - max_delta, max_delta, -1):
            column_step = 0
            for w in range(width - max_delta, max_delta, -1):
                dx = offsets[iteration, row_step, column_step, 0]
                dy = offsets[iteration, row_step, column_step, 1]
                for c in range(channels):
                    image[h, w, c] = image[h + dy, w + dx, c]
                column_step += 1
            row_step += 1


@numba.njit(cache=True)
def accumulate_zooms(image, row_index, row_weight, column_index, column_weight, output):  # pragma: no cover
    """Add the bilinear centre zoom of ``image`` for every zoom factor to ``output`` (all HxWxC).

    ``row_index[z, i]``/``row_weight[z, i]`` give the lower source row and the weight of the upper
    one for output row i of zoom z (columns likewise). Each zoom is computed in float64 in two
    passes (rows, then columns), cast to ``output``'s dtype
    (as scipy casts to its input dtype) and added in that dtype (as the reference adds float32
    arrays). The separable order differs from scipy's tensor-product sum only in the last bits of
    float64, below the float32 rounding of the result.
    """
    height, width, channels = image.shape
    flat = image.reshape(height, width * channels)
    rows = np.empty((height, width * channels), dtype=np.float64)
    zoomed = np.empty_like(output)
    for z in range(row_index.shape[0]):
        for i in range(height):
            r0 = row_index[z, i]
            r1 = min(r0 + 1, height - 1)
            wr1 = row_weight[z, i]
            wr0 = 1.0 - wr1
            for k in range(width * channels):
                rows[i, k] = wr0 * flat[r0, k] + wr1 * flat[r1, k]
        for i in range(height):
            for j in range(width):
                q0 = column_index[z, j] * channels
                q1 = min(column_index[z, j] + 1, width - 1) * channels
                wq1 = column_weight[z, j]
                wq0 = 1.0 - wq1
                for c in range(channels):
                    zoomed[i, j, c] = wq0 * rows[i, q0 + c] + wq1 * rows[i, q1 + c]
        output += zoomed


@numba.njit(cache=True)
def adjust_hsv(image, value_shift, saturation_scale, saturation_shift):  # pragma: no cover - compiled
    """RGB → HSV → adjust → RGB with scikit-image's exact formulas (float64, values in [0, 1]).

    V becomes ``clip(V + value_shift, 0, 1)`` and S becomes ``clip(S * saturation_scale +
    saturation_shift, 0, 1)``; hue is kept. ``rgb2hsv``'s tie rule (blue over green over red when
    several channels hold the maximum) and ``hsv2rgb``'s sector table are reproduced per pixel.
    Returns a new HxWx3 float64 array.
    """
    height, width, _ = image.shape
    output = np.empty((height, width, 3), dtype=np.float64)
    for i in range(height):
        for j in range(width):
            red = image[i, j, 0]
            green = image[i, j, 1]
            blue = image[i, j, 2]
            value = max(red, green, blue)
            delta = value - min(red, green, blue)
            if delta == 0.0:
                saturation = 0.0
                hue = 0.0
            else:
                saturation = delta / value
                if blue == value:
                    sector = 4.0 + (red - green) / delta
                elif green == value:
                    sector = 2.0 + (blue - red) / delta
                else:
                    sector = (green - blue) / delta
                hue = (sector / 6.0) % 1.0
            value = min(max(value + value_shift, 0.0), 1.0)
            saturation = min(max(saturation * saturation_scale + saturation_shift, 0.0), 1.0)
            hue_sector = np.floor(hue * 6.0)
            fraction = hue * 6.0 - hue_sector
            p = value * (1.0 - saturation)
            q = value * (1.0 - fraction * saturation)
            t = value * (1.0 - (1.0 - fraction) * saturation)
            index = int(hue_sector) % 6
            if index == 0:
                output[i, j, 0], output[i, j, 1], output[i, j, 2] = value, t, p
            elif index == 1:
                output[i, j, 0], output[i, j, 1], output[i, j, 2] = q, value, p
            elif index == 2:
                output[i, j, 0], output[i, j, 1], output[i, j, 2] = p, value, t
            elif index == 3:
                output[i, j, 0], output[i, j, 1], output[i, j, 2] = p, q, value
            elif index == 4:
                output[i, j, 0], output[i, j, 1], output[i, j, 2] = t, p, value
            else:
                output[i, j, 0], output[i, j, 1], output[i, j, 2] = value, p, q
    return output


@numba.njit(cache=True)
def _reflect_coordinate(coordinate, length):  # pragma: no cover - compiled
    if -0.5 <= coordinate <= length - 0.5:
        return coordinate
    period = 2.0 * length
    folded = (coordinate + 0.5) % period
    if folded >= length:
        folded = period - folded
    return folded - 0.5


@numba.njit(cache=True)
def sample_bilinear_reflect(image, row_coordinates, column_coordinates):  # pragma: no cover - compiled
    """``scipy.ndimage.map_coordinates(channel, (rows, columns), order=1, mode="reflect")`` per channel.

    ``image`` is HxWxC, the coordinates are HxW float64 (any values: they are reflected about the
    pixel edges, period ``2 * length``). Values are computed in float64 as scipy's tensor-product
    sum and stored in ``image``'s dtype. Returns a new HxWxC array.
    """
    height, width, channels = image.shape
    output = np.empty((row_coordinates.shape[0], row_coordinates.shape[1], channels), dtype=image.dtype)
    for i in range(row_coordinates.shape[0]):
        for j in range(row_coordinates.shape[1]):
            row = _reflect_coordinate(row_coordinates[i, j], height)
            column = _reflect_coordinate(column_coordinates[i, j], width)
            row_floor = np.floor(row)
            column_floor = np.floor(column)
            wr1 = row - row_floor
            wq1 = column - column_floor
            wr0 = 1.0 - wr1
            wq0 = 1.0 - wq1
            r0 = int(row_floor)
            q0 = int(column_floor)
            r1 = min(max(r0 + 1, 0), height - 1)
            q1 = min(max(q0 + 1, 0), width - 1)
            r0 = min(max(r0, 0), height - 1)
            q0 = min(max(q0, 0), width - 1)
            for c in range(channels):
                output[i, j, c] = (
                    wr0 * wq0 * np.float64(image[r0, q0, c])
                    + wr0 * wq1 * np.float64(image[r0, q1, c])
                    + wr1 * wq0 * np.float64(image[r1, q0, c])
                    + wr1 * wq1 * np.float64(image[r1, q1, c])
                )
    return output


@numba.njit(cache=True)
def build_alias_tables(probabilities):  # pragma: no cover - compiled
    """Walker/Vose alias tables, one per row of ``probabilities`` (rows sum to 1).

    Returns ``(acceptance, alias)``, both shaped like ``probabilities``: a category drawn uniformly
    is kept with probability ``acceptance`` and replaced by ``alias`` otherwise, which samples the
    row's distribution exactly.
    """
    rows, size = probabilities.shape
    acceptance = np.ones((rows, size), dtype=np.float64)
    alias = np.empty((rows, size), dtype=np.int64)
    small = np.empty(size, dtype=np.int64)
    large = np.empty(size, dtype=np.int64)
    for row in range(rows):
        scaled = probabilities[row] * size
        small_count = 0
        large_count = 0
        for category in range(size):
            alias[row, category] = category
            if scaled[category] < 1.0:
                small[small_count] = category
                small_count += 1
            else:
                large[large_count] = category
                large_count += 1
        while small_count > 0 and large_count > 0:
            small_count -= 1
            under = small[small_count]
            over = large[large_count - 1]
            acceptance[row, under] = scaled[under]
            alias[row, under] = over
            scaled[over] = (scaled[over] + scaled[under]) - 1.0
            if scaled[over] < 1.0:
                large_count -= 1
                small[small_count] = over
                small_count += 1
    return acceptance, alias


@numba.njit(cache=True)
def sample_bytes_with_alias(image, acceptance, alias, uniforms):  # pragma: no cover - compiled
    """Per value v of ``image`` (uint8), a byte drawn from row v of the alias tables.

    One uniform per value: its integer part over 256 categories picks a category, its fractional
    part decides between the category and its alias. Returns uint8 shaped like ``image``.
    """
    flat_image = image.ravel()
    flat_uniforms = uniforms.ravel()
    size = acceptance.shape[1]
    output = np.empty(flat_image.size, dtype=np.uint8)
    for index in range(flat_image.size):
        row = flat_image[index]
        scaled = flat_uniforms[index] * size
        category = min(int(scaled), size - 1)
        if scaled - category < acceptance[row, category]:
            output[index] = category
        else:
            output[index] = alias[row, category]
    return output.reshape(image.shape)
