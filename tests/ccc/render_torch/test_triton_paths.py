"""The renderer through every ``ccc::`` operator's CUDA implementation, on the CPU: each operator replaced by
the function its CUDA registration runs, ``fuses`` saying yes and the Triton kernels in Triton's interpreter.

The kernel tests check each kernel against its composition; these check the wiring a GPU would run and no
other test does (the arguments each owner hands its kernel, the layouts its call sites give): every corruption
in both precisions and a rendered batch with the final JPEG round trip give the compositions' bytes.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._library import custom_ops

from ccc.demo.images import render_demo_image
from ccc.render_torch import _triton, jpeg, pipeline
from ccc.render_torch.random import SampleRandom
from ccc.render_torch.registry import torch_corruptions
from ccc.stream.spec import SampleSpec

from .triton_kernels import interpreted, kernel_module

KERNEL_MODULES = sorted(path.stem for path in Path(_triton.__file__).parent.glob("[!_]*.py"))


def _operators() -> dict[str, list[str]]:
    """Owner module name → the names of the ``ccc::`` operators it defines."""
    owners: dict[str, list[str]] = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("ccc.render_torch.") and not name.startswith("ccc.render_torch._triton"):
            for attribute, value in vars(module).items():
                if isinstance(value, custom_ops.CustomOpDef):
                    owners.setdefault(name, []).append(attribute)
    return owners


@contextlib.contextmanager
def _cuda_paths(launched: set[str]) -> Iterator[None]:
    """Within: every operator is its CUDA implementation (torch.library keeps it as the operator's
    ``_backend_fns["cuda"]``), every kernel interpreted; the kernel modules' launches are recorded in
    ``launched``."""
    with pytest.MonkeyPatch.context() as patch, contextlib.ExitStack() as stack:
        for module_name, attributes in _operators().items():
            module = sys.modules[module_name]
            patch.setattr(module, "fuses", lambda device: True)
            for attribute in attributes:
                patch.setattr(module, attribute, getattr(module, attribute)._backend_fns["cuda"])
        for name in KERNEL_MODULES:
            module = kernel_module(name)
            stack.enter_context(interpreted(module))

            def recorded(kernel: object, *args: object, _launch=module.launch, _name=name, **constants: object) -> None:
                launched.add(_name)
                _launch(kernel, *args, **constants)

            patch.setattr(module, "launch", recorded)
        yield


@pytest.mark.slow
def test_the_cuda_paths_give_the_compositions_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: set[str] = set()
    generator = np.random.default_rng(3)
    images = torch.from_numpy(generator.integers(0, 256, (2, 3, 24, 32), dtype=np.uint8)).float() / 255
    severities = torch.tensor([2.5, 4.0], dtype=torch.float64)
    for name, corruption in torch_corruptions().items():
        for dtype in (torch.float64, torch.float32):
            expected = corruption(images, severities, SampleRandom(torch.tensor([5, 6])), dtype)
            with _cuda_paths(launched):
                ours = corruption(images, severities, SampleRandom(torch.tensor([5, 6])), dtype)
            assert torch.equal(ours, expected), f"{name} in {dtype}"
    # a sample through the crop, both stages and the final round trip (the integer one, every GPU's)
    monkeypatch.setattr(pipeline, "jpeg_round_trip", jpeg.integer_jpeg_round_trip)
    source = render_demo_image(0, np.random.default_rng(0))
    height, width = source.shape[:2]
    spec = SampleSpec(
        index=0, step=0, pair_index=0, path_position=0, path_cell=(0, 0), n1="brightness", s1=2.0,
        n2="contrast", s2=1.5, calibrated_accuracy=50.0, source_position=0, source_path="c/0.png",
        class_index=0, source_size=(width, height), crop_box=(10, 20, 10 + 200, 20 + 170), flip=True, seed=11,
    )  # fmt: skip
    specs = [spec]
    expected = pipeline.render_batch(specs, [source], "cpu")
    with _cuda_paths(launched):
        ours = pipeline.render_batch(specs, [source], "cpu")
    assert torch.equal(ours, expected)
    assert launched == set(KERNEL_MODULES)  # every kernel module's wiring ran
