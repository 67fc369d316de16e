"""The calibration table: per ordered corruption pair, a 21×21 grid of a model's top-1 accuracy.

A :class:`CalibrationTable` holds, for each ordered pair of distinct corruptions ``(n1, n2)``, the
accuracy (percent) of a model on a calibration image set corrupted with ``n1`` at severity
``s1 = i / 4`` followed by ``n2`` at severity ``s2 = j / 4`` (``i, j`` in ``0 … 20``), the number of
images behind every cell, descriptive :class:`CalibrationMetadata` and named difficulty presets.

The on-disk format is a documented ``.npz`` (zip of ``.npy`` arrays plus one JSON member) that holds
no pickled objects; ``docs/calibration_format.md`` describes it field by field and
:mod:`ccc.calibration.table_io`, its one owner, encodes, decodes and checksums it (the table's
``save``, ``load``, ``to_bytes``, ``from_bytes`` and ``checksum`` call it; imports point from here
to there only). The severity grid (:data:`GRID_SIZE`, :data:`SEVERITIES`) and :class:`CalibrationError`
come from there too. Difficulty presets are :class:`ccc.calibration.presets.DifficultyPreset`.
"""

from __future__ import annotations

import dataclasses
import datetime
import numbers
import os
import re
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ccc.calibration.presets import DifficultyPreset
from ccc.calibration.table_io import (
    CENTRE_PREPROCESSING,
    GRID_SIZE,
    PREPROCESSING_KINDS,
    SEVERITIES,
    CalibrationError,
    TableContent,
    decode_table,
    encode_table,
    read_table_file,
    table_checksum,
    write_table_file,
)
from ccc.corruptions import CORRUPTION_ALIASES as _REGISTRY_ALIASES
from ccc.corruptions import DEFAULT_CORRUPTION_SET, list_corruption_sets
from ccc.validation import check_positive_int
from ccc.version import __version__ as _LIBRARY_VERSION

__all__ = [
    "CORRUPTION_ALIASES",
    "GRID_SIZE",
    "SEVERITIES",
    "CalibrationError",
    "CalibrationMetadata",
    "CalibrationTable",
    "canonical_corruption_name",
]

CORRUPTION_ALIASES: Mapping[str, str] = _REGISTRY_ALIASES
"""ImageNet-C spellings → CCC spellings; a table answers to either spelling of a corruption."""

_SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")


def canonical_corruption_name(name: str) -> str:
    """Return the CCC spelling of a corruption name (``elastic_transform`` → ``elastic`` …)."""
    return CORRUPTION_ALIASES.get(name, name)


def _now_iso8601() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _check_optional_sha256(field_name: str, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not _SHA256_PATTERN.fullmatch(value)):
        raise CalibrationError(f"metadata {field_name} must be None or 64 lowercase hex digits, got {value!r}")


