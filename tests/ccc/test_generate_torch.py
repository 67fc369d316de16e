"""Shards rendered by the torch backend (``ccc.generate.TorchRendering``, ``ccc-generate --render-device``).

The CPU path's decoder and JPEG encoder frame the torch renderer, so a stream of deterministic
corruptions gives the CPU path's bytes; a stream with random corruptions gives other bytes, the same
for any batch size, worker count and run. The manifest records the renderer (the CPU path's has no
``renderer`` key); a folder is resumed only with the renderer that started it; ``open_stream`` and
``ccc-verify`` read such folders; a device that cannot be used ends the command in one line, before
anything is written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from ccc.cli.generate import main
from ccc.cli.verify import main as verify_main
from ccc.execution import RayExecutor, SerialExecutor
from ccc.generate import OutputFolderError, RenderDeviceError, TorchRendering, check_render_device, generate_stream
from ccc.load import open_stream
from ccc.shards.manifest import MANIFEST_NAME, load_manifest
from ccc.stream.plan import plan_sample
from ccc.stream.sources import index_image_folder, load_source_images
from tests.builders import cli_user_error, make_calibration_table, make_ccc_plan, make_image_folder

DETERMINISTIC = ("brightness", "jpeg", "pixelate", "contrast")
"""Corruptions the torch backend renders with the CPU path's bytes on the CPU (docs/fidelity.md, torch section)."""
RANDOM = ("gaussian_noise", "impulse_noise", "brightness", "contrast")
NUM_IMAGES = 24
SHARD_SIZE = 10
TORCH_CPU = {"backend": "torch", "device_type": "cpu"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory):
    """A 12-image ImageNet-layout folder (500×375 JPEGs), indexed."""
    folder = make_image_folder(tmp_path_factory.mktemp("images") / "val")
    return load_source_images(index_image_folder(folder, progress=False))


def make_plan(sources, corruptions: tuple[str, ...]):
    """A 24-image stream over ``corruptions`` in shards of 10, 10 and 4 samples."""
    return make_ccc_plan(make_calibration_table(corruptions), sources, NUM_IMAGES, 4, SHARD_SIZE)


def shard_hashes(run_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(run_dir.glob("serial_*.tar"))}


@pytest.fixture(scope="module")
def random_plan(sources):
    plan = make_plan(sources, RANDOM)
    random_severities = [
        spec.s1 for spec in map(lambda index: plan_sample(plan, index), range(NUM_IMAGES)) if spec.n1 in RANDOM[:2]
    ]
    assert random_severities and max(random_severities) > 0, "the stream must hold random corruptions"
    return plan


