"""``scripts/bench/corruption_sets.py``: every corruption of a set timed at the set's size, the public
functions beside ours when a reference module is given; no timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ccc.corruptions import list_corruptions
from tests.builders import load_script


def _bench():  # noqa: ANN202
    return load_script("scripts/bench/corruption_sets.py")


def test_every_corruption_is_timed_with_and_without_a_reference(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the bench runs in the reference's folder; the working directory comes back
    reference = tmp_path / "reference.py"
    calls = tmp_path / "calls.txt"
    names = {"elastic": "elastic_transform", "jpeg": "jpeg_compression"}
    lines = ["import numpy as np"]
    for name in list_corruptions():
        lines.append(f"def {names.get(name, name)}(x, severity=1):")
        lines.append(f"    with open({str(calls)!r}, 'a') as record:")
        lines.append(f"        record.write('{name} %d\\n' % severity)")
        lines.append("    return np.asarray(x)")
    reference.write_text("\n".join(lines) + "\n")
    bench = _bench()
    assert (
        bench.main(
            ["--images", "2", "--severities", "1,3", "--reference", str(reference), "--json", str(tmp_path / "r.json")]
        )
        == 0
    )
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["corruption_set"] == "cifar" and list(written["rows"]) == list_corruptions()
    assert all(row["ccc_ms"] > 0 and row["reference_ms"] >= 0 for row in written["rows"].values())
    assert calls.read_text().count("fog 3\n") == 2 and len(calls.read_text().splitlines()) == 2 * 2 * 19
    rows = bench.measure("tinyimagenet", 1, [2], None)
    assert all(row["reference_ms"] is None for row in rows.values())
    assert "| mean |" in bench.table(rows) and np.isfinite(bench._mean(rows)["ccc_ms"])
