"""Every registered protocol, found by iterating the protocol registry (a new protocol is tested here
without editing this file): its command-line options parse into its settings, which survive JSON;
it runs a tiny model over a small stream and yields one record per method and batch with the
columns its scorer needs; deterministic timing gives identical records twice; a bad option value,
or another protocol's option, is refused in one line; its sweep axis builds its own settings; and a
run through ``tta-eval run`` reports its scores."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.tta_eval.tta_helpers import TINY_FACTORY, make_batches, make_tiny_cnn, run_cli
from tta_eval.cli import build_parser
from tta_eval.cli.run import protocol_settings
from tta_eval.methods import create
from tta_eval.protocols import (
    CostModel,
    MethodCost,
    RunContext,
    Timing,
    evaluate_protocol,
    get_protocol,
    list_protocols,
    protocol_entries,
    protocol_from_json,
    protocol_scores,
)
from tta_eval.records import RECORD_COLUMNS
from tta_eval.run_folder import load_run
from tta_eval.settings import ExperimentSettings
from tta_eval.sweep import SweepSettings

PROTOCOLS_DOC = Path(__file__).resolve().parents[3] / "docs" / "protocols.md"
LATENCY = 0.01
STREAM = "synthetic:num_batches=6,batch_size=16,domain_length=2,image_size=8"
METHODS = ("source", "tent")
DETERMINISTIC = ("--cost", "tent=2.5", "--baseline-latency-ms", "10")

VALUED_OPTIONS = [
    (entry.name, option.flag) for entry in protocol_entries() for option in entry.options if "type" in option.arguments
]
"""(protocol, option) of every protocol option taking a value."""

FOREIGN_OPTIONS = [
    (entry.name, other.name, option)
    for entry in protocol_entries()
    for other in protocol_entries()
    if other is not entry
    for option in other.options[:1]
]
"""(protocol, another protocol, one of the other's options)."""


def example_settings(name: str):  # type: ignore[no-untyped-def]
    """The settings ``tta-eval run --protocol NAME`` with the protocol's example options gives."""
    entry = get_protocol(name)
    arguments = build_parser().parse_args(
        ["run", "--stream", STREAM, "--protocol", name, "--domain-key", "domain", *entry.example]
    )
    return protocol_settings(arguments)


def deterministic_context() -> RunContext:
    costs = CostModel(LATENCY, (("tent", MethodCost.parse("2.5")),))
    return RunContext(timing=Timing(cost_model=costs), baseline_latency=LATENCY)


def run_records(name: str):  # type: ignore[no-untyped-def]
    model = make_tiny_cnn()
    batches = make_batches(6)
    for index, (images, labels) in enumerate(batches):
        batches[index] = (images, labels, {"domain": ["a" if index < 3 else "b"] * len(labels)})
    methods = {label: create(label, model) for label in METHODS}
    return evaluate_protocol(methods, batches, example_settings(name), deterministic_context())


@pytest.mark.parametrize("name", list_protocols())
def test_the_protocol_has_its_module_and_its_docs_section(name):
    assert importlib.util.find_spec(f"tta_eval.protocols.{name}") is not None, f"tta_eval/protocols/{name}.py"
    headings = [line for line in PROTOCOLS_DOC.read_text().splitlines() if line.startswith(("## ", "### "))]
    assert any(f"`--protocol {name}`" in heading for heading in headings), (
        f"no section headed '... (`--protocol {name}`)' in docs/protocols.md"
    )


def test_the_registry_holds_the_five_protocols_in_their_order():
    built_in = {"offline": 10, "continuous": 20, "alfarra": 30, "discrete": 40, "amortised": 50}
    orders = {entry.name: entry.order for entry in protocol_entries() if entry.name in built_in}
    assert orders == built_in
    assert [name for name in list_protocols() if name in built_in] == list(built_in)
    with pytest.raises(ValueError, match="unknown protocol 'realtime'; available: offline, continuous"):
        get_protocol("realtime")


@pytest.mark.parametrize("name", list_protocols())
def test_cli_options_parse_into_its_settings_which_survive_json(name):
    entry = get_protocol(name)
    settings = example_settings(name)
    assert type(settings) is entry.settings and settings.name == name
    assert settings.domain_key == "domain"
    assert protocol_from_json(json.loads(json.dumps(settings.to_json()))) == settings


@pytest.mark.parametrize("name", list_protocols())
def test_runs_and_yields_the_records_its_scorer_needs(name):
    entry = get_protocol(name)
    tables = run_records(name)
    settings = example_settings(name)
    for label, table in tables.items():
        assert table.column("batch_index").tolist() == list(range(6)), label
        scores = protocol_scores(table, settings, LATENCY, label)
        assert bool(scores) == bool(entry.score_columns), label
        for score in scores:
            assert score["protocol"] == name and 0.0 <= score["utility"] <= 1.0
            assert {column.key for column in entry.score_columns} <= set(score)
            assert set(score["per_domain"]) == {"a", "b"}
            if entry.sweep is not None:
                assert entry.sweep.score_key in score


@pytest.mark.parametrize("name", list_protocols())
def test_deterministic_timing_gives_identical_records_twice(name):
    first, second = run_records(name), run_records(name)
    for label in METHODS:
        for column in RECORD_COLUMNS:
            assert repr(first[label].column(column).tolist()) == repr(second[label].column(column).tolist()), (
                label,
                column,
            )


@pytest.mark.parametrize(("name", "flag"), VALUED_OPTIONS)
def test_a_bad_option_value_is_refused_in_one_line(tmp_path, capsys, name, flag):
    entry = get_protocol(name)
    example = list(entry.example)
    if flag in example:
        del example[example.index(flag) : example.index(flag) + 2]
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        STREAM,
        "--method",
        "tent",
        "--out",
        str(tmp_path),
        "--protocol",
        name,
        *example,
        flag,
        "-1",
    )
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    stem = flag.lstrip("-").removesuffix("-ms").removesuffix("-s").replace("-", "_")
    assert stem in err.replace("-", "_"), err


