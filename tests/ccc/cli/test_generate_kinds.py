"""``ccc-generate --kind cin-c|gradual`` end to end: one-line errors for options the kind does not use,
the dry run, byte-identical shards across runs and chunk sizes, ``ccc-verify`` (plan hash without a
calibration table), and the loader's metadata (domain, severity) for shards and on-the-fly rendering."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ccc.cli.generate import main
from ccc.cli.verify import main as verify_main
from ccc.execution import SerialExecutor
from ccc.generate import generate_stream
from ccc.load import open_stream, render_stream
from ccc.shards.manifest import load_manifest
from ccc.stream.plan import plan_stream
from tests.builders import make_calibration_table, make_image_folder
from tests.ccc.cli.test_generate import run_error

CIN_C_NAME = "cin-c_severity_3_images_3_crop_random_seed_43"
GRADUAL_NAME = "gradual_images_2_crop_center_seed_5"


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("kinds") / "val")


def common(images: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--imagenet",
        str(images),
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
        "--shard-size",
        "8",
        *extra,
    ]


def shard_digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.glob("serial_*.tar"))}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--severity", "3", "--difficulty", "medium", "--speed", "4"],
            "--severity does not apply to --kind ccc (the default)",
        ),
        (
            ["--kind", "ccc", "--crop", "random", "--images-per-domain", "4"],
            "--images-per-domain does not apply to --kind ccc",
        ),
        (
            ["--kind", "ccc", "--crop", "center", "--speed", "4"],
            "--crop center (ImageNet-C's centre crop) is for --kind cin-c and gradual",
        ),
        (["--kind", "cin-c", "--speed", "4"], "--speed does not apply to --kind cin-c: it needs no calibration table"),
        (
            ["--kind", "cin-c", "--difficulty", "medium", "--calibration", "t.npz"],
            "--difficulty, --calibration do not apply to --kind cin-c",
        ),
        (
            ["--kind", "gradual", "--severity", "2"],
            "--severity does not apply to --kind gradual: it needs no calibration table, "
            "its severities are 1 2 3 4 5 4 3 2 1",
        ),
        (["--kind", "gradual", "--schedule", "reference"], "--schedule does not apply to --kind gradual"),
        (["--kind", "cin-c", "--severity", "7"], "argument --severity: invalid choice: 7 (choose from 1, 2, 3, 4, 5)"),
        (
            ["--kind", "cin-c", "--images-per-domain", "13"],
            "images per domain (speed, --images-per-domain) must be at most the number of source images (12)",
        ),
        (["--kind", "cin-c", "--corruptions", "fog,haze"], "unknown corruption 'haze'"),
    ],
)
def test_options_the_kind_does_not_use_are_refused_in_one_line(images, tmp_path, capsys, extra, expected) -> None:
    line = run_error(capsys, common(images, tmp_path, *extra))
    assert expected in line, line
    assert not (tmp_path / CIN_C_NAME).exists()


def test_the_dry_run_lists_the_domains_without_images(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--kind", "gradual", "--corruptions", "fog,contrast", "--images-per-domain", "10", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gradual stream: 18 domains × 10 images = 180 images per pass")
    rows = [line.split() for line in out.splitlines() if "–" in line and line.strip()[0].isdigit()]
    assert [(row[3], int(row[4])) for row in rows] == [
        (name, level) for name in ("fog", "contrast") for level in (1, 2, 3, 4, 5, 4, 3, 2, 1)
    ]
    assert "run folder: shards/gradual_images_10_crop_random_seed_43" in out
    assert not (tmp_path / "shards").exists()


def test_cin_c_shards_are_byte_stable_and_verified_without_a_table(images, tmp_path, capsys) -> None:
    assert main(common(images, tmp_path / "a", "--kind", "cin-c", "--severity", "3", "--images-per-domain", "3")) == 0
    first = tmp_path / "a" / CIN_C_NAME
    manifest = load_manifest(first)
    assert manifest.stream.kind == "cin-c" and manifest.stream.num_images == 45 and manifest.complete
    assert json.loads((first / "manifest.json").read_text())["stream"]["severity"] == 3
    # the same plan rendered again, one sample per executor task, gives the same bytes
    plan = plan_stream(manifest.stream, None, images)
    generate_stream(plan, tmp_path / "b", SerialExecutor(), chunk_size=1, progress=False)
    assert shard_digests(first) == shard_digests(tmp_path / "b") and len(shard_digests(first)) == 6
    capsys.readouterr()
    assert verify_main([str(first), "--imagenet", str(images), "--no-progress"]) == 0
    assert (
        "6 of 6 shards intact (45 images in the stream, 45 samples decoded); plan hash matches"
        in capsys.readouterr().out
    )
    assert verify_main([str(first), "--imagenet", str(images), "--calibration", "t.npz"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--calibration: a cin-c stream has no calibration table" in error[0], error


def test_gradual_shards_carry_domain_and_severity_and_render_stream_gives_the_same_images(images, tmp_path) -> None:
    argv = common(
        images,
        tmp_path,
        "--kind",
        "gradual",
        "--corruptions",
        "fog,contrast",
        "--images-per-domain",
        "2",
        "--crop",
        "center",
        "--seed",
        "5",
    )
    assert main(argv) == 0
    run = tmp_path / GRADUAL_NAME
    read = list(open_stream(run, image_format="jpeg"))
    expected = [
        (name, level) for name in ("fog", "contrast") for level in (1, 2, 3, 4, 5, 4, 3, 2, 1) for _ in range(2)
    ]
    assert [(sample.metadata["domain"], sample.metadata["severity"]) for sample in read] == expected
    assert all(sample.metadata["calibrated_accuracy"] is None for sample in read)
    rendered = list(render_stream(run, imagenet=images, image_format="jpeg"))
    assert [sample.image for sample in rendered] == [sample.image for sample in read]
    assert [sample.metadata["domain"] for sample in rendered] == [name for name, _ in expected]
    before = shard_digests(run)
    assert main(argv) == 0  # a second run finds every shard finished
    assert shard_digests(run) == before


def test_a_cin_c_dry_run_without_images_per_domain_counts_every_image_of_the_folder(
    images, tmp_path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--kind", "cin-c", "--corruptions", "fog,contrast", "--imagenet", str(images), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cin-c stream: 2 domains × 12 images = 24 images per pass")
    assert "run folder: shards/cin-c_severity_5_images_12_crop_random_seed_43" in out
    assert main(["--demo", "--kind", "cin-c", "--dry-run"]) == 0
    assert "run folder: shards/demo_cin-c_severity_5_images_2400_crop_random_seed_43" in capsys.readouterr().out
    assert main(["--demo", "--kind", "gradual", "--dry-run"]) == 0
    assert "run folder: shards/demo_gradual_images_200_crop_random_seed_43" in capsys.readouterr().out
    assert not (tmp_path / "shards").exists()


def test_render_stream_needs_a_table_only_for_the_ccc_kind(images) -> None:
    stream = render_stream({"kind": "cin-c", "speed": 2, "corruptions": "fog"}, imagenet=images, limit=2)
    assert [sample.metadata["domain"] for sample in stream] == ["fog", "fog"]
    with pytest.raises(ValueError, match="calibration must be a CalibrationTable"):
        render_stream({"difficulty": "medium", "speed": 2}, imagenet=images)
    table = make_calibration_table()
    ccc = render_stream({"difficulty": "medium", "speed": 2, "num_images": 2}, imagenet=images, calibration=table)
    assert all("domain" not in sample.metadata for sample in ccc)


def test_a_demo_cin_c_stream_needs_no_table_and_verifies_without_arguments(tmp_path, capsys) -> None:
    argv = [
        "--demo",
        "--kind",
        "cin-c",
        "--corruptions",
        "fog,jpeg_compression",
        "--images-per-domain",
        "3",
        "--out",
        str(tmp_path),
        "--workers",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 0
    run = tmp_path / "demo_cin-c_severity_5_images_3_crop_random_seed_43"
    assert load_manifest(run).stream.corruptions == ("fog", "jpeg")
    capsys.readouterr()
    assert verify_main([str(run), "--no-progress"]) == 0
    assert (
        "1 of 1 shard intact (6 images in the stream, 6 samples decoded); plan hash matches" in capsys.readouterr().out
    )


@pytest.mark.slow
def test_gradual_shards_are_the_same_from_two_ray_workers(images, tmp_path) -> None:
    pytest.importorskip("ray")
    from ccc.execution import RayExecutor, ray_session

    plan = plan_stream(
        {"kind": "gradual", "corruptions": "contrast,fog", "speed": 3, "shard_size": 10, "crop": "center"}, None, images
    )
    generate_stream(plan, tmp_path / "serial", SerialExecutor(), progress=False)
    with ray_session(workers=2, object_store_bytes=100 * 2**20) as ray:
        generate_stream(plan, tmp_path / "ray", RayExecutor(ray), chunk_size=2, progress=False)
    assert (
        shard_digests(tmp_path / "serial") == shard_digests(tmp_path / "ray")
        and len(shard_digests(tmp_path / "ray")) == 6
    )