def _check_text(field_name: str, value: object, *, allow_empty: bool) -> None:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        expected = "a string" if allow_empty else "a non-empty string"
        raise CalibrationError(f"metadata {field_name} must be {expected}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class CalibrationMetadata:
    """Where a calibration table's numbers come from (descriptive, not part of the checksum).

    Attributes:
        model_name: identity of the model, e.g. ``"torchvision resnet50 IMAGENET1K_V1"``.
        preprocessing: how corrupted images were turned into model input (free text).
        preprocessing_kind: ``"centre"`` (centre crops, as ImageNet-C and the published matrices) or
            ``"stream"`` (drawn as a CCC stream draws its samples: random-resized crop, flip, JPEG
            quality 85); a kind other than centre enters :meth:`CalibrationTable.checksum`.
        corruption_set: whose corruption parameters and image size the cells were measured with, a name of
            :func:`ccc.corruptions.list_corruption_sets` (default ``"imagenet"``); another set enters
            :meth:`CalibrationTable.checksum` and the file's metadata (an ``imagenet`` table's file omits it,
            as files written before sets existed do).
        image_set_description: how the calibration images were chosen (free text).
        image_count: number of calibration images, ≥ 1; no cell evaluates more images than this.
        model_weights_sha256: sha256 of the weights file (64 lowercase hex digits), None if unknown.
        image_set_sha256: sha256 of the calibration file list (64 hex digits), None if unknown.
        corruptions: the table's corruption names in pair-index order; filled in by
            :meth:`CalibrationTable.from_grids` when left empty.
        library_version: version of ccc that wrote the table.
        created: creation time, ISO 8601 (e.g. ``"2024-05-01T12:00:00+00:00"``).
        source: where the accuracy values come from (URL or path of imported data; "" when computed).
        source_sha256: sha256 of the source file (64 hex digits), None if not applicable.
        notes: free-form notes.
    """

    model_name: str
    preprocessing: str
    image_set_description: str
    image_count: int
    model_weights_sha256: str | None = None
    image_set_sha256: str | None = None
    corruptions: tuple[str, ...] = ()
    library_version: str = _LIBRARY_VERSION
    created: str = dataclasses.field(default_factory=_now_iso8601)
    source: str = ""
    source_sha256: str | None = None
    notes: str = ""
    preprocessing_kind: str = CENTRE_PREPROCESSING
    corruption_set: str = DEFAULT_CORRUPTION_SET

    def __post_init__(self) -> None:
        _check_text("model_name", self.model_name, allow_empty=False)
        if self.corruption_set not in list_corruption_sets():
            raise CalibrationError(
                f"metadata corruption_set must be one of {', '.join(list_corruption_sets())}, "
                f"got {self.corruption_set!r}"
            )
        if self.preprocessing_kind not in PREPROCESSING_KINDS:
            raise CalibrationError(
                f"metadata preprocessing_kind must be one of {', '.join(PREPROCESSING_KINDS)}, "
                f"got {self.preprocessing_kind!r}"
            )
        _check_text("preprocessing", self.preprocessing, allow_empty=False)
        _check_text("image_set_description", self.image_set_description, allow_empty=False)
        _check_text("library_version", self.library_version, allow_empty=False)
        _check_text("source", self.source, allow_empty=True)
        _check_text("notes", self.notes, allow_empty=True)
        check_positive_int("metadata image_count", self.image_count, error=CalibrationError)
        _check_optional_sha256("model_weights_sha256", self.model_weights_sha256)
        _check_optional_sha256("image_set_sha256", self.image_set_sha256)
        _check_optional_sha256("source_sha256", self.source_sha256)
        if not isinstance(self.created, str):
            raise CalibrationError(f"metadata created must be an ISO 8601 string, got {self.created!r}")
        try:
            datetime.datetime.fromisoformat(self.created)
        except ValueError:
            raise CalibrationError(f"metadata created must be an ISO 8601 date/time, got {self.created!r}") from None
        if isinstance(self.corruptions, str) or not all(isinstance(name, str) for name in self.corruptions):
            raise CalibrationError(f"metadata corruptions must be a sequence of names, got {self.corruptions!r}")
        object.__setattr__(self, "corruptions", tuple(self.corruptions))

    def to_json_dict(self) -> dict[str, Any]:
        """Return the metadata as a JSON-serialisable dict (the ``metadata`` object of the file)."""
        fields = dataclasses.asdict(self)
        fields["corruptions"] = list(self.corruptions)
        if self.corruption_set == DEFAULT_CORRUPTION_SET:
            del fields["corruption_set"]
        return fields

    @classmethod
    def from_json_dict(cls, fields: object) -> CalibrationMetadata:
        """Build metadata from the dict :meth:`to_json_dict` returns; every field must be present but
        ``preprocessing_kind``, which files written before it existed lack (they are centre-crop tables), and
        ``corruption_set``, which ``imagenet`` tables lack."""
        if not isinstance(fields, dict):
            raise CalibrationError(f"metadata must be a JSON object, got {type(fields).__name__}")
        fields = {"preprocessing_kind": CENTRE_PREPROCESSING, "corruption_set": DEFAULT_CORRUPTION_SET, **fields}
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if name not in fields]
        if missing:
            raise CalibrationError(f"metadata is missing field(s): {', '.join(missing)}")
        unexpected = sorted(set(fields) - set(names))
        if unexpected:
            raise CalibrationError(f"metadata has unexpected field(s): {', '.join(unexpected)}")
        corruptions = fields["corruptions"]
        if not isinstance(corruptions, list):
            raise CalibrationError(f"metadata corruptions must be a list, got {corruptions!r}")
        return cls(**{**fields, "corruptions": tuple(corruptions)})