@pytest.mark.parametrize(("name", "other", "option"), FOREIGN_OPTIONS, ids=lambda value: getattr(value, "flag", value))
def test_another_protocols_option_is_refused_in_one_line(tmp_path, capsys, name, other, option):
    value = [] if option.arguments.get("action") == "store_true" else ["1"]
    code, _, err = run_cli(
        capsys,
        "run",
        "--stream",
        STREAM,
        "--method",
        "tent",
        "--out",
        str(tmp_path),
        "--protocol",
        name,
        option.flag,
        *value,
    )
    assert code == 2, err
    assert err.strip() == f"tta-eval: error: {option.flag} applies to --protocol {other}, got --protocol {name}"


@pytest.mark.parametrize("name", [entry.name for entry in protocol_entries() if entry.sweep is not None])
def test_its_sweep_axis_builds_its_own_settings(name):
    entry = get_protocol(name)
    experiment = ExperimentSettings(stream=STREAM, methods=())
    scenarios = SweepSettings(experiment=experiment, grids=((name, (0.5, 0.25)),)).scenarios()
    assert scenarios and all(type(settings) is entry.settings for _, settings in scenarios)
    assert len({folder for folder, _ in scenarios}) == len(scenarios)


@pytest.mark.parametrize("name", list_protocols())
def test_a_run_through_the_command_line_reports_its_scores(tmp_path, capsys, name):
    entry = get_protocol(name)
    arguments = ["run", "--stream", STREAM, "--model", TINY_FACTORY, "--method", "tent", "--domain-key", "domain"]
    arguments += [
        "--out",
        str(tmp_path),
        "--name",
        name,
        "--no-progress",
        "--protocol",
        name,
        *entry.example,
        *DETERMINISTIC,
    ]
    code, out, err = run_cli(capsys, *arguments)
    assert code == 0, err
    run = load_run(tmp_path / name)
    assert run.summary["protocol"]["name"] == name
    scores = run.summary["methods"]["tent"]["protocol_scores"]
    assert [score["protocol"] for score in scores] == [name] * len(scores)
    for column in entry.score_columns:
        assert column.header in out


def test_sweep_settings_name_what_is_wrong():
    experiment = ExperimentSettings(stream=STREAM)
    with pytest.raises(
        ValueError,
        match=(
            "protocol 'offline' has no sweep axis; protocols that can be swept: "
            "continuous, alfarra, discrete, amortised"
        ),
    ):
        SweepSettings(experiment=experiment, grids=(("offline", (1.0,)),))
    with pytest.raises(ValueError, match="sweep options must be among --strict, --single-model, --buffer, got --speed"):
        SweepSettings(experiment=experiment, grids=(("alfarra", (1.0,)),), options=(("--speed", 1.0),))
    with pytest.raises(ValueError, match="a sweep needs at least one grid"):
        SweepSettings(experiment=experiment)
