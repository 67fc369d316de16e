"""Every Triton launch of the renderer goes through ``_triton.launch``: fp fusion off, on its tensors' device."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ccc.render_torch import _triton

KERNEL_MODULES = sorted((Path(_triton.__file__).parent).glob("[!_]*.py"))


class _Kernel:
    def __init__(self, events: list[object]) -> None:
        self.events = events

    def __getitem__(self, grid: tuple[int, ...]):  # noqa: ANN204
        return lambda *args, **constants: self.events.append(("launch", grid, args, constants))


def test_a_launch_runs_on_the_device_it_is_given_with_fp_fusion_off(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[object] = []

    @contextlib.contextmanager
    def device(index: torch.device) -> Iterator[None]:
        events.append(("enter", index))
        yield
        events.append(("exit", index))

    monkeypatch.setattr(torch.cuda, "device", device)
    _triton.launch(_Kernel(events), (4, 2), torch.device("cuda", 1), 7, BLOCK=8)
    cuda_one = torch.device("cuda", 1)
    assert events == [
        ("enter", cuda_one),
        ("launch", (4, 2), (7,), {"BLOCK": 8, "enable_fp_fusion": False}),
        ("exit", cuda_one),
    ]
    events.clear()
    _triton.launch(_Kernel(events), (1,), torch.device("cpu"), 3)
    assert events == [("launch", (1,), (3,), {"enable_fp_fusion": False})]  # the interpreter, no CUDA device


@pytest.mark.parametrize("path", KERNEL_MODULES, ids=[path.stem for path in KERNEL_MODULES])
def test_every_kernel_module_launches_through_launch_only(path: Path) -> None:
    source = path.read_text()
    assert not re.search(r"kernel\s*\[", source), "a kernel launched directly (kernel[grid](...)), not by launch()"
    assert "enable_fp_fusion" not in source and re.search(r"\blaunch\(", source)


@pytest.mark.parametrize(
    ("device", "variable", "capability", "hip", "expected"),
    [
        ("cpu", None, (9, 0), None, False),
        ("meta", None, (9, 0), None, False),
        ("cuda:1", None, (9, 0), None, True),
        ("cuda:1", "triton", (8, 0), None, True),
        ("cuda:1", "aten", (9, 0), None, False),
        ("cuda:1", None, (7, 5), None, False),  # Turing: Triton's NVIDIA backend starts at Ampere
        ("cuda:1", None, (9, 4), "6.2", False),  # ROCm: the kernels are checked for NVIDIA's backend only
    ],
)
def test_the_kernels_run_on_nvidia_gpus_from_ampere_on_unless_asked_not_to(
    device: str,
    variable: str | None,
    capability: tuple[int, int],
    hip: str | None,
    expected: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(_triton, "_triton_importable", lambda: True)
    monkeypatch.setattr(_triton, "_supported", _triton._supported.__wrapped__)  # no answer kept between cases
    if variable is None:
        monkeypatch.delenv(_triton.KERNELS_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(_triton.KERNELS_VARIABLE, variable)
    assert _triton.fuses(torch.device(device)) is expected
    assert asked in ([], [1])


def test_an_unknown_kernels_choice_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_triton.KERNELS_VARIABLE, "fast")
    with pytest.raises(ValueError, match=r"^CCC_TORCH_KERNELS='fast': expected 'aten' or 'triton'$"):
        _triton.kernels_choice()
    with pytest.raises(ValueError, match=r"^CCC_TORCH_KERNELS='fast'"):
        _triton.fuses(torch.device("cuda", 0))
