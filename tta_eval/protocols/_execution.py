"""Machinery shared by the protocols: the stream side (batches, episodes) and the method side (steps).

A protocol decides, batch by batch and method by method, which step to take: ``adapt`` (the
method's own call: predict, then adapt), ``predict`` (a prediction without adaptation) or ``skip``
(no prediction). ``MethodRunner`` executes the step, times it with the run's clock and returns the
batch's record. Methods are used through their public interface only: calling them, ``reset()``,
``last_step``, and the network they predict with (``prediction_network``). ``lockstep`` sets up a
run: the runners of the methods and the stream's batches, each with whether it starts an episode.

Precision and memory format (``RunContext.precision``, ``channels_last``) are applied here and only
here: a runner calls its method under ``precision_autocast`` and, for float16, with its own loss
scaler (``tta_eval.methods.base.loss_scaling``); the methods' networks and the stream's images are
put in channels-last format when asked.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn
from tqdm import tqdm

from tta_eval.checkpoint import restore_rng_states
from tta_eval.methods import NeedsStreamPreparation, TTAMethod
from tta_eval.methods.base import batchnorm_layers, load_method_state_dict, loss_scaling, method_state_dict
from tta_eval.protocols._base import EpisodeSettings, NonFiniteLossError, ProtocolState, RunContext
from tta_eval.protocols.timing import Timing
from tta_eval.records import BatchRecord
from tta_eval.streams import Batch, as_batch, majority_value, metadata_values, stream_length

if TYPE_CHECKING:
    from tta_eval.checkpoint import Checkpointer

logger = logging.getLogger(__name__)

NON_TTY_PROGRESS_INTERVAL_SECONDS = 30.0
MAX_WRAPPER_DEPTH = 8
AUTOCAST_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""The autocast type of each reduced precision (``RunContext.precision``; "fp32" has none)."""


