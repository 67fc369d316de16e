"""ccc.load.selection: which positions a rank and a DataLoader worker read (pure arithmetic, no torch)."""

from __future__ import annotations

import itertools

import pytest

from ccc.load.selection import Selection, consumer_selection, environment_rank

CASES = [
    # length, chunk_size, world_size, workers
    (1, 1, 1, 1),
    (10, 3, 1, 1),
    (10, 3, 2, 1),
    (23, 4, 3, 2),
    (7, 64, 2, 4),
    (100, 5, 4, 3),
]


def positions(selection: Selection, length: int) -> list[int]:
    return [relative for relative in range(length) if selection.wanted(relative)]


@pytest.mark.parametrize("rank_split", ["interleaved", "contiguous"])
@pytest.mark.parametrize(("length", "chunk_size", "world_size", "workers"), CASES)
def test_every_position_is_read_by_exactly_one_consumer(
    length: int, chunk_size: int, world_size: int, workers: int, rank_split: str
) -> None:
    read = sorted(
        relative
        for rank, worker in itertools.product(range(world_size), range(workers))
        for relative in positions(
            consumer_selection(
                length=length,
                chunk_size=chunk_size,
                rank=rank,
                world_size=world_size,
                rank_split=rank_split,
                worker=worker,
                workers=workers,
            ),
            length,
        )
    )
    assert read == list(range(length))


def dataloader_order(length: int, chunk_size: int, rank: int, world_size: int, workers: int, rank_split: str) -> list:
    """What a DataLoader with ``batch_size == chunk_size`` returns: one batch per worker in turn."""
    batches = []
    for worker in range(workers):
        selection = consumer_selection(
            length=length,
            chunk_size=chunk_size,
            rank=rank,
            world_size=world_size,
            rank_split=rank_split,
            worker=worker,
            workers=workers,
        )
        read = positions(selection, length)
        batches.append([read[start : start + chunk_size] for start in range(0, len(read), chunk_size)])
    return [position for turn in itertools.zip_longest(*batches, fillvalue=[]) for batch in turn for position in batch]


@pytest.mark.parametrize(("length", "chunk_size", "world_size", "workers"), CASES)
def test_a_rank_collects_its_chunks_in_stream_order(
    length: int, chunk_size: int, world_size: int, workers: int
) -> None:
    for rank in range(world_size):
        interleaved = [p for p in range(length) if (p // chunk_size) % world_size == rank]
        assert dataloader_order(length, chunk_size, rank, world_size, workers, "interleaved") == interleaved
        contiguous = list(range(rank * length // world_size, (rank + 1) * length // world_size))
        assert dataloader_order(length, chunk_size, rank, world_size, workers, "contiguous") == contiguous


@pytest.mark.parametrize(
    "selection",
    [
        Selection(lo=0, hi=None, period=12, offset=4, chunk=4),
        Selection(lo=0, hi=30, period=5, offset=0, chunk=5),
        Selection(lo=7, hi=19, period=6, offset=3, chunk=3),
        Selection(lo=3, hi=3, period=2, offset=1, chunk=1),
    ],
)
def test_count_and_next_wanted_agree_with_wanted(selection: Selection) -> None:
    wanted = [relative for relative in range(60) if selection.wanted(relative)]
    for begin in range(50):
        for end in range(begin, 50):
            assert selection.count(begin, end) == sum(begin <= relative < end for relative in wanted)
        following = [relative for relative in wanted if relative >= begin]
        found = selection.next_wanted(begin)
        if following:
            assert found == following[0]
        else:  # none below 60: past the end (None) or, unbounded, at 60 or beyond
            assert found is None or found >= 60


def test_an_unbounded_stream_is_split_in_turns() -> None:
    selection = consumer_selection(length=None, chunk_size=2, rank=1, world_size=2, rank_split="interleaved")
    assert positions(selection, 14) == [2, 3, 6, 7, 10, 11]
    assert selection.next_wanted(10**15) == 10**15 + 2


def test_rank_and_world_size_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert environment_rank() == (0, 1)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert environment_rank() == (3, 4)
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(ValueError, match="^environment RANK and WORLD_SIZE must be integers, got '3' and 'four'$"):
        environment_rank()
