"""Reset policies (tta_eval.methods.reset): parsing and one-line errors, periodic = the old reset_every,
the drift detector of rdumbpp (fires on a shift, not on a stationary stream; soft reset re-derived),
ASR's adaptive, selective reset (what it keeps, what it restores, its regulariser) and pickling."""

from __future__ import annotations

import copy
import io
import json
import math

import numpy
import pytest
import torch
from torch import nn

from tests.tta_eval.method_helpers import TEST_OPTIONS
from tests.tta_eval.tta_helpers import SMALL_STREAM, TINY_FACTORY, make_batches, run_cli
from tta_eval.methods import ETA, ResetPolicyWrapper, create, get_method
from tta_eval.methods.base import StepInfo
from tta_eval.methods.losses import softmax_entropy
from tta_eval.methods.registry import parse_reset_policy, reset_policy_names
from tta_eval.methods.reset import (
    AdaptiveSelectiveReset,
    ASRPolicy,
    DriftPolicy,
    DriftReset,
    NeverReset,
    PeriodicPolicy,
    PeriodicReset,
)
from tta_eval.records import RecordTable
from tta_eval.settings import MethodSpec

ETA_OPTIONS = TEST_OPTIONS["eta"]


def one_line_error(value, *needles: str) -> str:
    with pytest.raises(ValueError) as error:
        parse_reset_policy(value)
    message = str(error.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


# --- parsing ----------------------------------------------------------------------------------------


def test_policies_parse_with_their_parameters_and_print_back():
    assert reset_policy_names() == ["never", "periodic", "rdumbpp", "asr"]
    assert parse_reset_policy(None) == parse_reset_policy("never") == NeverReset()
    assert parse_reset_policy("periodic:every=7") == PeriodicPolicy(7)
    assert parse_reset_policy("periodic") == PeriodicPolicy(1000)
    drift = parse_reset_policy("rdumbpp:signal=kl:mode=soft:strength=0.25:warmup=3:cooldown=0")
    assert drift == DriftPolicy(signal="kl", mode="soft", strength=0.25, warmup=3, cooldown=0)
    assert parse_reset_policy("asr:r0=0.3:p0=0") == ASRPolicy(r0=0.3, p0=0.0)
    for policy in (NeverReset(), PeriodicPolicy(3), drift, ASRPolicy()):
        assert parse_reset_policy(policy.text()) == policy
    assert ASRPolicy().text() == "asr:m0=0.15:p0=5.0:a0=0.5:r0=0.5:r1=20.0"


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ("sometimes", ("unknown reset policy 'sometimes'", "valid policies: never, periodic, rdumbpp, asr")),
        ("periodic:often=3", ("unknown parameter 'often' of reset policy 'periodic'", "valid parameters: every")),
        ("asr:tau", ("options of reset policy 'asr' must be key=value pairs separated by ':'", "'tau'")),
        ("never:every=3", ("unknown parameter 'every' of reset policy 'never'", "valid parameters: none")),
        ("periodic:every=fast", ("option 'every' of reset policy 'periodic' must be an integer, got 'fast'",)),
        ("periodic:every=0", ("reset policy 'periodic': every must be an integer >= 1, got 0",)),
        ("rdumbpp:threshold=-1", ("reset policy 'rdumbpp': threshold must be a finite number > 0, got -1.0",)),
        ("rdumbpp:signal=loss", ("reset policy 'rdumbpp': signal must be one of entropy, kl; got 'loss'",)),
        ("rdumbpp:mode=hard", ("mode must be one of full, soft; got 'hard'",)),
        ("asr:r0=2", ("reset policy 'asr': r0 must be in [0, 1], got 2.0",)),
        (5, ("option 'reset' must be a reset policy such as 'periodic:every=1000'", "got 5")),
    ],
)
def test_bad_policies_fail_in_one_line_naming_the_valid_ones(value, needles):
    one_line_error(value, *needles)


def test_reset_and_reset_every_are_one_option(tiny_cnn):
    with pytest.raises(
        ValueError, match=r"^give either 'reset' or its short form 'reset_every' for method 'eta', not both"
    ):
        create("eta", tiny_cnn, reset="asr", reset_every=3)
    assert isinstance(create("rdumb", tiny_cnn, reset="never"), ETA)
    assert isinstance(create("rdumb", tiny_cnn, reset_every=None), ETA)
    assert isinstance(create("eta", tiny_cnn, reset="rdumbpp"), DriftReset)
    assert isinstance(create("roid", tiny_cnn, reset="asr"), AdaptiveSelectiveReset)