@pytest.fixture(scope="module")
def torch_reference(random_plan, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Shard hashes of the random stream rendered by the torch renderer on the CPU, batches of 4."""
    run_dir = tmp_path_factory.mktemp("torch") / "run"
    summary = generate_stream(
        random_plan, run_dir, SerialExecutor(), progress=False, rendering=TorchRendering("cpu", 4)
    )
    assert (summary.images_rendered, summary.shards_written) == (NUM_IMAGES, 3)
    return shard_hashes(run_dir)


def test_deterministic_corruptions_give_the_cpu_paths_bytes(sources, tmp_path: Path) -> None:
    """Same decoder, same crops, exact deterministic corruptions, same JPEG encoder: same shards."""
    plan = make_plan(sources, DETERMINISTIC)
    generate_stream(plan, tmp_path / "cpu", SerialExecutor(), progress=False)
    generate_stream(plan, tmp_path / "torch", SerialExecutor(), progress=False, rendering=TorchRendering("cpu", 8))
    assert shard_hashes(tmp_path / "torch") == shard_hashes(tmp_path / "cpu")
    cpu_document = json.loads((tmp_path / "cpu" / MANIFEST_NAME).read_text())
    torch_document = json.loads((tmp_path / "torch" / MANIFEST_NAME).read_text())
    assert "renderer" not in cpu_document, "the CPU path's manifest keeps its bytes: no renderer key"
    assert torch_document["renderer"] == TORCH_CPU
    assert {"torch", "torchvision"} <= set(torch_document["library_versions"]) - set(cpu_document["library_versions"])


def test_random_corruptions_differ_from_the_cpu_path_but_not_with_batch_size_or_runs(
    random_plan, torch_reference, tmp_path: Path
) -> None:
    generate_stream(random_plan, tmp_path / "cpu", SerialExecutor(), progress=False)
    assert shard_hashes(tmp_path / "cpu").keys() == torch_reference.keys()
    assert shard_hashes(tmp_path / "cpu") != torch_reference, "random corruptions draw from other streams"
    for name, batch_size in (("batch8", 8), ("again", 4)):
        rendering = TorchRendering("cpu", batch_size)
        generate_stream(random_plan, tmp_path / name, SerialExecutor(), progress=False, rendering=rendering)
        assert shard_hashes(tmp_path / name) == torch_reference, name


@pytest.mark.slow
def test_two_ray_workers_give_the_one_process_bytes(random_plan, torch_reference, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from ccc.execution import ray_session

    with ray_session(workers=2, object_store_bytes=100 * 2**20) as ray:
        executor = RayExecutor(ray)
        generate_stream(random_plan, tmp_path, executor, progress=False, rendering=TorchRendering("cpu", 4))
    assert shard_hashes(tmp_path) == torch_reference


def test_a_folder_is_resumed_only_with_its_renderer(random_plan, torch_reference, tmp_path: Path) -> None:
    torch_dir, cpu_dir = tmp_path / "torch", tmp_path / "cpu"
    rendering = TorchRendering("cpu", 4)
    generate_stream(random_plan, torch_dir, SerialExecutor(), progress=False, rendering=rendering)
    assert load_manifest(torch_dir).renderer == TORCH_CPU
    (torch_dir / "serial_00001.tar").unlink()
    summary = generate_stream(random_plan, torch_dir, SerialExecutor(), progress=False, rendering=rendering)
    assert (summary.shards_written, summary.shards_skipped) == (1, 2)
    assert shard_hashes(torch_dir) == torch_reference
    with pytest.raises(OutputFolderError, match="was rendered by the torch backend on cpu, not the CPU reference path"):
        generate_stream(random_plan, torch_dir, SerialExecutor(), progress=False)
    generate_stream(random_plan, cpu_dir, SerialExecutor(), progress=False)
    with pytest.raises(OutputFolderError, match="was rendered by the CPU reference path, not the torch backend on cpu"):
        generate_stream(random_plan, cpu_dir, SerialExecutor(), progress=False, rendering=rendering)
    assert load_manifest(cpu_dir).renderer is None


def test_the_float32_precision_is_recorded_and_resumed_only_with_itself(random_plan, tmp_path: Path) -> None:
    single = TorchRendering("cpu", 8, "float32")
    assert TorchRendering("cpu").manifest_record() == TORCH_CPU, "the default keeps older manifests resumable"
    generate_stream(random_plan, tmp_path, SerialExecutor(), progress=False, rendering=single)
    assert load_manifest(tmp_path).renderer == {**TORCH_CPU, "precision": "float32"}
    with pytest.raises(
        OutputFolderError, match="by the torch backend on cpu in float32, not the torch backend on cpu:"
    ):
        generate_stream(random_plan, tmp_path, SerialExecutor(), progress=False, rendering=TorchRendering("cpu", 8))
    with pytest.raises(ValueError, match="render precision must be one of float64, float32, got 'half'"):
        TorchRendering("cpu", 8, "half")


class _RayStub:
    """What :func:`check_render_device` reads of a Ray executor: distributed, with ``gpus`` GPUs."""

    distributed = True

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus


def test_devices_that_cannot_be_used_are_refused_in_one_line() -> None:
    with pytest.raises(RenderDeviceError, match="render device must be 'cpu' or 'cuda\\[:index\\]', got 'tpu'"):
        TorchRendering("tpu")
    with pytest.raises(ValueError, match="batch_size"):
        TorchRendering("cpu", 0)
    with pytest.raises(RenderDeviceError, match="with Ray each worker renders on the one GPU Ray gives it"):
        check_render_device(TorchRendering("cuda:1"), _RayStub(gpus=2))  # type: ignore[arg-type]
    with pytest.raises(RenderDeviceError, match="the Ray cluster has no GPU"):
        check_render_device(TorchRendering("cuda"), _RayStub(gpus=0))  # type: ignore[arg-type]
    assert check_render_device(TorchRendering("cuda"), _RayStub(gpus=1)).gpus == 1  # type: ignore[arg-type]
    assert check_render_device(TorchRendering("cpu")).gpus == 0
    if not torch.cuda.is_available():
        with pytest.raises(RenderDeviceError, match="CUDA is not available"):
            check_render_device(TorchRendering("cuda"))


def test_an_unknown_kernels_choice_is_refused_before_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    from ccc.load.rendered_stream import check_render_device as check_stream_device

    monkeypatch.setenv("CCC_TORCH_KERNELS", "fast")
    message = r"^render device: CCC_TORCH_KERNELS='fast': expected 'aten' or 'triton'$"
    with pytest.raises(RenderDeviceError, match=message):
        check_render_device(TorchRendering("cpu"))
    with pytest.raises(ValueError, match=message):
        check_stream_device("cpu")
    monkeypatch.setenv("CCC_TORCH_KERNELS", "aten")
    assert check_render_device(TorchRendering("cpu")).gpus == 0 and check_stream_device("cpu").type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_renders_reproducibly_whatever_the_batch_size(random_plan, tmp_path: Path) -> None:
    for name, batch_size in (("a", 4), ("b", 8)):
        rendering = TorchRendering("cuda", batch_size)
        generate_stream(random_plan, tmp_path / name, SerialExecutor(), progress=False, rendering=rendering)
    assert shard_hashes(tmp_path / "a") == shard_hashes(tmp_path / "b")
    assert load_manifest(tmp_path / "a").renderer == {"backend": "torch", "device_type": "cuda"}


# ----------------------------------------------------------------------------- command line


def demo_arguments(out: Path, *extra: str) -> list[str]:
    """A tiny demo stream: 24 images, speed 8, shards of 8."""
    return [
        "--demo", "--difficulty", "medium", "--num-images", "24", "--speed", "8", "--shard-size", "8",
        "--out", str(out), "--workers", "1", "--no-progress", *extra,
    ]  # fmt: skip


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ccc-generate expecting a user error; return its one line."""
    return cli_user_error(main, capsys, argv)


def test_a_demo_run_on_the_torch_renderer_is_read_and_verified(tmp_path: Path, capsys) -> None:
    assert main(demo_arguments(tmp_path, "--render-device", "cpu", "--render-batch-size", "4")) == 0
    assert "rendered by the torch backend on cpu (cpu, batches of 4" in capsys.readouterr().out
    run = next(tmp_path.iterdir())
    assert load_manifest(run).renderer == TORCH_CPU
    samples = list(open_stream(run))
    assert [sample.metadata["index"] for sample in samples] == list(range(24))
    assert verify_main([str(run), "--no-progress"]) == 0
    assert (
        "rendered by the torch backend on cpu (bytes differ from the CPU reference path's)" in capsys.readouterr().out
    )


def test_the_dry_run_shows_the_renderer(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(demo_arguments(tmp_path / "out", "--dry-run", "--render-device", "cpu")) == 0
    assert "renderer: the torch backend on cpu (cpu, batches of 64; bytes differ" in capsys.readouterr().out
    assert main(demo_arguments(tmp_path / "out", "--dry-run")) == 0
    assert "renderer: the CPU reference path (the default" in capsys.readouterr().out
    assert main(demo_arguments(tmp_path / "out", "--dry-run", "--render-device", "cuda")) == 0, "previewed anywhere"
    assert "renderer: the torch backend on cuda (cuda, batches of 64" in capsys.readouterr().out
    single = ("--dry-run", "--render-device", "cpu", "--render-precision", "float32")
    assert main(demo_arguments(tmp_path / "out", *single)) == 0
    assert "renderer: the torch backend on cpu in float32 (cpu, batches of 64" in capsys.readouterr().out
    plots = sorted(path.name for path in tmp_path.glob("*_schedule.png"))
    assert [name for name in plots if name.endswith("_torch_float32_schedule.png")], plots
    assert not (tmp_path / "out").exists()


def test_a_bad_render_device_ends_the_command_before_anything_is_written(tmp_path: Path, capsys) -> None:
    line = one_line_error(capsys, demo_arguments(tmp_path, "--render-device", "tpu"))
    assert "render device must be 'cpu' or 'cuda[:index]', got 'tpu'" in line
    line = one_line_error(capsys, demo_arguments(tmp_path, "--render-batch-size", "8"))
    assert "--render-batch-size applies to the torch renderer" in line
    line = one_line_error(capsys, demo_arguments(tmp_path, "--render-precision", "float32"))
    assert "--render-precision applies to the torch renderer: add --render-device cpu|cuda" in line
    if not torch.cuda.is_available():
        line = one_line_error(capsys, demo_arguments(tmp_path, "--render-device", "cuda"))
        assert "render device: device 'cuda' requested but CUDA is not available" in line
    assert list(tmp_path.iterdir()) == []
