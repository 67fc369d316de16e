"""Model loading, stream sources and the tta-eval command line (tiny models, synthetic streams, no downloads)."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
import torchvision
from torch import nn

from ccc.models import IMAGENET_MEAN, ModelSpec, NormalizedClassifier, load_model, resolve_device
from tests.tta_eval.tta_helpers import SMALL_STREAM, TINY_FACTORY, run_cli
from tta_eval.records import RecordTable
from tta_eval.streams import (
    StreamOptions,
    open_stream_source,
    register_stream_source,
    stream_length,
    stream_sources,
)
from tta_eval.synthetic import SyntheticStream, SyntheticStreamSpec, tiny_bn_cnn

# --- models ---------------------------------------------------------------------------------------


def test_default_model_is_resnet50_with_imagenet1k_v1_weights_and_normalisation(monkeypatch):
    requested = {}

    def fake_get_model(name, weights):
        requested.update(name=name, weights=weights)
        return nn.Sequential(nn.Flatten(), nn.LazyLinear(1000))

    monkeypatch.setattr(torchvision.models, "get_model", fake_get_model)
    model = load_model(ModelSpec())
    assert requested == {"name": "resnet50", "weights": torchvision.models.ResNet50_Weights.IMAGENET1K_V1}
    assert isinstance(model, NormalizedClassifier) and not model.training
    assert model.mean.flatten().tolist() == pytest.approx(IMAGENET_MEAN)


def test_torchvision_model_by_name_without_weights():
    model = load_model(ModelSpec("resnet18", weights="none"))
    assert isinstance(model, NormalizedClassifier)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 1000)


def test_local_weights_file_for_a_factory_model(tmp_path):
    source = tiny_bn_cnn()
    torch.save({"state_dict": source.state_dict()}, tmp_path / "tiny.pt")
    model = load_model(ModelSpec(TINY_FACTORY, weights=str(tmp_path / "tiny.pt")))
    assert not isinstance(model, NormalizedClassifier)
    images = torch.rand(4, 3, 16, 16)
    assert torch.equal(model(images), source.eval()(images))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ModelSpec("resnet5000"), r"unknown model 'resnet5000'; torchvision classification models: .*resnet50"),
        (
            ModelSpec("resnet18", weights="IMAGENET9K"),
            r"unknown weights 'IMAGENET9K' for model 'resnet18'; available: DEFAULT, none, IMAGENET1K_V1",
        ),
        (ModelSpec("resnet18", weights="missing/weights.pt"), r"weights file 'missing/weights.pt' does not exist"),
        (ModelSpec("no_such_module_xyz:build"), r"model factory module 'no_such_module_xyz' cannot be imported"),
        (ModelSpec("tta_eval.synthetic:nothing"), r"module 'tta_eval.synthetic' has no callable 'nothing'"),
    ],
)
def test_bad_model_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        load_model(spec)


def test_mismatching_weights_file(tmp_path):
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "other.pt")
    with pytest.raises(ValueError, match="does not match the model: missing keys"):
        load_model(ModelSpec(TINY_FACTORY, weights=str(tmp_path / "other.pt")))


def test_cuda_request_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="device 'cuda' requested but CUDA is not available"):
        resolve_device("cuda")


# --- streams --------------------------------------------------------------------------------------


def test_synthetic_stream_is_deterministic_and_random_access():
    stream = SyntheticStream(SyntheticStreamSpec(num_batches=4, batch_size=8, domain_length=2))
    batches = list(stream)
    again = stream.batch(3)
    assert torch.equal(batches[3][0], again[0]) and torch.equal(batches[3][1], again[1])
    assert batches[0][2]["domain"][0] == "noise-3" and batches[2][2]["domain"][0] == "contrast-3"
    assert 0.0 <= float(batches[0][0].min()) and float(batches[0][0].max()) <= 1.0


def test_image_folder_stream(tmp_path):
    from PIL import Image

    for class_name in ("n01", "n02"):
        (tmp_path / class_name).mkdir()
        for index in range(3):
            Image.new("RGB", (40, 30), color=(index * 40, 10, 200)).save(tmp_path / class_name / f"{index}.png")
    loader = open_stream_source(str(tmp_path), StreamOptions(batch_size=4, image_size=16))
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
    assert sorted(torch.cat([batch[1] for batch in loader]).tolist()) == [0, 0, 0, 1, 1, 1]
    assert stream_length(loader) == 6, "the progress bar's total"


def test_unknown_stream_source():
    with pytest.raises(
        ValueError, match=r"stream 'nowhere/at/all' is neither an existing folder nor '<scheme>:<options>'"
    ):
        open_stream_source("nowhere/at/all", StreamOptions())
    with pytest.raises(ValueError, match="unknown synthetic stream option.* colours"):
        open_stream_source("synthetic:colours=3", StreamOptions())


# --- command line ---------------------------------------------------------------------------------


def test_methods_lists_every_method_with_defaults(capsys):
    code, out, _ = run_cli(capsys, "methods")
    assert code == 0
    for name in ("source", "bn", "tent", "rpl", "slr", "cpl", "cotta", "eta", "eata", "rdumb"):
        assert f"\n{name}: " in "\n" + out
    assert "reset_every = 1000" in out and "fisher_weight = 2000.0" in out


def test_run_writes_a_complete_run_folder_and_compare_tabulates_runs(tmp_path, capsys):
    common = [
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "rdumb:reset_every=2",
        "--method",
        "tent",
        "--domain-key",
        "domain",
        "--window",
        "32",
        "--collapse-span",
        "32",
        "--out",
        str(tmp_path / "results"),
        "--no-progress",
    ]
    code, out, err = run_cli(capsys, *common, "--name", "first")
    assert code == 0, err
    run_dir = tmp_path / "results" / "first"
    assert "| rdumb:reset_every=2 |" in out
    config = json.loads((run_dir / "config.json").read_text())
    assert config["methods"]["tent"]["config"]["learning_rate"] == 2.5e-4
    assert config["methods"]["rdumb:reset_every=2"]["reset_every"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["methods"]) == {"source", "rdumb:reset_every=2", "tent"}
    tent = summary["methods"]["tent"]
    assert tent["samples"] == 96 and "collapse" in tent and tent["per_domain_accuracy"]
    assert summary["methods"]["rdumb:reset_every=2"]["resets"] == 2
    records = RecordTable.read_csv(run_dir / "records" / "tent.csv")
    assert len(records) == 6 and records.total_correct == round(tent["accuracy"] * 96)
    for suffix in ("png", "svg"):
        assert (run_dir / f"accuracy.{suffix}").stat().st_size > 1000

    other_stream = SMALL_STREAM + ",seed=1"
    code, _, err = run_cli(
        capsys,
        *[other_stream if part == SMALL_STREAM else part for part in common],
        "--name",
        "second",
        "--method",
        "bn",
    )
    assert code == 0, err
    code, out, err = run_cli(
        capsys, "compare", str(run_dir), str(tmp_path / "results" / "second"), "--out", str(tmp_path / "cmp")
    )
    assert code == 0, err
    short, other = SMALL_STREAM, other_stream
    assert f"| method | {short} | {other} | mean |" in out
    assert "| bn | – |" in out
    assert (tmp_path / "cmp" / "comparison.md").read_text().startswith("| method |")
    assert (tmp_path / "cmp" / "accuracy.svg").exists()


def test_compare_finds_run_folders_at_any_depth_joins_runs_of_one_stream_and_refuses_duplicates(tmp_path, capsys):
    common = ["run", "--stream", SMALL_STREAM, "--model", TINY_FACTORY, "--window", "32", "--no-progress"]
    assert run_cli(capsys, *common, "--method", "tent", "--out", str(tmp_path / "results" / "a"))[0] == 0
    assert (
        run_cli(
            capsys, *common, "--method", "bn", "--collapse-reference", "none", "--out", str(tmp_path / "results" / "b")
        )[0]
        == 0
    )
    code, out, err = run_cli(capsys, "compare", str(tmp_path / "results"), "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    table = out.split("\n\n")[0].splitlines()
    assert table[0] == f"| method | {SMALL_STREAM} |"
    assert [line.split(" | ")[0] for line in table[2:]] == ["| source", "| tent", "| bn"]
    code, out, err = run_cli(capsys, "compare", str(tmp_path / "results" / "*"), "--out", str(tmp_path / "cmp"))
    assert code == 0 and f"| method | {SMALL_STREAM} |" in out, err

    assert run_cli(capsys, *common, "--method", "tent", "--out", str(tmp_path / "results" / "c"))[0] == 0
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "results"), "--out", str(tmp_path / "cmp"))
    assert code == 2 and "both hold method 'source' on stream" in err and len(err.strip().splitlines()) == 1
    assert "name the run folders to compare" in err

    # the next-step hint: the folder of the run, or, once it holds a second run of the same stream and
    # method, the run folders compare takes together
    folder = tmp_path / "results" / "a"
    code, out, _ = run_cli(
        capsys, *common, "--method", "bn", "--collapse-reference", "none", "--name", "bn", "--out", str(folder)
    )
    assert code == 0 and f"tta-eval compare {folder}      # with the other runs there" in out
    code, out, _ = run_cli(capsys, *common, "--method", "tent", "--name", "again", "--out", str(folder))
    assert code == 0
    picked, comment = out.split("next: ")[1].splitlines()[1].strip().split("      # ")
    assert picked == f"tta-eval compare {folder / 'again'} {folder / 'bn'}"
    assert comment.startswith(f"{folder} also holds 1 run that compare cannot put beside these")
    assert run_cli(capsys, *picked.split()[1:], "--out", str(tmp_path / "cmp"))[0] == 0
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "results" / "zz*"))
    assert code == 2 and "matches no file or folder" in err


def test_compare_puts_runs_of_two_streams_with_one_name_side_by_side(tmp_path, capsys):
    """Two stream folders of one name (a CPU- and a torch-rendered copy, say) are two columns, named by
    their locations: compare does not refuse them as one stream's duplicates."""
    from tests.builders import make_ccc_run

    first, second = make_ccc_run(tmp_path / "cpu", 16, 4, 8), make_ccc_run(tmp_path / "torch", 16, 4, 8)
    assert first.name == second.name
    for stream, out in ((first, "results/cpu"), (second, "results/torch")):
        arguments = ["run", "--stream", f"ccc:{stream}", "--model", TINY_FACTORY, "--method", "bn", "--window", "8"]
        code, _, err = run_cli(capsys, *arguments, "--out", str(tmp_path / out), "--no-progress")
        assert code == 0, err
    code, out, err = run_cli(capsys, "compare", str(tmp_path / "results"), "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    assert f"| method | ccc:{first} | ccc:{second} | mean |" in out


def test_run_notes_learning_methods_whose_filters_kept_almost_nothing(tmp_path, capsys):
    # entropy_margin_fraction = 0.001 keeps only near-certain samples: the tiny untrained model has none.
    code, out, err = run_cli(
        capsys,
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "eta:entropy_margin_fraction=0.001",
        "--method",
        "tent",
        "--method",
        "bn",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: eta:entropy_margin_fraction=0.001 adapted on 0 % of the samples: its filters kept almost none; "
        "with few classes try --method eta:entropy_margin_fraction=0.001,redundancy_margin=0.4 "
        "(thresholds tuned for 1,000 classes? see docs/methods.md, 'Filters on models with few classes')"
    ]


def test_no_adaptation_note_where_the_protocol_skips_batches(tmp_path):
    from tta_eval.reports import adaptation_notes
    from tta_eval.run_folder import RunResult

    config = {"methods": {"tent": {"config": {"learning_rate": 2.5e-4}}, "bn": {"config": {}}}}
    methods = {"tent": {"adapted_fraction": 0.005}, "bn": {"adapted_fraction": 0.0}}
    skipping = RunResult("r", tmp_path, config, {"protocol": {"name": "alfarra"}, "methods": methods})
    assert adaptation_notes(skipping) == []
    every_batch = RunResult("r", tmp_path, config, {"protocol": {"name": "continuous"}, "methods": methods})
    assert [note.split(" adapted")[0] for note in adaptation_notes(every_batch)] == ["note: tent"]


def test_existing_run_folder_is_not_overwritten(tmp_path, capsys):
    arguments = [
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--method",
        "bn",
        "--out",
        str(tmp_path),
        "--name",
        "r",
        "--no-progress",
    ]
    assert run_cli(capsys, *arguments)[0] == 0
    code, _, err = run_cli(capsys, *arguments)
    assert code == 2 and "already exists; choose another --name or pass --overwrite" in err
    assert run_cli(capsys, *arguments, "--overwrite")[0] == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--method", "tentt"], "unknown method 'tentt'; available: adabn, asr, bn, "),
        (["--method", "tent:lr=1"], "unknown option 'lr' for method 'tent'; valid options: learning_rate"),
        (
            ["--method", "tent:learning_rate"],
            "options of method 'tent' must be key=value pairs separated by ',', got 'learning_rate'",
        ),
        (["--method", "tent", "--stream", "no/such/folder"], "stream 'no/such/folder' is neither an existing folder"),
        (["--method", "tent", "--model", "tta_eval.synthetic:missing"], "has no callable 'missing'"),
        (["--method", "tent", "--collapse-reference", "2"], "--collapse-reference accuracy must be in [0, 1], got 2.0"),
        (["--method", "tent", "--batch-size", "0"], "batch_size must be an integer >= 1, got 0"),
        (["--method", "tent", "--num-workers", "1000000"], "num_workers must be an integer in [0, "),
        (["--method", "tent", "--device", "tpu"], "device must be 'cpu' or 'cuda[:index]', got 'tpu'"),
        (["--method", "tent", "--episodic-domain", "pair"], "domain key 'pair' not in the metadata of stream batch 0"),
    ],
)
def test_user_mistakes_give_one_line_and_exit_code_2(tmp_path, capsys, arguments, message):
    base = ["run", "--stream", SMALL_STREAM, "--model", TINY_FACTORY, "--out", str(tmp_path), "--no-progress"]
    if "--stream" in arguments:
        base = ["run", "--model", TINY_FACTORY, "--out", str(tmp_path), "--no-progress"]
    code, _, err = run_cli(capsys, *base, *arguments)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_compare_of_a_folder_that_is_not_a_run(tmp_path, capsys):
    code, _, err = run_cli(capsys, "compare", str(tmp_path))
    assert code == 2 and "is not a tta-eval run folder (no summary.json)" in err