def test_method_specs_take_policies_after_reset_with_colons():
    spec = MethodSpec.parse("roid:reset=asr:r0=0.25,learning_rate=0.001")
    assert spec.name == "roid" and dict(spec.options) == {"reset": "asr:r0=0.25", "learning_rate": 0.001}
    assert MethodSpec.parse("eta:reset=periodic:every=1000").options == (("reset", "periodic:every=1000"),)
    with pytest.raises(
        ValueError, match=r"unknown reset policy 'rdumb'; valid policies: never, periodic, rdumbpp, asr"
    ):
        MethodSpec.parse("eta:reset=rdumb")


def test_registered_entries_name_their_policies():
    assert get_method("rdumb").defaults()["reset"] == "periodic:every=1000"
    assert get_method("rdumbpp").defaults()["reset"] == DriftPolicy().text()
    assert get_method("asr").defaults()["reset"] == ASRPolicy().text()
    assert get_method("asr").defaults()["nesterov"] is True
    assert get_method("eta").defaults()["reset"] == "never" and get_method("rdumbpp").reset_every is None


def test_methods_command_lists_the_new_methods_and_their_policies(capsys):
    code, out, _ = run_cli(capsys, "methods", "r*")
    assert code == 0
    assert "\nrdumbpp: " in out and f"reset = '{DriftPolicy().text()}'" in out
    code, out, _ = run_cli(capsys, "methods", "asr")
    assert code == 0 and f"reset = '{ASRPolicy().text()}'" in out and "YonseiML/asr" in out
    policies = out[out.index("reset policies, for any method") :].splitlines()[1:]
    assert [line.strip() for line in policies] == [
        "never",
        "periodic:every=1000",
        DriftPolicy().text(),
        ASRPolicy().text(),
    ]


# --- periodic = reset_every --------------------------------------------------------------------------


def test_periodic_policy_equals_reset_every(tiny_cnn):
    short = create("eta", tiny_cnn, reset_every=2, **ETA_OPTIONS)
    long = create("eta", tiny_cnn, reset="periodic:every=2", **ETA_OPTIONS)
    assert isinstance(long, PeriodicReset) and long.every == 2
    for images, _ in make_batches(5):
        assert torch.equal(short(images), long(images))
        assert short.last_step == long.last_step


def test_periodic_policy_run_records_equal_the_reset_every_run(tmp_path, capsys):
    adapt = "entropy_margin_fraction=1.0,redundancy_margin=1.0"
    labels = (f"rdumb:reset_every=2,{adapt}", f"rdumb:reset=periodic:every=2,{adapt}")
    code, _, err = run_cli(
        capsys, "run", "--stream", SMALL_STREAM, "--model", TINY_FACTORY, "--method", labels[0], "--method", labels[1],
        "--out", str(tmp_path), "--name", "periodic", "--no-progress", "--collapse-reference", "none",
    )  # fmt: skip
    assert code == 0, err
    run = tmp_path / "periodic"
    first, second = (RecordTable.read_csv(path) for path in sorted((run / "records").glob("rdumb*.csv")))
    assert len(first) == len(second) == 6
    for column in (
        "batch_index",
        "correct",
        "samples_adapted",
        "loss",
        "nonfinite_loss",
        "reset",
        "predicted",
        "adapted",
    ):
        numpy.testing.assert_array_equal(first.column(column), second.column(column), err_msg=column)
    assert list(first.column("reset")) == [0, 0, 1, 0, 1, 0] and first.column("samples_adapted").sum() > 0
    config = json.loads((run / "config.json").read_text())["methods"]
    assert config[labels[1]]["reset"] == "periodic:every=2" and config[labels[1]]["reset_every"] == 2


# --- the drift detector (rdumbpp) ----------------------------------------------------------------------


