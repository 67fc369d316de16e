"""Command-line options that registered entries contribute to ``tta-eval run`` and ``sweep``.

A protocol (``tta_eval.protocols``) and a stream source (``tta_eval.streams``) each carry their own
options; the command line adds them by iterating the registries, so a new entry brings its flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CliOption:
    """One option of ``tta-eval run`` (and ``sweep``) that belongs to a registered entry.

    flag: the option, e.g. "--speed" (unique among all entries); arguments: keyword arguments of
    ``argparse.ArgumentParser.add_argument`` (type, action, default, metavar, help). A protocol's
    options leave the default out: the CLI gives them None, meaning "not given", so it can refuse one
    under another protocol. A stream source's options carry their defaults.
    """

    flag: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        """The attribute name argparse stores the value under ("--threshold-ms" → "threshold_ms")."""
        return self.flag.lstrip("-").replace("-", "_")
