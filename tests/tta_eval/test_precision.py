"""Precision (autocast, fp16 loss scaling) and channels-last memory format of the run machinery.

CI has no GPU: the machinery is exercised on the CPU, where torch autocasts to bfloat16 and float16
and ``torch.amp.GradScaler("cpu")`` scales losses; the command line refuses these options on the CPU.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.tta_eval.method_helpers import build, statistics_file
from tests.tta_eval.tta_helpers import make_batches, make_tiny_cnn
from tta_eval.cli import main as tta_main
from tta_eval.methods import create, list_methods
from tta_eval.methods.base import loss_scaling
from tta_eval.protocols import OfflineProtocol, RunContext, Timing, evaluate_protocol
from tta_eval.protocols._execution import method_runners, precision_autocast, stream_batches

CPU = torch.device("cpu")


def _logit_dtypes(model: nn.Module) -> list[torch.dtype]:
    """The dtypes of ``model``'s outputs, appended on every forward pass."""
    seen: list[torch.dtype] = []
    model.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    return seen


def test_context_refuses_an_unknown_precision() -> None:
    with pytest.raises(ValueError, match="precision must be one of bf16, fp16, fp32; got 'fp8'"):
        RunContext(precision="fp8")


def test_fp32_changes_nothing() -> None:
    assert isinstance(precision_autocast("fp32", CPU), contextlib.nullcontext)
    assert isinstance(precision_autocast("bf16", CPU), torch.autocast)
    batches = make_batches(4)
    default = evaluate_protocol({"tent": create("tent", make_tiny_cnn())}, batches, OfflineProtocol(), RunContext())
    explicit = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())}, batches, OfflineProtocol(), RunContext(precision="fp32")
    )
    assert list(default["tent"].column("correct")) == list(explicit["tent"].column("correct"))
    assert list(default["tent"].column("loss")) == list(explicit["tent"].column("loss"))


def test_bf16_runs_the_forward_in_bfloat16_and_records_come_out() -> None:
    model = make_tiny_cnn()
    method = create("tent", model)
    dtypes = _logit_dtypes(method.model)
    initial = [parameter.detach().clone() for parameter in method.model.parameters()]
    tables = evaluate_protocol({"tent": method}, make_batches(4), OfflineProtocol(), RunContext(precision="bf16"))
    assert dtypes and set(dtypes) == {torch.bfloat16}
    table = tables["tent"]
    assert len(table) == 4 and table.total_samples == 64
    assert all(math.isfinite(loss) for loss in table.column("loss"))
    assert all(parameter.dtype == torch.float32 for parameter in method.model.parameters())
    assert any(not torch.equal(before, after) for before, after in zip(initial, method.model.parameters()))


@pytest.mark.parametrize("name", list_methods())
def test_every_method_runs_under_bf16_autocast(name: str, tmp_path: Path) -> None:
    model = make_tiny_cnn()
    method = build(name, model, statistics_file(model, tmp_path))
    tables = evaluate_protocol({name: method}, make_batches(3), OfflineProtocol(), RunContext(precision="bf16"))
    table = tables[name]
    assert len(table) == 3 and table.total_samples == 48
    assert not table.column("nonfinite_loss").any()


def test_fp16_scales_the_loss_with_one_scaler_per_method() -> None:
    methods = {"tent": create("tent", make_tiny_cnn()), "bn": create("bn", make_tiny_cnn())}
    with method_runners(methods, Timing("cpu"), CPU, "fp16") as runners:
        scalers = [runner.grad_scaler for runner in runners]
    assert all(isinstance(scaler, torch.amp.GradScaler) for scaler in scalers) and scalers[0] is not scalers[1]
    with method_runners(methods, Timing("cpu"), CPU, "bf16") as runners:
        assert [runner.grad_scaler for runner in runners] == [None, None]

    method = create("tent", make_tiny_cnn())
    dtypes = _logit_dtypes(method.model)
    initial = [parameter.detach().clone() for parameter in method.model.parameters()]
    table = evaluate_protocol({"tent": method}, make_batches(3), OfflineProtocol(), RunContext(precision="fp16"))[
        "tent"
    ]
    assert set(dtypes) == {torch.float16}
    assert all(math.isfinite(loss) for loss in table.column("loss"))
    assert any(not torch.equal(before, after) for before, after in zip(initial, method.model.parameters()))