class LogitsMethod(nn.Module):
    """A stand-in method whose logits are its input images flattened (N×C); it counts its weight restores."""

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Identity()
        self.scale = nn.Parameter(torch.ones(()), requires_grad=False)
        self.restores = 0
        self.calls = 0
        self.last_step = StepInfo()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.last_step = StepInfo()
        return images.flatten(1) * self.scale

    def restore_initial_weights(self) -> None:
        self.restores += 1

    def reset(self) -> None:
        self.restore_initial_weights()
        self.last_step = StepInfo(reset=True)


def entropy_logits(entropy_scale: float) -> torch.Tensor:
    """64×10 logits, sharper (lower entropy) for a larger ``entropy_scale``."""
    return torch.randn(64, 10, generator=torch.Generator().manual_seed(0)) * entropy_scale


def test_the_drift_score_follows_the_authors_formula_and_stays_below_its_bound():
    """μ ← 0.99 μ + 0.01 s and v ← 0.6 v + 0.4 d² (before the score): the score |d| / (√(v + 1e-6) + 1e-6)
    is below 1/√0.4 = 1.58 however large the shift, so the author's CCC threshold (3.0; 2.5 in its
    notebook) never fires; 1.25 (its class default) fires on the shifted batch itself."""
    for threshold, fires in ((3.0, False), (1.25, True)):
        wrapped = DriftPolicy(threshold=threshold, warmup=0, cooldown=0).wrap(LogitsMethod())
        for _ in range(5):
            wrapped(entropy_logits(1.0))
        signal = float(softmax_entropy(entropy_logits(1.0)).mean())
        assert wrapped.signal_mean == pytest.approx(signal, rel=1e-12) and wrapped.last_score == pytest.approx(
            0.0, abs=1e-3
        )
        variance = wrapped.signal_variance
        wrapped(entropy_logits(20.0))
        deviation = float(softmax_entropy(entropy_logits(20.0)).mean()) - signal
        variance = 0.6 * variance + 0.4 * deviation**2
        assert wrapped.last_score == pytest.approx(abs(deviation) / (math.sqrt(variance + 1e-6) + 1e-6), rel=1e-9)
        assert 1.5 < wrapped.last_score < 1 / math.sqrt(0.4)
        assert wrapped.resets == wrapped.method.restores == int(fires) and wrapped.last_step.reset is fires
        assert wrapped.method.calls == 6 + int(fires), "the shifted batch is predicted again after the reset"
        if fires:
            assert wrapped.signal_mean == pytest.approx(0.99 * signal + 0.01 * (signal + deviation), rel=1e-12), "kept"


def test_the_drift_detector_waits_for_warmup_and_cooldown():
    """Batches 0-3 are the warm-up; the shifts at 6 and 12 fire; 7 and 8 (and 13, 14) are the cool-down,
    in which nothing is scored, not even the shifted batch 8; the statistics go on after a reset."""
    wrapped = DriftPolicy(threshold=1.25, warmup=4, cooldown=3).wrap(LogitsMethod())
    scored, reset = [], []
    for index in range(16):
        wrapped.last_score = None
        wrapped(entropy_logits(20.0 if index in (6, 8, 12) else 1.0))
        scored.append(wrapped.last_score is not None)
        reset.append(wrapped.last_step.reset)
    assert [index for index, was in enumerate(scored) if not was] == [0, 1, 2, 3, 7, 8, 13, 14]
    assert [index for index, was in enumerate(reset) if was] == [6, 12] and wrapped.resets == 2


