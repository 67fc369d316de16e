"""A long synthetic continual run: entropy minimisation collapses on a tiny model; RDumb's resets recover.

The tiny CNN is trained on clean synthetic images; the stream alternates "noise" and "blur" at
severity 5 every 100 batches of 16 for 2,000 batches. At the paper's learning rate (2.5e-4) a tiny
model barely moves in 2,000 steps and nothing collapses (observed: tent 0.78, eta 0.78, source 0.47
accuracy on 1,000 batches of all four corruptions), so the adapting methods use an accelerated
learning rate of 1.0. Observed with that setting (seeded, CPU): source 0.85, tent 0.11 (collapsed
within the first 1,600 samples), eta 0.37 (collapsed as well), rdumb with k = 250: 0.71. The
assertions below check these effects with wide margins, not the exact values.
"""

from __future__ import annotations

import pytest

from tta_eval.methods import create
from tta_eval.metrics import detect_collapse, overall_accuracy, windowed_accuracy
from tta_eval.protocols import OfflineProtocol, evaluate_protocol
from tta_eval.synthetic import SyntheticStream, SyntheticStreamSpec, train_source_model

BATCHES = 2000
BATCH_SIZE = 16
RESET_EVERY = 250
WINDOW = 100 * BATCH_SIZE


@pytest.mark.slow
def test_tent_collapses_and_rdumb_keeps_accuracy_on_a_long_synthetic_stream():
    model = train_source_model(SyntheticStreamSpec(batch_size=64))
    stream = SyntheticStream(
        SyntheticStreamSpec(
            num_batches=BATCHES, batch_size=BATCH_SIZE, domain_length=100, severity=5, corruptions=("noise", "blur")
        )
    )
    methods = {
        "source": create("source", model),
        "tent": create("tent", model, learning_rate=1.0),
        "eta": create("eta", model, learning_rate=1.0),
        "rdumb": create("rdumb", model, learning_rate=1.0, reset_every=RESET_EVERY),
    }
    tables = evaluate_protocol(methods, stream, OfflineProtocol(domain_key="domain"))

    accuracy = {name: overall_accuracy(table) for name, table in tables.items()}
    reference = windowed_accuracy(tables["source"], WINDOW)
    collapse = {
        name: detect_collapse(windowed_accuracy(tables[name], WINDOW), reference, span=3 * WINDOW)
        for name in ("tent", "eta", "rdumb")
    }
    assert accuracy["source"] > 0.75
    assert collapse["tent"].collapsed and accuracy["tent"] < 0.3
    assert accuracy["rdumb"] > accuracy["tent"] + 0.3
    assert accuracy["rdumb"] > accuracy["eta"] + 0.1
    reset_batches = [int(index) for index in tables["rdumb"].column("batch_index")[tables["rdumb"].column("reset")]]
    assert reset_batches == list(range(RESET_EVERY, BATCHES, RESET_EVERY))
    assert not tables["tent"].column("nonfinite_loss").any()
