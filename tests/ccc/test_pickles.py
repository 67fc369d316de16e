"""The opcode bound every reader of a user's pickle applies (ccc.pickles), and torch files read after it."""

from __future__ import annotations

import pickle

import pytest
import torch

from ccc.pickles import MAX_PICKLE_OPCODES, count_pickle_opcodes, load_torch_file


def test_opcodes_are_counted_up_to_one_past_the_bound() -> None:
    assert count_pickle_opcodes(pickle.dumps([1, 2], protocol=2)) == 8
    flood = b"\x80\x02" + b"}" * (MAX_PICKLE_OPCODES + 10) + b"."
    assert count_pickle_opcodes(flood) == MAX_PICKLE_OPCODES + 1


def test_a_torch_file_of_tensors_and_plain_values_loads(tmp_path) -> None:
    torch.save({"weights": torch.ones(3), "steps": [1, 2.5, "a", None]}, tmp_path / "state.pt")
    loaded = load_torch_file(tmp_path / "state.pt", "state file")
    assert torch.equal(loaded["weights"], torch.ones(3)) and loaded["steps"] == [1, 2.5, "a", None]


@pytest.mark.parametrize("content", [b"", b"not a zip", pickle.dumps({"a": 1})])
def test_anything_but_a_torch_zip_is_refused_in_one_line(tmp_path, content) -> None:
    (tmp_path / "state.pt").write_bytes(content)
    with pytest.raises(
        ValueError, match=r"^state file '.*state.pt' cannot be read: it is not a file written by torch.save"
    ) as error:
        load_torch_file(tmp_path / "state.pt", "state file")
    assert "\n" not in str(error.value)


class SystemCall:
    """Unpickled, runs ``touch MARKER``."""

    def __init__(self, marker) -> None:  # type: ignore[no-untyped-def]
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        import os

        return (os.system, (f"touch {self.marker}",))


def test_the_legacy_format_loads_and_is_bounded_and_code_free(tmp_path) -> None:
    torch.save({"weights": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert torch.equal(load_torch_file(tmp_path / "legacy.pt", "weights file")["weights"], torch.ones(2))
    marker = tmp_path / "marker"
    torch.save({"payload": SystemCall(marker)}, tmp_path / "payload.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match="objects other than tensors and plain values"):
        load_torch_file(tmp_path / "payload.pt", "weights file")
    assert not marker.exists()
    flood = (
        pickle.dumps(torch.serialization.MAGIC_NUMBER, protocol=2)
        + b"\x80\x02"
        + b"}" * (MAX_PICKLE_OPCODES + 10)
        + b"."
    )
    (tmp_path / "flood.pt").write_bytes(flood)
    with pytest.raises(ValueError, match="more than 500,000 opcodes"):
        load_torch_file(tmp_path / "flood.pt", "weights file")


def test_a_weights_file_is_bounded_before_it_is_unpickled(tmp_path, monkeypatch) -> None:
    from ccc.models import ModelSpec, load_model

    (tmp_path / "flood.pt").write_bytes(
        pickle.dumps(torch.serialization.MAGIC_NUMBER, protocol=2) + b"}" * (MAX_PICKLE_OPCODES + 10) + b"."
    )

    def unpickled(*arguments, **options):  # type: ignore[no-untyped-def]
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", unpickled)
    with pytest.raises(
        ValueError, match=r"weights file '.*flood.pt' cannot be read: its pickles hold more than 500,000 opcodes"
    ):
        load_model(ModelSpec("tests.tta_eval.tta_helpers:make_tiny_cnn", weights=str(tmp_path / "flood.pt")))


def deflated_copy(source, destination, inflating: dict[str, bytes] | None = None) -> None:
    """``destination``: the zip ``source`` with every entry deflated (and the entries named in
    ``inflating`` given that content), as a zip tool would recompress a file torch.save wrote."""
    import zipfile

    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as out:
        for info in archive.infolist():
            out.writestr(info.filename, (inflating or {}).get(info.filename, archive.read(info)))


def test_a_zip_bomb_pickle_is_refused_before_it_is_inflated(tmp_path) -> None:
    import tracemalloc

    torch.save({"weights": torch.ones(2)}, tmp_path / "state.pt")
    # 64 MiB of NONE opcodes deflate to about 64 KiB; reading them whole would allocate the 64 MiB.
    deflated_copy(tmp_path / "state.pt", tmp_path / "bomb.pt", {"state/data.pkl": b"\x80\x02" + b"N" * 2**26})
    assert (tmp_path / "bomb.pt").stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError, match=r"^checkpoint '.*bomb.pt' cannot be read: its entry 'state/data.pkl' is compressed"
        ):
            load_torch_file(tmp_path / "bomb.pt", "checkpoint")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**22


def test_a_compressed_tensor_storage_is_refused(tmp_path) -> None:
    """torch.load would inflate it in C++ (a 3 MB file to 3 GB): every entry must be stored as torch.save stores it."""
    torch.save({"weights": torch.zeros(2**18)}, tmp_path / "state.pt")
    deflated_copy(tmp_path / "state.pt", tmp_path / "deflated.pt")
    with pytest.raises(ValueError, match=r"its entry 'state/[^']+' is compressed"):
        load_torch_file(tmp_path / "deflated.pt", "checkpoint")
