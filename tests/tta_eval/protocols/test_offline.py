"""Offline protocol, per-batch records, metrics and collapse detection."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.tta_eval.tta_helpers import make_batches, make_tiny_cnn
from tta_eval.methods import create
from tta_eval.metrics import (
    WindowedAccuracy,
    detect_collapse,
    overall_accuracy,
    per_domain_accuracy,
    windowed_accuracy,
)
from tta_eval.protocols import NonFiniteLossError, OfflineProtocol, evaluate_protocol, run_offline
from tta_eval.records import BatchRecord, RecordTable
from tta_eval.streams import as_batch, limit_samples, metadata_values


def with_domains(batches, domains):
    return [(images, labels, {"domain": [domain] * len(labels)}) for (images, labels), domain in zip(batches, domains)]


def table_from(rows: list[tuple[int, int]], domains: list[str] | None = None) -> RecordTable:
    """RecordTable from (batch_size, correct) rows."""
    table = RecordTable()
    start = 0
    for index, (size, correct) in enumerate(rows):
        domain = domains[index] if domains else ""
        table.append(BatchRecord("m", index, start, size, correct, 0, math.nan, False, False, 0.01, domain))
        start += size
    return table


# --- protocol -------------------------------------------------------------------------------------


def test_lockstep_records_one_row_per_method_and_batch():
    model = make_tiny_cnn()
    batches = make_batches(5)
    methods = {"source": create("source", model), "tent": create("tent", model)}
    tables = evaluate_protocol(methods, batches)
    for name, table in tables.items():
        assert len(table) == 5
        assert table.column("sample_start").tolist() == [0, 16, 32, 48, 64]
        assert table.column("batch_size").tolist() == [16] * 5
    expected_correct = [int((model(images).argmax(1) == labels).sum()) for images, labels in batches]
    assert tables["source"].column("correct").tolist() == expected_correct
    assert tables["tent"].column("samples_adapted").tolist() == [16] * 5
    assert tables["source"].column("samples_adapted").tolist() == [0] * 5
    assert np.all(tables["tent"].column("loss") > 0)
    assert not tables["tent"].column("reset").any()


def test_episodic_reset_at_domain_changes_restores_the_method():
    model = make_tiny_cnn()
    batches = with_domains(make_batches(5), ["a", "a", "b", "b", "a"])
    method = create("tent", model, learning_rate=0.05)
    records = list(run_offline({"tent": method}, batches, OfflineProtocol(reset="domain", domain_key="domain")))
    assert [record.reset for record in records] == [False, False, True, False, True]
    assert [record.domain for record in records] == ["a", "a", "b", "b", "a"]
    fresh = create("tent", model, learning_rate=0.05)
    images, labels, _ = batches[2]
    assert records[2].correct == int((fresh(images).argmax(1) == labels).sum())


def test_episodic_reset_every_n_batches():
    batches = make_batches(5)
    records = list(
        run_offline(
            {"bn": create("bn", make_tiny_cnn())}, batches, OfflineProtocol(reset="batches", reset_every_batches=2)
        )
    )
    assert [record.reset for record in records] == [False, False, True, False, True]


def test_eata_gets_the_stream_head_and_every_batch_is_still_evaluated():
    model = make_tiny_cnn()
    batches = make_batches(4)
    method = create("eata", model, fisher_samples=20)
    one_shot = iter(batches)
    tables = evaluate_protocol({"eata": method}, one_shot)
    assert tables["eata"].total_samples == 64 and len(tables["eata"]) == 4
    assert method.fisher


def test_label_range_mismatch_is_reported():
    images, labels = make_batches(1)[0]
    labels[3] = 999
    with pytest.raises(
        ValueError,
        match=r"labels must be in \[0, 10\) for a model with 10 outputs, got labels in \[\d+, 999\] in stream batch 0",
    ):
        evaluate_protocol({"source": create("source", make_tiny_cnn())}, [(images, labels)])


def test_empty_stream_is_reported():
    with pytest.raises(ValueError, match="the stream yielded no batches"):
        evaluate_protocol({"source": create("source", make_tiny_cnn())}, [])


def test_nonfinite_loss_policy_continue_records_and_goes_on():
    batches = make_batches(3)
    batches[1][0][0, 0, 0, 0] = float("nan")
    tables = evaluate_protocol({"tent": create("tent", make_tiny_cnn())}, batches)
    assert tables["tent"].column("nonfinite_loss").tolist() == [False, True, False]
    assert len(tables["tent"]) == 3 and math.isfinite(tables["tent"].column("loss")[2])


def test_nonfinite_loss_policy_stop_raises_after_recording():
    batches = make_batches(3)
    batches[1][0][0, 0, 0, 0] = float("nan")
    records = []
    with pytest.raises(NonFiniteLossError, match="method 'tent' produced a non-finite loss .* on stream batch 1"):
        for record in run_offline(
            {"tent": create("tent", make_tiny_cnn())}, batches, OfflineProtocol(nonfinite_loss="stop")
        ):
            records.append(record)
    assert [record.nonfinite_loss for record in records] == [False, True]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            (torch.rand(4, 3, 8, 8),),
            r"stream batch 0 must be \(images, labels\) or \(images, labels, metadata\), got tuple of length 1",
        ),
        (
            (torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.zeros(4, dtype=torch.long)),
            r"images must be a float tensor N×C×H×W, got \(4, 3, 8, 8\) torch.uint8",
        ),
        ((torch.rand(4, 3, 8, 8), torch.zeros(3, dtype=torch.long)), r"4 images but 3 labels"),
        (
            (torch.rand(4, 3, 8, 8), torch.zeros(4)),
            r"labels must be an integer tensor \(N,\), got \(4,\) torch.float32",
        ),
    ],
)
def test_malformed_batches_are_rejected(item, message):
    with pytest.raises(ValueError, match=message):
        as_batch(item, 0)


def test_protocol_settings_are_validated():
    with pytest.raises(ValueError, match="reset must be one of batches, domain, never; got 'sometimes'"):
        OfflineProtocol(reset="sometimes")
    with pytest.raises(ValueError, match="reset='domain' needs a domain_key"):
        OfflineProtocol(reset="domain")
    with pytest.raises(ValueError, match="reset_every_batches must be an integer >= 1, got 0"):
        OfflineProtocol(reset="batches", reset_every_batches=0)


def test_missing_domain_key_lists_the_available_keys():
    batches = [(images, labels, {"corruption": ["fog"] * 16}) for images, labels in make_batches(1)]
    with pytest.raises(
        ValueError, match=r"domain key 'domain' not in the metadata of stream batch 0; available keys: corruption"
    ):
        evaluate_protocol({"source": create("source", make_tiny_cnn())}, batches, OfflineProtocol(domain_key="domain"))


def test_metadata_as_per_sample_dicts_and_tensors():
    assert metadata_values([{"pair": 1}, {"pair": 2}], "pair", 2, 0) == ["1", "2"]
    assert metadata_values({"step": torch.tensor([3, 3])}, "step", 2, 0) == ["3", "3"]


def test_limit_samples_cuts_the_last_batch():
    batches = with_domains(make_batches(3), ["a", "b", "c"])
    limited = list(limit_samples(batches, 20))
    assert [len(labels) for _, labels, _ in limited] == [16, 4]
    assert limited[1][2]["domain"] == ["b"] * 4


# --- records --------------------------------------------------------------------------------------


def test_records_round_trip_through_csv(tmp_path):
    table = RecordTable()
    table.append(BatchRecord("m", 0, 0, 64, 10, 12, 0.5, False, True, 0.25, "fog-3"))
    table.append(BatchRecord("m", 1, 64, 64, 11, 0, math.nan, True, False, 0.125, ""))
    table.write_csv(tmp_path / "records.csv")
    loaded = RecordTable.read_csv(tmp_path / "records.csv")
    for name in (
        "batch_index",
        "sample_start",
        "batch_size",
        "correct",
        "samples_adapted",
        "nonfinite_loss",
        "reset",
        "seconds",
        "domain",
    ):
        assert loaded.column(name).tolist() == table.column(name).tolist(), name
    assert loaded.column("loss")[0] == 0.5 and math.isnan(loaded.column("loss")[1])


def test_reading_a_foreign_csv_fails_clearly(tmp_path):
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="is not a tta_eval record file"):
        RecordTable.read_csv(tmp_path / "other.csv")


# --- metrics --------------------------------------------------------------------------------------


def test_overall_and_windowed_accuracy():
    table = table_from([(10, 10), (10, 5), (10, 0), (10, 10), (5, 1)])
    assert overall_accuracy(table) == pytest.approx(26 / 45)
    curve = windowed_accuracy(table, window=20)
    assert curve.sample_end.tolist() == [20, 40, 45]
    assert curve.samples.tolist() == [20, 20, 5]
    assert curve.accuracy.tolist() == pytest.approx([0.75, 0.5, 0.2])


def test_per_domain_accuracy_in_order_of_appearance():
    table = table_from([(10, 10), (10, 0), (10, 5)], ["b", "a", "b"])
    result = per_domain_accuracy(table)
    assert list(result) == ["b", "a"]
    assert result["b"].accuracy == pytest.approx(0.75) and result["b"].samples == 20
    assert result["a"].first_sample == 10
    assert per_domain_accuracy(table_from([(10, 1)])) == {}


def curve(values: list[float], window: int = 10) -> WindowedAccuracy:
    count = len(values)
    return WindowedAccuracy(window, np.arange(1, count + 1) * window, np.full(count, window), np.array(values))


def test_collapse_against_a_reference_curve():
    source = curve([0.5] * 8)
    adapted = curve([0.7, 0.6, 0.4, 0.6, 0.3, 0.2, 0.1, 0.1])
    report = detect_collapse(adapted, source, span=30)
    assert report.collapsed and report.sample_index == 40 and report.below_samples == 40
    assert "collapse at sample 40" in report.message
    assert not detect_collapse(adapted, source, span=50).collapsed


def test_collapse_against_a_number_and_no_collapse_message():
    report = detect_collapse(curve([0.9, 0.8, 0.9]), 0.1, span=10)
    assert not report.collapsed and report.sample_index is None
    assert report.message == "no collapse observed (windowed accuracy never stayed below 0.1 for 10 samples)"
    assert detect_collapse(curve([0.9, 0.05, 0.9]), 0.1, span=10).sample_index == 10


def test_collapse_reference_must_share_the_window_grid():
    with pytest.raises(ValueError, match=r"reference window must equal the curve's \(10\), got 20"):
        detect_collapse(curve([0.5]), curve([0.5], window=20))
    with pytest.raises(ValueError, match=r"collapse reference accuracy must be in \[0, 1\], got 2"):
        detect_collapse(curve([0.5]), 2.0)


def test_model_and_stream_mismatch_on_the_first_batch_is_a_value_error():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(10, 10))
    with pytest.raises(ValueError, match=r"method 'source' failed on the first batch \(images \(16, 3, 8, 8\)\)"):
        evaluate_protocol({"source": create("source", model)}, make_batches(1))
