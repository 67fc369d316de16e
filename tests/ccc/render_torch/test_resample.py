"""The batched resampler: Pillow's bytes per sample in one batch, and no operation per sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils._python_dispatch import TorchDispatchMode

from ccc.render_torch import _resample
from ccc.render_torch._resample import resample_batch

_RESAMPLING = {"box": Image.Resampling.BOX, "bilinear": Image.Resampling.BILINEAR}


def _random_batch(generator: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``count`` 160×200 noise images, boxes of every shape (both of Pillow's pass orders), output sizes
    from 1 to 90 pixels and flips."""
    images = generator.integers(0, 256, (count, 160, 200, 3), dtype=np.uint8)
    left, top = generator.integers(0, 100, count), generator.integers(0, 80, count)
    right = left + generator.integers(1, 200 - left + 1)
    bottom = top + generator.integers(1, 160 - top + 1)
    boxes = np.stack([left, top, right, bottom], axis=1)
    sizes = generator.integers(1, 91, (count, 2))
    return images, boxes, sizes, generator.random(count) < 0.5


@pytest.mark.parametrize("multiplies_while_casting", [False, True], ids=["the CPU's products", "a GPU's products"])
@pytest.mark.parametrize("kind", ["box", "bilinear"])
def test_every_sample_of_a_mixed_batch_equals_pillow(
    kind: str, multiplies_while_casting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_resample, "multiplies_while_casting", lambda device: multiplies_while_casting)
    images, boxes, sizes, flips = _random_batch(np.random.default_rng(11), 24)
    output = resample_batch(torch.from_numpy(images), boxes, sizes, (90, 90), kind, flips)
    for k in range(len(images)):
        resized = Image.fromarray(images[k]).crop(tuple(boxes[k])).resize(tuple(sizes[k][::-1]), _RESAMPLING[kind])
        if flips[k]:
            resized = resized.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        height, width = sizes[k]
        ours = output[k, :height, :width].numpy()
        np.testing.assert_array_equal(ours, np.asarray(resized), err_msg=f"sample {k}, box {boxes[k]}, size {sizes[k]}")
        assert not output[k, height:].any() and not output[k, :, width:].any()


class _CountOperations(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, function, types, arguments=(), keywords=None):
        self.count += 1
        return function(*arguments, **(keywords or {}))


def _operations(repeats: int) -> int:
    images, boxes, sizes, flips = _random_batch(np.random.default_rng(3), 4)
    levels = torch.from_numpy(np.tile(images, (repeats, 1, 1, 1)))
    with _CountOperations() as counter:
        resample_batch(levels, np.tile(boxes, (repeats, 1)), np.tile(sizes, (repeats, 1)), (90, 90), "bilinear")
    return counter.count


def test_the_operations_do_not_grow_with_the_batch() -> None:
    assert _operations(8) == _operations(1)


def test_a_batch_past_the_int32_tap_indices_is_refused_in_one_line() -> None:
    boxes = np.array([[0, 0, 4, 4]] * 2, dtype=np.int64)
    no_flips = np.zeros(2, dtype=bool)
    rows, row_weights, _, _ = _resample._tables(boxes, np.full((2, 2), 2), (2, 2), "box", no_flips, (1 << 29, 4))
    assert rows.dtype == row_weights.dtype == np.int32 and rows.max() == (1 << 29) + 3
    # 2 planes of 2**30 rows: 2**31 rows in all (the tables only, no plane allocated)
    with pytest.raises(ValueError, match="^2 planes of 1073741824x4 pixels exceed the int32 tap indices$"):
        _resample._tables(boxes, np.full((2, 2), 2), (2, 2), "box", no_flips, (1 << 30, 4))
