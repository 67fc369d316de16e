"""Time-constrained protocols: Alfarra et al. and Tempora's discrete, continuous and amortised utilities.

Checks against the papers: C ≡ 1 reproduces the offline protocol exactly; a method k times slower
than the plain model adapts on about 1/k of the batches; Tempora's b = 1 recurrence with constant δ
gives the closed-form served set; U_continuous = ā·κ̄ + Cov(a, κ) to float precision. Runs that
depend on time use the deterministic cost model, so nothing here asserts on measured durations.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from ccc.models import ModelSpec
from tests.tta_eval.method_helpers import build, statistics_file
from tests.tta_eval.tta_helpers import make_batches, make_tiny_cnn
from tta_eval.experiment import run_experiment
from tta_eval.methods import create, list_methods
from tta_eval.protocols import (
    AlfarraProtocol,
    AmortisedProtocol,
    ContinuousProtocol,
    CostModel,
    DiscreteProtocol,
    MethodCost,
    OfflineProtocol,
    RunContext,
    Timing,
    calibrate_baseline_latency,
    continuous_scores,
    evaluate_protocol,
    predict_without_adapting,
    prediction_network,
    protocol_from_json,
    relative_speed,
)
from tta_eval.protocols.tempora import (
    amortised_utility,
    continuous_utility,
    decay_factors,
    discrete_utility,
    served_batches,
)
from tta_eval.records import LEGACY_RECORD_COLUMNS, RecordTable
from tta_eval.reports import rescore_run
from tta_eval.settings import ExperimentSettings, MethodSpec

LATENCY = 0.01
TINY_MODEL = "tests.tta_eval.tta_helpers:make_tiny_cnn"
SMALL_STREAM = "synthetic:num_batches=12,batch_size=16,domain_length=4,image_size=8"


def deterministic(**costs: float | str) -> Timing:
    """Deterministic timing with λ = 10 ms and the given costs (units of λ)."""
    entries = tuple((label, MethodCost.parse(str(cost))) for label, cost in costs.items())
    return Timing(cost_model=CostModel(LATENCY, entries))


def with_domains(batches, domains):
    return [(images, labels, {"domain": [domain] * len(labels)}) for (images, labels), domain in zip(batches, domains)]


# --- Tempora's discrete pipeline (pure) ----------------------------------------------------------


def closed_form_served(count: int, latency: float, interval: float) -> list[int]:
    """b = 1, constant δ: the pipeline idles when δ <= γ (every batch served); otherwise it is always
    busy, finishes its j-th batch at j·δ and then serves floor(j·δ/γ), the latest arrival; after the
    arrivals end it serves the last batch if it has not yet."""
    if latency <= interval:
        return list(range(count))
    served = []
    step = 0
    while math.floor(step * latency / interval) <= count - 1:
        served.append(math.floor(step * latency / interval))
        step += 1
    if served[-1] != count - 1:
        served.append(count - 1)
    return served


@pytest.mark.parametrize("latency", [0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.25, 7.0])
@pytest.mark.parametrize("count", [1, 2, 10, 23])
def test_buffer_one_with_constant_latency_gives_the_closed_form(latency, count):
    assert served_batches([latency] * count, 1.0, buffer=1) == closed_form_served(count, latency, 1.0)
    assert served_batches([latency / 2] * count, 0.5) == closed_form_served(count, latency, 1.0)


def test_buffer_one_follows_the_recurrence_with_varying_latencies():
    rng = np.random.default_rng(0)
    latencies = rng.choice([0.5, 1.25, 2.0, 3.75], size=40)
    served = [0]
    finish = latencies[0]
    while True:
        next_index = max(served[-1] + 1, min(math.floor(finish / 1.0), 39))
        if next_index > 39:
            break
        start = max(finish, next_index * 1.0)
        finish = start + latencies[next_index]
        served.append(next_index)
    assert served_batches(latencies, 1.0, 1) == served


def test_unbuffered_pipeline_serves_the_next_arrival_and_ties_count_as_arrived():
    assert served_batches([2.5] * 10, 1.0, buffer=0) == [0, 3, 6, 9]
    assert served_batches([2.0] * 10, 1.0, buffer=0) == [0, 2, 4, 6, 8]
    assert served_batches([0.5] * 4, 1.0, buffer=0) == [0, 1, 2, 3]


def test_tie_with_buffer_one_serves_the_new_arrival():
    # batch 1 waits in the buffer; batch 2 arrives exactly when batch 0 finishes and displaces it.
    assert served_batches([2.0] * 10, 1.0, buffer=1) == [0, 2, 4, 6, 8, 9]


def test_fifo_buffer_serves_oldest_first_and_evicts_oldest():
    # worked by hand: 0 [0, 2.5); 1 [2.5, 5); at t=5 batch 5 arrives into the full queue (2, 3, 4),
    # evicting 2; 3 [5, 7.5); 4 is evicted by 7; 5 [7.5, 10); 6 is evicted by 9; drain: 7, 8, 9.
    assert served_batches([2.5] * 10, 1.0, buffer=3) == [0, 1, 3, 5, 7, 8, 9]
    assert served_batches([2.5] * 10, 1.0, buffer=20) == list(range(10))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (([1.0, -0.5], 1.0), r"latencies must be >= 0, got -0.5"),
        (([1.0, math.nan], 1.0), r"latencies must hold finite numbers, got nan"),
        (([[1.0]], 1.0), r"latencies must be a one-dimensional sequence of numbers, got shape \(1, 1\)"),
        (([1.0], 0.0), r"interval must be a finite number > 0, got 0.0"),
        (([1.0], 1.0, -1), r"buffer \(batch slots\) must be an integer >= 0, got -1"),
        (([1.0], 1.0, 1.5), r"buffer \(batch slots\) must be an integer >= 0, got 1.5"),
    ],
)
def test_served_batches_rejects_bad_input(arguments, message):
    with pytest.raises(ValueError, match=message):
        served_batches(*arguments)


# --- utilities (pure) ----------------------------------------------------------------------------


def test_continuous_utility_by_hand():
    # w = (1, 0 + 1, 2 + 3) = (1, 1, 5); d = (0, 0, 4); κ = (1, 1, 1/3) with λ = 1, T = 3.
    result = continuous_utility([1.0, 0.5, 0.9], [1.0, 1.0, 3.0], [0.0, 2.0, 0.0], 1.0, 3.0)
    assert result["utility"] == pytest.approx((1.0 + 0.5 + 0.3) / 3)
    assert result["mean_kappa"] == pytest.approx(7 / 9)
    assert result["mean_accuracy"] == pytest.approx(0.8)


def test_continuous_utility_equals_mean_accuracy_times_mean_kappa_plus_population_covariance():
    rng = np.random.default_rng(1)
    for _ in range(20):
        count = int(rng.integers(2, 300))
        accuracy = rng.uniform(0, 1, count)
        prediction = rng.uniform(0, 0.2, count)
        ready = rng.uniform(0, 0.3, count)
        result = continuous_utility(accuracy, prediction, ready, 0.05, float(rng.uniform(0.06, 1.0)))
        identity = result["mean_accuracy"] * result["mean_kappa"] + result["covariance"]
        assert result["utility"] == pytest.approx(identity, rel=1e-12, abs=1e-15)
    # Tempora's code adds the sample covariance (ddof = 1) instead, which breaks the identity.
    decay = decay_factors(prediction, ready, 0.05, 0.3)
    sample = accuracy.mean() * decay.mean() + np.cov(accuracy, decay)[0, 1]
    assert sample != pytest.approx(continuous_utility(accuracy, prediction, ready, 0.05, 0.3)["utility"], rel=1e-9)


def test_discrete_and_amortised_decompositions():
    accuracy = np.array([0.5, 0.25, 1.0, 0.75])
    discrete = discrete_utility(accuracy, [True, False, True, False])
    assert discrete["availability"] == 0.5 and discrete["served_accuracy"] == 0.75
    assert discrete["utility"] == pytest.approx(discrete["availability"] * discrete["served_accuracy"])
    amortised = amortised_utility(accuracy, [True, True, True, False])
    beta = amortised["adapted_fraction"]
    assert beta == 0.75 and amortised["frozen_accuracy"] == 0.75
    assert amortised["utility"] == pytest.approx(
        beta * amortised["adapt_accuracy"] + (1 - beta) * amortised["frozen_accuracy"]
    )
    assert math.isnan(discrete_utility([0.5], [False])["served_accuracy"])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: continuous_utility([0.5], [0.1], [0.1], 0.1, 0.1),
            r"threshold must be greater than the baseline latency λ = 0.1",
        ),
        (
            lambda: continuous_utility([0.5, 0.5], [0.1], [0.1], 0.05, 0.1),
            r"must have one value per batch \(2\), got 1",
        ),
        (lambda: continuous_utility([1.5], [0.1], [0.1], 0.05, 0.1), r"correct_fraction must be in \[0, 1\]"),
        (lambda: continuous_utility([], [], [], 0.05, 0.1), r"needs at least one batch"),
        (lambda: continuous_utility([0.5], [0.1], [-0.1], 0.05, 0.1), r"prediction_to_ready must be >= 0, got -0.1"),
        (
            lambda: continuous_utility([0.5], [0.1], [0.1], 0.0, 0.1),
            r"baseline_latency must be a finite number > 0, got 0.0",
        ),
        (lambda: discrete_utility([0.5, 0.5], [True]), r"served must have one flag per batch \(2\)"),
        (lambda: amortised_utility([0.5], [True, False]), r"adapted must have one flag per batch \(1\)"),
    ],
)
def test_utilities_reject_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- settings, costs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AlfarraProtocol(speed=0.0), r"speed must be in \(0, 1\], got 0.0"),
        (lambda: AlfarraProtocol(speed=1.5), r"speed must be in \(0, 1\], got 1.5"),
        (lambda: AlfarraProtocol(relative_speed=0), r"relative_speed must be an integer >= 1, got 0"),
        (lambda: DiscreteProtocol(), r"give exactly one of interval \(seconds\) and utilisation"),
        (lambda: DiscreteProtocol(interval=0.1, utilisation=0.5), r"give exactly one of interval"),
        (lambda: DiscreteProtocol(utilisation=-1.0), r"utilisation must be a finite number > 0, got -1.0"),
        (lambda: DiscreteProtocol(interval=0.1, buffer=-1), r"buffer \(batch slots\) must be an integer >= 0"),
        (lambda: AmortisedProtocol(budget=-1.0), r"budget must be a finite number >= 0, got -1.0"),
        (lambda: ContinuousProtocol(thresholds=()), r"thresholds must be a non-empty tuple of seconds"),
        (lambda: ContinuousProtocol(thresholds=(0.0,)), r"threshold must be a finite number > 0, got 0.0"),
        (lambda: AlfarraProtocol(reset="domain"), r"reset='domain' needs a domain_key"),
        (
            lambda: MethodCost.parse("fast"),
            r"a cost must be 'TOTAL' or 'PREDICTION\+READY' in units of λ, e.g. 2.5 or 1\+1.5; got 'fast'",
        ),
        (lambda: MethodCost.parse("1+2+3"), r"a cost must be 'TOTAL' or 'PREDICTION\+READY'"),
        (lambda: MethodCost.parse("-2"), r"cost must be a finite number >= 0, got -2.0"),
        (lambda: CostModel(0.0), r"baseline_latency must be a finite number > 0, got 0.0"),
        (
            lambda: CostModel(1.0).cost_of("tent"),
            r"the cost model has no cost for method 'tent'; give one with --cost tent=TOTAL",
        ),
        (
            lambda: protocol_from_json({"name": "realtime"}),
            r"unknown protocol 'realtime'; available: offline, continuous",
        ),
        (lambda: Timing(warmup_calls=-1), r"warmup_calls must be an integer >= 0, got -1"),
    ],
)
def test_settings_reject_bad_input(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_costs_and_settings_round_trip(tmp_path):
    assert MethodCost.parse("2.5") == MethodCost(1.0, 1.5)
    assert MethodCost.parse("0.5") == MethodCost(0.5, 0.0)
    assert MethodCost.parse("1+0.25").total == 1.25
    model = CostModel(0.02, (("tent", MethodCost(1.0, 1.5)),), origin="test")
    model.save(tmp_path / "costs.json")
    assert CostModel.load(tmp_path).costs == model.costs
    assert CostModel.load(tmp_path / "costs.json").cost_of("tent:learning_rate=0.1", "tent") == MethodCost(1.0, 1.5)
    assert model.cost_of("source") == MethodCost(1.0, 0.0)
    for protocol in (
        AlfarraProtocol(speed=0.5, strict=True),
        DiscreteProtocol(utilisation=0.7, buffer=3),
        ContinuousProtocol(thresholds=(0.1, 0.2)),
    ):
        assert protocol_from_json(json.loads(json.dumps(protocol.to_json()))) == protocol


def test_relative_speed_rounds_away_float_error():
    assert relative_speed(1.0, 0.3, 0.1) == 3
    assert relative_speed(0.1, 3.0, 0.1) == 3
    assert relative_speed(1.0, 0.0, 0.1) == 1
    assert relative_speed(0.5, 0.25, 0.1) == 2


# --- non-adapting predictions ---------------------------------------------------------------------


def test_prediction_without_adapting_changes_nothing():
    method = create("tent", make_tiny_cnn())
    network = prediction_network(method)
    images = make_batches(1)[0][0]
    before = copy.deepcopy(method.state_dict())
    logits = predict_without_adapting(network, images)
    for name, value in method.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(layer.track_running_stats for layer in network.modules() if isinstance(layer, torch.nn.BatchNorm2d))
    with torch.no_grad():
        assert torch.allclose(logits, network(images))  # batch statistics, as the method itself predicts
    assert prediction_network(create("rdumb", make_tiny_cnn(), reset_every=3)) is not None


def test_calibration_is_mean_plus_six_sigma():
    calibration = calibrate_baseline_latency(make_tiny_cnn(), make_batches(1)[0][0], warmup=1, calls=5)
    assert calibration.baseline_latency == pytest.approx(calibration.mean + 6 * calibration.std)
    assert calibration.calls == 5 and calibration.batch_shape == (16, 3, 8, 8)
    with pytest.raises(ValueError, match="calls must be >= 2"):
        calibrate_baseline_latency(make_tiny_cnn(), make_batches(1)[0][0], calls=1)


# --- offline trace --------------------------------------------------------------------------------


def test_offline_records_carry_the_timing_trace():
    tables = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn()), "source": create("source", make_tiny_cnn())}, make_batches(4)
    )
    for table in tables.values():
        prediction, ready = table.column("pickup_to_prediction"), table.column("prediction_to_ready")
        assert np.all(prediction > 0) and np.all(ready >= 0)
        assert np.allclose(prediction + ready, table.column("seconds"), rtol=1e-9, atol=1e-12)
        assert table.column("predicted").all() and table.column("adapted").all()
    # Tent's backward pass and update come after its prediction.
    assert np.all(tables["tent"].column("prediction_to_ready") > 0)


def test_records_with_trace_round_trip_exactly_and_old_files_still_read(tmp_path):
    tables = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())},
        make_batches(3),
        AlfarraProtocol(),
        RunContext(timing=deterministic(tent=2.3)),
    )
    tables["tent"].write_csv(tmp_path / "tent.csv")
    loaded = RecordTable.read_csv(tmp_path / "tent.csv")
    for name in ("pickup_to_prediction", "prediction_to_ready", "predicted", "adapted", "relative_speed", "seconds"):
        assert loaded.column(name).tolist() == tables["tent"].column(name).tolist(), name
    (tmp_path / "old.csv").write_text(",".join(LEGACY_RECORD_COLUMNS) + "\n0,0,16,3,16,0.5,0,0,0.01,\n")
    old = RecordTable.read_csv(tmp_path / "old.csv")
    assert old.column("adapted").tolist() == [True] and math.isnan(old.column("pickup_to_prediction")[0])


# --- Alfarra et al. -------------------------------------------------------------------------------

OFFLINE_COLUMNS = ("correct", "samples_adapted", "loss", "reset", "batch_index", "sample_start")


@pytest.mark.parametrize("timing", ["measured", "deterministic"])
def test_relative_speed_one_reproduces_the_offline_protocol_exactly(timing):
    model = make_tiny_cnn()
    batches = with_domains(make_batches(8), ["a"] * 3 + ["b"] * 5)
    names = ("source", "bn", "tent", "eta")
    episodes = {"reset": "domain", "domain_key": "domain"}
    offline = evaluate_protocol({name: create(name, model) for name in names}, batches, OfflineProtocol(**episodes))
    if timing == "measured":
        protocol, clock = AlfarraProtocol(**episodes, relative_speed=1), None
    else:
        protocol, clock = AlfarraProtocol(**episodes), deterministic(bn=1, tent=1, eta="0.5+0.5")
    online = evaluate_protocol(
        {name: create(name, model) for name in names}, batches, protocol, RunContext(timing=clock)
    )
    for name in names:
        for column in OFFLINE_COLUMNS:
            assert np.array_equal(online[name].column(column), offline[name].column(column), equal_nan=True), (
                name,
                column,
            )
        assert online[name].column("relative_speed").tolist() == [1] * 8


@pytest.mark.parametrize("slowdown", [2, 3, 4, 8])
def test_a_method_k_times_slower_adapts_on_one_in_k_batches(slowdown):
    count = 40
    tables = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())},
        make_batches(count, batch_size=4),
        AlfarraProtocol(),
        RunContext(timing=deterministic(tent=slowdown)),
    )
    adapted = tables["tent"].column("adapted")
    assert adapted.sum() == math.ceil(count / slowdown)
    assert abs(adapted.mean() - 1 / slowdown) <= 1 / count
    assert np.flatnonzero(adapted).tolist() == list(range(0, count, slowdown))
    assert tables["tent"].column("predicted").all()


def test_stream_speed_strict_and_single_model_variants():
    batches = make_batches(12, batch_size=4)
    slow = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())},
        batches,
        AlfarraProtocol(speed=0.5),
        RunContext(timing=deterministic(tent=4)),
    )
    assert np.flatnonzero(slow["tent"].column("adapted")).tolist() == [0, 2, 4, 6, 8, 10]
    strict = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())},
        batches,
        AlfarraProtocol(strict=True),
        RunContext(timing=deterministic(tent=2)),
    )
    assert np.flatnonzero(strict["tent"].column("adapted")).tolist() == [0, 3, 6, 9]
    single = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())},
        batches,
        AlfarraProtocol(single_model=True),
        RunContext(timing=deterministic(tent=3)),
    )["tent"]
    skipped = ~single.column("predicted")
    assert np.flatnonzero(~skipped).tolist() == [0, 3, 6, 9]
    assert np.all(single.column("correct")[skipped] == 0) and np.all(single.column("seconds")[skipped] == 0)


def test_skipped_batches_are_predicted_by_the_latest_adapted_model():
    model = make_tiny_cnn()
    batches = make_batches(6)
    tables = evaluate_protocol(
        {"tent": create("tent", model, learning_rate=0.05)}, batches, AlfarraProtocol(relative_speed=3)
    )
    reference = create("tent", model, learning_rate=0.05)
    expected = []
    for index, (images, labels) in enumerate(batches):
        if index % 3 == 0:
            logits = reference(images)
        else:
            logits = predict_without_adapting(reference.model, images)
        expected.append(int((logits.argmax(1) == labels).sum()))
    assert tables["tent"].column("correct").tolist() == expected
    assert tables["tent"].column("adapted").tolist() == [True, False, False] * 2


def test_measured_relative_speed_schedules_consistently():
    table = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())}, make_batches(10, batch_size=4), AlfarraProtocol()
    )["tent"]
    adapted = np.flatnonzero(table.column("adapted"))
    speeds = table.column("relative_speed")
    assert adapted[0] == 0 and np.all(speeds[adapted] >= 1) and np.all(table.column("baseline_seconds")[adapted] > 0)
    for position, index in enumerate(adapted[:-1]):
        assert adapted[position + 1] == index + speeds[index]


@pytest.mark.parametrize("name", list_methods())
def test_every_registered_method_runs_under_the_time_protocols(name, tmp_path):
    """C = 2 for every method: the skipped batches' predictions leave its state alone, so the adapted
    batches match a method called on those batches only; then the amortised protocol freezes it."""
    model = make_tiny_cnn()
    batches = make_batches(5)
    options = {"fisher_samples": 16} if name == "eata" else {}
    statistics = statistics_file(model, tmp_path)
    table = evaluate_protocol(
        {name: build(name, model, statistics, **options)},
        batches,
        AlfarraProtocol(),
        RunContext(timing=deterministic(**{name: 2})),
    )[name]
    assert table.column("adapted").tolist() == [True, False, True, False, True]
    assert table.column("predicted").all()
    reference = build(name, model, statistics, **options)
    if getattr(reference, "preparation_samples", 0) > 0:
        reference.prepare(images for images, _ in batches)
    expected = [int((reference(batches[index][0]).argmax(1) == batches[index][1]).sum()) for index in (0, 2, 4)]
    assert table.column("correct")[[0, 2, 4]].tolist() == expected
    frozen = evaluate_protocol(
        {name: build(name, model, statistics, **options)},
        batches,
        AmortisedProtocol(budget=1.5 * LATENCY),
        RunContext(timing=deterministic(**{name: 2}), baseline_latency=LATENCY),
    )[name]
    assert frozen.column("adapted").tolist() == [True, True, False, False, False]


# --- Tempora: discrete -----------------------------------------------------------------------------


@pytest.mark.parametrize("buffer", [0, 1, 3])
def test_live_discrete_run_serves_the_simulated_set_and_the_method_sees_only_served_batches(buffer):
    model = make_tiny_cnn()
    batches = make_batches(14)
    protocol = DiscreteProtocol(utilisation=1.0, buffer=buffer)
    tables = evaluate_protocol(
        {"tent": create("tent", model), "source": create("source", model)},
        batches,
        protocol,
        RunContext(timing=deterministic(tent=2.5), baseline_latency=LATENCY),
    )
    table = tables["tent"]
    served = served_batches([2.5] * 14, 1.0, buffer)
    assert np.flatnonzero(table.column("predicted")).tolist() == served
    assert np.all(table.column("correct")[~table.column("predicted")] == 0)
    reference = create("tent", model)
    expected = [int((reference(batches[index][0]).argmax(1) == batches[index][1]).sum()) for index in served]
    assert table.column("correct")[served].tolist() == expected
    starts = table.column("pickup_time")[served]
    assert starts[0] == 0 and np.all(np.diff(starts) >= 2.5 * LATENCY - 1e-12)
    assert tables["source"].column("predicted").all()  # the plain model (cost λ) keeps pace at ρ = 100 %


def test_discrete_episodes_restart_the_pipeline():
    batches = with_domains(make_batches(8), ["a"] * 4 + ["b"] * 4)
    protocol = DiscreteProtocol(interval=LATENCY, buffer=0, reset="domain", domain_key="domain")
    table = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())}, batches, protocol, RunContext(timing=deterministic(tent=3))
    )["tent"]
    assert np.flatnonzero(table.column("predicted")).tolist() == [0, 3, 4, 7]
    assert table.column("pickup_time")[[0, 4]].tolist() == [0.0, 0.0]
    assert table.column("reset").tolist()[4]


def test_utilisation_needs_the_baseline_latency():
    with pytest.raises(ValueError, match="utilisation needs the baseline latency"):
        evaluate_protocol(
            {"source": create("source", make_tiny_cnn())}, make_batches(2), DiscreteProtocol(utilisation=0.5)
        )


# --- Tempora: amortised ----------------------------------------------------------------------------


def test_amortised_freezes_once_the_budget_is_spent_and_predicts_with_target_statistics():
    model = make_tiny_cnn()
    batches = make_batches(7)
    # Cost 2λ: each adapted batch spends λ of overhead; with B = 2.5λ batches 0, 1, 2 are adapted.
    protocol = AmortisedProtocol(budget=2.5 * LATENCY)
    table = evaluate_protocol(
        {"tent": create("tent", model, learning_rate=0.05)},
        batches,
        protocol,
        RunContext(timing=deterministic(tent=2), baseline_latency=LATENCY),
    )["tent"]
    assert table.column("adapted").tolist() == [True] * 3 + [False] * 4
    reference = create("tent", model, learning_rate=0.05)
    expected = [int((reference(images).argmax(1) == labels).sum()) for images, labels in batches[:3]]
    frozen = copy.deepcopy(reference.model).eval()
    source_statistics = [layer.running_mean for layer in model.modules() if isinstance(layer, torch.nn.BatchNorm2d)]
    frozen_statistics = [layer.running_mean for layer in frozen.modules() if isinstance(layer, torch.nn.BatchNorm2d)]
    assert not all(torch.equal(a, b) for a, b in zip(source_statistics, frozen_statistics))
    with torch.no_grad():
        expected += [int((frozen(images).argmax(1) == labels).sum()) for images, labels in batches[3:]]
    assert table.column("correct").tolist() == expected
    assert np.all(table.column("prediction_to_ready")[3:] == 0)


def test_zero_budget_is_the_frozen_source_model():
    model = make_tiny_cnn()
    batches = make_batches(3)
    tables = evaluate_protocol(
        {"tent": create("tent", model), "source": create("source", model)},
        batches,
        AmortisedProtocol(budget=0.0),
        RunContext(timing=deterministic(tent=2), baseline_latency=LATENCY),
    )
    assert not tables["tent"].column("adapted").any()
    assert tables["tent"].column("correct").tolist() == tables["source"].column("correct").tolist()


# --- experiments: continuous utility, rescoring, reproducibility ------------------------------------


def experiment(tmp_path, name: str, protocol, **overrides) -> ExperimentSettings:
    values = {
        "stream": SMALL_STREAM,
        "methods": (MethodSpec.parse("tent"), MethodSpec.parse("bn")),
        "model": ModelSpec(TINY_MODEL),
        "output_root": tmp_path,
        "run_name": name,
        "protocol": protocol,
        "cost_model": CostModel(LATENCY, (("tent", MethodCost(1.0, 1.5)), ("bn", MethodCost(1.0, 0.25)))),
        "window": 64,
        "progress": False,
    }
    values.update(overrides)
    return ExperimentSettings(**values)


def test_continuous_run_scores_equal_rescoring_its_saved_trace(tmp_path):
    run_dir = run_experiment(
        experiment(tmp_path, "c", ContinuousProtocol(thresholds=(0.02, 0.05), domain_key="domain"))
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["timing"]["mode"] == "deterministic" and summary["timing"]["baseline_latency_seconds"] == LATENCY
    rescored = rescore_run(run_dir, (0.02, 0.05, 0.4))
    for label in ("source", "tent", "bn"):
        in_run = summary["methods"][label]["protocol_scores"]
        assert [score["utility"] for score in in_run] == [score["utility"] for score in rescored["methods"][label][:2]]
        table = RecordTable.read_csv(run_dir / "records" / f"{label}.csv")
        direct = continuous_utility(
            table.column("correct") / table.column("batch_size"),
            table.column("pickup_to_prediction"),
            table.column("prediction_to_ready"),
            LATENCY,
            0.4,
        )
        assert rescored["methods"][label][2]["utility"] == direct["utility"]
    tent = rescored["methods"]["tent"]
    # Tent's ℓ = 1.5λ delays every next batch; a more lenient threshold gives a larger κ̄.
    assert tent[0]["mean_kappa"] < tent[1]["mean_kappa"] < tent[2]["mean_kappa"] < 1.0
    assert rescored["methods"]["source"][0]["mean_kappa"] == 1.0
    assert set(tent[0]["per_domain"]) == {"noise-3", "contrast-3", "brightness-3"}


def test_rescoring_refuses_runs_that_skipped_batches(tmp_path):
    run_dir = run_experiment(experiment(tmp_path, "d", DiscreteProtocol(utilisation=1.0)))
    with pytest.raises(ValueError, match="run 'd' used protocol 'discrete'"):
        rescore_run(run_dir, (0.05,))
    with pytest.raises(ValueError, match="threshold must be greater than the baseline latency"):
        rescore_run(
            run_experiment(experiment(tmp_path, "o", OfflineProtocol(), cost_model=None, baseline_latency=0.5)), (0.1,)
        )


def test_deterministic_runs_are_reproducible_bit_for_bit(tmp_path):
    protocol = AlfarraProtocol()
    first = run_experiment(experiment(tmp_path, "first", protocol))
    second = run_experiment(experiment(tmp_path, "second", protocol))
    for label in ("source", "tent", "bn"):
        assert (first / "records" / f"{label}.csv").read_bytes() == (second / "records" / f"{label}.csv").read_bytes()
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (first, second)]
    for summary in summaries:
        summary.pop("run")
    assert summaries[0] == summaries[1]
    assert summaries[0]["methods"]["tent"]["protocol_scores"][0]["adapted_batch_fraction"] == pytest.approx(
        4 / 12
    )  # C = ceil(2.5) = 3


def test_measured_run_stores_costs_that_make_a_deterministic_run(tmp_path):
    measured = run_experiment(
        experiment(
            tmp_path, "measured", AmortisedProtocol(budget=1.0), cost_model=None, baseline_latency=0.5, warmup_calls=1
        )
    )
    summary = json.loads((measured / "summary.json").read_text())
    assert summary["timing"]["mode"] == "measured" and summary["timing"]["baseline_latency_source"] == "given"
    costs = CostModel.load(measured)
    assert {label for label, _ in costs.costs} == {"source", "tent", "bn"} and costs.baseline_latency == 0.5
    replay = run_experiment(experiment(tmp_path, "replay", AmortisedProtocol(budget=1.0), cost_model=costs))
    replayed = json.loads((replay / "summary.json").read_text())
    assert replayed["timing"]["mode"] == "deterministic" and replayed["timing"]["cost_model_origin"].endswith(
        "costs.json"
    )
    assert replayed["methods"]["tent"]["protocol_scores"][0]["adapted_fraction"] == 1.0


def test_continuous_utility_needs_an_adapted_trace():
    table = evaluate_protocol(
        {"tent": create("tent", make_tiny_cnn())},
        make_batches(4),
        AlfarraProtocol(),
        RunContext(timing=deterministic(tent=2)),
    )["tent"]
    with pytest.raises(
        ValueError, match="method 'tent': continuous utility needs a run in which every batch was predicted and adapted"
    ):
        continuous_scores(table, LATENCY, (0.1,), "tent")


@pytest.mark.parametrize(
    ("slowdown", "paper_availability"), [(2.43, 0.412), (2.45, 0.410), (3.03, 0.332), (4.89, 0.206)]
)
def test_availability_at_full_utilisation_is_the_inverse_slowdown(slowdown, paper_availability):
    """Tempora's ρ = 100 %, b = 1: a method δ/λ times slower serves about λ/δ of the batches (the
    paper reports α = 41.2 % for Tent at 2.43×, 41.0 % for ETA at 2.45×, 33.2 % for SHOT-IM at 3.03×,
    20.6 % for SAR at 4.89×)."""
    count = 2000
    served = served_batches([slowdown] * count, 1.0, buffer=1)
    assert len(served) / count == pytest.approx(1 / slowdown, abs=2 / count)
    assert len(served) / count == pytest.approx(paper_availability, abs=0.002)
