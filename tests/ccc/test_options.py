"""The one key=value option parser (ccc.options): typing, strictness, one-line errors naming the key."""

from __future__ import annotations

import re

import pytest

from ccc.options import parse_list, parse_options


@pytest.mark.parametrize(
    ("text", "separator", "expected"),
    [
        ("", ",", {}),
        ("  ", ":", {}),
        ("speed=2000,seed=-3,lr=2e-4,x=0.5,y=.5", ",", {"speed": 2000, "seed": -3, "lr": 2e-4, "x": 0.5, "y": 0.5}),
        ("every=010", ":", {"every": 10}),
        ("a=true:b=False:c=none:d=NONE", ":", {"a": True, "b": False, "c": None, "d": None}),
        (
            " kind = cin-c , imagenet=/data/val,folder=2024_images",
            ",",
            {"kind": "cin-c", "imagenet": "/data/val", "folder": "2024_images"},
        ),
        ("reset=periodic:every=3,steps=1", ",", {"reset": "periodic:every=3", "steps": 1}),
        ("tiny=1e-300,zero=0e5,negative_zero=-0.0", ",", {"tiny": 1e-300, "zero": 0.0, "negative_zero": -0.0}),
    ],
)
def test_options_are_typed(text: str, separator: str, expected: dict) -> None:
    parsed = parse_options(text, "the test", separator)
    assert parsed == expected
    assert [type(value) for value in parsed.values()] == [type(value) for value in expected.values()]


@pytest.mark.parametrize(
    ("text", "separator", "message"),
    [
        ("num_images=", ",", "option 'num_images' of the test has no value (num_images=)"),
        ("speed=1,speed=2", ",", "option 'speed' of the test is given twice (speed=1 and speed=2)"),
        ("every=1:every=2", ":", "option 'every' of the test is given twice (every=1 and every=2)"),
        (
            "speed=0x10",
            ",",
            "option 'speed' of the test must be a finite decimal number (e.g. 16, 0.5, 2e-4), got '0x10'",
        ),
        ("every=0o17", ":", "option 'every' of the test must be a finite decimal number"),
        ("every=0b101", ":", "option 'every' of the test must be a finite decimal number"),
        ("every=1_000", ":", "option 'every' of the test must be a finite decimal number"),
        ("every=1j", ":", "option 'every' of the test must be a finite decimal number"),
        (
            "lr=1e-400",
            ",",
            "option 'lr' of the test must be a finite decimal number, got '1e-400' (underflows to 0 as a float)",
        ),
        (
            "lr=-1e999",
            ",",
            "option 'lr' of the test must be a finite decimal number, got '-1e999' (overflows as a float)",
        ),
        ("lr=nan", ",", "option 'lr' of the test must be a finite decimal number"),
        ("lr=-Infinity", ",", "option 'lr' of the test must be a finite decimal number"),
        ("speed", ",", "options of the test must be key=value pairs separated by ',', got 'speed'"),
        ("=3", ":", "options of the test must be key=value pairs separated by ':', got '=3'"),
        ("a=1,,b=2", ",", "options of the test must be key=value pairs separated by ',', got ''"),
    ],
)
def test_mistakes_are_one_line_errors_naming_the_key(text: str, separator: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        parse_options(text, "the test", separator)
    assert "\n" not in str(error.value)


def test_lists_are_words_joined_by_plus() -> None:
    assert parse_list("corruptions", "noise + blur", "the test") == ("noise", "blur")
    assert parse_list("corruptions", "fog", "the test") == ("fog",)
    for value in ("noise++blur", "noise+", 3, None):
        with pytest.raises(ValueError, match=re.escape("option 'corruptions' of the test must be names joined by '+'")):
            parse_list("corruptions", value, "the test")
