"""Every key=value option string is read by the one strict parser (ccc.options, issue 27 item 10):
stream definitions (synthetic:, ccc-render:), method options and reset-policy parameters refuse
duplicates, empty values and non-decimal numbers in one line naming the key; sizes of 0 are
refused, not read as "unbounded"; the word none is what the text options document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.tta_eval.method_helpers import make_staged_cnn
from tests.tta_eval.tta_helpers import TINY_FACTORY, run_cli
from tta_eval.methods import create, resolve_config
from tta_eval.methods.layers import normalization_affine_parameters
from tta_eval.methods.registry import parse_reset_policy
from tta_eval.settings import MethodSpec
from tta_eval.streams import StreamOptions, describe_stream_source, open_stream_source, parse_render_location


def _synthetic(options: str) -> Any:
    return open_stream_source(f"synthetic:{options}", StreamOptions())


def _render(options: str) -> Any:
    return parse_render_location(f"demo,difficulty=easy,{options}")


def _method(options: str) -> Any:
    return MethodSpec.parse(f"tent:{options}")


def _policy(options: str) -> Any:
    return parse_reset_policy(f"periodic:{options.replace(',', ':')}")


CALLERS: dict[str, tuple[Callable[[str], Any], str, str]] = {
    # caller: (parse, the name of an integer option it takes, what errors call it)
    "synthetic": (_synthetic, "seed", "stream 'synthetic:'"),
    "ccc-render": (_render, "speed", "stream 'ccc-render:'"),
    "method": (_method, "steps", "method 'tent'"),
    "reset policy": (_policy, "every", "reset policy 'periodic'"),
}


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{key}=", "option '{key}' of {owner} has no value ({key}=); write {key}=VALUE or leave the option out"),
        ("{key}=1,{key}=2", "option '{key}' of {owner} is given twice ({key}=1 and {key}=2); give it once"),
        ("{key}=0x10", "option '{key}' of {owner} must be a finite decimal number (e.g. 16, 0.5, 2e-4), got '0x10'"),
        (
            "{key}=1e-400",
            "option '{key}' of {owner} must be a finite decimal number, got '1e-400' (underflows to 0 as a float)",
        ),
        (
            "{key}=1e999",
            "option '{key}' of {owner} must be a finite decimal number, got '1e999' (overflows as a float)",
        ),
        ("{key}=nan", "option '{key}' of {owner} must be a finite decimal number (e.g. 16, 0.5, 2e-4), got 'nan'"),
    ],
)
def test_every_caller_refuses_a_badly_written_option_in_one_line(caller: str, template: str, message: str) -> None:
    parse, key, owner = CALLERS[caller]
    with pytest.raises(ValueError) as error:
        parse(template.format(key=key))
    assert str(error.value) == message.format(key=key, owner=owner)


def test_the_word_none_is_what_text_options_document() -> None:
    assert dict(MethodSpec.parse("roid:reset=asr,prior_correction=none").options)["prior_correction"] is None
    assert resolve_config("roid", prior_correction=None)[0].prior_correction == "none"
    every_layer = len(normalization_affine_parameters(make_staged_cnn()))
    assert len(create("sar", make_staged_cnn()).adapted_parameters) < every_layer
    sar = create("sar", make_staged_cnn(), **dict(MethodSpec.parse("sar:excluded_modules=none").options))
    assert len(sar.adapted_parameters) == every_layer


@pytest.mark.parametrize("kind", ["ccc", "cin-c", "gradual"])
@pytest.mark.parametrize("num_images", [0, -5])
def test_no_images_is_refused_not_read_as_an_endless_stream(kind: str, num_images: int) -> None:
    location = f"ccc-render:demo,kind={kind},num_images={num_images}" + (",difficulty=easy" if kind == "ccc" else "")
    with pytest.raises(ValueError, match=rf"num_images must be an integer >= 1, got {num_images}$"):
        describe_stream_source(location, StreamOptions())


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ("ccc-render:demo,num_images=", "option 'num_images' of stream 'ccc-render:' has no value (num_images=)"),
        (
            "ccc-render:demo,difficulty=easy,num_images=",
            "option 'num_images' of stream 'ccc-render:' has no value (num_images=)",
        ),
        ("ccc-render:demo,difficulty=easy,num_images=0", "num_images must be an integer >= 1, got 0"),
        (
            "ccc-render:demo,difficulty=easy,speed=1,speed=2",
            "option 'speed' of stream 'ccc-render:' is given twice (speed=1 and speed=2)",
        ),
        ("synthetic:seed=0x10", "option 'seed' of stream 'synthetic:' must be a finite decimal number"),
    ],
)
def test_the_command_line_prints_one_line_and_exits_2(
    stream: str, message: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(
        capsys,
        "run",
        "--stream",
        stream,
        "--model",
        TINY_FACTORY,
        "--method",
        "source",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert "Traceback" not in out + err and not any(tmp_path.iterdir())


def test_method_and_policy_mistakes_on_the_command_line(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    for method, message in (
        (
            "eta:reset=periodic:every=1:every=2",
            "option 'every' of reset policy 'periodic' is given twice (every=1 and every=2)",
        ),
        ("tent:steps=1,steps=2", "option 'steps' of method 'tent' is given twice (steps=1 and steps=2)"),
    ):
        code, _, err = run_cli(
            capsys,
            "run",
            "--stream",
            "synthetic:num_batches=2",
            "--model",
            TINY_FACTORY,
            "--method",
            method,
            "--out",
            str(tmp_path),
        )
        assert code == 2 and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("caller", CALLERS)
def test_every_caller_refuses_an_empty_option(caller: str) -> None:
    parse, key, owner = CALLERS[caller]
    with pytest.raises(ValueError, match=rf"^options of {owner} must be key=value pairs separated by"):
        parse(f"{key}=1,,")
