"""Settings of the evaluation protocols: frozen dataclasses, validated on construction.

Every protocol shares the episode settings of the offline protocol (when the protocol resets the
methods, which metadata key names the domain, what to do with non-finite losses). An episode is an
independent run: at an episode boundary every method is reset and a time-constrained protocol
restarts its clock (Alfarra's pending skips, Tempora's arrival times, queue and budget), as when the
papers evaluate each ImageNet-C corruption separately.

Times are in seconds throughout. Fields are keyword-only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ccc.validation import check_choice, check_in_range, check_non_negative, check_positive, check_positive_int

RESET_MODES = ("never", "domain", "batches")
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

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form, with the protocol's name under "name"."""
        return {"name": self.name, **dataclasses.asdict(self)}


@dataclass(frozen=True, kw_only=True)
class OfflineProtocol(EpisodeSettings):
    """The offline ("current") protocol: every batch is predicted and adapted on; time is ignored.

    The per-batch timing trace is still recorded, so continuous utility can be computed afterwards.
    """

    name: ClassVar[str] = "offline"


@dataclass(frozen=True, kw_only=True)
class ContinuousProtocol(EpisodeSettings):
    """Tempora's continuous utility: an offline run (no batch skipped) scored with latency penalties.

    thresholds: one or more thresholds T in seconds, each > λ; the summary reports ā, κ̄, Cov(a, κ)
    and U_continuous for each. Any other T can be scored later from the trace (``tta-eval rescore``).
    """

    name: ClassVar[str] = "continuous"

    thresholds: tuple[float, ...] = (0.1,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.thresholds, tuple) or not self.thresholds:
            raise ValueError(f"thresholds must be a non-empty tuple of seconds, got {self.thresholds!r}")
        for threshold in self.thresholds:
            check_positive("threshold", threshold)

    @property
    def needs_baseline_latency(self) -> bool:
        """The decay κ is defined relative to λ."""
        return True


@dataclass(frozen=True, kw_only=True)
class AlfarraProtocol(EpisodeSettings):
    """Alfarra et al.'s time-constrained protocol.

    speed: stream speed η in (0, 1] (1: the stream reveals a batch each time the plain model
        finishes one; smaller values slow the stream down).
    relative_speed: fixed relative adaptation speed C >= 1 for every adapted batch, or None to
        measure C_t = ceil(η · δ_t / λ_t) on each adapted batch (δ_t: the method's time on the batch,
        λ_t: the time of a non-adapting forward pass of its network on the same batch).
    strict: skip C batches after an adapted batch instead of C - 1 (the paper's stricter variant).
    single_model: skipped batches get no prediction (count as wrong) instead of the latest model's
        non-adapting prediction.
    """

    name: ClassVar[str] = "alfarra"

    speed: float = 1.0
    relative_speed: int | None = None
    strict: bool = False
    single_model: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range("speed", self.speed, 0.0, 1.0, include_low=False)
        if self.relative_speed is not None:
            check_positive_int("relative_speed", self.relative_speed)
        for flag in ("strict", "single_model"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")


@dataclass(frozen=True, kw_only=True)
class DiscreteProtocol(EpisodeSettings):
    """Tempora's discrete utility: batches arrive every γ seconds; batches not served are lost.

    Give exactly one of interval (γ in seconds, > 0) and utilisation (ρ = λ/γ, > 0; γ then follows
    from λ). buffer: batch slots b >= 0 holding arrivals while the pipeline is busy (0: arrivals
    during processing are lost; 1: the most recent arrival waits; b > 1: FIFO queue evicting its
    oldest entry when full).
    """

    name: ClassVar[str] = "discrete"

    interval: float | None = None
    utilisation: float | None = None
    buffer: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.interval is None) == (self.utilisation is None):
            raise ValueError(
                f"give exactly one of interval (seconds) and utilisation (λ/γ), got interval={self.interval!r}, "
                f"utilisation={self.utilisation!r}"
            )
        if self.interval is not None:
            check_positive("interval", self.interval)
        if self.utilisation is not None:
            check_positive("utilisation", self.utilisation)
        if isinstance(self.buffer, bool) or not isinstance(self.buffer, int) or self.buffer < 0:
            raise ValueError(f"buffer must be an integer >= 0 (batch slots), got {self.buffer!r}")

    @property
    def needs_baseline_latency(self) -> bool:
        """A utilisation is converted to an interval with λ."""
        return self.utilisation is not None

    def interval_seconds(self, baseline_latency: float | None) -> float:
        """γ in seconds: ``interval``, or λ / ``utilisation``."""
        if self.interval is not None:
            return float(self.interval)
        if baseline_latency is None:
            raise ValueError("utilisation needs the baseline latency λ to derive the arrival interval, got None")
        check_positive("baseline_latency", baseline_latency)
        return baseline_latency / self.utilisation


@dataclass(frozen=True, kw_only=True)
class AmortisedProtocol(EpisodeSettings):
    """Tempora's amortised utility: adapt until the adaptation overhead budget is spent, then freeze.

    budget: B in seconds >= 0, the total overhead Σ max(0, δ_i - λ) the method may spend per episode.
    Once spent, the model is frozen: it predicts without adapting, in evaluation mode, so BatchNorm
    uses the running statistics tracked on the target stream while adapting.
    """

    name: ClassVar[str] = "amortised"

    budget: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative("budget", self.budget)

    @property
    def needs_baseline_latency(self) -> bool:
        """The overhead of a batch is its time beyond λ."""
        return True


PROTOCOLS: dict[str, type[EpisodeSettings]] = {
    protocol.name: protocol
    for protocol in (OfflineProtocol, ContinuousProtocol, AlfarraProtocol, DiscreteProtocol, AmortisedProtocol)
}
"""Protocol settings classes by name."""

ProtocolSettings = OfflineProtocol | ContinuousProtocol | AlfarraProtocol | DiscreteProtocol | AmortisedProtocol
"""Any protocol's settings."""


def protocol_from_json(data: dict[str, Any]) -> EpisodeSettings:
    """Inverse of ``to_json``; ValueError for an unknown name or unknown fields."""
    values = dict(data)
    name = values.pop("name", "offline")
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; available: {', '.join(PROTOCOLS)}")
    cls = PROTOCOLS[name]
    valid = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - valid)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} for protocol {name!r}; valid: {', '.join(sorted(valid))}")
    if "thresholds" in values and isinstance(values["thresholds"], list):
        values["thresholds"] = tuple(values["thresholds"])
    return cls(**values)

