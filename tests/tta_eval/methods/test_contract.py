"""The contract every registered method keeps, checked for each name in ``list_methods()``: a new method
is tested here without touching this file.

Per method: its module and docs entry exist; its defaults are valid; the logits are finite and the
model passed to ``create`` is never changed; ``reset()`` restores the state right after creation
exactly (weights, buffers, optimiser, random generators), also after several batches; ``reset_every``
resets on schedule; every option is validated with a one-line error naming it; models the method
cannot adapt are refused in one line; the prediction network predicts without changing any state.
Options that make a method adapt on the random tiny CNN, and its special inputs (the source
statistics file of methods with a ``source_statistics`` option, EATA's stream preparation) come from
``tests.tta_eval.method_helpers`` (TEST_OPTIONS, ``build``, ``prepared``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import math
import re
import typing

import pytest
import torch
from torch import nn

from tests.builders import REPOSITORY
from tests.tta_eval.method_helpers import build, prepared, statistics_file
from tests.tta_eval.tta_helpers import assert_reset_matches_fresh, make_batches, states_equal
from tta_eval.methods import PeriodicReset, ResetPolicyWrapper, create, get_method, list_methods
from tta_eval.methods.layers import batchnorm_statistics_frozen

METHODS_DOC = REPOSITORY / "docs" / "methods.md"
NEVER_CHANGED_BY_ADAPTATION = {"source", "lame"}
"""Methods whose state (weights, buffers, generators) stays the initial one: the source model and LAME,
which corrects the outputs only. Every other method must change something in four batches."""


@pytest.fixture
def statistics_path(tiny_cnn, tmp_path) -> str:
    return statistics_file(tiny_cnn, tmp_path)


def snapshot(value: typing.Any, depth: int = 0) -> typing.Any:
    """A comparable copy of ``value``: tensors cloned, generators by their state, plain objects (e.g. a
    memory bank) by their attributes; modules and optimisers are compared through the state_dicts."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.Generator):
        return ("generator", value.get_state())
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [snapshot(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {key: snapshot(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (nn.Module, torch.optim.Optimizer)) or dataclasses.is_dataclass(value) or depth > 4:
        return None
    if hasattr(value, "__dict__"):
        return {key: snapshot(item, depth + 1) for key, item in vars(value).items()}
    return None


def same(first: typing.Any, second: typing.Any) -> bool:
    """Equality of two snapshots: tensors bit for bit, NaN equal to NaN."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, tuple) or isinstance(first, list):
        return type(first) is type(second) and len(first) == len(second) and all(map(same, first, second))
    if isinstance(first, dict):
        return (
            isinstance(second, dict)
            and first.keys() == second.keys()
            and all(same(first[key], second[key]) for key in first)
        )
    if isinstance(first, float) and isinstance(second, float) and math.isnan(first) and math.isnan(second):
        return True
    return first == second


def full_state(method: nn.Module) -> dict[str, typing.Any]:
    """Everything a method may change: its state_dict and the attributes it keeps outside it (prediction
    averages, random generators, memory banks …), of the method and, for a method wrapped by a reset
    policy, of the wrapper too (counters, drift statistics, Fisher estimates)."""
    inner = method.method if isinstance(method, ResetPolicyWrapper) else method
    attributes = {key: value for key, value in vars(inner).items() if not key.startswith("_") and key != "last_step"}
    if inner is not method:
        attributes |= {
            f"policy.{key}": value
            for key, value in vars(method).items()
            if not key.startswith("_") and key != "last_step"
        }
    return {"state_dict": snapshot(dict(method.state_dict())), "attributes": snapshot(attributes)}


def method_state_dict(state: dict[str, typing.Any]) -> dict[str, torch.Tensor]:
    """The state_dict part of a ``full_state``."""
    return state["state_dict"]


def differences(first: dict[str, typing.Any], second: dict[str, typing.Any]) -> list[str]:
    """Names of the state_dict entries and attributes that differ between two ``full_state``s."""
    return [
        f"{part}.{key}"
        for part in first
        for key in sorted(set(first[part]) | set(second[part]))
        if not same(first[part].get(key), second[part].get(key))
    ]


def assert_one_line(error: pytest.ExceptionInfo, *needles: str) -> None:
    message = str(error.value)
    assert "\n" not in message and message.strip(), message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


# --- where a method lives ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list_methods())
def test_the_method_has_its_module_and_its_docs_entry(name):
    assert importlib.util.find_spec(f"tta_eval.methods.{name}") is not None, f"tta_eval/methods/{name}.py"
    headings = [line for line in METHODS_DOC.read_text().splitlines() if line.startswith("### ")]
    assert any(re.search(rf"\b{re.escape(name)}\b", heading) for heading in headings), (
        f"no '### {name}' in docs/methods.md"
    )


@pytest.mark.parametrize("name", list_methods())
def test_defaults_are_valid_json_and_the_entry_is_described(name):
    entry = get_method(name)
    assert entry.name == name
    assert dataclasses.is_dataclass(entry.config_class) and entry.config_class.__dataclass_params__.frozen
    defaults = entry.defaults()
    assert json.loads(json.dumps(defaults)) == defaults
    assert list(defaults) == entry.option_names()
    assert entry.description and "\n" not in entry.description and entry.sources


# --- behaviour on a tiny BatchNorm CNN ----------------------------------------------------------------


@pytest.mark.parametrize("name", list_methods())
def test_logits_are_finite_and_the_given_model_is_untouched(name, tiny_cnn, statistics_path):
    before = copy.deepcopy(tiny_cnn.state_dict())
    method = prepared(build(name, tiny_cnn, statistics_path))
    for images, _ in make_batches(3):
        logits = method(images)
        assert logits.shape == (16, 10) and not logits.requires_grad and torch.isfinite(logits).all()
    assert states_equal(tiny_cnn.state_dict(), before), "create must work on a copy of the model"
    assert all(parameter.requires_grad for parameter in tiny_cnn.parameters())
    assert not tiny_cnn.training
    assert method.last_step.samples_adapted >= 0 and not method.last_step.nonfinite_loss


@pytest.mark.parametrize("name", list_methods())
def test_reset_restores_the_state_after_creation_exactly(name, tiny_cnn, statistics_path):
    batches = make_batches(5)
    fresh = prepared(build(name, tiny_cnn, statistics_path))
    used = prepared(build(name, tiny_cnn, statistics_path))
    initial = full_state(used)
    assert not differences(full_state(fresh), initial)
    for images, _ in batches[:4]:
        used(images)
    if name not in NEVER_CHANGED_BY_ADAPTATION:
        assert differences(full_state(used), initial), "the method should have changed something"
    used.reset()
    assert used.last_step.reset
    assert not differences(full_state(used), initial), "reset() must restore these"
    assert_reset_matches_fresh(used, fresh, method_state_dict(initial), batches[4][0])
    assert used.last_step == fresh.last_step
    assert not differences(full_state(used), full_state(fresh))


@pytest.mark.parametrize("name", list_methods())
def test_periodic_reset_restores_the_method_before_every_kth_batch(name, tiny_cnn, statistics_path):
    method = prepared(build(name, tiny_cnn, statistics_path, reset_every=2))
    assert isinstance(method, PeriodicReset) and method.every == 2
    batches = make_batches(5)
    flags, outputs = [], []
    for images, _ in batches:
        outputs.append(method(images))
        flags.append(method.last_step.reset)
    assert flags == [False, False, True, False, True]
    for index in (2, 4):
        fresh = prepared(build(name, tiny_cnn, statistics_path))
        assert torch.equal(outputs[index], fresh(batches[index][0])), f"batch {index} must see the initial state"


@pytest.mark.parametrize("name", list_methods())
def test_prediction_network_predicts_without_changing_any_state(name, tiny_cnn, statistics_path):
    method = prepared(build(name, tiny_cnn, statistics_path))
    first, second = (images for images, _ in make_batches(2))
    method(first)
    inner = method.method if isinstance(method, ResetPolicyWrapper) else method
    network = getattr(inner, "prediction_network", inner.model)
    before = full_state(method)
    with torch.no_grad(), batchnorm_statistics_frozen(network):
        logits = network(second)
    assert logits.shape == (16, 10) and torch.isfinite(logits).all()
    assert not differences(full_state(method), before)
    assert not any(key.startswith("prediction_network.") for key in method.state_dict())


# --- bad input ------------------------------------------------------------------------------------


def wrong_type_value(default: typing.Any) -> typing.Any:
    """A value of the wrong type for an option whose default is ``default``."""
    if isinstance(default, bool):
        return 1
    if isinstance(default, (int, float)):
        return "fast"
    return 3


def out_of_range_value(default: typing.Any) -> typing.Any:
    """A value of the right type that no option accepts: NaN for numbers, -1 for integers."""
    if isinstance(default, bool):
        return None
    if isinstance(default, int):
        return -1
    if isinstance(default, float):
        return math.nan
    return None


@pytest.mark.parametrize("name", list_methods())
def test_unknown_options_and_bad_reset_periods_are_refused_in_one_line(name, tiny_cnn):
    with pytest.raises(ValueError) as error:
        create(name, tiny_cnn, not_an_option=1)
    assert_one_line(error, "'not_an_option'", f"method {name!r}", "valid options:", "reset_every")
    for period in (0, -3, 2.5, True, "10"):
        with pytest.raises(ValueError) as error:
            create(name, tiny_cnn, reset_every=period)
        assert_one_line(error, "reset_every must be an integer >= 1")


def rejection(name: str, model: nn.Module, option: str, value: typing.Any) -> str:
    """The error message of ``create(name, model, option=value)``; fails the test if it is accepted."""
    try:
        create(name, model, **{option: value})
    except ValueError as error:
        return str(error)
    pytest.fail(f"option {option!r} of method {name!r} accepted {value!r}; check it in the config's __post_init__")


@pytest.mark.parametrize("name", list_methods())
def test_every_option_rejects_bad_values_in_one_line_naming_it(name, tiny_cnn):
    entry = get_method(name)
    hints = typing.get_type_hints(entry.config_class)
    for option, default in dataclasses.asdict(entry.config_class()).items():
        bad_values = [wrong_type_value(default), out_of_range_value(default)]
        if bad_values[1] is None and typing.get_args(hints[option]):
            bad_values[1] = "not-a-choice"
        for value in bad_values:
            if value is not None:
                message = rejection(name, tiny_cnn, option, value)
                assert "\n" not in message and option in message, message


MODELS_WITHOUT_BATCHNORM = {
    "layernorm": lambda: nn.Sequential(nn.Flatten(), nn.LayerNorm(192), nn.Linear(192, 10)),
    "linear": lambda: nn.Sequential(nn.Flatten(), nn.Linear(192, 10)),
    "no-linear-head": lambda: nn.Sequential(nn.Conv2d(3, 10, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()),
}


@pytest.mark.parametrize("model_kind", sorted(MODELS_WITHOUT_BATCHNORM))
@pytest.mark.parametrize("name", list_methods())
def test_a_model_the_method_cannot_adapt_is_refused_in_one_line(name, model_kind, tmp_path):
    """Either ``create`` refuses the model with one line naming the method (BatchNorm methods always do),
    or the method runs on it with finite logits."""
    model = MODELS_WITHOUT_BATCHNORM[model_kind]().eval()
    options = {}
    if "source_statistics" in get_method(name).option_names():
        options["source_statistics"] = str(tmp_path / "missing.ttac.pt")
        if model_kind != "no-linear-head":
            options["source_statistics"] = statistics_file(model, tmp_path)
    try:
        method = prepared(build(name, model, **options))
    except ValueError as error:
        message = str(error)
        assert "\n" not in message and f"'{name}'" in message, message
        return
    assert not get_method(name).needs_batchnorm, "a BatchNorm method must refuse a model without BatchNorm"
    for images, _ in make_batches(2):
        logits = method(images)
        assert logits.shape == (16, 10) and torch.isfinite(logits).all()


@pytest.mark.parametrize("name", [name for name in list_methods() if get_method(name).needs_batchnorm])
def test_batchnorm_methods_name_the_normalisation_layers_they_found(name):
    model = MODELS_WITHOUT_BATCHNORM["layernorm"]()
    with pytest.raises(
        ValueError, match=rf"^method '{name}' adapts BatchNorm layers, but the model has none \(found: LayerNorm\)"
    ):
        create(name, model)
