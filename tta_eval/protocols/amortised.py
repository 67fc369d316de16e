"""Tempora's amortised scenario as a live protocol: adapt until the overhead budget is spent, then freeze.

Overhead of an adapted batch: c_i = max(0, δ_i - λ) seconds (δ_i measured or from the cost model).
A method adapts on a batch while its spent overhead is below the budget B; the batch during which
the spend crosses B is still adapted (its overhead is only known afterwards), as in Tempora's code,
so the spend can exceed B by one batch's overhead. The specification's
m = max{j : Σ_{i ≤ j} c_i ≤ B} counts that batch as frozen instead. After that the model is frozen:
a copy of its prediction network in evaluation mode, so BatchNorm normalises with the running
statistics it tracked on the target stream. Per episode the method is reset, unfrozen and given a
fresh budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from tta_eval.methods import TTAMethod
from tta_eval.protocols.execution import EpisodeTracker, check_nonfinite, method_runners, stream_batches
from tta_eval.protocols.settings import AmortisedProtocol
from tta_eval.protocols.timing import Timing
from tta_eval.records import BatchRecord
from ccc.validation import check_positive


def run_amortised(
    methods: Mapping[str, TTAMethod],
    batches: Iterable[Any],
    protocol: AmortisedProtocol,
    baseline_latency: float,
    device: str | torch.device = "cpu",
    progress: bool = False,
    timing: Timing | None = None,
) -> Iterator[BatchRecord]:
    """Run ``methods`` in lockstep over ``batches`` under Tempora's amortised scenario.

    baseline_latency: λ in seconds (> 0). Adapted batches have ``adapted`` True; frozen ones are
    non-adapting predictions of the frozen copy (``adapted`` False). Errors as in ``run_offline``.
    """
    check_positive("baseline_latency", baseline_latency)
    device = torch.device(device)
    timing = timing or Timing(str(device))
    episodes = EpisodeTracker(protocol)
    with method_runners(methods, timing, device) as runners:
        spent = {runner.label: 0.0 for runner in runners}
        for batch in stream_batches(methods, batches, device, protocol.domain_key, progress):
            new_episode = episodes.starts_episode(batch)
            for runner in runners:
                if new_episode:
                    runner.reset()
                    spent[runner.label] = 0.0
                if runner.frozen_network is None and spent[runner.label] >= protocol.budget:
                    runner.freeze()
                if runner.frozen_network is not None:
                    yield runner.predict(batch)
                    continue
                record = runner.adapt(batch)
                spent[runner.label] += max(0.0, record.seconds - baseline_latency)
                yield record
                check_nonfinite(record, protocol)