@pytest.mark.parametrize("mode", ["full", "soft"])
def test_a_drift_reset_restores_the_weights_keeps_the_class_average_and_predicts_the_batch_again(mode, tiny_cnn):
    """RDumb++'s timing: the batch that drifts is predicted again after the reset and adapted on; full:
    weights, BN buffers and optimiser state restored, ETA's class average kept; soft: every weight and
    buffer moved a fraction ``strength`` back, optimiser state and class average kept."""
    strength = 0.25
    policy = DriftPolicy(mode=mode, strength=strength, warmup=1, cooldown=0, threshold=1e-12)
    wrapped = create("eta", tiny_cnn, reset=policy.text(), **ETA_OPTIONS)
    plain = create("eta", tiny_cnn, **ETA_OPTIONS)
    initial = copy.deepcopy(plain.state_dict())
    batches = make_batches(3)
    for images, _ in batches[:2]:
        assert torch.equal(wrapped(images), plain(images))
    assert wrapped.resets == 0, "batch 0 is in the warm-up, batch 1 gives the first signal"
    if mode == "full":
        plain.restore_initial_weights()
        assert plain.mean_prediction is not None
    else:
        with torch.no_grad():
            for name, value in plain.state_dict().items():
                if value.is_floating_point():
                    value.mul_(1.0 - strength).add_(initial[name], alpha=strength)
    images = batches[2][0]
    assert torch.equal(wrapped(images), plain(images))
    assert wrapped.resets == 1 and wrapped.last_step.reset and wrapped.last_step.updated
    for name, value in plain.state_dict().items():
        assert torch.equal(wrapped.method.state_dict()[name], value), name
    assert torch.equal(wrapped.method.mean_prediction, plain.mean_prediction)
    assert str(wrapped.method.optimizer.state_dict()) == str(plain.optimizer.state_dict())


# --- ASR ---------------------------------------------------------------------------------------------


def recorded_gradients(method: nn.Module) -> list[list[torch.Tensor]]:
    """Register a hook recording the gradients of each optimiser step of ``method``."""
    steps: list[list[torch.Tensor]] = []

    def record(optimizer, args, kwargs):
        steps.append([parameter.grad.clone() for group in optimizer.param_groups for parameter in group["params"]])

    method.optimizer.register_step_pre_hook(record)
    return steps


@pytest.mark.parametrize("name", ["eta", "roid"])
def test_asr_resets_only_the_deep_part_and_learns_fisher_and_means(name, tiny_cnn):
    options = ETA_OPTIONS if name == "eta" else {}
    policy = ASRPolicy(a0=100.0, r0=0.5, r1=0.0)  # threshold ln(1000) > any entropy of 10 classes: fires at once
    wrapped = create(name, tiny_cnn, reset=policy.text(), **options)
    plain = create(name, tiny_cnn, **options)
    fresh = create(name, tiny_cnn, **options)
    gradients = recorded_gradients(plain)
    images = make_batches(1)[0][0]
    assert torch.equal(wrapped(images), plain(images))
    assert wrapped.resets == 1 and wrapped.last_scope == 0.5 and wrapped.reset_pending
    parameters = wrapped.adapted_parameters()
    kept = math.ceil(0.5 * len(parameters))
    adapted = dict(plain.model.named_parameters())
    initial = dict(fresh.model.named_parameters())
    for index, (parameter_name, parameter) in enumerate(zip(wrapped.parameter_names, parameters)):
        expected = adapted[parameter_name] if index < kept else initial[parameter_name]
        assert torch.equal(parameter, expected), parameter_name
    assert not torch.equal(adapted[wrapped.parameter_names[0]], initial[wrapped.parameter_names[0]])
    for buffer_name, value in wrapped.method.model.named_buffers():
        assert torch.equal(value, dict(fresh.model.named_buffers())[buffer_name]), buffer_name
    assert wrapped.method.optimizer.state_dict()["state"] == {}
    if name == "roid":
        assert wrapped.method.class_average is None
        for source, initial_source in zip(
            wrapped.method.source_parameters.tensors(), fresh.source_parameters.tensors()
        ):
            assert torch.equal(source, initial_source)
    [step_gradients] = gradients
    for fisher, gradient in zip(wrapped.fisher, step_gradients):
        assert torch.equal(fisher, 1.0 * gradient.square())
    for mean, parameter_name in zip(wrapped.parameter_mean, wrapped.parameter_names):
        assert torch.equal(mean, 1.0 * initial[parameter_name])
    assert wrapped.threshold == math.log(10 * 100.0) and wrapped.steps == 0
    wrapped(make_batches(2)[1][0])
    assert wrapped.last_step.reset


def test_asr_scope_shrinks_with_the_entropy_drop(tiny_cnn):
    policy = ASRPolicy(a0=100.0, r0=0.5, r1=0.05)
    wrapped = create("eta", tiny_cnn, reset=policy.text(), **ETA_OPTIONS)
    wrapped(make_batches(1)[0][0])
    expected = max(0.5 - 0.05 * (math.log(10 * 100.0) - wrapped.last_entropy), 0.0)
    assert wrapped.last_scope == pytest.approx(expected, abs=0.0) and 0.0 < expected < 0.5


