"""The image filters of spatter's water branch as batched torch operations (OpenCV's arithmetic).

``cv2.Canny``, ``cv2.distanceTransform``, ``cv2.blur``, ``cv2.equalizeHist`` and ``cv2.filter2D``
on (B, H, W) tensors holding byte or float32 values. Byte images travel as float32 integers (the
integer 3x3 correlations of Canny and the emboss are exact in float32); the box blur computes in its
input's dtype (float64 for the CPU's bytes). The two sequential algorithms are run as
parallel steps, a fixed number of them (no data-dependent loop, no read of the data on the host), that
reach the same result: Canny's hysteresis (a stack-based flood fill) as connected-component labelling of
the candidate pixels by Borůvka-style hooking and pointer jumping (:func:`connected_to_strong`), and
the two-pass 5x5 chamfer distance as two phases of Bellman-Ford relaxations (raster-forward steps,
then raster-backward steps: the same paths and float32 sums as OpenCV's two scans; distances are
only needed up to the truncation at 20 pixels, which 22 relaxations per phase reach).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

_CANNY_SHIFT = 15
_TAN_22_5 = int(0.4142135623730950488016887242097 * (1 << _CANNY_SHIFT) + 0.5)
"""OpenCV's ``TG22``: tan(22.5°) in fixed point, for the gradient direction of non-maximum suppression."""
_CHAMFER_WEIGHTS = (1.0, 1.4, 2.1969)
"""OpenCV's 5x5 ``DIST_L2`` chamfer weights (horizontal/vertical, diagonal, knight move), added in float32."""


def _shifted(padded: Tensor, rows: int, columns: int, pad: int) -> Tensor:
    """The (B, H, W) window of ``padded`` (padded by ``pad``) moved by (rows, columns)."""
    height, width = padded.shape[-2] - 2 * pad, padded.shape[-1] - 2 * pad
    return padded[..., pad + rows : pad + rows + height, pad + columns : pad + columns + width]


def _correlate3(images: Tensor, kernel: list[list[int]], mode: str) -> Tensor:
    """3x3 correlation of float (B, H, W) images with integer ``kernel``, borders by ``mode``, in their dtype
    (exact for byte images in float32: the sums stay below 2**24)."""
    padded = F.pad(images[:, None], (1, 1, 1, 1), mode=mode)[:, 0]
    total = torch.zeros_like(images)
    for row in range(3):
        for column in range(3):
            if kernel[row][column]:
                total = total + kernel[row][column] * _shifted(padded, row - 1, column - 1, 1)
    return total


def canny(images: Tensor, low: int, high: int) -> Tensor:
    """``cv2.Canny(image, low, high)`` (aperture 3, L1 gradient) of byte images.

    Args:
        images: float32 (or float64) (B, H, W) holding integers 0..255.
        low, high: hysteresis thresholds on ``|dx| + |dy|``.

    Returns:
        bool (B, H, W), True on edges.
    """
    dx = _correlate3(images, [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], "replicate").long()
    dy = _correlate3(images, [[-1, -2, -1], [0, 0, 0], [1, 2, 1]], "replicate").long()
    magnitude = dx.abs() + dy.abs()
    padded = F.pad(magnitude, (1, 1, 1, 1))
    x_size = dx.abs()
    y_size = dy.abs() << _CANNY_SHIFT
    tan_22 = x_size * _TAN_22_5
    tan_67 = tan_22 + (x_size << (_CANNY_SHIFT + 1))
    horizontal = (magnitude > _shifted(padded, 0, -1, 1)) & (magnitude >= _shifted(padded, 0, 1, 1))
    vertical = (magnitude > _shifted(padded, -1, 0, 1)) & (magnitude >= _shifted(padded, 1, 0, 1))
    rising = (magnitude > _shifted(padded, -1, -1, 1)) & (magnitude > _shifted(padded, 1, 1, 1))
    falling = (magnitude > _shifted(padded, -1, 1, 1)) & (magnitude > _shifted(padded, 1, -1, 1))
    diagonal = torch.where((dx ^ dy) < 0, falling, rising)
    maximum = torch.where(y_size < tan_22, horizontal, torch.where(y_size > tan_67, vertical, diagonal))
    candidates = maximum & (magnitude > low)
    return connected_to_strong(candidates, candidates & (magnitude > high))