def nan_stream(location, options):
    """Stream source for the test below: the second of three batches holds a NaN pixel."""
    batches = []
    for index in range(3):
        images = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(index))
        if index == 1:
            images[0, 0, 0, 0] = float("nan")
        batches.append((images, torch.zeros(8, dtype=torch.long)))
    return batches


def test_stop_policy_writes_the_run_folder_and_exits_with_1(tmp_path, capsys, scratch_stream_sources):
    register_stream_source("nantest", nan_stream)
    arguments = [
        "run",
        "--stream",
        "nantest:",
        "--model",
        TINY_FACTORY,
        "--method",
        "tent",
        "--out",
        str(tmp_path),
        "--name",
        "r",
        "--no-progress",
    ]
    code, _, err = run_cli(capsys, *arguments, "--nonfinite-loss", "stop")
    assert code == 1 and "method 'tent' produced a non-finite loss" in err
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["stopped"].startswith("NonFiniteLossError") and summary["methods"]["tent"]["batches"] == 2
    code, _, err = run_cli(capsys, *arguments, "--overwrite")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (
        code == 0 and summary["methods"]["tent"]["nonfinite_losses"] == 1 and summary["methods"]["tent"]["batches"] == 3
    )


# --- option groups --------------------------------------------------------------------------------


def _command_parser(command: str) -> argparse.ArgumentParser:
    from tta_eval.cli import build_parser

    subcommands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    return subcommands.choices[command]