def test_asr_does_not_reset_while_the_entropy_stays_above_its_threshold(tiny_cnn):
    wrapped = create("eta", tiny_cnn, reset="asr", **ETA_OPTIONS)
    plain = create("eta", tiny_cnn, **ETA_OPTIONS)
    for images, _ in make_batches(4):
        assert torch.equal(wrapped(images), plain(images))
    assert wrapped.resets == 0 and wrapped.steps == 4 and wrapped.fisher is None
    assert wrapped.threshold >= math.log(10 * 0.5)


def test_asr_regulariser_adds_the_gradient_of_its_penalty(tiny_cnn):
    wrapped = create("eta", tiny_cnn, reset="asr", **ETA_OPTIONS)
    parameters = wrapped.adapted_parameters()
    generator = torch.Generator().manual_seed(3)
    gradients = [torch.randn(p.shape, generator=generator) for p in parameters]
    wrapped.fisher = [torch.rand(p.shape, generator=generator) for p in parameters]
    wrapped.parameter_mean = [p.detach() + torch.randn(p.shape, generator=generator) for p in parameters]
    wrapped.regulariser_weight = 0.7
    for parameter, gradient in zip(parameters, gradients):
        parameter.grad = gradient.clone()
    wrapped._before_optimizer_step(wrapped.method.optimizer, (), {})
    for parameter, gradient, fisher, mean, total in zip(
        parameters, gradients, wrapped.fisher, wrapped.parameter_mean, wrapped.fisher_sum
    ):
        with torch.enable_grad():
            copy_ = parameter.detach().clone().requires_grad_(True)
            (0.7 * (fisher * (copy_ - mean) ** 2).sum()).backward()
        torch.testing.assert_close(parameter.grad, gradient + copy_.grad, rtol=1e-6, atol=1e-7)
        assert torch.equal(total, gradient.square())