def precision_autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` to the type of ``precision`` ("bf16", "fp16") for ``device``'s kind; a no-op
    for "fp32" (everything then runs exactly as without it)."""
    dtype = AUTOCAST_TYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def prediction_network(method: nn.Module) -> nn.Module:
    """The network whose forward pass produces ``method``'s prediction.

    Resolution: the method's ``prediction_network`` attribute if it defines one (an ``nn.Module``);
    otherwise a wrapper holding the method in ``.method`` (e.g. ``PeriodicReset``) is unwrapped;
    otherwise the method's ``model``. Raises ValueError if none exists. The protocols use this
    network for predictions without adaptation (its current layer modes, no update of any state)
    and, in measured timing, to find the moment a prediction exists (end of its first forward pass).
    """
    current: Any = method
    for _ in range(MAX_WRAPPER_DEPTH):
        explicit = getattr(current, "prediction_network", None)
        if isinstance(explicit, nn.Module):
            return explicit
        inner = getattr(current, "method", None)
        if isinstance(inner, nn.Module):
            current = inner
            continue
        model = getattr(current, "model", None)
        if isinstance(model, nn.Module):
            return model
        break
    raise ValueError(
        f"cannot find the prediction network of {type(method).__name__}: expected an attribute "
        "'prediction_network' or 'model' (an nn.Module), or a wrapper with 'method'"
    )


@contextlib.contextmanager
def running_statistics_frozen(network: nn.Module) -> Iterator[None]:
    """Within the block, BatchNorm layers in training mode normalise with batch statistics as usual
    but do not update their running statistics (nor ``num_batches_tracked``)."""
    layers = [layer for layer in batchnorm_layers(network) if layer.training and layer.track_running_stats]
    for layer in layers:
        layer.track_running_stats = False
    try:
        yield
    finally:
        for layer in layers:
            layer.track_running_stats = True


def predict_without_adapting(network: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Logits of ``network`` in its current layer modes, without gradients, leaving every parameter
    and buffer unchanged (BatchNorm layers using batch statistics keep doing so)."""
    with torch.no_grad(), running_statistics_frozen(network):
        return network(images)


def frozen_copy(network: nn.Module) -> nn.Module:
    """A deep copy of ``network`` in evaluation mode without gradients: BatchNorm layers normalise with
    their running statistics (tracked on the target stream while the method adapted)."""
    frozen = copy.deepcopy(network).eval()
    frozen.requires_grad_(False)
    return frozen


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """A validated stream batch on the run's device.

    index: 0-based position in the stream; sample_start: samples before it; images N×C×H×W;
    labels (N,); label_range: (min, max) label; domain: majority value of the domain key ("" if none).
    """

    index: int
    sample_start: int
    images: torch.Tensor
    labels: torch.Tensor
    label_range: tuple[int, int]
    domain: str

    @property
    def size(self) -> int:
        """Number of samples N."""
        return int(self.labels.shape[0])


def _preparation_samples(method: TTAMethod) -> int:
    return method.preparation_samples if isinstance(method, NeedsStreamPreparation) else 0


def _prepare_methods(methods: Mapping[str, TTAMethod], iterator: Iterator[Any], device: torch.device) -> list[Batch]:
    """Give each method needing the stream head its images; return the head batches (to be evaluated)."""
    needed = max((_preparation_samples(method) for method in methods.values()), default=0)
    head: list[Batch] = []
    seen = 0
    while seen < needed:
        item = next(iterator, None)
        if item is None:
            break
        head.append(as_batch(item, len(head)))
        seen += head[-1].size
    for name, method in methods.items():
        if _preparation_samples(method) > 0:
            logger.info("%s: preparing on the first %d stream samples", name, method.preparation_samples)
            try:
                method.prepare(batch.images.to(device) for batch in head)
            except RuntimeError as error:
                raise ValueError(f"method {name!r} failed while preparing on the stream head: {error}") from error
    return head


def stream_batches(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    device: torch.device,
    domain_key: str | None,
    progress: bool = False,
    start: tuple[int, int] | None = None,
    before_first: Callable[[], None] | None = None,
    memory_format: torch.memory_format = torch.preserve_format,
) -> Iterator[StreamBatch]:
    """Validated batches of ``batches`` on ``device``, with domains; methods needing the stream head
    (EATA) are prepared first. progress: a bar on stderr, with total and ETA when the stream's length
    is known (``tta_eval.streams.SizedStream``); memory_format: of the images on ``device``
    (``torch.channels_last`` for channels-last runs). Raises ValueError for malformed batches or an
    empty stream.

    start: (batches, samples) already consumed by a resumed run: ``batches`` is the rest of the
    stream, its batches are numbered from there, the methods are not prepared again and an empty
    rest is allowed. before_first: called once the stream is opened, before its first batch is read
    (a resumed run restores the random states there)."""
    resumed = start is not None
    first_index, samples_seen = start if resumed else (0, 0)
    total = stream_length(batches)
    iterator = iter(batches)
    head = [] if resumed else _prepare_methods(methods, iterator, device)
    interactive = sys.stderr.isatty()
    bar = tqdm(
        total=None if total is None else samples_seen + total,
        initial=samples_seen,
        disable=not progress,
        unit="img",
        unit_scale=True,
        dynamic_ncols=True,
        mininterval=0.5 if interactive else NON_TTY_PROGRESS_INTERVAL_SECONDS,
        desc=", ".join(methods),
    )
    if before_first is not None:
        before_first()
    batch_index = -1
    try:
        for batch_index, item in enumerate(itertools.chain(head, iterator), start=first_index):
            batch = item if isinstance(item, Batch) else as_batch(item, batch_index)
            domain = ""
            if domain_key:
                domain = majority_value(metadata_values(batch.metadata, domain_key, batch.size, batch_index))
            low, high = torch.aminmax(batch.labels)
            labels = batch.labels
            yield StreamBatch(
                batch_index,
                samples_seen,
                batch.images.to(device, non_blocking=True, memory_format=memory_format),
                labels.to(device, non_blocking=True),
                (int(low), int(high)),
                domain,
            )
            samples_seen += batch.size
            bar.update(batch.size)
    finally:
        bar.close()
    if batch_index < 0 and not resumed:
        raise ValueError("the stream yielded no batches")


class EpisodeTracker:
    """Decides where episodes start: at domain changes, every N batches, or never (first batch excluded)."""

    def __init__(self, settings: EpisodeSettings) -> None:
        self._settings = settings
        self._previous_domain: str | None = None

    def starts_episode(self, batch: StreamBatch) -> bool:
        """True if the protocol resets the methods before ``batch`` (call once per batch, in order)."""
        settings = self._settings
        starts = batch.index > 0 and (
            (settings.reset == "domain" and batch.domain != self._previous_domain)
            or (settings.reset == "batches" and batch.index % settings.reset_every_batches == 0)
        )
        self._previous_domain = batch.domain
        return starts

    def state_dict(self) -> dict[str, Any]:
        """The domain of the last batch seen."""
        return {"previous_domain": self._previous_domain}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self._previous_domain = state["previous_domain"]


def check_nonfinite(record: BatchRecord, settings: EpisodeSettings) -> None:
    """Log a non-finite loss and raise NonFiniteLossError under the "stop" policy (call after yielding)."""
    if not record.nonfinite_loss:
        return
    logger.warning("%s: non-finite loss %s on batch %d; update skipped", record.method, record.loss, record.batch_index)
    if settings.nonfinite_loss == "stop":
        raise NonFiniteLossError(
            f"method {record.method!r} produced a non-finite loss ({record.loss}) on stream batch "
            f"{record.batch_index}; stopped (nonfinite_loss='stop')"
        )


class MethodRunner:
    """Runs one method's steps on stream batches and returns their records.

    label: the method's name in the run; timing: the run's clock settings; precision and device:
    every call of the method (and of its network) runs under ``precision_autocast(precision,
    device)``; under "fp16" with ``grad_scaler``, this method's loss scaler (None otherwise). Call
    ``close()`` at the end of the run (it removes the timing hook from the method's network).
    """

    def __init__(
        self,
        label: str,
        method: TTAMethod,
        timing: Timing,
        precision: str = "fp32",
        device: torch.device = torch.device("cpu"),
    ) -> None:
        self.label = label
        self.method = method
        self.precision = precision
        self.device = device
        self.grad_scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
        self.network = prediction_network(method)
        self.clock = timing.clock_for(label, self.network)
        self._warmup_calls = timing.method_warmup_calls
        self.frozen_network: nn.Module | None = None
        self._reset_pending = False
        self._called = False

    def reset(self) -> None:
        """Restore the method's initial state (and unfreeze it); the next record is marked as reset."""
        self.method.reset()
        self.frozen_network = None
        self.clock.attach()
        self._reset_pending = True

    def freeze(self) -> None:
        """From now on, ``predict`` uses a frozen copy of the network in evaluation mode."""
        self.clock.detach()
        self.frozen_network = frozen_copy(self.network)

    def close(self) -> None:
        """Remove the timing hook."""
        self.clock.detach()

    def state_dict(self) -> dict[str, Any]:
        """What the runner keeps besides its method, as tensors and plain values: a pending reset mark,
        whether the method was called (warmed up), the ``state_dict`` of the frozen copy of its network
        (None when not frozen) and, under fp16, its loss scaler's state (scale and growth tracker)."""
        scaler = None if self.grad_scaler is None else self.grad_scaler.state_dict()
        frozen = None if self.frozen_network is None else self.frozen_network.state_dict()
        return {
            "reset_pending": self._reset_pending,
            "called": self._called,
            "frozen_network": frozen,
            "grad_scaler": scaler,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned (after the method's own state: the frozen copy is
        made from its network, then given the saved weights)."""
        self._reset_pending = bool(state["reset_pending"])
        self._called = bool(state["called"])
        self.frozen_network = None
        if state["frozen_network"] is not None:
            self.freeze()
            self.frozen_network.load_state_dict(state["frozen_network"])
        if self.grad_scaler is not None and state.get("grad_scaler"):
            self.grad_scaler.load_state_dict(state["grad_scaler"])

    def _warm_up(self, batch: StreamBatch) -> None:
        for _ in range(self._warmup_calls):
            self.method(batch.images)
        if self._warmup_calls:
            self.method.reset()

    @contextlib.contextmanager
    def _precision(self) -> Iterator[None]:
        with precision_autocast(self.precision, self.device), loss_scaling(self.grad_scaler):
            yield

    def _call(self, call: Any, batch: StreamBatch) -> Any:
        try:
            with self._precision():
                if not self._called:
                    self._warm_up(batch)
                result = call()
        except RuntimeError as error:
            if self._called:
                raise
            # The first call failing is almost always a model/stream mismatch (image size, channels).
            raise ValueError(
                f"method {self.label!r} failed on the first batch (images {tuple(batch.images.shape)}): {error}"
            ) from error
        self._called = True
        return result

    def _correct(self, logits: torch.Tensor, batch: StreamBatch) -> int:
        classes = logits.shape[1]
        low, high = batch.label_range
        if low < 0 or high >= classes:
            raise ValueError(
                f"labels must be in [0, {classes}) for a model with {classes} outputs, "
                f"got labels in [{low}, {high}] in stream batch {batch.index}"
            )
        return int((logits.argmax(1) == batch.labels).sum())

    def _take_reset(self) -> bool:
        pending, self._reset_pending = self._reset_pending, False
        return pending

    def adapt(self, batch: StreamBatch) -> BatchRecord:
        """The method's own call on ``batch`` (predict, then adapt), timed."""
        logits, step_time = self._call(lambda: self.clock.time_adaptation(lambda: self.method(batch.images)), batch)
        correct = self._correct(logits, batch)
        step = self.method.last_step
        return BatchRecord(
            method=self.label,
            batch_index=batch.index,
            sample_start=batch.sample_start,
            batch_size=batch.size,
            correct=correct,
            samples_adapted=step.samples_adapted,
            loss=step.loss,
            nonfinite_loss=step.nonfinite_loss,
            reset=self._take_reset() or step.reset,
            seconds=step_time.total,
            domain=batch.domain,
            pickup_to_prediction=step_time.pickup_to_prediction,
            prediction_to_ready=step_time.prediction_to_ready,
        )

    def predict(self, batch: StreamBatch) -> BatchRecord:
        """A prediction without adaptation: by the frozen copy if frozen, else by the current network."""
        network = self.frozen_network if self.frozen_network is not None else self.network
        logits, step_time = self._call(
            lambda: self.clock.time_prediction(lambda: predict_without_adapting(network, batch.images)), batch
        )
        return BatchRecord(
            method=self.label,
            batch_index=batch.index,
            sample_start=batch.sample_start,
            batch_size=batch.size,
            correct=self._correct(logits, batch),
            samples_adapted=0,
            loss=float("nan"),
            nonfinite_loss=False,
            reset=self._take_reset(),
            seconds=step_time.total,
            domain=batch.domain,
            pickup_to_prediction=step_time.pickup_to_prediction,
            prediction_to_ready=step_time.prediction_to_ready,
            adapted=False,
        )

    def skip(self, batch: StreamBatch) -> BatchRecord:
        """No prediction for ``batch``: every sample counts as wrong, no time is charged."""
        return BatchRecord(
            method=self.label,
            batch_index=batch.index,
            sample_start=batch.sample_start,
            batch_size=batch.size,
            correct=0,
            samples_adapted=0,
            loss=float("nan"),
            nonfinite_loss=False,
            reset=self._take_reset(),
            seconds=0.0,
            domain=batch.domain,
            pickup_to_prediction=0.0,
            prediction_to_ready=0.0,
            predicted=False,
            adapted=False,
        )

    def reference_seconds(self, batch: StreamBatch) -> float:
        """λ_t: seconds of a non-adapting forward pass of the current network on ``batch``."""
        with self._precision():
            return self.clock.time_reference(lambda: predict_without_adapting(self.network, batch.images))


@contextlib.contextmanager
def method_runners(
    methods: Mapping[str, TTAMethod],
    timing: Timing,
    device: torch.device,
    precision: str = "fp32",
    channels_last: bool = False,
) -> Iterator[list[MethodRunner]]:
    """Runners for ``methods`` (moved to ``device``, in channels-last format if ``channels_last``),
    calling them in ``precision`` (see ``MethodRunner``), closed when the block ends."""
    if not methods:
        raise ValueError("methods must name at least one method, got none")
    timing.check_methods(list(methods))
    runners = []
    try:
        for label, method in methods.items():
            if channels_last:
                method.to(device, memory_format=torch.channels_last)
            else:
                method.to(device)
            runners.append(MethodRunner(label, method, timing, precision, device))
        yield runners
    finally:
        for runner in runners:
            runner.close()


State = TypeVar("State", bound=ProtocolState)


@contextlib.contextmanager
def lockstep(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    settings: EpisodeSettings,
    context: RunContext,
    new_state: Callable[[list[MethodRunner]], State] = ProtocolState,  # type: ignore[assignment]
) -> Iterator[tuple[State, Iterator[tuple[StreamBatch, bool]]]]:
    """The protocol's state ``new_state(runners)`` holding the runners of ``methods`` (moved to the
    context's device, timed by its timing, measured wall time by default) and the validated stream
    batches, each paired with whether the protocol resets the methods before it
    (``EpisodeTracker``); the runners are closed when the block ends.

    Checkpoints (``context.checkpoint``) are written at batch boundaries: when the protocol asks for
    the next batch, every record of the previous ones has been handed out (and written by the
    caller), and nothing of the next has been read. They hold the methods' state
    (``method_state_dict``), the runners', episode tracker's and protocol state's ``state_dict``s and
    the stream position. ``context.resume`` (a ``tta_eval.checkpoint.Checkpoint``) restores all of
    them into the methods given (built as the checkpoint's were: same model and options) and, just
    before the first batch is read, the global random states. Methods run in the context's precision
    and memory format.
    """
    device = torch.device(context.device)
    timing = context.timing or Timing(str(device))
    episodes = EpisodeTracker(settings)
    resume = context.resume
    memory_format = torch.channels_last if context.channels_last else torch.preserve_format
    with method_runners(methods, timing, device, context.precision, context.channels_last) as runners:
        state = new_state(runners)
        start = None
        restore_random = None
        if resume is not None:
            labels = [runner.label for runner in runners]
            if list(resume.methods) != labels or list(resume.runners) != labels:
                raise ValueError(f"the checkpoint holds methods {', '.join(resume.methods)}, not {', '.join(labels)}")
            for runner in runners:
                load_method_state_dict(runner.method, resume.methods[runner.label])
                runner.load_state_dict(resume.runners[runner.label])
            episodes.load_state_dict(resume.episodes)
            state.load_state_dict(resume.protocol)
            start = (resume.batches, resume.samples)
            restore_random = functools.partial(restore_rng_states, resume.rng)
        stream = stream_batches(
            methods, batches, device, settings.domain_key, context.progress, start, restore_random, memory_format
        )
        yield state, _with_checkpoints(stream, episodes, state, context.checkpoint)


def _with_checkpoints(
    stream: Iterator[StreamBatch], episodes: EpisodeTracker, state: ProtocolState, checkpoint: Checkpointer | None
) -> Iterator[tuple[StreamBatch, bool]]:
    for batch in stream:
        yield batch, episodes.starts_episode(batch)
        samples = batch.sample_start + batch.size
        if checkpoint is not None and checkpoint.due(samples):
            with contextlib.ExitStack() as hooks_removed:
                for runner in state.runners:
                    hooks_removed.enter_context(runner.clock.detached())
                checkpoint.save(
                    {
                        "methods": {runner.label: method_state_dict(runner.method) for runner in state.runners},
                        "runners": {runner.label: runner.state_dict() for runner in state.runners},
                        "episodes": episodes.state_dict(),
                        "protocol": state.state_dict(),
                        "position": {"batches": batch.index + 1, "samples": samples},
                    },
                    samples,
                )
