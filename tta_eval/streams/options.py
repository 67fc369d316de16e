"""The run-level options every stream opener is given (batch size, workers, image folders', ``ccc:``'s)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccc.validation import MAX_BATCH_SIZE, MAX_IMAGE_SIZE, check_loader_workers, check_positive_int

if TYPE_CHECKING:
    from ccc.shards.remote import RemoteOptions


DEFAULT_BATCH_SIZE = 64
"""Samples per batch when neither the user nor a run's method settings give a batch size."""


@dataclass(frozen=True)
class StreamOptions:
    """Options given to stream openers.

    batch_size in [1, 65536], None: ``DEFAULT_BATCH_SIZE`` (64), or the batch size of a run's method
    settings (``tta_eval.method_settings``; ``resolved`` fills it in); num_workers: DataLoader worker
    processes of every stream that has a loader, in [0, ``ccc.validation.max_loader_workers()``] (4 per
    CPU of this machine, or 16 where that is more);
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
    shard); False checks only sizes, keys and counts. Other sources ignore it. remote_deadline,
    remote_min_rate: ``ccc:`` ``http(s)://`` shards: seconds a shard's read may wait on the server
    without useful progress, in (0, 86400], and bytes/s a try must deliver to count as progress, >= 0
    (:class:`ccc.shards.remote.RemoteOptions` ``deadline`` and ``min_rate``; None: their defaults,
    300 s and 10,000 B/s).
    """

    batch_size: int | None = None
    num_workers: int = 0
    image_size: int = 224
    shuffle_seed: int | None = 0
    skip_bad_images: bool = False
    classes: str | None = None
    verify_shards: bool = True
    remote_deadline: float | None = None
    remote_min_rate: float | None = None

    def __post_init__(self) -> None:
        if self.batch_size is not None:
            check_positive_int("batch_size", self.batch_size, MAX_BATCH_SIZE)
        check_positive_int("image_size", self.image_size, MAX_IMAGE_SIZE)
        check_loader_workers("num_workers", self.num_workers)
        try:
            self.remote_options()
        except ValueError as error:  # its messages start with the field's name: deadline, min_rate
            raise ValueError(f"remote_{error}") from None

    def resolved(self, batch_size: int = DEFAULT_BATCH_SIZE) -> StreamOptions:
        """These options, with ``batch_size`` (in [1, 65536]) where they give none."""
        return self if self.batch_size is not None else dataclasses.replace(self, batch_size=batch_size)

    def remote_options(self) -> RemoteOptions:
        """The remote reader's options of ``ccc:`` streams: the defaults, with ``remote_deadline`` and
        ``remote_min_rate`` when given."""
        from ccc.shards.remote import DEFAULT_REMOTE_OPTIONS

        given = {"deadline": self.remote_deadline, "min_rate": self.remote_min_rate}
        return dataclasses.replace(
            DEFAULT_REMOTE_OPTIONS, **{key: value for key, value in given.items() if value is not None}
        )
