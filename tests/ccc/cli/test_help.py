"""``--help`` of every console script: defaults shown, examples at the end, no heavy import (torch, Ray,
matplotlib), the protocol symbols explained in words, the registered stream schemes named; the shared
formatter and counted nouns of ``ccc.cli.common``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from ccc.cli.common import HelpFormatter, count, examples
from tests.builders import REPOSITORY

SCRIPTS = [
    "ccc.cli.generate",
    "ccc.cli.verify",
    "ccc.cli.mirror",
    "ccc.cli.corruption_grid",
    "ccc.cli.calibrate",
    "tta_eval.cli",
]
"""The modules whose ``main`` the six console scripts run (a subcommand's help imports the same modules)."""

HEAVY_MODULES = ("torch", "ray", "matplotlib")

PROBE = """
import contextlib, io, json, sys
from {module} import main
text = io.StringIO()
with contextlib.redirect_stdout(text):
    try:
        main({argv!r})
    except SystemExit:
        pass
print(json.dumps({{"help": text.getvalue(), "heavy": [name for name in {heavy!r} if name in sys.modules]}}))
"""


def _help_in_fresh_process(module: str, words: list[str]) -> dict:
    code = PROBE.format(module=module, argv=[*words, "--help"], heavy=HEAVY_MODULES)
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", SCRIPTS)
def test_help_imports_nothing_heavy(module: str) -> None:
    answer = _help_in_fresh_process(module, [])
    assert answer["heavy"] == [], f"--help imported {answer['heavy']}"
    assert "examples:" in answer["help"]


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


def _all_parsers() -> list[argparse.ArgumentParser]:
    from ccc.cli.calibrate import build_parser as calibrate_parser
    from ccc.cli.corruption_grid import build_parser as grid_parser
    from ccc.cli.generate import build_parser as generate_parser
    from ccc.cli.verify import build_parser as verify_parser
    from tta_eval.cli import build_parser as tta_parser

    return [
        parser
        for build in (generate_parser, verify_parser, grid_parser, calibrate_parser, tta_parser)
        for parser in _parsers(build())
    ]


def test_every_command_ends_with_examples() -> None:
    parsers = _all_parsers()
    assert len(parsers) == 14
    for parser in parsers:
        text = parser.format_help()
        assert "examples:" in text, parser.prog
        commands = [
            line
            for line in text.split("examples:")[-1].splitlines()
            if line.startswith("  ") and not line.startswith("  #")
        ]
        assert len(commands) >= 1 and all(
            line.split()[0] in ("ccc-generate", "ccc-verify", "ccc-calibrate", "tta-eval", "ccc-corruption-grid")
            for line in commands
        ), parser.prog


def test_every_option_with_a_default_shows_it() -> None:
    missing = []
    for parser in _all_parsers():
        formatter = parser._get_formatter()
        assert isinstance(formatter, HelpFormatter), parser.prog
        for action in parser._actions:
            default = action.default
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            if default in (None, False, argparse.SUPPRESS) or (isinstance(default, (list, tuple, str)) and not default):
                continue
            if "default" not in (formatter._get_help_string(action) or "").lower():
                missing.append(f"{parser.prog} {action.option_strings[0]}")
    assert missing == []


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_tta_eval_run_help_explains_the_protocol_symbols_and_names_the_stream_schemes() -> None:
    from tta_eval.cli import build_parser
    from tta_eval.streams import stream_schemes

    run = next(parser for parser in _parsers(build_parser()) if parser.prog == "tta-eval run")
    text = _flat(run.format_help())
    for words in (
        "λ, the plain (non-adapting) model's latency per batch",
        "δ the method's time per batch",
        "stream speed η",
        "utilisation ρ = λ/γ",
        "arrival interval γ",
    ):
        assert words in text
    assert schemes_listed(text, stream_schemes())


def schemes_listed(text: str, schemes: list[str]) -> bool:
    listed = "(" + ", ".join(f"{scheme}:" for scheme in schemes) + ")"
    return listed in text and "ccc:" in listed


def test_num_images_states_images_and_disk() -> None:
    from ccc.cli.generate import SHARD_BYTES_PER_IMAGE, build_parser
    from ccc.stream.spec import PAPER_NUM_IMAGES

    text = _flat(build_parser().format_help())
    assert f"default {PAPER_NUM_IMAGES:,}" in text
    assert f"{PAPER_NUM_IMAGES * SHARD_BYTES_PER_IMAGE / 1e9:,.0f} GB" in text
    assert "with --demo 30,000, about 0.72 GB" in text  # the README's 224×224 demo stream: 719.6 MB


def test_help_formatter_appends_defaults_only_where_they_say_something() -> None:
    parser = argparse.ArgumentParser(
        prog="demo", formatter_class=HelpFormatter, epilog=examples("demo --rate 2", ("demo --fast", "quick"))
    )
    parser.add_argument("--rate", type=float, default=0.5, help="a rate in %% per step")
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 2], help="sizes")
    parser.add_argument("--name", default=None, help="a name")
    parser.add_argument("--flag", action="store_true", help="a flag")
    parser.add_argument("--out", default="x", help="output (default: stdout)")
    parser.add_argument("--tags", action="append", default=[], help="tags")
    text = parser.format_help()
    assert "a rate in % per step (default: 0.5)" in _flat(text)
    assert "sizes (default: 1 2)" in _flat(text)
    assert "a name (default" not in text and "a flag (default" not in text and "tags (default" not in text
    assert "output (default: stdout)" in _flat(text) and "(default: x)" not in text
    assert text.endswith("examples:\n  demo --rate 2\n  # quick\n  demo --fast\n")


@pytest.mark.parametrize(
    ("number", "expected"), [(0, "0 shards"), (1, "1 shard"), (2, "2 shards"), (25_000, "25,000 shards")]
)
def test_count_uses_the_plural_except_for_one(number: int, expected: str) -> None:
    assert count(number, "shard") == expected
    assert count(1, "pair of images", "pairs of images") == "1 pair of images"
    assert count(3, "pair of images", "pairs of images") == "3 pairs of images"
