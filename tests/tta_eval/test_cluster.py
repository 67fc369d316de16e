"""Several runs on one executor (tta_eval.cluster, `tta-eval run --stream … --stream … --workers N`):
the same run folders and records as a serial run, retries of dead workers, one line for user mistakes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ccc.execution import RayExecutor, SerialExecutor
from tests.builders import REPOSITORY
from tests.ray_cluster import two_node_ray_cluster
from tests.tta_eval.tta_helpers import run_cli
from tta_eval.cluster import run_experiments, task_options
from tta_eval.protocols import CostModel, MethodCost
from tta_eval.settings import ExperimentSettings, MethodSpec, resolve_experiment
from tta_eval.sweep import SweepSettings, run_sweep
from tta_eval.synthetic import pretrained_tiny_cnn

STREAMS = (
    "synthetic:num_batches=6,batch_size=16,domain_length=2",
    "synthetic:num_batches=6,batch_size=16,domain_length=2,seed=1",
)
"""Two 96-sample synthetic streams of 16×16 images (the pretrained tiny CNN's)."""

MODEL = "tta_eval.synthetic:pretrained_tiny_cnn"
COSTS = CostModel(0.01, (("source", MethodCost(1.0)), ("bn", MethodCost(1.0)), ("tent", MethodCost(1.0, 1.0))))
"""Deterministic timing: the records do not depend on where or how fast a run executes."""

CRASH_MARKER = "CCC_TEST_CRASH_MARKER"
"""Environment variable naming the file whose absence makes ``crash_once_model`` kill its process."""

ATTEMPTS_FILE = "CCC_TEST_ATTEMPTS_FILE"
"""Environment variable naming the file ``failing_model`` appends a line to on every call."""


def crash_once_model():  # type: ignore[no-untyped-def]
    """Model factory: the first call (no marker yet) kills its process, as a node dying would."""
    marker = Path(os.environ[CRASH_MARKER])
    if not marker.exists():
        marker.touch()
        os._exit(1)
    return pretrained_tiny_cnn()


MIDWAY_MARKER = "CCC_TEST_MIDWAY_MARKER"
"""Environment variable naming the file whose absence makes ``crash_midway_model`` kill its process
at its 13th forward pass: in the fourth of the stream's 6 batches (3 methods), after the run's
checkpoint at sample 32."""

MIDWAY_CALLS = "CCC_TEST_MIDWAY_CALLS"
"""Environment variable naming the file ``crash_midway_model`` appends a line to on every forward
pass after the crash (the retried attempt)."""

_FORWARD_PASSES = [0]


class _MidwayCrashingNetwork(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.network = pretrained_tiny_cnn()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        marker = Path(os.environ[MIDWAY_MARKER])
        if marker.exists():
            with open(os.environ[MIDWAY_CALLS], "a") as calls:
                calls.write("call\n")
        else:
            _FORWARD_PASSES[0] += 1
            if _FORWARD_PASSES[0] > 12:
                marker.touch()
                os._exit(1)
        return self.network(images)


def crash_midway_model():  # type: ignore[no-untyped-def]
    """Model factory: the tiny CNN whose process dies in the middle of its first run (no marker yet)."""
    return _MidwayCrashingNetwork()


def failing_model():  # type: ignore[no-untyped-def]
    """Model factory that counts its calls and fails as a user mistake would."""
    with open(os.environ[ATTEMPTS_FILE], "a") as attempts:
        attempts.write("call\n")
    raise ValueError("this model cannot be built")


def settings_for(stream: str, out: Path, model: str = MODEL, **overrides) -> ExperimentSettings:  # type: ignore[no-untyped-def]
    from ccc.models import ModelSpec

    methods = tuple(MethodSpec(name, name) for name in ("bn", "tent"))
    return ExperimentSettings(
        stream, methods, ModelSpec(model), out, cost_model=COSTS, progress=False, window=32, **overrides
    )


def records_digests(root: Path) -> dict[str, str]:
    """sha256 of every records file below ``root``, by path relative to it."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("records/*.csv"))
    }


@pytest.fixture(scope="module")
def serial_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The serial run's records, computed with one torch thread, as a Ray task asking one CPU runs
    (the float sums of a backward pass depend on the number of threads)."""
    out = tmp_path_factory.mktemp("serial")
    runs = [resolve_experiment(settings_for(stream, out)) for stream in STREAMS]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folders = run_experiments(runs, SerialExecutor(), task_options("cpu", False))
    finally:
        torch.set_num_threads(threads)
    assert [folder.parent for folder in folders] == [out, out] and folders[0] != folders[1]
    digests = records_digests(out)
    assert len(digests) == 6  # source, bn, tent on each stream
    return digests


def test_task_options_follow_the_device() -> None:
    assert task_options("cpu", True).gpus == 0 and task_options("cpu", True).retry_exceptions == ()
    assert task_options("cpu", True).working_directory == str(Path.cwd())
    assert task_options("cpu", False).working_directory is None
    assert task_options("cuda", True).gpus == 1
    assert task_options("cuda", True, 0.5).gpus == 0.5
    assert task_options("cuda:1", False).gpus == 1
    with pytest.raises(ValueError, match="--gpus-per-task applies to --device cuda, got --device cpu"):
        task_options("cpu", True, 1)
    with pytest.raises(
        ValueError, match=r"--device cuda:1 names a GPU of this machine; on a Ray cluster give --device cuda"
    ):
        task_options("cuda:1", True)
    with pytest.raises(
        ValueError, match=r"--gpus-per-task: gpus must be a fraction in \(0, 1\] or a whole number, got 1.5"
    ):
        task_options("cuda", True, 1.5)
    with pytest.raises(ValueError, match="--gpus-per-task must be > 0, got 0"):
        task_options("cuda", True, 0)


def test_several_streams_on_the_command_line_write_one_run_folder_each(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    arguments = [
        "run",
        "--stream",
        STREAMS[0],
        "--stream",
        STREAMS[1],
        "--model",
        MODEL,
        "--method",
        "bn",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    code, out, err = run_cli(capsys, *arguments, "--window", "32")
    assert code == 0, err
    folders = sorted(path.parent for path in tmp_path.glob("*/summary.json"))
    assert len(folders) == 2
    assert "[2/2] run " in out and all(f"run folder: {folder}" in out for folder in folders)
    code, _, err = run_cli(capsys, *arguments, "--name", "one")
    assert (
        code == 2
        and err.strip()
        == "tta-eval: error: --name names one run folder, but 2 streams were given: leave it out "
        "(each run folder is named after its stream)"
    )
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        STREAMS[0],
        "--stream",
        STREAMS[0],
        "--model",
        MODEL,
        "--method",
        "bn",
        "--out",
        str(tmp_path / "again"),
    )
    assert code == 2 and "would both write run folder" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(
        capsys,
        "sweep",
        "--stream",
        STREAMS[0],
        "--stream",
        STREAMS[1],
        "--model",
        MODEL,
        "--method",
        "bn",
        "--speeds",
        "1",
    )
    assert (
        code == 2
        and err.strip() == "tta-eval: error: a sweep runs over one stream, got 2 --stream; run one sweep per stream"
    )
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        STREAMS[0],
        "--model",
        MODEL,
        "--method",
        "bn",
        "--gpus-per-task",
        "1",
        "--out",
        str(tmp_path / "g"),
    )
    assert code == 2 and err.strip() == "tta-eval: error: --gpus-per-task applies to --device cuda, got --device cpu"


def test_a_failed_run_does_not_stop_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ATTEMPTS_FILE, str(tmp_path / "attempts"))
    runs = [
        resolve_experiment(settings_for(STREAMS[0], tmp_path, f"{__name__}:failing_model")),
        resolve_experiment(settings_for(STREAMS[1], tmp_path)),
    ]
    ended = []
    with pytest.raises(ValueError, match="^this model cannot be built$"):
        run_experiments(
            runs,
            SerialExecutor(),
            task_options("cpu", False),
            on_finished=lambda run, folder, error: ended.append((folder, error)),
        )
    assert [folder is None for folder, _ in ended] == [True, False]
    assert (ended[1][0] / "summary.json").exists()


def test_the_paper_streams_recipe_lists_the_27_run_folders_or_names_the_missing(tmp_path: Path) -> None:
    script = REPOSITORY / "scripts" / "cluster" / "paper_streams.sh"
    names = [
        f"baseline_{b}_transition+speed_{k}_seed_{s}"
        for b in (40, 20, 0)
        for k in (1000, 2000, 5000)
        for s in (43, 44, 45)
    ]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    result = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"--stream ccc:{tmp_path / name}" for name in names]
    (tmp_path / names[4] / "manifest.json").unlink()
    result = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert (
        result.returncode == 2
        and f"1 of the 27 paper streams are missing (no manifest.json): {tmp_path / names[4]}" in result.stderr
    )


