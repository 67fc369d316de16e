"""The run-level options every stream opener is given (batch size, workers, image folders', ``ccc:``'s)."""

from __future__ import annotations

from dataclasses import dataclass

from ccc.validation import MAX_BATCH_SIZE, MAX_IMAGE_SIZE, check_loader_workers, check_positive_int


@dataclass(frozen=True)
class StreamOptions:
    """Options given to stream openers.

    batch_size in [1, 65536]; num_workers: DataLoader worker processes of every stream that has a loader,
    in [0, ``ccc.validation.max_loader_workers()``] (4 per CPU of this machine, or 16 where that is more);
    image_size: side in pixels of the centre crop for image folders (images are resized so the short side is 256/224
    of it), at most 16384; shuffle_seed: seed of the fixed permutation applied to image folders
    (their files are sorted by class otherwise), None keeps the sorted order; skip_bad_images:
    decode every image of a folder before the run and exclude the unreadable ones (logged), as
    ``ccc-generate --skip-bad-images`` does; without it the first unreadable image stops the run
    with an error naming it; classes: a class list file for image folders (one class folder name
    per line, line k = class k, as ``ccc-generate --classes``), None: the standard ImageNet index
    for WordNet-id folders, else sorted folder order; verify_shards: ``ccc:`` run folders (a
    manifest): compare each shard's sha256 with the manifest's before any of its samples is
    delivered (``ccc.open_stream(verify="sha256")``; a changed byte stops the stream naming the
    shard); False checks only sizes, keys and counts. Other sources ignore it.
    """

    batch_size: int = 64
    num_workers: int = 0
    image_size: int = 224
    shuffle_seed: int | None = 0
    skip_bad_images: bool = False
    classes: str | None = None
    verify_shards: bool = True

    def __post_init__(self) -> None:
        check_positive_int("batch_size", self.batch_size, MAX_BATCH_SIZE)
        check_positive_int("image_size", self.image_size, MAX_IMAGE_SIZE)
        check_loader_workers("num_workers", self.num_workers)