def _block_links(candidates: Tensor) -> tuple[Tensor, Tensor, list[tuple[int, int, Tensor]]]:
    """The candidates of (B, H, W) grouped in 2x2 blocks (H, W padded to even sizes with non-candidates).

    Returns:
        ``occupied``: bool (B, H/2, W/2), blocks holding a candidate; ``pixels``: bool (B, H/2, 2, W/2, 2),
        the padded candidates by block; ``links``: for each of the 8 neighbouring blocks (row, column
        offset), bool (B, H/2, W/2), True where a candidate of the block is 8-adjacent to one of that
        neighbour (side neighbours: a candidate in each facing pair of rows or columns, every such pair is
        adjacent; corner neighbours: the two facing corner pixels).
    """
    batch, height, width = candidates.shape
    padded = F.pad(candidates, (0, width % 2, 0, height % 2))
    pixels = padded.reshape(batch, (height + 1) // 2, 2, (width + 1) // 2, 2)
    top_left, top_right = pixels[:, :, 0, :, 0], pixels[:, :, 0, :, 1]
    bottom_left, bottom_right = pixels[:, :, 1, :, 0], pixels[:, :, 1, :, 1]
    top, bottom = top_left | top_right, bottom_left | bottom_right
    left, right = top_left | bottom_left, top_right | bottom_right
    facing = {
        (0, 1): (right, left),
        (0, -1): (left, right),
        (1, 0): (bottom, top),
        (-1, 0): (top, bottom),
        (1, 1): (bottom_right, top_left),
        (1, -1): (bottom_left, top_right),
        (-1, 1): (top_right, bottom_left),
        (-1, -1): (top_left, bottom_right),
    }
    links = [
        (row, column, mine & _shifted(F.pad(theirs, (1, 1, 1, 1)), row, column, 1))
        for (row, column), (mine, theirs) in facing.items()
    ]
    return top | bottom, pixels, links


def connected_to_strong(candidates: Tensor, strong: Tensor) -> Tensor:
    """Canny's hysteresis: the candidates 8-connected (through candidates) to a strong pixel.

    Args:
        candidates: bool (B, H, W), the pixels that may be edges; strong: bool (B, H, W), a subset of them.

    Returns:
        bool (B, H, W): the candidates whose 8-connected component of candidates holds a strong pixel
        (OpenCV's stack-based flood fill from the strong pixels reaches exactly these).

    A fixed number of parallel steps, whatever the images (no data-dependent loop). The four pixels of a
    2x2 block are pairwise 8-adjacent, so a block's candidates lie in one component, and the components
    are those of the graph of occupied blocks linked by :func:`_block_links`. They are labelled by
    Borůvka-style hooking: every tree (one root, initially every block) is a star labelled by its root's
    flat index. Each round every tree hooks its root onto the smallest label linked to its blocks if that
    is below its own, else onto the largest if that is above (a tree linked to another always hooks); of
    two trees picking each other the smaller stays a root. No longer cycle forms: the smallest tree of a
    cycle must hook up, onto a tree Z, whose smallest neighbour is then at most that smallest tree, so Z
    hooks back onto it. So the hooks form a forest and every tree that is not yet a whole component
    merges with at least one other: after round r a component not yet labelled holds at most
    ``n / 2**r`` trees (n blocks), and ``ceil(log2(n))`` rounds label every component. In round r a hook
    chain has fewer than ``n / 2**r`` trees, so the forest is at most ``n / 2**r`` steps deep
    (block → root → hooked roots) and ``ceil(log2(n / 2**r))`` pointer-jumping steps flatten it back to stars.
    """
    batch, height, width = candidates.shape
    occupied, pixels, links = _block_links(candidates)
    rows, columns = occupied.shape[1:]
    count = rows * columns
    positions = torch.arange(count, device=candidates.device).expand(batch, count)
    # unlinked neighbours and empty blocks pushed out of range: to >= count for the minimum, to < 0 for the maximum
    penalties = [(row, column, torch.where(link, 0, count)) for row, column, link in links]
    unoccupied = torch.where(occupied, 0, count)
    roots = positions
    for round_index in range(max(1, math.ceil(math.log2(count)))):
        labels = roots.reshape(batch, rows, columns)
        padded = F.pad(labels, (1, 1, 1, 1))
        smallest, largest = labels + unoccupied, labels - unoccupied
        for row, column, penalty in penalties:
            neighbour = _shifted(padded, row, column, 1)
            smallest = torch.minimum(smallest, neighbour + penalty)
            largest = torch.maximum(largest, neighbour - penalty)
        smallest = torch.full_like(roots, count).scatter_reduce(1, roots, smallest.reshape(batch, count), "amin")
        largest = torch.full_like(roots, -1).scatter_reduce(1, roots, largest.reshape(batch, count), "amax")
        picked = torch.where(smallest < positions, smallest, torch.where(largest > positions, largest, positions))
        mutual = (picked.gather(1, picked) == positions) & (positions < picked)
        parents = torch.where(roots == positions, torch.where(mutual, positions, picked), roots)
        for _ in range(math.ceil(math.log2(max(2, count >> round_index)))):
            parents = parents.gather(1, parents)
        roots = parents
    strong_blocks = F.pad(strong, (0, width % 2, 0, height % 2)).reshape(pixels.shape).any(dim=4).any(dim=2)
    reached = torch.zeros_like(roots).scatter_reduce(1, roots, strong_blocks.reshape(batch, count).long(), "amax")
    reached = (reached.gather(1, roots) > 0).reshape(batch, rows, 1, columns, 1)
    return (pixels & reached).reshape(batch, 2 * rows, 2 * columns)[:, :height, :width]


def chamfer_distance(sources: Tensor, limit: float) -> Tensor:
    """``min(cv2.distanceTransform(~sources, cv2.DIST_L2, 5), limit)``: 5x5 chamfer distances to sources.

    OpenCV's two raster scans give each pixel the smallest float32 sum of chamfer weights (added
    one step at a time from the source) over the paths made of steps that go forward in raster order
    followed by steps that go backward. The same two families of paths are relaxed here in two
    parallel phases, so the float32 sums and their minima are the same.

    Args:
        sources: bool (B, H, W), the zero pixels of OpenCV's input (distance 0).
        limit: distances above it are returned as ``limit`` (the caller's truncation), in pixels.

    Returns:
        float32 (B, H, W) in pixels; paths stay inside the image.
    """
    straight, diagonal, knight = _CHAMFER_WEIGHTS
    steps = [(0, 1, straight), (0, -1, straight), (1, 0, straight), (-1, 0, straight)]
    steps += [(row, column, diagonal) for row in (-1, 1) for column in (-1, 1)]
    steps += [
        (sign_row * row, sign_column * column, knight)
        for row, column in ((1, 2), (2, 1))
        for sign_row in (-1, 1)
        for sign_column in (-1, 1)
    ]
    forward = [step for step in steps if step[0] < 0 or (step[0] == 0 and step[1] < 0)]
    backward = [step for step in steps if step not in forward]
    cap = float(limit + 1)
    distance = torch.where(sources, 0.0, cap).float()
    for phase in (forward, backward):
        # a path of length <= limit + 1 has at most limit + 1 steps (each weighs >= 1)
        for _ in range(int(limit) + 2):
            padded = F.pad(distance, (2, 2, 2, 2), value=cap)
            for row, column, weight in phase:
                distance = torch.minimum(distance, _shifted(padded, row, column, 2) + weight)
    return torch.clamp(distance, max=limit)


def box_blur3(images: Tensor) -> Tensor:
    """``cv2.blur(image, (3, 3))`` (reflect-101 borders) of float64 (B, H, W) values: the exact sum / 9
    (float32 values: the same in float32, the float32 mode's approximation)."""
    padded = F.pad(images[:, None], (1, 1, 1, 1), mode="reflect")[:, 0]
    total = sum(_shifted(padded, row, column, 1) for row in (-1, 0, 1) for column in (-1, 0, 1))
    return total * (1.0 / 9.0)


def emboss(images: Tensor) -> Tensor:
    """``cv2.filter2D(image, cv2.CV_8U, [[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])`` (reflect-101 borders,
    saturated to 0..255) of byte images held as float (B, H, W), in their dtype."""
    return torch.clamp(_correlate3(images, [[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], "reflect"), 0, 255)


def equalize_histogram(images: Tensor) -> Tensor:
    """``cv2.equalizeHist`` of byte images: float (B, H, W) integers 0..255 → the same dtype, equalised."""
    batch = images.shape[0]
    levels = images.long().reshape(batch, -1)
    histogram = torch.zeros((batch, 256), dtype=torch.long, device=images.device)
    histogram.scatter_add_(1, levels, torch.ones_like(levels))
    lowest = torch.argmax((histogram > 0).long(), dim=1, keepdim=True)
    lowest_count = histogram.gather(1, lowest)
    total = levels.shape[1]
    scale = (255.0 / (total - lowest_count).clamp(min=1).float()).float()
    above = torch.arange(256, device=images.device) > lowest
    cumulative = torch.cumsum(torch.where(above, histogram, 0), dim=1)
    table = torch.clamp(torch.round(cumulative.float() * scale), 0, 255)
    table = torch.where(lowest_count == total, lowest.float(), table)
    return table.gather(1, levels).reshape(images.shape).to(images.dtype)
