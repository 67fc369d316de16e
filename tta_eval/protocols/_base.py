"""What every protocol shares: the episode settings, the run context, the score and sweep types
(the registry, :mod:`tta_eval.protocols.registry`, builds on them).

Every protocol shares the episode settings of the offline protocol (when the protocol resets the
methods, which metadata key names the domain, what to do with non-finite losses). An episode is an
independent run: at an episode boundary every method is reset and a time-constrained protocol
restarts its clock (Alfarra's pending skips, Tempora's arrival times, queue and budget), as when the
papers evaluate each ImageNet-C corruption separately.

Runners import torch when a run starts (``tta_eval.protocols._execution``, a private module so
that importing the package does not load it), so that the registry, and with it ``tta-eval
--help``, loads without torch. Times are in seconds throughout. Settings fields
are keyword-only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ccc.validation import check_choice, check_positive_int

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import torch

    from tta_eval.checkpoint import Checkpoint, Checkpointer
    from tta_eval.methods.base import TTAMethod
    from tta_eval.protocols.timing import Timing
    from tta_eval.records import BatchRecord, RecordTable

RESET_MODES = ("never", "domain", "batches")
PRECISIONS = ("fp32", "bf16", "fp16")
"""Arithmetic of the methods' forward passes: float32, or autocast to bfloat16 / float16."""
NONFINITE_POLICIES = ("continue", "stop")


class NonFiniteLossError(RuntimeError):
    """Raised under ``nonfinite_loss="stop"`` after the record of the offending batch was yielded."""


@dataclass(frozen=True, kw_only=True)
class EpisodeSettings:
    """Resets and non-finite-loss policy, shared by all protocols.

    reset: "never" (continual), "domain" (episodic: reset when the majority value of
        ``domain_key`` changes from one batch to the next) or "batches" (reset every
        ``reset_every_batches`` batches).
    domain_key: metadata key whose per-sample value names the domain (e.g. the corruption); also
        recorded per batch for per-domain metrics. None: no domain column.
    nonfinite_loss: "continue" (the method skips the update, the batch is recorded with
        nonfinite_loss=1, the run goes on) or "stop" (raise NonFiniteLossError after recording it).
    """

    name: ClassVar[str] = "episodes"

    reset: Literal["never", "domain", "batches"] = "never"
    reset_every_batches: int | None = None
    domain_key: str | None = None
    nonfinite_loss: Literal["continue", "stop"] = "continue"

    def __post_init__(self) -> None:
        check_choice("reset", self.reset, RESET_MODES)
        check_choice("nonfinite_loss", self.nonfinite_loss, NONFINITE_POLICIES)
        if self.reset == "batches":
            if self.reset_every_batches is None:
                raise ValueError("reset='batches' needs reset_every_batches, got None")
            check_positive_int("reset_every_batches", self.reset_every_batches)
        elif self.reset_every_batches is not None:
            raise ValueError(f"reset_every_batches is only used with reset='batches', got reset={self.reset!r}")
        if self.reset == "domain" and not self.domain_key:
            raise ValueError("reset='domain' needs a domain_key naming the metadata key of the domain")

    @property
    def needs_baseline_latency(self) -> bool:
        """True if the protocol needs λ, the plain model's latency per batch."""
        return False

    def check_baseline_latency(self, baseline_latency: float | None) -> None:
        """ValueError for settings that do not fit λ (seconds; None: not known); called before a run."""

    def episode(self) -> dict[str, Any]:
        """The episode settings alone (the fields of ``EpisodeSettings``), e.g. to build another protocol's settings."""
        return {item.name: getattr(self, item.name) for item in dataclasses.fields(EpisodeSettings)}

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form, with the protocol's name under "name"."""
        return {"name": self.name, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class RunContext:
    """What a protocol run needs besides methods, stream and settings.

    device: where the methods run ("cpu", "cuda", "cuda:1" or a torch.device); progress: a progress
    bar on stderr; timing: the run's clock (None: wall time measured on ``device``);
    baseline_latency: λ in seconds (> 0), the plain model's latency per batch, for the protocols
    whose settings need it (``EpisodeSettings.needs_baseline_latency``), else None.
    checkpoint: writes checkpoints at batch boundaries (``tta_eval.checkpoint.Checkpointer``; None:
    none). resume: a checkpoint (``tta_eval.checkpoint.read_checkpoint``) to continue from: the
    methods given to the run must then be built as the checkpoint's were (same model and options;
    their saved state is loaded into them) and the batches the stream after its position (the run's
    records start there).
    precision: "fp32" (default), or "bf16" / "fp16": every method call (forward passes and losses)
    runs under ``torch.autocast`` to that type, and under "fp16" gradient steps scale the loss
    (``torch.amp.GradScaler``, one per method); channels_last: methods' networks and stream images
    in channels-last memory format (faster convolutions on recent GPUs).
    """

    device: str | torch.device = "cpu"
    progress: bool = False
    timing: Timing | None = None
    baseline_latency: float | None = None
    checkpoint: Checkpointer | None = None
    resume: Checkpoint | None = None
    precision: str = "fp32"
    channels_last: bool = False

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)


