"""Named method settings (``tta_eval.method_settings``): every value fits its method, the precedence
user option > settings > method default, the batch size, config.json's record and the CLI's errors."""

from __future__ import annotations

import json

import pytest

from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli
from tta_eval.method_settings import (
    CIFAR_BATCH_SIZE,
    DEMO,
    DEMO_CIFAR,
    LINKED_OPTIONS,
    format_options,
    get_method_settings,
    list_method_settings,
)
from tta_eval.methods import get_method, list_methods, resolve_config
from tta_eval.settings import ExperimentSettings, MethodSpec, resolve_experiment
from tta_eval.streams import StreamOptions

STREAM = "synthetic:num_batches=2,image_size=8"
"""A synthetic stream whose batch size is the run's (2 batches)."""

ENTRIES = [
    (settings, method, option)
    for settings in list_method_settings()
    for method, options in get_method_settings(settings).options.items()
    for option in options
]


def test_cifar_settings_are_registered_and_the_demo_settings_have_no_batch_size():
    assert {"cifar10", "cifar100", DEMO, DEMO_CIFAR} <= set(list_method_settings())
    # resolve_experiment reads the stream before it knows whether the stream is the demo world's
    assert get_method_settings(DEMO).batch_size is None and get_method_settings(DEMO_CIFAR).batch_size is None


def test_every_demo_world_has_settings_of_its_name():
    from tta_eval.streams import DEMO_WORLD_NAMES

    for world in DEMO_WORLD_NAMES.values():  # a demo-world stream gets the settings named after its world
        assert get_method_settings(world).name == world
    assert get_method_settings(DEMO_CIFAR).options["tent"]["learning_rate"].value == 1.0
    assert get_method_settings(DEMO).options["tent"]["learning_rate"].value == 0.05


@pytest.mark.parametrize(("settings", "method", "option"), ENTRIES)
def test_every_value_is_accepted_by_its_method_and_has_a_source(settings, method, option):
    options = get_method_settings(settings).options[method]
    setting = options[option]
    # With the method's other values: some fit only together (Adam without Nesterov, Nesterov with momentum).
    config, policy = resolve_config(method, **{name: value.value for name, value in options.items()})
    assert setting.source
    if option == "reset_every":
        assert policy.interval() == setting.value
    else:
        assert getattr(config, option) == setting.value


@pytest.mark.parametrize("settings", [name for name in list_method_settings() if name not in (DEMO, DEMO_CIFAR)])
def test_the_cifar_settings_say_something_of_every_registered_method(settings):
    """A new method needs a decision: its public CIFAR values, or why it keeps its defaults."""
    chosen = get_method_settings(settings)
    for method in list_methods():
        assert method in chosen.options or method in chosen.omitted, method
    for method in [*chosen.options, *chosen.omitted]:
        get_method(method)


def test_the_cifar_values_differ_where_the_public_code_does():
    cifar10, cifar100 = get_method_settings("cifar10"), get_method_settings("cifar100")
    assert cifar10.options["eta"]["redundancy_margin"].value == 0.4
    assert cifar100.options["eta"]["redundancy_margin"].value == 0.1
    assert cifar100.options["rdumb"]["redundancy_margin"].value == 0.4
    assert (
        cifar10.options["cotta"]["augmentation_threshold"].value,
        cifar100.options["cotta"]["augmentation_threshold"].value,
    ) == (0.92, 0.72)
    assert "cifar100_c/eta.yaml" in cifar100.options["eta"]["redundancy_margin"].source
    assert cifar10.batch_size is not None and cifar10.batch_size.value == CIFAR_BATCH_SIZE == 200


def test_user_options_win_over_the_settings_and_settings_over_the_defaults():
    chosen = get_method_settings("cifar10")
    assert chosen.open_options("tent", {}) == {"optimizer": "adam", "learning_rate": 1e-3, "momentum": 0.9}
    assert chosen.open_options("tent", {"learning_rate": 0.01}) == {"optimizer": "adam", "momentum": 0.9}
    assert chosen.open_options("source", {}) == {}


@pytest.mark.parametrize("linked", LINKED_OPTIONS, ids=lambda linked: "+".join(sorted(linked)))
def test_linked_options_come_from_one_place(linked):
    chosen = get_method_settings("cifar10")
    for option in linked:
        for method in chosen.options:
            assert not linked & chosen.open_options(method, {option: None}).keys()
    # e.g. SGD with Nesterov momentum for CoTTA keeps the settings' learning rate but not their optimiser
    assert "optimizer" not in chosen.open_options("cotta", {"nesterov": True})
    assert "learning_rate" in chosen.open_options("cotta", {"nesterov": True})


def resolve(methods: tuple[str, ...], **fields) -> object:
    return resolve_experiment(
        ExperimentSettings(stream=STREAM, methods=tuple(MethodSpec.parse(text) for text in methods), **fields)
    )


