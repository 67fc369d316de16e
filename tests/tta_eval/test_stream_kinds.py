"""tta-eval on cin-c and gradual streams: the default domain key is the sample's corruption
("domain"; "pair" stays the default of ccc streams), --domain-key severity gives per-severity
accuracy, and per-domain accuracy is recorded per corruption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ccc.cli.generate import main as generate
from tests.builders import make_ccc_run, make_image_folder
from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli
from tta_eval.streams import default_domain_key


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    images = make_image_folder(root / "val")
    common = [
        "--imagenet",
        str(images),
        "--out",
        str(root),
        "--workers",
        "1",
        "--no-progress",
        "--images-per-domain",
        "8",
    ]
    assert generate([*common, "--kind", "cin-c", "--corruptions", "fog,contrast,snow", "--name", "cinc"]) == 0
    assert generate([*common, "--kind", "gradual", "--corruptions", "contrast", "--name", "gradual"]) == 0
    return {"cinc": root / "cinc", "gradual": root / "gradual", "ccc": make_ccc_run(root / "ccc", 8, 4, 8)}


def test_the_default_domain_key_follows_the_kind(runs) -> None:
    assert default_domain_key(f"ccc:{runs['cinc']}") == "domain"
    assert default_domain_key(f"ccc:{runs['gradual']}/manifest.json") == "domain"
    assert default_domain_key(f"ccc:{runs['ccc']}") == "pair"
    assert default_domain_key("ccc:/data/ccc/serial_{00000..00009}.tar") == "pair"


def summary(capsys, tmp_path: Path, stream: Path, *extra: str) -> dict:
    code, _, err = run_cli(
        capsys, "run", "--stream", f"ccc:{stream}", "--model", TINY_FACTORY, "--method", "source", "--batch-size", "8",
        "--out", str(tmp_path), "--name", "run", "--no-progress", *extra,
    )  # fmt: skip
    assert code == 0, err
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_a_cin_c_run_reports_accuracy_per_corruption(runs, tmp_path, capsys) -> None:
    result = summary(capsys, tmp_path, runs["cinc"])
    assert result["protocol"]["domain_key"] == "domain"
    assert [segment["domain"] for segment in result["domain_segments"]] == ["fog", "contrast", "snow"]
    per_domain = result["methods"]["source"]["per_domain_accuracy"]
    assert {name: entry["samples"] for name, entry in per_domain.items()} == {"fog": 8, "contrast": 8, "snow": 8}


def test_domain_key_severity_gives_accuracy_per_severity_of_a_gradual_stream(runs, tmp_path, capsys) -> None:
    result = summary(capsys, tmp_path, runs["gradual"], "--domain-key", "severity")
    assert [segment["domain"] for segment in result["domain_segments"]] == ["1", "2", "3", "4", "5", "4", "3", "2", "1"]
    per_domain = result["methods"]["source"]["per_domain_accuracy"]
    assert {name: entry["samples"] for name, entry in per_domain.items()} == {
        str(level): 16 if level < 5 else 8 for level in range(1, 6)
    }


def test_a_cin_c_stream_rendered_on_the_fly_equals_its_shards(runs) -> None:
    """``ccc-render:`` takes a cin-c run folder or definition (no calibration table), names and sizes
    it as ccc-generate does, gives it the domain key "domain" and renders the stored samples."""
    from tta_eval.streams import StreamOptions, describe_stream_source, open_stream_source

    images = runs["cinc"].parent / "val"
    definition = f"ccc-render:kind=cin-c,corruptions=fog+contrast+snow,speed=8,imagenet={images}"
    description = describe_stream_source(definition, StreamOptions())
    assert (description.name, description.samples) == ("cin-c_severity_5_images_8_crop_random_seed_43", 24)
    assert (
        default_domain_key(definition) == default_domain_key(f"ccc-render:{runs['cinc']},imagenet={images}") == "domain"
    )
    options = StreamOptions(batch_size=8)
    stored = list(open_stream_source(f"ccc:{runs['cinc']}", options))
    for location in (definition, f"ccc-render:{runs['cinc']},imagenet={images}"):
        rendered = list(open_stream_source(location, options))
        assert len(rendered) == len(stored) == 3
        for (images_batch, labels, metadata), (stored_images, stored_labels, stored_metadata) in zip(rendered, stored):
            assert torch.equal(images_batch, stored_images) and torch.equal(labels, stored_labels)
            assert [entry["domain"] for entry in metadata] == [entry["domain"] for entry in stored_metadata]


def test_a_cin_c_definition_without_speed_is_named_by_every_image_of_its_folder(runs) -> None:
    """cin-c shows every source image per corruption by default (the CCC paper's CIN-C, ASR's scripts):
    the name and length count the folder's images (listed, not read); the demo world's are 2,400."""
    from tta_eval.streams import StreamOptions, describe_stream_source

    images = runs["cinc"].parent / "val"
    count = sum(1 for path in images.glob("*/*") if path.is_file())
    description = describe_stream_source(
        f"ccc-render:kind=cin-c,corruptions=fog+snow,imagenet={images}", StreamOptions()
    )
    assert (description.name, description.samples) == (
        f"cin-c_severity_5_images_{count}_crop_random_seed_43",
        2 * count,
    )
    demo = describe_stream_source("ccc-render:demo,kind=cin-c", StreamOptions())
    assert (demo.name, demo.samples) == ("demo_cin-c_severity_5_images_2400_crop_random_seed_43", 15 * 2400)
    gradual = describe_stream_source("ccc-render:demo,kind=gradual", StreamOptions())
    assert gradual.name == "demo_gradual_images_200_crop_random_seed_43"


def test_an_unknown_published_stream_is_one_line_before_anything_is_printed(tmp_path, capsys):
    code, out, err = run_cli(
        capsys, "run", "--stream", "ccc:published:baseline_20_speed_2000", "--method", "source", "--out", str(tmp_path)
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "unknown published CCC stream 'baseline_20_speed_2000'" in err


def test_a_published_stream_is_described_with_its_length_in_the_imagenet_world() -> None:
    from tta_eval.streams import StreamOptions, describe_stream_source

    medium = describe_stream_source("ccc:published:baseline_20_transition+speed_2000_seed_43", StreamOptions())
    assert (medium.name, medium.samples, medium.world) == (
        "baseline_20_transition+speed_2000_seed_43",
        7_514_000,
        "imagenet",
    )
    hard = describe_stream_source("ccc:published:baseline_0_transition+speed_5000_seed_45", StreamOptions())
    assert hard.samples == 7_500_000


def test_a_synthetic_stream_tells_its_length_so_its_progress_bar_has_a_total() -> None:
    from tta_eval.streams import StreamOptions, open_stream_source, stream_length

    stream = open_stream_source("synthetic:num_batches=3,batch_size=4", StreamOptions())
    assert stream_length(stream) == 12
    assert sum(len(labels) for _, labels, _ in stream) == 12
    assert stream_length(open_stream_source("synthetic:num_batches=3,batch_size=4", StreamOptions(), start=4)) == 8