def _option_groups(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Heading → the flags listed under it in the parser's help."""
    return {
        group.title: [action.option_strings[0] for action in group._group_actions if action.option_strings]
        for group in parser._action_groups
    }


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_and_sweep_group_their_options_and_each_stream_source_brings_its_own(command):
    groups = _option_groups(_command_parser(command))
    assert groups["stream"][:2] == ["--stream", "--batch-size"]
    assert groups["model"][0] == "--model" and groups["methods"][0] == "--method" and "--out" in groups["run"]
    assert ("protocol" in groups) == (command == "run")
    for source in stream_sources():
        if source.options:
            assert groups[source.heading] == [option.flag for option in source.options]
    assert groups["image folders (folder:PATH or a plain folder path)"] == [
        "--image-size",
        "--shuffle-seed",
        "--no-shuffle",
        "--skip-bad-images",
        "--classes",
    ]
    assert groups["ccc: streams (run folders of ccc-generate)"] == [
        "--no-verify",
        "--remote-deadline",
        "--remote-min-rate",
    ]


def test_a_registered_source_s_options_reach_the_command_line(scratch_stream_sources):
    from tta_eval.cli.options import stream_options
    from tta_eval.cli_options import CliOption
    from tta_eval.streams import StreamSource

    registry = scratch_stream_sources
    given = []

    def toy_fields(values):
        given.append(dict(values))
        return {}

    registry.register(
        StreamSource(
            "toy",
            lambda location, options: [],
            order=100,
            options=(CliOption("--toy-level", {"type": int, "default": 3, "help": "toy streams' level"}),),
            from_options=toy_fields,
        )
    )
    run = _command_parser("run")
    assert _option_groups(run)["toy: streams"] == ["--toy-level"]
    assert "toy streams' level (default: 3)" in " ".join(run.format_help().split())
    arguments = run.parse_args(["--stream", "toy:", "--toy-level", "5", "--no-shuffle", "--batch-size", "8"])
    assert stream_options(arguments) == StreamOptions(batch_size=8, shuffle_seed=None)
    assert given == [{"toy_level": 5}]


def test_the_rescore_examples_of_docs_protocols_work_on_an_offline_run(tmp_path, capsys, monkeypatch):
    """The rescore commands of docs/protocols.md, docs/tta_eval.md and the --help on an offline run like README
    command 1's (which stores no λ)."""
    import shlex

    from tests.builders import REPOSITORY

    run = "demo_baseline_30_transition+speed_100_seed_43"
    common = ["--stream", SMALL_STREAM, "--model", TINY_FACTORY, "--method", "bn", "--no-progress"]
    assert run_cli(capsys, "run", *common, "--out", str(tmp_path / "results"), "--name", run)[0] == 0
    monkeypatch.chdir(tmp_path)
    from tests.test_examples import epilog_examples

    texts = [(REPOSITORY / "docs" / name).read_text() for name in ("protocols.md", "tta_eval.md")]
    texts += [example.script for example in epilog_examples()]
    lines = [line.strip() for text in texts for line in text.splitlines()]
    examples = [shlex.split(line, comments=True) for line in lines if line.startswith("tta-eval rescore ")]
    assert len(examples) >= 5
    for words in examples:
        assert words[2] == f"results/{run}", words
        code, out, err = run_cli(capsys, *words[1:])
        assert code == 0, f"{shlex.join(words)}: {err}"
        assert f"run {run} (λ = " in out
