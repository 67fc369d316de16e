"""Evaluation defaults that fit the stream: fitted window and collapse span, the stream's world choosing
model, methods and options, notes on resets that never fire, models that do not fit the labels, and
one-line answers when weights cannot be had."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
import torchvision

import ccc.demo
import ccc.demo.demonstration
from tests.builders import make_ccc_run, pretend_demo_world
from tests.tta_eval.tta_helpers import SMALL_STREAM, TINY_FACTORY, run_cli
from tta_eval.settings import ExperimentSettings, MethodSpec, fitted_window, resolve_experiment


@pytest.mark.parametrize(
    ("samples", "window"),
    [
        (None, 10_000),
        (1, 1),
        (40, 2),
        (2_000, 100),
        (10_000, 500),
        (30_000, 1_000),
        (50_000, 2_000),
        (7_500_000, 10_000),
    ],
)
def test_fitted_window_gives_twenty_windows_or_the_papers_value(samples, window):
    assert fitted_window(samples) == window
    if samples is not None:
        assert samples // window >= 20 or window == 1


@pytest.mark.parametrize(
    ("samples", "batch_size", "window"), [(64, 64, 64), (40, 64, 40), (2_000, 64, 100), (640, 16, 20)]
)
def test_a_fitted_window_holds_at_least_one_batch(samples, batch_size, window):
    assert fitted_window(samples, batch_size) == window


def test_a_short_run_gets_a_window_of_one_batch():
    """--max-samples 64 on a stream of 64-sample batches: a window of one batch, not of 2 samples."""
    settings = ExperimentSettings(
        stream="synthetic:num_batches=20,image_size=8", methods=(MethodSpec.parse("tent"),), max_samples=64
    )
    resolved = resolve_experiment(settings)
    assert resolved.settings.window == 64
    assert resolved.notes[0].startswith("window 64 samples and collapse span 320 (fitted to the stream's 64 samples")


def test_window_and_collapse_span_are_fitted_to_the_stream_unless_given():
    settings = ExperimentSettings(stream=SMALL_STREAM, methods=(MethodSpec.parse("tent"),))
    resolved = resolve_experiment(settings)
    assert (resolved.settings.window, resolved.settings.collapse_span) == (16, 80)  # one batch of 16 at least
    assert resolved.stream.samples == 96
    assert (
        "window 16 samples and collapse span 80 (fitted to the stream's 96 samples; "
        "--window, --collapse-span to change)" in resolved.notes
    )
    given = resolve_experiment(ExperimentSettings(stream=SMALL_STREAM, methods=(MethodSpec.parse("tent"),), window=32))
    assert (given.settings.window, given.settings.collapse_span) == (32, 160)
    assert [note for note in given.notes if note.startswith("collapse span 160 (fitted")]
    capped = resolve_experiment(
        ExperimentSettings(stream=SMALL_STREAM, methods=(MethodSpec.parse("tent"),), max_samples=40)
    )
    assert capped.settings.window == 16 and "fitted to the stream's 40 samples" in capped.notes[0]


def test_a_reset_interval_longer_than_the_stream_gets_a_note_with_the_fix():
    stream = "synthetic:num_batches=20,image_size=8"  # 20 batches of 64 samples
    methods = tuple(MethodSpec.parse(text) for text in ("rdumb", "rdumb:reset_every=20", "rdumb:reset_every=19"))
    notes = [
        note
        for note in resolve_experiment(ExperimentSettings(stream=stream, methods=methods)).notes
        if note.startswith("note:")
    ]
    assert notes == [
        "note: rdumb resets every 1,000 batches (64,000 samples), but the stream has 1,280 samples: "
        "it never resets and equals its method without resets; e.g. --method rdumb:reset_every=2",
        "note: rdumb:reset_every=20 resets every 20 batches (1,280 samples), but the stream has 1,280 samples: "
        "it never resets and equals its method without resets; e.g. --method rdumb:reset_every=2",
    ]


def test_run_prints_and_records_what_it_chose(tmp_path, capsys):
    code, out, err = run_cli(
        capsys,
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "bn",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 0, err
    assert out.splitlines()[0].startswith("window 16 samples and collapse span 80 (fitted")
    run_dir = tmp_path / "synthetic_num_batches=6_batch_size=16_domain_length=2_image_size=8"
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["window"], config["collapse_span"]) == (16, 80)
    assert config["choices"][0].startswith("window 16 samples")
    assert json.loads((run_dir / "summary.json").read_text())["window"] == 16


def test_no_method_outside_the_demo_world_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "run", "--stream", SMALL_STREAM, "--model", TINY_FACTORY, "--out", str(tmp_path), "--no-progress"
    )
    assert (
        code == 2
        and err.strip()
        == "tta-eval: error: pass at least one method (--method NAME, repeatable; see 'tta-eval methods')"
    )


def test_a_model_whose_classes_do_not_fit_the_stream_is_refused(tmp_path, capsys):
    stream = SMALL_STREAM + ",num_classes=20"
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        stream,
        "--model",
        TINY_FACTORY,
        "--method",
        "bn",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "model 'tta_eval.synthetic:tiny_bn_cnn' predicts 10 classes, but the stream's labels come from 20 classes"
        in err
    )
    assert not (tmp_path / "synthetic_num_batches=6_batch_size=16_domain_length=2_image_size=8_num_classes=20").exists()


def test_a_failed_weights_download_is_one_line_naming_the_remedy(tmp_path, capsys, monkeypatch):
    def offline(*arguments, **options):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.models, "get_model", offline)
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        "resnet18",
        "--method",
        "bn",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "could not get the DEFAULT weights of resnet18 ([Errno -3] Temporary failure in name resolution)" in err
    assert "pass --weights FILE (a local state_dict) or --weights none" in err


@pytest.fixture(scope="module")
def ccc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 128-image CCC run folder over a 3-class ImageNet-layout folder (not the demo world)."""
    return make_ccc_run(tmp_path_factory.mktemp("shards"), num_images=128, speed=8, shard_size=64)