class ProtocolState:
    """What a protocol keeps from one batch to the next besides its methods and their runners (e.g.
    Alfarra's pending skips), saved in checkpoints at batch boundaries and restored on resume.

    runners: the run's method runners (``tta_eval.protocols._execution.MethodRunner``), whose own
    state the machinery saves. Subclasses hold their fields as attributes and return them from
    ``state_dict`` as tensors and plain values (numbers, strings, None, lists, tuples, dicts): a
    checkpoint is read back with ``torch.load(weights_only=True)``.
    """

    def __init__(self, runners: list[Any]) -> None:
        self.runners = runners

    def state_dict(self) -> dict[str, Any]:
        """The protocol's own state (none by default)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""


@dataclass(frozen=True)
class ScoreColumn:
    """One column of a protocol's score table: the score key, its header, and how it is shown
    (percent: a fraction in [0, 1] shown as a percentage with one decimal; else ``digits`` decimals)."""

    key: str
    header: str
    percent: bool = True
    digits: int = 1


@dataclass(frozen=True)
class SweepAxis:
    """What ``tta-eval sweep`` varies for a protocol.

    option: the sweep's comma-separated grid option (e.g. "--speeds"); metavar, help: its help;
    unit: command-line value × unit = settings value (1e-3 for milliseconds); score_key: the score
    key holding the varied parameter (x axis of the utility plot); label: that axis' label;
    scenarios(values, base): (run folder name, settings) of every scenario for the grid ``values``
    (settings units), ``base`` holding the episode settings and the values of ``shared_options``
    (flags of the protocol's ``CliOption``s that the sweep also takes; absent when not given).
    """

    option: str
    metavar: str
    help: str
    score_key: str
    label: str
    scenarios: Callable[[tuple[float, ...], Mapping[str, Any]], list[tuple[str, EpisodeSettings]]]
    unit: float = 1.0
    shared_options: tuple[str, ...] = ()


Runner = Callable[["Mapping[str, TTAMethod]", "Iterable[Any]", Any, RunContext], "Iterator[BatchRecord]"]
"""runner(methods, batches, settings, context): one record per method and batch, in stream order."""

Scorer = Callable[["RecordTable", Any, "float | None", str], "list[dict[str, Any]]"]
"""scorer(table, settings, baseline_latency, label): the protocol's score dicts for one method's
records, each with "scenario", "protocol", "utility" (a fraction), the score columns' keys and
"per_domain" (domain → the same scores)."""


def seconds_from_ms(option: str, value: float | None) -> float | None:
    """A command-line time in milliseconds as seconds (None stays None); ValueError naming ``option``
    unless it is a finite number > 0."""
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{option} must be a positive number of milliseconds, got {value!r}")
    return value / 1000.0