def _validate_corruption_names(corruptions: Iterable[str]) -> tuple[str, ...]:
    names = tuple(corruptions)
    if len(names) < 2:
        raise CalibrationError(f"corruptions must hold at least 2 names, got {list(names)}")
    for name in names:
        if not isinstance(name, str) or not name:
            raise CalibrationError(f"corruption names must be non-empty strings, got {name!r}")
    canonical = [canonical_corruption_name(name) for name in names]
    duplicates = sorted({name for name in canonical if canonical.count(name) > 1})
    if duplicates:
        raise CalibrationError(
            f"corruptions must be distinct (aliases count as the same), got duplicates of {duplicates}"
        )
    return names


def _float_array(name: str, values: ArrayLike) -> NDArray[np.float64]:
    array = np.asarray(values)
    if array.dtype.kind not in "fiu":
        raise CalibrationError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float64)


def _integer_array(name: str, values: ArrayLike) -> NDArray[np.int64]:
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise CalibrationError(f"{name} must hold integers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _check_accuracy_values(accuracy: NDArray[np.float64], pair_labels: list[str]) -> None:
    for index, grid in enumerate(accuracy):
        bad = ~np.isfinite(grid) | (grid < 0.0) | (grid > 100.0)
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            raise CalibrationError(
                f"accuracy of pair {pair_labels[index]} must be finite and in [0, 100] percent, "
                f"got {float(grid[i, j])} at s1={SEVERITIES[i]}, s2={SEVERITIES[j]} "
                f"({int(bad.sum())} bad cell(s))"
            )


class CalibrationTable:
    """Accuracy (percent) of one model for ordered corruption pairs over the 21×21 severity grid.

    ``grid(n1, n2)[i, j]`` is the top-1 accuracy in percent (in [0, 100]) on the calibration images
    corrupted with ``n1`` at severity ``s1 = i / 4`` and then ``n2`` at ``s2 = j / 4`` (severities in
    [0, 5]); ``image_counts(n1, n2)[i, j]`` is how many images that cell evaluated.

    Instances are immutable: the arrays are read-only and every accessor returns read-only views.
    Build one with :meth:`from_grids`, :meth:`load`, or :func:`ccc.calibration.import_ccc_pickle`.
    The constructor takes the stacked arrays directly:

    Args:
        accuracy: float array [P, 21, 21], percent in [0, 100], no NaN.
        image_counts: integer array [P, 21, 21], ≥ 0 and ≤ ``metadata.image_count``.
        pairs: integer array [P, 2]; row ``p`` is ``(index of n1, index of n2)`` into
            ``metadata.corruptions``, distinct rows, ``n1 != n2``. Rows are stored sorted.
        metadata: :class:`CalibrationMetadata`; its ``corruptions`` define the pair indices.
        difficulty_presets: name → :class:`DifficultyPreset`; names of corruptions may be aliases.
    """

    __slots__ = (
        "_accuracy",
        "_image_counts",
        "_pairs",
        "_metadata",
        "_difficulty_presets",
        "_pair_index",
        "_name_lookup",
    )

    def __init__(
        self,
        accuracy: ArrayLike,
        image_counts: ArrayLike,
        pairs: ArrayLike,
        metadata: CalibrationMetadata,
        difficulty_presets: Mapping[str, DifficultyPreset | tuple[float, Iterable[str]]] | None = None,
    ) -> None:
        if not isinstance(metadata, CalibrationMetadata):
            raise CalibrationError(f"metadata must be a CalibrationMetadata, got {type(metadata).__name__}")
        corruptions = _validate_corruption_names(metadata.corruptions)
        accuracy_array = _float_array("accuracy", accuracy)
        counts_array = _integer_array("image_counts", image_counts)
        pairs_array = _integer_array("pairs", pairs)
        if pairs_array.ndim != 2 or pairs_array.shape[1] != 2 or pairs_array.shape[0] < 1:
            raise CalibrationError(f"pairs must have shape [P, 2] with P >= 1, got {pairs_array.shape}")
        pair_count = pairs_array.shape[0]
        expected_shape = (pair_count, GRID_SIZE, GRID_SIZE)
        if accuracy_array.shape != expected_shape:
            raise CalibrationError(
                f"accuracy must have shape {list(expected_shape)} (pairs × s1 × s2), got {list(accuracy_array.shape)}"
            )
        if counts_array.shape != expected_shape:
            raise CalibrationError(
                f"image_counts must have shape {list(expected_shape)}, got {list(counts_array.shape)}"
            )
        if ((pairs_array < 0) | (pairs_array >= len(corruptions))).any():
            raise CalibrationError(
                f"pairs must index the {len(corruptions)} corruptions (0 … {len(corruptions) - 1}), "
                f"got indices from {int(pairs_array.min())} to {int(pairs_array.max())}"
            )
        same = np.flatnonzero(pairs_array[:, 0] == pairs_array[:, 1])
        if same.size:
            name = corruptions[int(pairs_array[same[0], 0])]
            raise CalibrationError(f"pairs must combine two distinct corruptions, got ({name}, {name})")
        order = np.lexsort((pairs_array[:, 1], pairs_array[:, 0]))
        pairs_array = pairs_array[order]
        accuracy_array = accuracy_array[order]
        counts_array = counts_array[order]
        repeated = np.flatnonzero((np.diff(pairs_array, axis=0) == 0).all(axis=1))
        if repeated.size:
            first, second = (corruptions[int(k)] for k in pairs_array[repeated[0]])
            raise CalibrationError(f"pairs must be distinct, got ({first}, {second}) more than once")
        labels = [f"({corruptions[int(a)]}, {corruptions[int(b)]})" for a, b in pairs_array]
        _check_accuracy_values(accuracy_array, labels)
        if (counts_array < 0).any():
            index = int(np.argwhere(counts_array < 0)[0][0])
            raise CalibrationError(
                f"image_counts of pair {labels[index]} must be >= 0, got {int(counts_array[index].min())}"
            )
        if (counts_array > metadata.image_count).any():
            index = int(np.argwhere(counts_array > metadata.image_count)[0][0])
            raise CalibrationError(
                f"image_counts of pair {labels[index]} must be <= metadata image_count "
                f"{metadata.image_count}, got {int(counts_array[index].max())}"
            )
        for array in (accuracy_array, counts_array, pairs_array):
            array.flags.writeable = False
        self._accuracy = accuracy_array
        self._image_counts = counts_array
        self._pairs = pairs_array
        self._metadata = metadata
        self._name_lookup: dict[str, str] = {}
        for name in corruptions:
            canonical = canonical_corruption_name(name)
            aliases = {alias for alias, target in CORRUPTION_ALIASES.items() if target == canonical}
            for spelling in {name, canonical} | aliases:
                self._name_lookup[spelling] = name
        self._pair_index = {(int(a), int(b)): p for p, (a, b) in enumerate(pairs_array)}
        self._difficulty_presets = MappingProxyType(self._validate_presets(difficulty_presets or {}))

    def _validate_presets(
        self, presets: Mapping[str, DifficultyPreset | tuple[float, Iterable[str]]]
    ) -> dict[str, DifficultyPreset]:
        if not isinstance(presets, Mapping):
            raise CalibrationError(
                f"difficulty_presets must be a mapping name -> (target, corruptions), got {presets!r}"
            )
        validated = {}
        for name, preset in presets.items():
            if not isinstance(name, str) or not name:
                raise CalibrationError(f"difficulty preset names must be non-empty strings, got {name!r}")
            try:
                target, corruptions = preset
            except (TypeError, ValueError):
                raise CalibrationError(
                    f"difficulty preset {name!r} must be (target accuracy, corruptions), got {preset!r}"
                ) from None
            if isinstance(target, bool) or not isinstance(target, numbers.Real) or not (0.0 <= target <= 100.0):
                raise CalibrationError(
                    f"difficulty preset {name!r} target accuracy must be in [0, 100] percent, got {target!r}"
                )
            if isinstance(corruptions, str):
                raise CalibrationError(
                    f"difficulty preset {name!r} corruptions must be a sequence of names, "
                    f"got the string {corruptions!r}"
                )
            resolved = tuple(self.resolve_corruption(corruption) for corruption in corruptions)
            if len(set(resolved)) != len(resolved) or len(resolved) < 2:
                raise CalibrationError(
                    f"difficulty preset {name!r} needs at least 2 distinct corruptions, got {list(corruptions)}"
                )
            validated[name] = DifficultyPreset(float(target), resolved)
        return validated

    @classmethod
    def from_grids(
        cls,
        corruptions: Iterable[str],
        grids: Mapping[tuple[str, str], ArrayLike],
        *,
        image_counts: int | Mapping[tuple[str, str], ArrayLike],
        metadata: CalibrationMetadata,
        difficulty_presets: Mapping[str, DifficultyPreset | tuple[float, Iterable[str]]] | None = None,
    ) -> CalibrationTable:
        """Build a table from per-pair 21×21 grids.

        Args:
            corruptions: corruption names; their order defines the pair indices.
            grids: ``(n1, n2)`` → 21×21 accuracy in percent, ``[i, j]`` at ``s1 = i/4, s2 = j/4``.
                Any subset of the ordered pairs of distinct corruptions (aliases accepted).
            image_counts: images evaluated per cell: one integer for every cell, or a mapping with
                the same keys as ``grids`` to 21×21 integer arrays.
            metadata: descriptive metadata; its ``corruptions`` may be left empty (filled in here)
                or must equal ``corruptions``.
            difficulty_presets: name → (target accuracy in percent, corruption names); None for
                none. :data:`ccc.calibration.presets.RESNET50_DIFFICULTY_PRESETS` are the public ResNet-50 ones.
        """
        names = _validate_corruption_names(corruptions)
        if metadata.corruptions and tuple(metadata.corruptions) != names:
            raise CalibrationError(
                f"metadata corruptions {list(metadata.corruptions)} differ from corruptions {list(names)}"
            )
        metadata = dataclasses.replace(metadata, corruptions=names)
        if not isinstance(grids, Mapping) or not grids:
            raise CalibrationError("grids must be a non-empty mapping (n1, n2) -> 21×21 array")
        lookup = {canonical_corruption_name(name): index for index, name in enumerate(names)}

        def pair_indices(key: object) -> tuple[int, int]:
            if not (isinstance(key, tuple) and len(key) == 2):
                raise CalibrationError(f"grid keys must be (n1, n2) tuples, got {key!r}")
            indices = []
            for name in key:
                canonical = canonical_corruption_name(name) if isinstance(name, str) else name
                if canonical not in lookup:
                    raise CalibrationError(
                        f"grid key {key!r} names unknown corruption {name!r}; available: {', '.join(names)}"
                    )
                indices.append(lookup[canonical])
            return indices[0], indices[1]

        keys = list(grids)
        pairs = [pair_indices(key) for key in keys]
        stacked = []
        for key in keys:
            grid = _float_array(f"grid {key}", grids[key])
            if grid.shape != (GRID_SIZE, GRID_SIZE):
                raise CalibrationError(f"grid {key} must be {GRID_SIZE}×{GRID_SIZE}, got shape {list(grid.shape)}")
            stacked.append(grid)
        if isinstance(image_counts, Mapping):
            counts_by_pair = {pair_indices(key): value for key, value in image_counts.items()}
            if set(counts_by_pair) != set(pairs):
                raise CalibrationError("image_counts must hold exactly the pairs of grids")
            count_grids = []
            for key, pair in zip(keys, pairs):
                count_grid = _integer_array(f"image_counts {key}", counts_by_pair[pair])
                if count_grid.shape != (GRID_SIZE, GRID_SIZE):
                    raise CalibrationError(
                        f"image_counts {key} must be {GRID_SIZE}×{GRID_SIZE}, got shape {list(count_grid.shape)}"
                    )
                count_grids.append(count_grid)
            counts = np.stack(count_grids)
        elif isinstance(image_counts, (int, np.integer)) and not isinstance(image_counts, bool):
            counts = np.full((len(pairs), GRID_SIZE, GRID_SIZE), int(image_counts), dtype=np.int64)
        else:
            raise CalibrationError(
                f"image_counts must be an integer or a mapping (n1, n2) -> 21×21 array, got {image_counts!r}"
            )
        pair_array = np.array(pairs, dtype=np.int64)
        return cls(np.stack(stacked), counts, pair_array, metadata, difficulty_presets)

    # ----------------------------------------------------------------------------- accessors
    @property
    def corruptions(self) -> tuple[str, ...]:
        """Corruption names; their order defines the pair indices of the file."""
        return self._metadata.corruptions

    @property
    def metadata(self) -> CalibrationMetadata:
        """Descriptive metadata (model, preprocessing, image set, provenance)."""
        return self._metadata

    @property
    def corruption_set(self) -> str:
        """Whose corruption parameters the cells were measured with (``metadata.corruption_set``): a stream made
        from this table renders with that set."""
        return self._metadata.corruption_set

    @property
    def difficulty_presets(self) -> Mapping[str, DifficultyPreset]:
        """Read-only mapping preset name → (target accuracy in percent, corruption names)."""
        return self._difficulty_presets

    @property
    def severities(self) -> NDArray[np.float64]:
        """The 21 severities of the grid axes: 0, 0.25, …, 5."""
        return SEVERITIES

    def resolve_corruption(self, name: str) -> str:
        """Return the table's spelling of ``name`` (an alias such as ``jpeg_compression`` is accepted)."""
        try:
            return self._name_lookup[name]
        except (KeyError, TypeError):
            raise CalibrationError(f"unknown corruption {name!r}; available: {', '.join(self.corruptions)}") from None

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The ordered pairs ``(n1, n2)`` the table holds, in storage order."""
        names = self.corruptions
        return tuple((names[int(a)], names[int(b)]) for a, b in self._pairs)

    def has_pair(self, n1: str, n2: str) -> bool:
        """Whether the table holds the ordered pair ``(n1, n2)`` (aliases accepted)."""
        try:
            self._index_of(n1, n2)
        except CalibrationError:
            return False
        return True

    def _index_of(self, n1: str, n2: str) -> int:
        first, second = self.resolve_corruption(n1), self.resolve_corruption(n2)
        key = (self.corruptions.index(first), self.corruptions.index(second))
        try:
            return self._pair_index[key]
        except KeyError:
            raise CalibrationError(f"pair ({first}, {second}) is not in the table ({len(self._pairs)} pairs)") from None

    def grid(self, n1: str, n2: str) -> NDArray[np.float64]:
        """Read-only 21×21 accuracy in percent; ``[i, j]`` is at ``s1 = i / 4``, ``s2 = j / 4``."""
        return self._accuracy[self._index_of(n1, n2)]

    def image_counts(self, n1: str, n2: str) -> NDArray[np.int64]:
        """Read-only 21×21 number of images evaluated per cell of :meth:`grid`."""
        return self._image_counts[self._index_of(n1, n2)]

    def confidence_interval(
        self, n1: str, n2: str, level: float = 0.95
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Wilson score interval of every cell's accuracy, as (lower, upper) 21×21 arrays in percent.

        ``level`` is the coverage probability in (0, 1). A cell that evaluated no image gets [0, 100].
        """
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < level < 1.0:
            raise CalibrationError(f"level must be in (0, 1), got {level!r}")
        proportion = self.grid(n1, n2) / 100.0
        count = self.image_counts(n1, n2).astype(np.float64)
        z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            denominator = 1.0 + z * z / count
            centre = (proportion + z * z / (2.0 * count)) / denominator
            half_width = (
                z / denominator * np.sqrt(proportion * (1.0 - proportion) / count + z * z / (4.0 * count * count))
            )
        lower = np.where(count > 0, np.clip(centre - half_width, 0.0, 1.0), 0.0) * 100.0
        upper = np.where(count > 0, np.clip(centre + half_width, 0.0, 1.0), 1.0) * 100.0
        return lower, upper

    def single_corruption_accuracy(self, name: str) -> NDArray[np.float64]:
        """Accuracy (percent) with ``name`` alone at the 21 severities, averaged over the table's pairs.

        Uses the cells where the other corruption has severity 0: column ``j = 0`` of pairs
        ``(name, x)`` and row ``i = 0`` of pairs ``(x, name)``. Raises if no pair contains ``name``.
        """
        index = self.corruptions.index(self.resolve_corruption(name))
        curves = [self._accuracy[p][:, 0] for p in np.flatnonzero(self._pairs[:, 0] == index)]
        curves += [self._accuracy[p][0, :] for p in np.flatnonzero(self._pairs[:, 1] == index)]
        if not curves:
            raise CalibrationError(f"no pair of the table contains corruption {name!r}")
        return np.mean(curves, axis=0)

    @property
    def accuracy_array(self) -> NDArray[np.float64]:
        """All grids stacked, read-only [P, 21, 21] in percent, in the order of :meth:`pairs`."""
        return self._accuracy

    @property
    def image_counts_array(self) -> NDArray[np.int64]:
        """All image counts stacked, read-only [P, 21, 21], in the order of :meth:`pairs`."""
        return self._image_counts

    @property
    def pair_indices(self) -> NDArray[np.int64]:
        """Read-only [P, 2] indices into :attr:`corruptions`, the file's ``pairs`` array."""
        return self._pairs

    def with_difficulty_presets(
        self, difficulty_presets: Mapping[str, DifficultyPreset | tuple[float, Iterable[str]]]
    ) -> CalibrationTable:
        """A copy with ``difficulty_presets`` (name → (target accuracy in percent, corruptions)) replacing the presets.

        Numbers, image counts and metadata are unchanged. Raises CalibrationError for presets that
        name corruptions the table lacks or fewer than two.
        """
        return CalibrationTable(self._accuracy, self._image_counts, self._pairs, self._metadata, difficulty_presets)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        # Pickling (e.g. to send a table to Ray workers) goes through the validated file format.
        return (CalibrationTable.from_bytes, (self.to_bytes(),))

    def __repr__(self) -> str:
        return (
            f"CalibrationTable(model={self._metadata.model_name!r}, "
            f"corruptions={len(self.corruptions)}, pairs={len(self._pairs)}, "
            f"checksum={self.checksum()[:12]}…)"
        )

    # ------------------------------------------------------------ identity and file (ccc.calibration.table_io)
    def _content(self) -> TableContent:
        """The table as the file format's plain content."""
        return TableContent(
            self._accuracy, self._image_counts, self._pairs, self._metadata.to_json_dict(), self._difficulty_presets
        )

    def checksum(self) -> str:
        """sha256 (hex) of the numbers and names stream generation reads; stable across save/load.

        Covers the corruption names, pairs, accuracy, image counts and difficulty presets, but not
        the descriptive :attr:`metadata` (so importing the same data twice, on another day or with
        another ccc version, gives the same checksum). ``docs/calibration_format.md`` shows how to
        recompute it without this package.
        """
        return table_checksum(self._content())

    def to_bytes(self) -> bytes:
        """The file content :meth:`save` writes; identical for identical tables."""
        return encode_table(self._content())

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the table to ``path`` (``.npz``) atomically: a temp file in the same folder, then rename.

        Saving the same table twice gives identical bytes. Returns the path written.
        """
        return write_table_file(self.to_bytes(), path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationTable:
        """Read and validate a table written by :meth:`save`; never unpickles anything.

        Raises :class:`CalibrationError` naming the file and the problem (not a zip, missing or
        unexpected member, pickled objects, wrong dtype or shape, values out of range, unknown
        format version, missing metadata fields, …).
        """
        data = read_table_file(path)
        try:
            return cls.from_bytes(data)
        except CalibrationError as error:
            raise CalibrationError(f"{Path(path)}: {error}") from None

    @classmethod
    def from_bytes(cls, data: bytes) -> CalibrationTable:
        """Parse and validate the content of a table file (see :meth:`load`)."""
        content = decode_table(data)
        metadata = CalibrationMetadata.from_json_dict(content.metadata)
        return cls(content.accuracy, content.image_counts, content.pairs, metadata, content.difficulty_presets)