def test_resolution_applies_the_settings_records_them_and_notes_them():
    resolved = resolve(("tent:learning_rate=0.01", "rdumb", "bn"), method_settings="cifar10")
    methods = {method.label: dict(method.options) for method in resolved.settings.methods}
    assert methods["tent:learning_rate=0.01"] == {"optimizer": "adam", "momentum": 0.9, "learning_rate": 0.01}
    assert methods["rdumb"]["reset_every"] == 1000 and methods["rdumb"]["redundancy_margin"] == 0.4
    assert methods["bn"] == {}
    assert resolved.settings.stream_options.batch_size == 200 and resolved.stream.samples == 400
    assert resolved.method_settings == {
        "name": "cifar10",
        "batch_size": 200,
        "options": {
            "tent:learning_rate=0.01": {"optimizer": "adam", "momentum": 0.9},
            "rdumb": {
                "optimizer": "adam",
                "learning_rate": 1e-3,
                "momentum": 0.9,
                "redundancy_margin": 0.4,
                "reset_every": 1000,
            },
        },
    }
    heading = "settings cifar10 (the public CIFAR-10-C code's; docs/methods.md)"
    assert f"{heading}: batch size 200 (--batch-size to change)" in resolved.notes
    assert (
        f"{heading}: tent:learning_rate=0.01: optimizer=adam, momentum=0.9; rdumb: optimizer=adam, "
        "learning_rate=0.001, momentum=0.9, redundancy_margin=0.4, reset_every=1000"
    ) in resolved.notes
    # Resolving the resolved settings again (as run_experiment does) keeps the record and adds no note.
    again = resolve_experiment(resolved.settings)
    assert again.method_settings == resolved.method_settings
    assert not any(note.startswith(heading) for note in again.notes)


def test_a_given_batch_size_wins_and_no_settings_change_nothing():
    resolved = resolve(("tent",), method_settings="cifar100", stream_options=StreamOptions(batch_size=16))
    assert resolved.settings.stream_options.batch_size == 16 and resolved.method_settings["batch_size"] is None
    assert not any("batch size" in note for note in resolved.notes)
    plain = resolve(("tent",))
    assert plain.method_settings is None and plain.settings.stream_options.batch_size == 64
    assert dict(plain.settings.methods[0].options) == {}


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(
        ValueError, match=r"^unknown method settings 'cifar1'; available: cifar10, cifar100, demo, demo_cifar$"
    ):
        ExperimentSettings(stream=STREAM, method_settings="cifar1")


def test_the_cli_refuses_an_unknown_name_in_one_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "--stream", STREAM, "--method", "tent", "--settings", "imagenet",
                           "--model", TINY_FACTORY, "--out", str(tmp_path))  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown method settings 'imagenet'; available: cifar10, cifar100, demo" in err


def test_a_cli_run_with_the_cifar10_settings_uses_and_records_them(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--stream", STREAM, "--settings", "cifar10", "--method", "tent",
                             "--method", "eta:redundancy_margin=0.2", "--model", TINY_FACTORY, "--out", str(tmp_path),
                             "--name", "cifar10", "--no-progress", "--collapse-reference", "none")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0] == (
        "settings cifar10 (the public CIFAR-10-C code's; docs/methods.md): batch size 200 (--batch-size to change)"
    )
    config = json.loads((tmp_path / "cifar10" / "config.json").read_text())
    assert config["stream_options"]["batch_size"] == 200
    assert config["method_settings"]["name"] == "cifar10" and config["method_settings"]["batch_size"] == 200
    assert config["method_settings"]["options"]["tent"] == {"optimizer": "adam", "learning_rate": 1e-3, "momentum": 0.9}
    eta = config["methods"]["eta:redundancy_margin=0.2"]["config"]
    assert (eta["optimizer"], eta["learning_rate"], eta["redundancy_margin"]) == ("adam", 1e-3, 0.2)
    assert "redundancy_margin" not in config["method_settings"]["options"]["eta:redundancy_margin=0.2"]
    records = (tmp_path / "cifar10" / "records" / "tent.csv").read_text().splitlines()
    assert len(records) == 1 + 2  # a header and one row per batch of 200


def test_docs_list_every_cifar_value_and_every_method_that_keeps_its_defaults():
    from tests.builders import REPOSITORY

    section = (REPOSITORY / "docs" / "methods.md").read_text().split("## CIFAR settings", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines() if line.startswith("| `")}
    cifar10, cifar100 = get_method_settings("cifar10"), get_method_settings("cifar100")
    for method, options in cifar10.options.items():
        assert format_options({option: setting.value for option, setting in options.items()}) in rows[method]
        differing = {
            option: setting.value
            for option, setting in cifar100.options[method].items()
            if setting.value != options[option].value
        }
        assert (format_options(differing) if differing else "| |") in rows[method], method
    for method in cifar10.omitted:
        assert f"`{method}`" in section, method
