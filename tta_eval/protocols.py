"""The offline ("current") protocol: every batch is predicted and adapted on; time is ignored.

Continual: the protocol never resets a method (CCC). Episodic: the protocol resets every method to
its initial state at each domain change (the majority value of a metadata key changes between
consecutive batches) or every N batches. Several methods run in lockstep over one pass of the
stream, so they see exactly the same batches and the stream is decoded once.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from tqdm import tqdm

from tta_eval.methods import NeedsStreamPreparation, TTAMethod
from tta_eval.records import BatchRecord, RecordTable
from tta_eval.streams import Batch, as_batch, majority_value, metadata_values
from tta_eval.validation import check_choice, check_positive_int

logger = logging.getLogger(__name__)

RESET_MODES = ("never", "domain", "batches")
NONFINITE_POLICIES = ("continue", "stop")
NON_TTY_PROGRESS_INTERVAL_SECONDS = 30.0


class NonFiniteLossError(RuntimeError):
    """Raised under ``nonfinite_loss="stop"`` after the record of the offending batch was yielded."""


@dataclass(frozen=True)
class OfflineProtocol:
    """Settings of the offline protocol.

    reset: "never" (continual), "domain" (episodic: reset when the majority value of
        ``domain_key`` changes from one batch to the next) or "batches" (reset every
        ``reset_every_batches`` batches).
    domain_key: metadata key whose per-sample value names the domain (e.g. the corruption); also
        recorded per batch for per-domain accuracy. None: no domain column.
    nonfinite_loss: "continue" (the method skips the update, the batch is recorded with
        nonfinite_loss=1, the run goes on) or "stop" (raise NonFiniteLossError after recording it).
    """

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


def _check_labels(labels: torch.Tensor, num_classes: int, batch_index: int) -> None:
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= num_classes:
        raise ValueError(
            f"labels must be in [0, {num_classes}) for a model with {num_classes} outputs, "
            f"got labels in [{low}, {high}] in stream batch {batch_index}"
        )


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


def run_offline(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: OfflineProtocol = OfflineProtocol(),
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> Iterator[BatchRecord]:
    """Run ``methods`` (name → method module) in lockstep over ``batches`` and yield one record per method and batch.

    Methods are moved to ``device``. Methods with ``preparation_samples`` > 0 (EATA) first get the
    head of the stream through ``prepare``; those batches are held in memory and then evaluated as
    usual. Raises ValueError for malformed batches, labels outside the model's output range or an
    empty stream, and NonFiniteLossError under ``nonfinite_loss="stop"``.
    """
    if not methods:
        raise ValueError("methods must name at least one method, got none")
    device = torch.device(device)
    for method in methods.values():
        method.to(device)
    iterator = iter(batches)
    head = _prepare_methods(methods, iterator, device)
    stream = itertools.chain(head, iterator)
    interactive = sys.stderr.isatty()
    bar = tqdm(
        disable=not progress,
        unit="img",
        unit_scale=True,
        dynamic_ncols=True,
        mininterval=0.5 if interactive else NON_TTY_PROGRESS_INTERVAL_SECONDS,
        desc=", ".join(methods),
    )
    synchronize = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    previous_domain: str | None = None
    samples_seen = 0
    batch_index = -1
    try:
        for batch_index, item in enumerate(stream):
            batch = item if isinstance(item, Batch) else as_batch(item, batch_index)
            domain = ""
            if protocol.domain_key:
                domain = majority_value(metadata_values(batch.metadata, protocol.domain_key, batch.size, batch_index))
            protocol_reset = batch_index > 0 and (
                (protocol.reset == "domain" and domain != previous_domain)
                or (protocol.reset == "batches" and batch_index % protocol.reset_every_batches == 0)
            )
            previous_domain = domain
            images = batch.images.to(device, non_blocking=True)
            labels = batch.labels.to(device, non_blocking=True)
            labels_checked = False
            for name, method in methods.items():
                if protocol_reset:
                    method.reset()
                synchronize()
                started = time.perf_counter()
                try:
                    logits = method(images)
                except RuntimeError as error:
                    if batch_index > 0:
                        raise
                    # On the first batch this is almost always a model/stream mismatch (image size, channels).
                    raise ValueError(
                        f"method {name!r} failed on the first batch (images {tuple(images.shape)}): {error}"
                    ) from error
                correct = int((logits.argmax(1) == labels).sum())
                synchronize()
                seconds = time.perf_counter() - started
                if not labels_checked:
                    _check_labels(labels, logits.shape[1], batch_index)
                    labels_checked = True
                step = method.last_step
                record = BatchRecord(
                    method=name,
                    batch_index=batch_index,
                    sample_start=samples_seen,
                    batch_size=batch.size,
                    correct=correct,
                    samples_adapted=step.samples_adapted,
                    loss=step.loss,
                    nonfinite_loss=step.nonfinite_loss,
                    reset=protocol_reset or step.reset,
                    seconds=seconds,
                    domain=domain,
                )
                yield record
                if step.nonfinite_loss:
                    logger.warning("%s: non-finite loss %s on batch %d; update skipped", name, step.loss, batch_index)
                    if protocol.nonfinite_loss == "stop":
                        raise NonFiniteLossError(
                            f"method {name!r} produced a non-finite loss ({step.loss}) on stream batch {batch_index}; "
                            "stopped (nonfinite_loss='stop')"
                        )
            samples_seen += batch.size
            bar.update(batch.size)
    finally:
        bar.close()
    if batch_index < 0:
        raise ValueError("the stream yielded no batches")


def evaluate_offline(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: OfflineProtocol = OfflineProtocol(),
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> dict[str, RecordTable]:
    """``run_offline`` collected into one RecordTable per method name."""
    tables = {name: RecordTable() for name in methods}
    for record in run_offline(methods, batches, protocol, device, progress):
        tables[record.method].append(record)
    return tables

