"""Ray sessions: a dead --ray-address fails fast with one line; a local cluster does not outlive a
command killed with SIGKILL (issue 19, item 7)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccc.cli.calibrate import main as calibrate_main
from ccc.cli.generate import main as generate_main
from ccc.execution import RayUnavailableError, connect_timeout_seconds, probe_ray_address
from tests.builders import REPOSITORY, make_calibration_table, make_image_folder, make_texture_folder
from tta_eval.cli import main as evaluate_main


def closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_probe_names_a_dead_address_and_honours_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    port = closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(
            RayUnavailableError,
            match=rf"cannot reach the Ray cluster at {address} \(127.0.0.1:{port}\): Connection refused",
        ):
            probe_ray_address(address, 5.0)
    with pytest.raises(
        RayUnavailableError, match="--ray-address must look like auto, host:port or ray://host:port, got 'host:port:x'"
    ):
        probe_ray_address("host:port:x", 5.0)

    def never_answers(endpoint, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", never_answers)
    with pytest.raises(
        RayUnavailableError, match=r"no answer within 0.5 s \(set CCC_RAY_CONNECT_TIMEOUT to wait longer\)"
    ):
        probe_ray_address("10.0.0.1:6379", 0.5)
    monkeypatch.setenv("CCC_RAY_CONNECT_TIMEOUT", "0.5")
    assert connect_timeout_seconds() == 0.5
    monkeypatch.setenv("CCC_RAY_CONNECT_TIMEOUT", "-1")
    with pytest.raises(
        RayUnavailableError, match="CCC_RAY_CONNECT_TIMEOUT must be a positive number of seconds, got '-1'"
    ):
        connect_timeout_seconds()


COMMANDS = {"ccc-generate": generate_main, "ccc-calibrate": calibrate_main, "tta-eval": evaluate_main}


def run_command(capsys: pytest.CaptureFixture[str], program: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``program`` run with ``arguments`` in this process, as its console script calls it: exit code and output.
    (The console scripts' own one-line errors, as programs, are in tests/ccc/cli/test_common.py.)"""
    capsys.readouterr()
    code = COMMANDS[program](list(arguments))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess([program, *arguments], code, captured.out, captured.err)


def generate_and_calibrate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *options: str
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """ccc-generate and ccc-calibrate compute on tiny inputs, each given ``options`` (e.g. a Ray address)."""
    table = tmp_path / "table.npz"
    make_calibration_table().save(table)
    images = make_image_folder(tmp_path / "val", images_per_class=2, size=(64, 48))
    generate = run_command(
        capsys, "ccc-generate", "--calibration", str(table), "--imagenet", str(images), "--difficulty", "medium",
        "--speed", "2", "--num-images", "4", "--out", str(tmp_path / "out"), *options, "--no-progress",
    )  # fmt: skip
    textures = make_texture_folder(tmp_path / "textures", images_per_class=1)
    calibrate = run_command(
        capsys, "ccc-calibrate", "compute", "--imagenet", str(textures),
        "--model", "tests.builders:tiny_texture_classifier", "--out", str(tmp_path / "t.npz"),
        "--corruptions", "gaussian_noise,contrast", "--images", "2", "--resize", "36", "--crop", "32", *options,
        "--no-progress",
    )  # fmt: skip
    return generate, calibrate


def test_a_dead_ray_address_is_one_line_in_both_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{closed_port()}"
    generate, calibrate = generate_and_calibrate(capsys, tmp_path, "--ray-address", address)
    for result in (generate, calibrate):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert (
            len(lines) == 1
            and f"cannot reach the Ray cluster at {address}" in lines[0]
            and "Connection refused" in lines[0]
        ), result.stderr


def test_an_address_that_accepts_but_is_not_ray_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    with socket.socket() as silent:  # the kernel accepts connections to it; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        table = tmp_path / "table.npz"
        make_calibration_table().save(table)
        images = make_image_folder(tmp_path / "val", images_per_class=2, size=(64, 48))
        monkeypatch.setenv("CCC_RAY_CONNECT_TIMEOUT", "2")
        result = run_command(
            capsys, "ccc-generate", "--calibration", str(table), "--imagenet", str(images), "--difficulty", "medium",
            "--speed", "2", "--num-images", "4", "--out", str(tmp_path / "out"), "--ray-address", address,
            "--no-progress",
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach the Ray cluster at {address}" in lines[0], result.stderr
    assert (
        "accepts connections but does not answer as a Ray cluster within 2 s (set CCC_RAY_CONNECT_TIMEOUT" in lines[0]
    )


def test_more_workers_than_this_machine_has_is_one_line_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--workers 10^9 once started Ray with 10^9 CPUs (and ignored SIGTERM): one shared bound now,
    checked before Ray starts."""
    pytest.importorskip("ray")
    workers = "1000000000"
    generate, calibrate = generate_and_calibrate(capsys, tmp_path, "--workers", workers)
    evaluate = run_command(
        capsys, "tta-eval", "run", "--stream", "synthetic:num_batches=2,batch_size=4,image_size=8",
        "--model", "tta_eval.synthetic:tiny_bn_cnn", "--method", "bn",
        "--stream", "synthetic:num_batches=2,batch_size=4,image_size=8,seed=1", "--out", str(tmp_path / "results"),
        "--workers", workers, "--no-progress",
    )  # fmt: skip
    cpus = os.cpu_count()
    for result in (generate, calibrate, evaluate):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert (
            len(lines) == 1
            and f"--workers must be in [1, {cpus}] for a local Ray cluster (this machine's CPUs), got {workers}"
            in lines[0]
        ), result.stderr


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the watchdog needs Linux /proc")
def test_a_killed_command_takes_its_local_cluster_with_it(tmp_path: Path) -> None:
    """SIGKILL a process holding a 2-CPU local cluster: every process of the cluster is gone within 15 s."""
    pytest.importorskip("ray")
    code = (
        "import sys, time\n"
        "from ccc.execution import ray_session\n"
        "with ray_session(workers=2, object_store_bytes=100 * 2**20) as ray:\n"
        "    info = ray._private.worker.global_worker.node.address_info\n"
        "    print(info['session_dir'], flush=True)\n"
        "    time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    session_dir = driver.stdout.readline().strip()  # type: ignore[union-attr]
    assert session_dir, "the local cluster did not start"
    time.sleep(3)  # let Ray start its agents and workers
    cluster = _cluster_processes(driver.pid, session_dir)
    assert len(cluster) >= 3, cluster
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    driver.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in cluster):
        time.sleep(0.2)
    assert not [pid for pid in cluster if _alive(pid)], "processes of the local cluster outlived the killed command"


def _cluster_processes(driver_pid: int, session_dir: str) -> list[int]:
    """The driver's descendants that name the session folder, and everything below them."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue

    def below(roots: set[int]) -> set[int]:
        found, frontier = set(), set(roots)
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
            found |= frontier
        return found

    def names_session(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return session_dir.encode() in handle.read()
        except OSError:
            return False

    roots = {pid for pid in below({driver_pid}) if names_session(pid)}
    return sorted(roots | below(roots))
