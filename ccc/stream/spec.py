"""The definition of a stream (:class:`StreamSpec`), of one sample (:class:`SampleSpec`), and the one
place that turns a user's stream definition into a spec (:func:`resolve_stream_spec`).

A stream definition names a difficulty preset of the calibration table (its target accuracy and
corruptions) and/or gives them explicitly (``baseline_accuracy``, ``corruptions`` override the
preset's), plus the speed, seed, length, schedule, path objective and shard size. The spec records
the table's and the image folder's checksums, so a spec is bound to exactly one table and image set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from ccc.stream.domains import CROPS, DOMAIN_KINDS, domain_levels
from ccc.stream.paths import PATH_OBJECTIVES
from ccc.stream.schedule import SCHEDULES
from ccc.validation import check_integer

__all__ = [
    "CCC_KIND",
    "DEFAULT_CORRUPTION_SET",
    "DEFAULT_GRADUAL_IMAGES",
    "DEFAULT_IMAGE_ENCODING",
    "DEFAULT_SEED",
    "DEFAULT_SEVERITY",
    "DEFAULT_SHARD_SIZE",
    "DEFINITION_KEYS",
    "IMAGE_ENCODINGS",
    "KINDS",
    "PAPER_NUM_IMAGES",
    "SET_DEFAULTS",
    "SET_MODEL_OPTIONS",
    "UNBOUNDED_IMAGES",
    "PlanError",
    "SampleSpec",
    "StreamSpec",
    "check_corruption_set",
    "check_sha256",
    "domain_run_name",
    "resolve_difficulty",
    "resolve_stream_spec",
    "run_name",
    "set_run_name",
]

DEFAULT_SHARD_SIZE = 25_000
"""Samples per shard, as the public CCC shards."""


DEFAULT_SEED = 43
"""Stream seed when a definition gives none (the paper's first seed)."""

UNBOUNDED_IMAGES = 2**62
"""Length given to a stream defined without a length ("infinite", rendered on the fly)."""

PAPER_NUM_IMAGES = 7_500_000
"""Length of the paper's CCC streams in images (``ccc-generate``'s default; not named in run names)."""

CCC_KIND = "ccc"
"""The default stream kind: continuously changing corruption pairs on calibrated severity paths."""

KINDS: tuple[str, ...] = (CCC_KIND, *DOMAIN_KINDS)
"""Stream kinds: ``ccc`` (default), ``cin-c`` (concatenated ImageNet-C), ``gradual`` (severity 1→5→1
per corruption); see :mod:`ccc.stream.domains` and ``docs/generator.md``."""

DEFAULT_SEVERITY = 5
"""Severity of a ``cin-c`` stream when none is given (the continual TTA benchmarks')."""

DEFAULT_GRADUAL_IMAGES = 5000
"""Images per severity level of a ``gradual`` stream when none is given: mariodoebler/test-time-adaptation's
``gradual`` setting evaluates RobustBench's 5,000-image ImageNet-C list (``CORRUPTION.NUM_EX = -1``)
at every level. A ``cin-c`` stream shows every source image per corruption by default (the CCC
paper's CIN-C; YonseiML/asr's CIN-C scripts, ``CORRUPTION.NUM_EX 50000``)."""

DEFAULT_IMAGE_ENCODING = "jpeg"
"""How a stream's rendered images are stored unless its definition says otherwise: the public generator's
JPEG (quality 85)."""

IMAGE_ENCODINGS = (DEFAULT_IMAGE_ENCODING, "png")
"""Encodings of a stream's images (:attr:`StreamSpec.image_encoding`), the default first: ``jpeg`` (quality
85, as the public CCC data) or ``png`` (lossless: the rendered pixels exactly, as CIFAR-10-C's arrays hold
them; see :func:`ccc.render.encode_png`)."""

DEFAULT_CORRUPTION_SET = "imagenet"
"""The corruption set of a stream whose definition names none (``ccc.corruptions``' default: ImageNet-C's
parameters at 224×224); named here too so that this module stays free of the corruptions' imports (a test
holds the two equal)."""

SET_DEFAULTS: dict[str, tuple[str, str]] = {
    "imagenet": ("random", "jpeg"),
    "cifar": ("whole", "png"),
    "tinyimagenet": ("whole", "jpeg"),
    "imagenet64": ("whole", "jpeg"),
}
"""Corruption set → the ``(crop, image_encoding)`` a stream of it gets unless its definition says otherwise:
what the public data of that resolution does. CCC crops ImageNet images at random (its RandomResizedCrop and
flip) and stores JPEG quality 85; ``make_cifar_c.py`` corrupts the CIFAR test images whole and saves uint8
arrays (lossless: ``png``); ``make_tinyimagenet_c.py`` and ``make_imagenet_64_c.py`` resize each image whole
to 64×64 and save JPEG quality 85 (``save(path, quality=85, optimize=True)``). Every registered set has an
entry (tested)."""

SET_MODEL_OPTIONS = {
    "cifar": "--model cifar10:wrn28_10 --weights FILE --settings cifar10 (or cifar100:resnext29, --settings cifar100)",
    "tinyimagenet": "--model module:function --weights FILE (a 64x64 classifier of yours)",
    "imagenet64": "--model module:function --weights FILE (a 64x64 classifier of yours)",
}
"""Corruption sets other than ImageNet's → the ``tta-eval run`` options a stream of their images needs (shown by
``ccc-generate``'s next step and ``tta-eval``'s error): such a stream has no default model (ResNet-50 is
ImageNet's)."""

_OPTIONAL_SAMPLE_FIELDS = ("domain", "resize", "corruption_set")
"""Sample fields left out of the JSON when None (so a ``ccc`` sample's JSON and plan hash stay what they were)."""

_KIND_FIELDS = ("kind", "severity", "crop")
"""Fields a ``ccc`` stream leaves out of its JSON (so its manifest and plan hash stay what they were)."""

DEFINITION_KEYS = (
    "kind",
    "severity",
    "crop",
    "difficulty",
    "baseline_accuracy",
    "corruptions",
    "speed",
    "seed",
    "num_images",
    "schedule",
    "path_objective",
    "shard_size",
    "image_encoding",
    "corruption_set",
)
"""Keys a stream definition mapping may hold (see :func:`resolve_stream_spec`)."""

_SHA256_HEX_DIGITS = 64


class PlanError(ValueError):
    """A stream definition or plan request is invalid; the message names the parameter."""


def check_corruption_set(name: object) -> str:
    """``name`` if it is a registered corruption set (:func:`ccc.corruptions.list_corruption_sets`), else
    PlanError listing them; the default needs no import of the corruptions."""
    if name == DEFAULT_CORRUPTION_SET:
        return name
    from ccc.corruptions import list_corruption_sets

    if not isinstance(name, str) or name not in list_corruption_sets():
        raise PlanError(f"corruption_set must be one of {', '.join(list_corruption_sets())}, got {name!r}")
    return name


def check_sha256(name: str, value: object) -> str:
    """``value`` if it is a sha256 hex digest (64 lowercase hex digits), else PlanError naming ``name``."""
    if not (
        isinstance(value, str) and len(value) == _SHA256_HEX_DIGITS and all(c in "0123456789abcdef" for c in value)
    ):
        raise PlanError(f"{name} must be a sha256 hex digest (64 lowercase hex digits), got {value!r}")
    return value


@dataclass(frozen=True)
class StreamSpec:
    """The definition of a stream; two streams with equal specs (and equal inputs) are byte-identical.

    Attributes:
        target_accuracy: calibration target accuracy in percent, in [0, 100].
        corruptions: corruption names (>= 2, distinct), in the order the schedule draws from.
        speed: images per path step ("transition speed" k), >= 1.
        seed: stream seed, >= 0.
        num_images: stream length in images, >= 1 (no upper limit).
        calibration_checksum: :meth:`CalibrationTable.checksum` of the table the paths come from.
        source_index_checksum: :meth:`ImageIndex.checksum` of the source image folder.
        difficulty: name of the difficulty preset the target and corruptions came from, or None.
        schedule: corruption-order schedule, one of :data:`ccc.stream.schedule.SCHEDULES`.
        path_objective: one of :data:`ccc.stream.paths.PATH_OBJECTIVES`.
        shard_size: samples per shard, >= 1 (the last shard may be shorter).
        kind: one of :data:`KINDS`. For ``cin-c`` and ``gradual`` (:mod:`ccc.stream.domains`) there
            is no calibration: ``target_accuracy``, ``calibration_checksum`` and ``difficulty`` are
            None, ``speed`` is the number of images per domain (per corruption for ``cin-c``, per
            severity level for ``gradual``) and ``corruptions`` needs only one name.
        severity: the ``cin-c`` severity, an integer in 1..5; None for the other kinds.
        crop: ``random`` (the CCC stream's random-resized crop and flip), ``whole`` (the whole image at the
            corruption set's size, no flip) or, for ``cin-c`` and ``gradual`` of the ``imagenet`` set,
            ``center`` (ImageNet-C's centre crop, no flip); see :data:`ccc.stream.domains.CROPS`.
        image_encoding: how the rendered images are stored, one of :data:`IMAGE_ENCODINGS` (``jpeg``, the
            default, or the lossless ``png``).
        corruption_set: whose corruption parameters and image size, a name of
            :func:`ccc.corruptions.list_corruption_sets` (``imagenet``, the default: 224×224; ``cifar``:
            32×32; ``tinyimagenet``, ``imagenet64``: 64×64).

    A ``ccc`` spec leaves ``kind`` and ``severity`` out of :meth:`to_json_dict`, and ``crop`` when it is
    ``random``; every spec leaves out a ``jpeg`` ``image_encoding`` and the ``imagenet`` corruption set, so
    the manifest and plan hash of a stream are those of streams written before the other kinds, crops,
    encodings and sets existed.
    """

    target_accuracy: float | None
    corruptions: tuple[str, ...]
    speed: int
    seed: int
    num_images: int
    calibration_checksum: str | None
    source_index_checksum: str
    difficulty: str | None = None
    schedule: str = "reference"
    path_objective: str = "reference"
    shard_size: int = DEFAULT_SHARD_SIZE
    kind: str = CCC_KIND
    severity: int | None = None
    crop: str = "random"
    image_encoding: str = DEFAULT_IMAGE_ENCODING
    corruption_set: str = DEFAULT_CORRUPTION_SET

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise PlanError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.image_encoding not in IMAGE_ENCODINGS:
            raise PlanError(f"image_encoding must be one of {', '.join(IMAGE_ENCODINGS)}, got {self.image_encoding!r}")
        if isinstance(self.corruptions, str) or not all(isinstance(name, str) for name in self.corruptions):
            raise PlanError(f"corruptions must be a sequence of names, got {self.corruptions!r}")
        object.__setattr__(self, "corruptions", tuple(self.corruptions))
        for name, minimum in (("speed", 1), ("seed", 0), ("num_images", 1), ("shard_size", 1)):
            object.__setattr__(self, name, check_integer(name, getattr(self, name), minimum, error=PlanError))
        check_sha256("source_index_checksum", self.source_index_checksum)
        if self.kind == CCC_KIND:
            self._check_ccc()
        else:
            self._check_domains()
        if self.schedule not in SCHEDULES:
            raise PlanError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.path_objective not in PATH_OBJECTIVES:
            raise PlanError(f"path_objective must be one of {', '.join(PATH_OBJECTIVES)}, got {self.path_objective!r}")

    def _check_domains(self) -> None:
        kind = self.kind
        for name in ("target_accuracy", "calibration_checksum", "difficulty"):
            if getattr(self, name) is not None:
                raise PlanError(f"a {kind} stream has no calibration: {name} must be None, got {getattr(self, name)!r}")
        from ccc.corruptions import list_corruptions

        if len(set(self.corruptions)) != len(self.corruptions) or not self.corruptions:
            raise PlanError(f"corruptions must hold at least 1 name, each once, got {list(self.corruptions)}")
        registered = list_corruptions()
        unknown = [name for name in self.corruptions if name not in registered]
        if unknown:
            raise PlanError(f"corruptions must be registered names ({', '.join(registered)}), got {', '.join(unknown)}")
        if self.crop not in CROPS:
            raise PlanError(f"crop must be one of {', '.join(CROPS)}, got {self.crop!r}")
        if self.crop == "center" and self.corruption_set != DEFAULT_CORRUPTION_SET:
            raise PlanError(
                f"crop 'center' is ImageNet-C's Resize(256) + CenterCrop(224), for corruption_set "
                f"{DEFAULT_CORRUPTION_SET!r} only; corruption_set {self.corruption_set!r} takes 'whole' or 'random'"
            )
        if kind == "cin-c":
            object.__setattr__(self, "severity", check_integer("severity", self.severity, 1, 5, error=PlanError))
        elif self.severity is not None:
            raise PlanError(f"a {kind} stream sets its own severities: severity must be None, got {self.severity!r}")

    def _check_ccc(self) -> None:
        target = self.target_accuracy
        if (
            isinstance(target, bool)
            or not isinstance(target, (int, float))
            or not (math.isfinite(target) and 0 <= target <= 100)
        ):
            raise PlanError(f"target_accuracy must be a number in [0, 100] percent, got {target!r}")
        object.__setattr__(self, "target_accuracy", float(target))
        if len(set(self.corruptions)) != len(self.corruptions) or len(self.corruptions) < 2:
            raise PlanError(f"corruptions must hold at least 2 distinct names, got {list(self.corruptions)}")
        check_sha256("calibration_checksum", self.calibration_checksum)
        if self.difficulty is not None and (not isinstance(self.difficulty, str) or not self.difficulty):
            raise PlanError(f"difficulty must be None or a preset name, got {self.difficulty!r}")
        if self.severity is not None or self.crop not in ("random", "whole"):
            raise PlanError(
                "a ccc stream has calibrated severities and random or whole-image crops: "
                f"severity must be None and crop 'random' or 'whole', got {self.severity!r} and {self.crop!r}"
            )

    @property
    def num_shards(self) -> int:
        """Number of shards: ``ceil(num_images / shard_size)``."""
        return -(-self.num_images // self.shard_size)

    def shard_range(self, shard_index: int) -> range:
        """Sample indices of shard ``shard_index`` (0 <= shard_index < num_shards)."""
        check_integer("shard_index", shard_index, 0, self.num_shards - 1, error=PlanError)
        start = shard_index * self.shard_size
        return range(start, min(start + self.shard_size, self.num_images))

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as a JSON-serialisable dict (corruptions as a list; a ``ccc`` spec without ``kind`` and
        ``severity``, and without ``crop`` when it is ``random``; no ``image_encoding`` when it is ``jpeg``,
        no ``corruption_set`` when it is ``imagenet``)."""
        document = asdict(self)
        document["corruptions"] = list(self.corruptions)
        if self.kind == CCC_KIND:
            for name in _KIND_FIELDS:
                if name != "crop" or self.crop == "random":
                    del document[name]
        if self.image_encoding == DEFAULT_IMAGE_ENCODING:
            del document["image_encoding"]
        if self.corruption_set == DEFAULT_CORRUPTION_SET:
            del document["corruption_set"]
        return document

    @property
    def domain_levels(self) -> tuple[tuple[str, int], ...]:
        """One pass of a ``cin-c`` or ``gradual`` stream: ``(corruption, severity)`` per domain (empty for ``ccc``)."""
        return () if self.kind == CCC_KIND else domain_levels(self.kind, self.corruptions, self.severity)

    @classmethod
    def from_json_dict(cls, document: object) -> StreamSpec:
        """Rebuild a spec from :meth:`to_json_dict`'s output; every field must be present (``kind``,
        ``severity`` and ``crop`` may be missing: a ``ccc`` stream; ``image_encoding`` may be missing: ``jpeg``;
        ``corruption_set`` may be missing: ``imagenet``).

        Raises:
            PlanError: for a missing, unexpected or invalid field.
        """
        if not isinstance(document, dict):
            raise PlanError(f"a stream spec must be a JSON object, got {type(document).__name__}")
        names = [field.name for field in fields(cls)]
        optional = (*_KIND_FIELDS, "image_encoding", "corruption_set")
        missing = [name for name in names if name not in document and name not in optional]
        unexpected = sorted(set(document) - set(names))
        if missing or unexpected:
            raise PlanError(f"stream spec fields: missing {missing or 'none'}, unexpected {unexpected or 'none'}")
        if not isinstance(document["corruptions"], list):
            raise PlanError(f"stream spec corruptions must be a list, got {document['corruptions']!r}")
        return cls(**{**document, "corruptions": tuple(document["corruptions"])})


def run_name(
    target_accuracy: float,
    speed: int,
    seed: int,
    num_images: int | None = None,
    default_images: int = PAPER_NUM_IMAGES,
    image_encoding: str | None = None,
    corruption_set: str = DEFAULT_CORRUPTION_SET,
    crop: str | None = None,
) -> str:
    """The public data's run name ``baseline_<b>_transition+speed_<k>_seed_<s>`` (b written with ``%g``:
    20, 40, 12.5), followed by ``_images_<N>`` for a stream of another length than its world's default:
    ``num_images`` (>= 1; None or :data:`UNBOUNDED_IMAGES`: the default) differs from ``default_images``
    (:data:`PAPER_NUM_IMAGES`; the demo world's: ``ccc.demo.DEMO_NUM_IMAGES``), so that a shorter stream of
    the same definition never shares the full one's run folder or results, then ``_crop_<crop>`` for a crop
    other than the set's default (None: the default); wrapped by :func:`set_run_name`."""
    name = f"baseline_{target_accuracy:g}_transition+speed_{speed}_seed_{seed}"
    if num_images is not None and num_images not in (default_images, UNBOUNDED_IMAGES):
        name = f"{name}_images_{num_images}"
    if crop not in (None, SET_DEFAULTS[corruption_set][0]):
        name = f"{name}_crop_{crop}"
    return set_run_name(name, corruption_set, image_encoding)


def set_run_name(name: str, corruption_set: str = DEFAULT_CORRUPTION_SET, image_encoding: str | None = None) -> str:
    """``name`` prefixed ``<set>_`` for a corruption set other than ``imagenet`` and suffixed ``_<encoding>``
    for an image encoding other than the set's default (:data:`SET_DEFAULTS`; None: the default), so that
    streams of different sets or encodings never share a run folder or results."""
    prefix = "" if corruption_set == DEFAULT_CORRUPTION_SET else f"{corruption_set}_"
    default_encoding = SET_DEFAULTS[corruption_set][1]
    suffix = "" if image_encoding in (None, default_encoding) else f"_{image_encoding}"
    return f"{prefix}{name}{suffix}"


def domain_run_name(
    kind: str,
    severity: int | None,
    images_per_domain: int,
    crop: str,
    seed: int,
    image_encoding: str | None = None,
    corruption_set: str = DEFAULT_CORRUPTION_SET,
) -> str:
    """Run name of a ``cin-c`` or ``gradual`` stream: ``cin-c_severity_5_images_50000_crop_random_seed_43``,
    ``gradual_images_5000_crop_center_seed_43`` (``images_per_domain``: images per corruption or level, >= 1),
    wrapped by :func:`set_run_name`."""
    level = f"_severity_{severity}" if severity is not None else ""
    name = f"{kind}{level}_images_{images_per_domain}_crop_{crop}_seed_{seed}"
    return set_run_name(name, corruption_set, image_encoding)


@dataclass(frozen=True)
class SampleSpec:
    """Everything needed to render one sample and to explain it later.

    Attributes:
        index: sample index in the stream, >= 0.
        step: path step, ``index // speed``.
        pair_index: position of the corruption pair in the stream's chain.
        path_position: position of the cell in the pair's severity path.
        path_cell: grid indices ``(i, j)`` of the cell: ``s1 = i / 4``, ``s2 = j / 4``.
        n1, s1, n2, s2: corruptions and severities in [0, 5]; ``n2`` is applied after ``n1``.
        calibrated_accuracy: the calibration table's accuracy at the cell, percent in [0, 100].
        source_position: position of the source image in :class:`SourceImages`.
        source_path: ``<wnid>/<file>`` of the source image.
        class_index: label, 0..K-1 (ImageNet: 0..999 in sorted-WordNet-id order).
        source_size: ``(width, height)`` of the source image in pixels.
        crop_box: ``(left, top, right, bottom)`` in source pixels, or in the pixels of the resized
            image when ``resize`` is set (PIL box convention, right and bottom exclusive); resized to
            224×224 after cropping.
        flip: whether the 224×224 crop is mirrored left-right.
        seed: render seed in [0, 2**63): ``numpy.random.default_rng(seed)`` drives the corruptions.
        domain: the domain of a ``cin-c`` or ``gradual`` sample (its corruption); None for ``ccc``
            samples, whose JSON then has no ``domain`` key (as before the other kinds existed).
        resize: ``(width, height)`` in pixels that the whole source image is resized to (PIL
            bilinear) before ``crop_box`` is cut from it: ImageNet-C's ``Resize(256)`` of the
            ``center`` crop (:func:`ccc.stream.domains.center_crop`); None (the random crops): the
            box is cut from the source image itself, and the JSON has no ``resize`` key.
        corruption_set: the stream's corruption set when it is not ``imagenet`` (its parameters, and its
            image size, to which the box is resized); None for ``imagenet`` (224×224), and the JSON then
            has no ``corruption_set`` key.
    """

    index: int
    step: int
    pair_index: int
    path_position: int
    path_cell: tuple[int, int]
    n1: str
    s1: float
    n2: str
    s2: float
    calibrated_accuracy: float
    source_position: int
    source_path: str
    class_index: int
    source_size: tuple[int, int]
    crop_box: tuple[int, int, int, int]
    flip: bool
    seed: int
    domain: str | None = None
    resize: tuple[int, int] | None = None
    corruption_set: str | None = None

    @property
    def wnid(self) -> str:
        """Class folder name (WordNet id) of the source image."""
        return self.source_path.split("/", 1)[0]

    @property
    def file_name(self) -> str:
        """File name of the source image."""
        return self.source_path.rsplit("/", 1)[-1]

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as a JSON-serialisable dict (tuples as lists; no ``domain``, ``resize`` or ``corruption_set``
        key when it is None)."""
        return {
            field.name: list(value) if isinstance(value, tuple) else value
            for field in fields(self)
            for value in (getattr(self, field.name),)
            if not (field.name in _OPTIONAL_SAMPLE_FIELDS and value is None)
        }


class _Presets(Protocol):
    """What resolving a definition needs of a calibration table (:class:`ccc.calibration.CalibrationTable`)."""

    @property
    def difficulty_presets(self) -> Mapping[str, tuple[float, tuple[str, ...]]]: ...

    def resolve_corruption(self, name: str) -> str: ...

    def checksum(self) -> str: ...

    @property
    def corruption_set(self) -> str: ...


def resolve_difficulty(
    table: _Presets, difficulty: str | None, baseline_accuracy: float | None = None, corruptions: Any = None
) -> tuple[float, tuple[str, ...], str | None]:
    """Target accuracy, corruption names and preset name of a definition.

    The preset ``difficulty`` of ``table`` gives the target accuracy (percent, in [0, 100]) and the
    corruptions; ``baseline_accuracy`` and ``corruptions`` (a sequence of names, or one
    comma-separated string) override them. The preset name is returned only when nothing was
    overridden (None otherwise). Corruption names are resolved to the table's (aliases such as
    ``jpeg_compression`` accepted).

    Raises:
        PlanError: an unknown difficulty (the message lists the table's presets), an unknown
            corruption, or neither a difficulty nor both ``baseline_accuracy`` and ``corruptions``.
    """
    presets = table.difficulty_presets
    target, names = baseline_accuracy, corruptions
    if difficulty is not None:
        if difficulty not in presets:
            available = ", ".join(presets) or "none (give baseline_accuracy and corruptions)"
            raise PlanError(f"unknown difficulty {difficulty!r}; the calibration table defines: {available}")
        preset_target, preset_names = presets[difficulty]
        target = preset_target if target is None else target
        names = preset_names if names is None else names
    if target is None or names is None:
        raise PlanError(
            f"a stream needs a difficulty (one of: {', '.join(presets) or 'none in this table'}) "
            "or both baseline_accuracy and corruptions"
        )
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",") if name.strip()]
    if isinstance(target, bool) or not isinstance(target, (int, float)):
        raise PlanError(f"baseline_accuracy must be a number in [0, 100] percent, got {target!r}")
    try:
        resolved = tuple(table.resolve_corruption(name) for name in names)
    except (TypeError, ValueError) as error:
        raise PlanError(str(error)) from None
    overridden = baseline_accuracy is not None or corruptions is not None
    return float(target), resolved, None if overridden else difficulty


def resolve_stream_spec(
    definition: StreamSpec | Mapping[str, Any],
    table: _Presets | None,
    source_index_checksum: str,
    source_count: int | None = None,
) -> StreamSpec:
    """The :class:`StreamSpec` of a stream definition, bound to ``table`` and the source images.

    Args:
        definition: a :class:`StreamSpec` (returned as is; :func:`ccc.stream.plan.build_stream_plan`
            compares its checksums with the table's and the images'), or a
            mapping with keys from :data:`DEFINITION_KEYS`: ``kind`` (default ``"ccc"``, see
            :data:`KINDS`); for ``ccc``: ``speed`` (required), ``difficulty`` and/or
            ``baseline_accuracy`` + ``corruptions`` (see :func:`resolve_difficulty`),
            ``schedule`` and ``path_objective`` (default ``"reference"``); for ``cin-c`` and
            ``gradual``: ``speed`` (images per domain; default ``cin-c``: ``source_count``, every
            source image once per corruption, ``gradual``: :data:`DEFAULT_GRADUAL_IMAGES`),
            ``corruptions`` (default the 15 ImageNet-C corruptions in their order),
            ``severity`` (``cin-c`` only, 1..5, default :data:`DEFAULT_SEVERITY`); for every kind ``crop``
            (``random``, ``whole``, or for the domain kinds ``center``; default the set's, see
            :data:`SET_DEFAULTS`), ``corruption_set`` (default :data:`DEFAULT_CORRUPTION_SET`), ``seed`` (default
            :data:`DEFAULT_SEED`), ``num_images`` (default: ``ccc`` unbounded,
            :data:`UNBOUNDED_IMAGES`; the others one pass of their domains), ``shard_size``
            (default :data:`DEFAULT_SHARD_SIZE`), ``image_encoding`` (default the set's, see
            :data:`IMAGE_ENCODINGS` and :data:`SET_DEFAULTS`).
        table: the calibration table (:class:`ccc.calibration.CalibrationTable`); None for the
            kinds without calibration.
        source_index_checksum: :meth:`ccc.stream.sources.ImageIndex.checksum` of the image folder.
        source_count: the number of source images, >= 1 (needed only for a ``cin-c`` definition
            without ``speed``).

    Raises:
        PlanError: an unknown key, a key the kind does not use, a missing speed or table, or a bad
            value (the message names it).
    """
    if isinstance(definition, StreamSpec):
        return definition
    if not isinstance(definition, Mapping):
        raise PlanError(f"a stream definition must be a StreamSpec or a mapping, got {type(definition).__name__}")
    unknown = sorted(set(definition) - set(DEFINITION_KEYS))
    if unknown:
        raise PlanError(
            f"unknown stream definition key(s) {', '.join(unknown)}; valid: {', '.join(sorted(DEFINITION_KEYS))}"
        )
    kind = definition.get("kind") or CCC_KIND
    if kind not in KINDS:
        raise PlanError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind != CCC_KIND:
        return _resolve_domain_spec(kind, definition, source_index_checksum, source_count)
    if definition.get("severity") is not None:
        raise PlanError("severity: only for the cin-c kind, not a ccc stream (its severities are calibrated)")
    if definition.get("speed") is None:
        raise PlanError("a stream definition needs speed (images per severity step)")
    if table is None:
        raise PlanError("a ccc stream needs a calibration table (its severity paths come from it)")
    set_defaults = _set_defaults(definition)
    if table.corruption_set != set_defaults["corruption_set"]:
        raise PlanError(
            f"the calibration table was measured on corruption set {table.corruption_set!r}, the stream asks for "
            f"{set_defaults['corruption_set']!r}: a ccc stream renders with its table's set (pass corruption_set "
            f"{table.corruption_set!r}, ccc-generate --corruption-set {table.corruption_set}, or a table made with "
            f"ccc-calibrate compute --corruption-set {set_defaults['corruption_set']})"
        )
    target, corruptions, difficulty = resolve_difficulty(
        table, definition.get("difficulty"), definition.get("baseline_accuracy"), definition.get("corruptions")
    )
    return StreamSpec(
        target_accuracy=target,
        corruptions=corruptions,
        speed=definition["speed"],
        seed=definition.get("seed", DEFAULT_SEED),
        num_images=UNBOUNDED_IMAGES if definition.get("num_images") is None else definition["num_images"],
        calibration_checksum=table.checksum(),
        source_index_checksum=source_index_checksum,
        difficulty=difficulty,
        schedule=definition.get("schedule", "reference"),
        path_objective=definition.get("path_objective", "reference"),
        shard_size=definition.get("shard_size", DEFAULT_SHARD_SIZE),
        **set_defaults,
    )


def _set_defaults(definition: Mapping[str, Any]) -> dict[str, str]:
    """``corruption_set``, ``crop`` and ``image_encoding`` of a definition, the last two defaulting to the
    set's (:data:`SET_DEFAULTS`)."""
    corruption_set = check_corruption_set(definition.get("corruption_set") or DEFAULT_CORRUPTION_SET)
    crop, image_encoding = SET_DEFAULTS[corruption_set]
    return {
        "corruption_set": corruption_set,
        "crop": definition.get("crop") or crop,
        "image_encoding": definition.get("image_encoding") or image_encoding,
    }


def _resolve_domain_spec(
    kind: str, definition: Mapping[str, Any], source_index_checksum: str, source_count: int | None
) -> StreamSpec:
    """The spec of a ``cin-c`` or ``gradual`` definition (see :func:`resolve_stream_spec`)."""
    from ccc.corruptions import CORRUPTIONS, get_corruption

    unused = [key for key in ("difficulty", "baseline_accuracy") if definition.get(key) is not None]
    unused += [key for key in ("schedule", "path_objective") if definition.get(key) not in (None, "reference")]
    if kind != "cin-c" and definition.get("severity") is not None:
        unused.append("severity")
    if unused:
        raise PlanError(
            f"{', '.join(unused)}: not for a {kind} stream "
            "(it has no calibration table and sets its own severities; see docs/generator.md)"
        )
    names = definition.get("corruptions")
    if names is None:
        names = CORRUPTIONS
    elif isinstance(names, str):
        names = [name.strip() for name in names.split(",") if name.strip()]
    try:
        corruptions = tuple(get_corruption(name).name for name in names)
    except ValueError as error:
        raise PlanError(str(error)) from None
    severity = (
        None if kind != "cin-c" else DEFAULT_SEVERITY if definition.get("severity") is None else definition["severity"]
    )
    speed = definition.get("speed")
    if speed is None and kind == "gradual":
        speed = DEFAULT_GRADUAL_IMAGES
    elif speed is None:
        if source_count is None:
            raise PlanError(
                "a cin-c stream without speed shows every source image per corruption: "
                "give speed (images per domain) or the number of source images"
            )
        speed = source_count
    speed = check_integer("speed", speed, 1, error=PlanError)
    return StreamSpec(
        target_accuracy=None,
        corruptions=corruptions,
        speed=speed,
        seed=definition.get("seed", DEFAULT_SEED),
        num_images=len(domain_levels(kind, corruptions, severity)) * speed
        if definition.get("num_images") is None
        else definition["num_images"],
        calibration_checksum=None,
        source_index_checksum=source_index_checksum,
        shard_size=definition.get("shard_size", DEFAULT_SHARD_SIZE),
        kind=kind,
        severity=severity,
        **_set_defaults(definition),
    )
