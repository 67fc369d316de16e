"""In-memory records stay small per batch over long runs (the run keeps every method's RecordTable)."""

from __future__ import annotations

import tracemalloc

from tta_eval.records import BatchRecord, RecordTable

ROWS = 20_000
MAX_BYTES_PER_RECORD = 160
"""108 bytes of columns and domain reference per record, plus the arrays' over-allocation."""


def test_a_record_table_holds_a_bounded_number_of_bytes_per_batch() -> None:
    table = RecordTable()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(ROWS):
            # A fresh string object per batch, as the majority domain of a CCC batch ("n1→n2") is.
            domain = "→".join(("gaussian_noise", f"fog{index % 3}"))
            table.append(BatchRecord("tent", index, 64 * index, 64, 30, 64, 0.25, False, False, 0.01, domain))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(table) == ROWS and set(table.column("domain")) == {f"gaussian_noise→fog{k}" for k in range(3)}
    assert held / ROWS < MAX_BYTES_PER_RECORD, f"{held / ROWS:.0f} bytes per record"
