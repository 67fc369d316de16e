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
    with pytest.raises(ValueError, match=r"^state file '.*state.pt' cannot be read: it is not a file written by torch.save") as error:
        load_torch_file(tmp_path / "state.pt", "state file")
    assert "\n" not in str(error.value)