def test_the_demo_model_is_refused_on_a_stream_of_another_world(ccc_run, tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "run", "--stream", f"ccc:{ccc_run}", "--demo", "--method", "bn", "--out", str(tmp_path), "--no-progress"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the demo model (--demo) fits only streams of the demo world" in err and "drop --demo" in err


def test_a_demo_world_stream_chooses_the_demo_model_methods_and_options(ccc_run, tmp_path, capsys, monkeypatch):
    # The world is recognised by the stream's source images; pretend the fixture's folder is the demo's.
    pretend_demo_world(monkeypatch, ccc_run)
    code, out, err = run_cli(capsys, "run", "--stream", f"ccc:{ccc_run}", "--out", str(tmp_path), "--no-progress",
                             "--method", "source", "--method", "tent", "--method", "rdumb:reset_every=1")  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        "demo world settings (docs/demo.md; the demo's, not the paper's): tent: learning_rate=0.05; "
        "rdumb:reset_every=1: learning_rate=0.05, redundancy_margin=0.4"
    )
    assert lines[1] == "demo world stream: evaluating the demo model (ccc.demo:demo_model, docs/demo.md)"
    run_dir = tmp_path / ccc_run.name
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"]["name"] == "ccc.demo:demo_model" and config["stream_name"] == ccc_run.name
    assert config["methods"]["tent"]["config"]["learning_rate"] == ccc.demo.demonstration.DEMO_LEARNING_RATE
    assert config["methods"]["rdumb:reset_every=1"]["reset_every"] == 1
    assert config["methods"]["rdumb:reset_every=1"]["config"]["redundancy_margin"] == 0.4

    code, out, err = run_cli(
        capsys,
        "run",
        "--stream",
        f"ccc:{ccc_run}",
        "--out",
        str(tmp_path / "all"),
        "--no-progress",
        "--max-samples",
        "64",
    )
    assert code == 0, err
    assert out.splitlines()[0] == f"demo world: methods {', '.join(ccc.demo.DEMO_METHODS)} (pass --method to choose)"
    summary = json.loads((tmp_path / "all" / ccc_run.name / "summary.json").read_text())
    assert list(summary["methods"]) == list(ccc.demo.DEMO_METHODS)


def test_the_quick_start_of_docs_tta_eval_resets_rdumb():
    """docs/tta_eval.md's first command shows RDumb's resets: its stream is long enough for them."""
    import shlex

    from tests.builders import REPOSITORY

    text = (REPOSITORY / "docs" / "tta_eval.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("\n\n", 1)[0]
    words = shlex.split(block.replace("\\\n", " "), comments=True)
    stream = words[words.index("--stream") + 1]
    methods = tuple(MethodSpec.parse(words[i + 1]) for i, word in enumerate(words) if word == "--method")
    assert any(method.name == "rdumb" for method in methods)
    notes = resolve_experiment(ExperimentSettings(stream=stream, methods=methods)).notes
    assert not [note for note in notes if "never resets" in note], notes
