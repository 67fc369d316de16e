"""The stream source registry: one module per source, listed in a fixed order, each source's
command-line options turned into ``StreamOptions`` (parametrised over every registered source)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccc.registry import Registry
from tta_eval.streams import (
    REGISTRY,
    StreamOptions,
    StreamSource,
    register_stream_source,
    stream_schemes,
    stream_sources,
)

REPOSITORY = Path(__file__).resolve().parents[2]


def test_the_built_in_sources_are_listed_in_their_order() -> None:
    assert stream_schemes()[:4] == ["synthetic", "folder", "ccc", "ccc-render"]
    assert [source.name for source in stream_sources()] == stream_schemes()


def test_a_user_source_is_listed_after_the_ones_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import tta_eval.streams.registry

    registry: Registry[StreamSource] = Registry("stream scheme", ordered=True)
    for source in REGISTRY:
        registry.register(source)
    monkeypatch.setattr(tta_eval.streams.registry, "REGISTRY", registry)
    entry = register_stream_source("zz-first-user", lambda location, options: [], domain_key="domain")
    register_stream_source("aa-second-user", lambda location, options: [])
    assert stream_schemes()[-2:] == ["zz-first-user", "aa-second-user"]
    assert entry.domain_key == "domain" and not entry.seekable and entry.options == ()
    with pytest.raises(ValueError, match="stream scheme 'zz-first-user' is already registered"):
        register_stream_source("zz-first-user", lambda location, options: [])
    with pytest.raises(ValueError, match="lower-case letters, digits, '_' or '-', got 'Bad.Scheme'"):
        register_stream_source("Bad.Scheme", lambda location, options: [])


@pytest.mark.parametrize("source", stream_sources(), ids=lambda source: source.name)
def test_a_source_s_options_at_their_defaults_give_the_default_stream_options(source: StreamSource) -> None:
    parser = argparse.ArgumentParser()
    for option in source.options:
        parser.add_argument(option.flag, **option.arguments)
    fields = source.from_options(vars(parser.parse_args([])))
    defaults = StreamOptions()
    assert set(fields) <= set(vars(defaults)), "options set StreamOptions fields"
    assert all(getattr(defaults, name) == value for name, value in fields.items()), fields


def test_the_flags_of_all_sources_are_distinct() -> None:
    flags = [option.flag for source in stream_sources() for option in source.options]
    assert len(flags) == len(set(flags)), flags


def test_image_folder_options_set_their_fields() -> None:
    source = REGISTRY.get("folder")
    values = {"image_size": 32, "shuffle_seed": 5, "no_shuffle": True, "skip_bad_images": True, "classes": "c.txt"}
    assert source.from_options(values) == {
        "image_size": 32,
        "shuffle_seed": None,
        "skip_bad_images": True,
        "classes": "c.txt",
    }
    ccc_values = {"no_verify": True, "remote_deadline": 30.0, "remote_min_rate": 0.0}
    assert REGISTRY.get("ccc").from_options(ccc_values) == {
        "verify_shards": False,
        "remote_deadline": 30.0,
        "remote_min_rate": 0.0,
    }


def test_importing_the_streams_loads_no_torch() -> None:
    """``tta-eval --help`` names the sources and their options without paying torch's import."""
    code = "import sys, tta_eval.streams, tta_eval.cli; print('torch' in sys.modules, 'torchvision' in sys.modules)"
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True, cwd=REPOSITORY
    )
    assert result.stdout.split() == ["False", "False"]


def test_stream_options_bound_the_loader_workers() -> None:
    from ccc.validation import max_loader_workers

    assert StreamOptions(num_workers=max_loader_workers()).num_workers == max_loader_workers()
    with pytest.raises(ValueError, match=rf"^num_workers must be an integer in \[0, {max_loader_workers():,}\]"):
        StreamOptions(num_workers=max_loader_workers() + 1)