class PrototypeClassifier(nn.Module):
    """1,000 classes, each an 8×8 prototype image; logits = LayerNorm of the correlations with the centred
    prototypes (ROID adapts the LayerNorm), so a batch of few classes has confident, peaked mean logits."""

    def __init__(self, prototypes: torch.Tensor) -> None:
        super().__init__()
        flat = prototypes.flatten(1)
        self.linear = nn.Linear(flat.shape[1], len(prototypes))
        with torch.no_grad():
            self.linear.weight.copy_(flat - flat.mean(0))
            self.linear.bias.zero_()
        self.norm = nn.LayerNorm(len(prototypes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(images.flatten(1)))


def test_asr_on_roid_fires_on_a_switch_with_the_default_prior_correction():
    """8 batches of all 1,000 classes, then batches of 2 classes. ASR decides on ROID's logits before
    the prior correction (YonseiML/asr methods/base.py): it resets on the first batch after the switch.
    On the corrected logits (≈ logits / C) the batch-mean entropy stays at ln C and it never fired."""
    generator = torch.Generator().manual_seed(0)
    prototypes = torch.rand(1000, 3, 8, 8, generator=generator)

    def batch(classes: torch.Tensor) -> torch.Tensor:
        labels = classes[torch.randint(0, len(classes), (32,), generator=generator)]
        return (prototypes[labels] + 0.05 * torch.randn(32, 3, 8, 8, generator=generator)).clamp(0, 1)

    wrapped = create("roid", PrototypeClassifier(prototypes), reset="asr")
    assert wrapped.method.config.prior_correction == "logits"
    for _ in range(8):
        wrapped(batch(torch.arange(1000)))
    assert wrapped.resets == 0
    corrected = wrapped(batch(torch.tensor([3, 7])))
    assert wrapped.resets == 1 and wrapped.last_entropy < math.log(1000) - 0.5
    assert float(softmax_entropy(corrected.mean(0, keepdim=True))[0]) > math.log(1000) - 1e-3


def test_asr_computes_the_entropy_in_the_models_float64(tiny_cnn):
    wrapped = create("eta", tiny_cnn.double(), reset="asr", **ETA_OPTIONS)
    logits = wrapped(make_batches(1)[0][0].double())
    assert logits.dtype == torch.float64
    assert wrapped.last_entropy == float(softmax_entropy(logits.mean(0, keepdim=True))[0])


@pytest.mark.parametrize("reset", ["asr", "rdumbpp", "periodic:every=2"])
def test_a_policy_prepares_a_method_that_needs_no_preparation(reset, tiny_cnn):
    wrapped = create("tent", tiny_cnn, reset=reset)
    assert wrapped.preparation_samples == 0
    wrapped.prepare(iter([make_batches(1)[0][0]]))


@pytest.mark.parametrize("reset", ["asr:a0=100", "rdumbpp:warmup=1:cooldown=1:threshold=0.5", "periodic:every=2"])
def test_wrapped_methods_pickle_and_continue_identically(reset, tiny_cnn):
    """torch.save / torch.load of a used wrapper (e.g. for checkpoints): the copy goes on exactly as the
    original, ASR's regulariser included (unpickling drops optimiser hooks; the wrapper re-registers)."""
    method = create("eta", tiny_cnn, reset=reset, **ETA_OPTIONS)
    batches = make_batches(6)
    for images, _ in batches[:3]:
        method(images)
    buffer = io.BytesIO()
    torch.save(method, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    assert isinstance(restored, ResetPolicyWrapper)
    for images, _ in batches[3:]:
        assert torch.equal(method(images), restored(images))
        assert method.last_step == restored.last_step
    if reset.startswith("asr"):
        assert method.fisher is not None and method.resets >= 2


# --- full runs ---------------------------------------------------------------------------------------


def test_tta_eval_runs_roid_with_asr_and_rdumbpp(tmp_path, capsys):
    labels = ("roid:reset=asr", "rdumbpp", "asr")
    arguments = [
        "run",
        "--stream",
        SMALL_STREAM,
        "--model",
        TINY_FACTORY,
        "--out",
        str(tmp_path),
        "--name",
        "policies",
        "--no-progress",
    ]
    for label in labels:
        arguments += ["--method", label]
    code, out, err = run_cli(capsys, *arguments)
    assert code == 0, err
    for label in labels:
        assert f"| {label} |" in out
    config = json.loads((tmp_path / "policies" / "config.json").read_text())["methods"]
    assert config["roid:reset=asr"]["reset"] == ASRPolicy().text() and config["roid:reset=asr"]["method"] == "roid"
    assert config["rdumbpp"]["reset"] == DriftPolicy().text() and config["rdumbpp"]["reset_every"] is None
    summary = json.loads((tmp_path / "policies" / "summary.json").read_text())["methods"]
    assert all(summary[label]["samples"] == 96 for label in labels)


def test_a_bad_policy_on_the_command_line_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", "--stream", SMALL_STREAM, "--model", TINY_FACTORY,
                           "--method", "eta:reset=asr:speed=2", "--out", str(tmp_path), "--no-progress")  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown parameter 'speed' of reset policy 'asr'; valid parameters: m0, p0, a0, r0, r1" in err


def test_a_policy_given_on_a_demo_world_stream_replaces_the_worlds_reset_every(tmp_path, monkeypatch):
    """The demo world gives rdumb reset_every=50 unless the user sets the reset, in either spelling."""
    import ccc.demo
    from tests.builders import make_ccc_run, pretend_demo_world
    from tta_eval.settings import ExperimentSettings, resolve_experiment

    run = make_ccc_run(tmp_path / "shards", num_images=64, speed=8, shard_size=64)
    pretend_demo_world(monkeypatch, run)
    methods = tuple(MethodSpec.parse(text) for text in ("rdumb", "rdumb:reset=asr", "rdumb:reset_every=3"))
    resolved = resolve_experiment(ExperimentSettings(stream=f"ccc:{run}", methods=methods)).settings.methods
    options = {method.label: dict(method.options) for method in resolved}
    assert options["rdumb"]["reset_every"] == ccc.demo.demonstration.DEMO_RESET_EVERY
    assert options["rdumb:reset=asr"]["reset"] == "asr" and "reset_every" not in options["rdumb:reset=asr"]
    assert options["rdumb:reset_every=3"]["reset_every"] == 3
    assert options["rdumb:reset=asr"]["learning_rate"] == ccc.demo.demonstration.DEMO_LEARNING_RATE