# ----------------------------------------------------------------------------- Ray


@pytest.fixture(scope="module")
def ray_module(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One local Ray cluster (2 CPUs, 100 MB object store); its workers import this module's model
    factories and read the marker files named in the environment."""
    pytest.importorskip("ray")
    from ccc.execution import ray_session

    folder = tmp_path_factory.mktemp("markers")
    environment = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
        CRASH_MARKER: str(folder / "crashed"),
        MIDWAY_MARKER: str(folder / "crashed_midway"),
        MIDWAY_CALLS: str(folder / "calls_after_the_crash"),
        ATTEMPTS_FILE: str(folder / "attempts"),
    }
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        with ray_session(workers=2, object_store_bytes=100 * 2**20) as ray:
            yield ray
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_two_ray_workers_write_the_serial_records(
    ray_module, serial_records: dict[str, str], tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    """`tta-eval run --workers 2` (the command joins the module's local cluster)."""
    arguments = [
        "run", "--stream", STREAMS[0], "--stream", STREAMS[1], "--model", MODEL, "--method", "bn", "--method", "tent",
        "--cost", "source=1", "--cost", "bn=1", "--cost", "tent=1+1", "--baseline-latency-ms", "10", "--window", "32",
        "--out", str(tmp_path), "--workers", "2", "--no-progress",
    ]  # fmt: skip
    code, out, err = run_cli(capsys, *arguments)
    assert code == 0, err
    assert "[1/2] run synthetic_" in out and "[2/2] run synthetic_" in out
    assert records_digests(tmp_path) == serial_records


def test_a_gpu_run_on_a_cluster_without_gpus_is_one_line_before_anything_runs(
    ray_module, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    arguments = [
        "run",
        "--stream",
        STREAMS[0],
        "--model",
        MODEL,
        "--method",
        "bn",
        "--device",
        "cuda",
        "--workers",
        "2",
        "--out",
        str(tmp_path),
    ]
    code, _, err = run_cli(capsys, *arguments)
    assert code == 2 and "each task asks for 1 CPUs and 1 GPUs, but no node of the Ray cluster has as much" in err
    assert len(err.strip().splitlines()) == 1 and not any(tmp_path.iterdir())


def test_a_run_whose_worker_died_is_retried_and_a_user_error_is_not(
    ray_module, serial_records: dict[str, str], tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    crashing = resolve_experiment(settings_for(STREAMS[0], tmp_path, f"{__name__}:crash_once_model"))
    fine = resolve_experiment(settings_for(STREAMS[1], tmp_path))
    run_experiments([crashing, fine], RayExecutor(ray_module, max_retries=2), task_options("cpu", True))
    assert Path(os.environ[CRASH_MARKER]).exists()  # the first attempt died
    assert records_digests(tmp_path) == serial_records
    failing = resolve_experiment(settings_for(STREAMS[0], tmp_path / "failing", f"{__name__}:failing_model"))
    with pytest.raises(ValueError, match="^this model cannot be built$"):
        run_experiments([failing], RayExecutor(ray_module, max_retries=2), task_options("cpu", True))
    assert Path(os.environ[ATTEMPTS_FILE]).read_text() == "call\n"


def test_a_run_whose_worker_died_midway_resumes_from_its_checkpoint(
    ray_module, serial_records: dict[str, str], tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    run = resolve_experiment(settings_for(STREAMS[0], tmp_path, f"{__name__}:crash_midway_model", checkpoint_every=32))
    run_experiments([run], RayExecutor(ray_module, max_retries=2), task_options("cpu", True))
    assert Path(os.environ[MIDWAY_MARKER]).exists()  # the first attempt died after its checkpoint at sample 32
    calls_after = len(Path(os.environ[MIDWAY_CALLS]).read_text().splitlines())
    assert 0 < calls_after < 18  # a run from the start makes 6 batches × 3 methods forward passes, at least
    expected = {
        path: digest
        for path, digest in serial_records.items()
        if path.startswith(run.settings.resolved_run_name() + "/")
    }
    assert records_digests(tmp_path) == expected


def test_a_sweep_on_ray_writes_the_serial_scenario_records(ray_module, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def sweep(executor, out: Path, options) -> Path:  # type: ignore[no-untyped-def]
        experiment = settings_for(STREAMS[0], out, run_name="sweep")
        return run_sweep(SweepSettings(experiment, grids=(("alfarra", (1.0, 0.5)),)), executor, options)

    serial = sweep(SerialExecutor(), tmp_path / "serial", task_options("cpu", False))
    distributed = sweep(RayExecutor(ray_module), tmp_path / "ray", task_options("cpu", True))
    assert records_digests(distributed) == records_digests(serial)
    assert len(records_digests(serial)) == 6  # two scenarios of source, bn, tent
    assert (distributed / "sweep.json").read_text() == (serial / "sweep.json").read_text()


@pytest.mark.slow
def test_a_two_node_ray_cluster_writes_the_serial_records(serial_records: dict[str, str], tmp_path: Path) -> None:
    """`ray start --head` plus `ray start --address` on this machine, started in another folder than
    the driver's; `tta-eval run --ray-address` with relative paths runs the two streams there."""
    pytest.importorskip("ray")
    environment = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONPATH=str(REPOSITORY))
    driver = tmp_path / "driver"
    driver.mkdir()
    with two_node_ray_cluster(tmp_path, environment) as address:
        command = [
            sys.executable, "-m", "tta_eval.cli", "run", "--stream", STREAMS[0], "--stream", STREAMS[1],
            "--model", MODEL, "--method", "bn", "--method", "tent", "--cost", "source=1", "--cost", "bn=1",
            "--cost", "tent=1+1", "--baseline-latency-ms", "10", "--window", "32", "--out", "results",
            "--ray-address", address, "--no-progress",
        ]  # fmt: skip
        result = subprocess.run(command, env=environment, cwd=driver, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert records_digests(driver / "results") == serial_records