class _CountingScaler(torch.amp.GradScaler):
    def __init__(self, init_scale: float) -> None:
        super().__init__("cpu", init_scale=init_scale)
        self.calls = {"scale": 0, "step": 0, "update": 0}

    def scale(self, outputs):  # type: ignore[no-untyped-def, override]
        self.calls["scale"] += 1
        return super().scale(outputs)

    def step(self, optimizer, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        self.calls["step"] += 1
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):  # type: ignore[no-untyped-def, override]
        self.calls["update"] += 1
        return super().update(new_scale)


@pytest.mark.parametrize("name", ["tent", "sar"])
def test_gradient_steps_go_through_the_loss_scaler(name: str) -> None:
    images = make_batches(1)[0][0]
    method = build(name, make_tiny_cnn())
    scaler = _CountingScaler(init_scale=2.0**10)
    with torch.autocast("cpu", dtype=torch.float16), loss_scaling(scaler):
        method(images)
    assert scaler.calls == {"scale": 1, "step": 1, "update": 1}
    assert method.last_step.updated
    method(images)
    assert scaler.calls["scale"] == 1, "outside loss_scaling a method does not use the scaler"


def test_an_overflowing_loss_scale_skips_the_step_and_lowers_the_scale() -> None:
    images = make_batches(1)[0][0]
    method = create("tent", make_tiny_cnn())
    before = [parameter.detach().clone() for parameter in method.model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    with torch.autocast("cpu", dtype=torch.float16), loss_scaling(scaler):
        method(images)
    assert not method.last_step.updated and math.isfinite(method.last_step.loss)
    assert scaler.get_scale() < 2.0**40
    assert all(torch.equal(first, second) for first, second in zip(before, method.model.parameters()))


def test_channels_last_puts_the_networks_and_the_images_in_channels_last_format() -> None:
    methods = {"tent": create("tent", make_tiny_cnn()), "cotta": build("cotta", make_tiny_cnn())}
    with method_runners(methods, Timing("cpu"), CPU, channels_last=True):
        convolutions = [
            module.weight for method in methods.values() for module in method.modules() if isinstance(module, nn.Conv2d)
        ]
        assert len(convolutions) > 2
        assert all(weight.is_contiguous(memory_format=torch.channels_last) for weight in convolutions)
    batches = list(stream_batches(methods, make_batches(2), CPU, None, memory_format=torch.channels_last))
    assert all(batch.images.is_contiguous(memory_format=torch.channels_last) for batch in batches)
    assert not make_batches(1)[0][0].is_contiguous(memory_format=torch.channels_last)

    method = create("tent", make_tiny_cnn())
    inputs: list[bool] = []
    first_convolution = next(module for module in method.model.modules() if isinstance(module, nn.Conv2d))
    first_convolution.register_forward_pre_hook(
        lambda module, args: inputs.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    table = evaluate_protocol({"tent": method}, make_batches(3), OfflineProtocol(), RunContext(channels_last=True))[
        "tent"
    ]
    assert inputs and all(inputs) and len(table) == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--precision", "bf16"], "tta-eval: error: --precision bf16 needs a CUDA device; CPU runs use fp32"),
        (["--precision", "fp16"], "tta-eval: error: --precision fp16 needs a CUDA device; CPU runs use fp32"),
        (
            ["--channels-last"],
            "tta-eval: error: --channels-last needs a CUDA device; CPU runs use the default memory format",
        ),
    ],
)
def test_the_command_line_refuses_reduced_precision_on_the_cpu(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # in this process: tests/ccc/cli/test_common.py runs the console script itself for a user error
    code = tta_main([
        "run", "--stream", "synthetic:num_batches=2", "--model", "tta_eval.synthetic:pretrained_tiny_cnn",
        "--method", "tent", "--out", str(tmp_path), *options,
    ])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip() == message
    assert not any(tmp_path.iterdir())
