"""``ccc-render:<definition>``: a CCC stream rendered on the fly (``ccc.render_stream``) in DataLoader
workers, no shards stored; its samples are those the shards of ``ccc-generate`` would hold."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccc.options import OPTION_SEPARATOR, parse_list, parse_options
from ccc.validation import check_non_negative_int
from tta_eval.streams.batch import SizedStream
from tta_eval.streams.ccc_shards import DOMAIN_KEY, PAIR_KEY, run_folder_kind, run_folder_stream, with_pairs
from tta_eval.streams.options import StreamOptions
from tta_eval.streams.registry import DEMO_WORLD_NAMES, REGISTRY, StreamDescription, StreamSource

RENDER_OPTIONS = ("imagenet", "calibration", "start", "device", "source_decoder", "precision")
"""Keys of ``ccc-render:`` that are not part of the stream definition (see ``RenderRequest``)."""


@dataclass(frozen=True)
class RenderRequest:
    """A parsed ``ccc-render:`` location: what ``ccc.render_stream`` is given.

    definition: a run folder (its manifest's stream) or a mapping of stream definition keys
    (``ccc.stream.spec.DEFINITION_KEYS``); imagenet: the source image folder (None: ``$CCC_IMAGENET``);
    calibration: the table's path (None for the kinds without calibration); start: first stream
    index rendered (>= 0); demo: the demo world (its images and table; speed and length default to
    ``ccc-generate --demo``'s); device: None renders with the CPU reference path in the DataLoader
    workers (the shards' bytes), ``cpu`` or ``cuda[:index]`` with the torch backend on that device
    (the workers decode; its bytes differ from the shards', ``docs/fidelity.md``); source_decoder:
    ``pillow`` (the workers decode) or ``device`` (torchvision decodes the JPEGs on ``device``; see
    ``ccc.render_stream``); precision: with ``device`` only, the torch backend's working float precision
    (None: ``float64``; ``float32``).
    """

    definition: str | dict[str, Any]
    imagenet: str | None
    calibration: str | None
    start: int = 0
    demo: bool = False
    device: str | None = None
    source_decoder: str = "pillow"
    precision: str | None = None
    demo_world: str = "imagenet"


RENDER_EXAMPLE = (
    "ccc-render:demo,difficulty=medium,seed=43 or "
    "ccc-render:difficulty=medium,speed=2000,calibration=calibration/resnet50.npz,imagenet=/data/imagenet/val"
)


def parse_render_location(location: str) -> RenderRequest:
    """Parse ``[demo|RUN_FOLDER,]key=value,…``: stream definition keys (``kind``, ``difficulty``,
    ``speed``, ``seed``, ``baseline_accuracy``, ``corruptions`` joined by '+', ``num_images``,
    ``schedule``, ``path_objective``, ``severity``, ``crop``, ``image_encoding``, ``corruption_set``;
    ``ccc.stream.spec.resolve_stream_spec``)
    or a run folder, plus ``imagenet=PATH``, ``calibration=PATH`` (required outside the demo world
    for the ``ccc`` kind; the ``cin-c`` and ``gradual`` kinds use none), ``start=INDEX`` and
    ``device=cpu|cuda[:index]`` (render with the torch backend there) and, with it,
    ``source_decoder=pillow|device`` (who decodes the source JPEGs) and ``precision=float64|float32``
    (its working float precision). Raises ValueError naming what is wrong."""
    from ccc.demo import DEMO_DOMAIN_IMAGES, DEMO_NUM_IMAGES, DEMO_SPEED, demo_calibration_path, demo_world_of
    from ccc.stream.spec import CCC_KIND, DEFINITION_KEYS

    owner = "stream 'ccc-render:'"
    parts = [part.strip() for part in location.split(OPTION_SEPARATOR)] if location.strip() else []
    if "" in parts:
        raise ValueError(
            f"options of {owner} must be key=value pairs separated by {OPTION_SEPARATOR!r}, "
            f"got an empty one in {location!r}"
        )
    bare = [part for part in parts if "=" not in part]
    values = parse_options(OPTION_SEPARATOR.join(part for part in parts if "=" in part), owner)
    demo = "demo" in bare
    folders = [part for part in bare if part != "demo"]
    if not parts or len(folders) > 1:
        raise ValueError(
            f"stream 'ccc-render:' needs a stream definition or one run folder, e.g. {RENDER_EXAMPLE}; got {location!r}"
        )
    unknown = sorted(set(values) - set(DEFINITION_KEYS) - set(RENDER_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown ccc-render option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted({*DEFINITION_KEYS, *RENDER_OPTIONS}))}"
        )
    start = values.pop("start", 0)
    check_non_negative_int("start", start)
    device = values.pop("device", None)
    source_decoder = str(values.pop("source_decoder", "pillow"))
    from ccc.load.rendered_stream import check_render_device, check_source_decoder

    check_source_decoder(source_decoder, device)
    if device is not None:
        device = str(device)
        check_render_device(device)
    precision = values.pop("precision", None)
    if precision is not None:
        from ccc.render import check_render_precision

        if device is None:
            raise ValueError(
                f"ccc-render option precision={precision} applies to the torch backend: add device=cpu|cuda"
            )
        precision = check_render_precision(str(precision))
    imagenet = values.pop("imagenet", None)
    calibration = values.pop("calibration", None)
    folder_stream = run_folder_stream(folders[0]) if folders else None
    folder_world = None if folder_stream is None else demo_world_of(folder_stream)
    if folders and not demo and imagenet is None and calibration is None:
        demo = folder_world is not None
    demo_world = folder_world or str(values.get("corruption_set") or "imagenet")
    calibrated = (run_folder_kind(folders[0]) if folders else values.get("kind", CCC_KIND)) == CCC_KIND
    if demo:
        if imagenet is not None or calibration is not None:
            raise ValueError(
                "stream 'ccc-render:demo' renders the demo world's images with its table: "
                "do not give imagenet= or calibration="
            )
        calibration = str(demo_calibration_path(demo_world)) if calibrated else None
    elif calibration is None and calibrated:
        raise ValueError(
            "stream 'ccc-render:' needs calibration=PATH (a calibration table, .npz) outside the demo world, "
            f"e.g. {RENDER_EXAMPLE}"
        )
    if folders and values:
        raise ValueError(
            f"stream 'ccc-render:{folders[0]}' takes its definition from the run folder's manifest; "
            f"do not add {', '.join(values)}"
        )
    if "corruptions" in values:
        values["corruptions"] = parse_list("corruptions", values["corruptions"], owner)
    if demo and calibrated and not folders:
        values.setdefault("speed", DEMO_SPEED)
        values.setdefault("num_images", DEMO_NUM_IMAGES)
    elif demo and values.get("kind") == "gradual":
        values.setdefault("speed", DEMO_DOMAIN_IMAGES)
    return RenderRequest(
        folders[0] if folders else values,
        None if imagenet is None else str(imagenet),
        _optional_path(calibration),
        start,
        demo,
        device,
        source_decoder,
        precision,
        demo_world if demo else "imagenet",
    )


def _optional_path(path: Any) -> str | None:
    return None if path is None else str(path)


def _open_ccc_render(location: str, options: StreamOptions, start: int = 0) -> SizedStream:
    """``ccc-render:<definition>``: a CCC stream rendered on the fly (``ccc.render_stream``) in
    ``options.num_workers`` DataLoader workers, float batches in [0, 1] in stream order, samples as
    the shards of ``ccc-generate`` would hold them; metadata as ``ccc:``'s (with ``PAIR_KEY``). With
    ``device=``, the workers decode (with ``source_decoder=device``, only read the source JPEGs, decoded
    on the device) and the torch backend renders each batch on that device.
    start: samples after the location's own ``start=`` that are not rendered (a resumed run)."""
    from ccc.demo import demo_image_folder
    from ccc.load import render_stream, stream_loader
    from ccc.stream.spec import UNBOUNDED_IMAGES

    request = parse_render_location(location)
    imagenet = str(demo_image_folder(corruption_set=request.demo_world)) if request.demo else request.imagenet
    stream = render_stream(
        request.definition,
        imagenet=imagenet,
        calibration=request.calibration,
        start=request.start + start,
        image_format="float",
        device=request.device,
        source_decoder=request.source_decoder,
        precision=request.precision,
    )
    loader = stream_loader(stream, batch_size=options.batch_size, num_workers=options.num_workers)
    unbounded = stream.spec.num_images >= UNBOUNDED_IMAGES  # type: ignore[attr-defined]
    return SizedStream(with_pairs(loader), None if unbounded else stream.length)


RENDERED_RUN_SUFFIX = "_rendered"
"""Ends the default run folder name of a ``ccc-render:`` stream (the stream's name stays ``ccc-generate``'s)."""

TORCH_RENDERED_RUN_SUFFIX = "_rendered_torch"
"""Ends it for a stream rendered by the torch backend (``device=``), whose bytes differ from the shards'
(followed by ``_<precision>`` for a precision other than the default, e.g. ``_rendered_torch_float32``,
and by ``_device_decoded`` for ``source_decoder=device``, whose sources may differ from Pillow's)."""


def _rendered_run_suffix(request: RenderRequest) -> str:
    """The default run folder name's ending of ``request``: the renderer, a non-default precision and a
    non-default source decoder."""
    from ccc.render import DEFAULT_RENDER_PRECISION

    if request.device is None:
        return RENDERED_RUN_SUFFIX
    suffix = TORCH_RENDERED_RUN_SUFFIX
    if request.precision not in (None, DEFAULT_RENDER_PRECISION):
        suffix += f"_{request.precision}"
    if request.source_decoder == "device":
        suffix += "_device_decoded"
    return suffix


def _count_source_images(request: RenderRequest) -> int | None:
    """The image count that names a cin-c definition without ``speed`` (every image per corruption),
    listed without reading an image; None for other definitions."""
    from ccc.demo import count_source_images

    if request.definition.get("kind") != "cin-c" or request.definition.get("speed") is not None:
        return None
    return count_source_images(request.imagenet, request.demo)


def _describe_ccc_render(location: str, options: StreamOptions) -> StreamDescription:
    """A rendered stream's name (that of ``ccc-generate``'s run folder for the same definition), run
    folder name, length and world, from its definition and the calibration table (no image is read)."""
    from ccc.calibration import CalibrationError, CalibrationTable
    from ccc.demo import DEMO_CLASSES, is_demo_stream, world_run_name
    from ccc.shards.manifest import ManifestError, load_manifest
    from ccc.stream.sources import ImageFolderError
    from ccc.stream.spec import CCC_KIND, UNBOUNDED_IMAGES, PlanError, domain_run_name, resolve_stream_spec

    request = parse_render_location(location)
    if isinstance(request.definition, str):
        folder = Path(request.definition)
        try:
            spec = load_manifest(folder.parent if folder.name == "manifest.json" else folder).stream
        except (FileNotFoundError, NotADirectoryError):
            raise ValueError(
                f"stream 'ccc-render:{request.definition}': no run folder with a manifest.json there; "
                f"pass a run folder written by ccc-generate or a definition, e.g. {RENDER_EXAMPLE}"
            ) from None
        except ManifestError as error:
            raise ValueError(str(error)) from None
        name, samples, demo = folder.resolve().name, spec.num_images, is_demo_stream(spec)
    elif _definition_kind(request.definition) != CCC_KIND:
        try:
            spec = resolve_stream_spec(request.definition, None, "0" * 64, _count_source_images(request))
        except (PlanError, ImageFolderError) as error:
            raise ValueError(f"stream 'ccc-render:{location}': {error}") from None
        demo = _renders_demo_images(request)
        severity = spec.severity if spec.kind == "cin-c" else None
        name = ("demo_" if demo else "") + domain_run_name(
            spec.kind, severity, spec.speed, spec.crop, spec.seed, spec.image_encoding, spec.corruption_set
        )
        samples = spec.num_images
    else:
        if request.definition.get("speed") is None:
            raise ValueError(
                "stream 'ccc-render:' needs speed=K (images per severity step; the paper: 1000, 2000 or 5000), "
                f"e.g. {RENDER_EXAMPLE}"
            )
        try:
            spec = resolve_stream_spec(request.definition, CalibrationTable.load(request.calibration), "0" * 64)
        except (CalibrationError, PlanError, OSError) as error:
            raise ValueError(f"stream 'ccc-render:{location}': {error}") from None
        demo = _renders_demo_images(request)
        name = world_run_name(
            spec.target_accuracy,
            spec.speed,
            spec.seed,
            spec.num_images,
            demo,
            spec.image_encoding,
            spec.corruption_set,
            spec.crop,
        )
        samples = None if spec.num_images >= UNBOUNDED_IMAGES else spec.num_images
    if samples is not None:
        samples = max(samples - request.start, 0)
    return StreamDescription(
        name=name,
        samples=samples,
        world=DEMO_WORLD_NAMES[request.demo_world] if demo else spec.corruption_set,
        num_classes=len(DEMO_CLASSES) if demo else None,
        run_name=name + _rendered_run_suffix(request),
    )


def _renders_demo_images(request: RenderRequest) -> bool:
    from ccc.demo.folder import default_demo_folder

    return request.demo or (
        request.imagenet is not None
        and Path(request.imagenet).resolve() == default_demo_folder(world=request.demo_world).resolve()
    )


def _definition_kind(definition: str | Mapping[str, Any]) -> str:
    """The stream kind of a ``ccc-render:`` definition: its ``kind`` key (default "ccc") or, for a
    run folder, its manifest's."""
    return run_folder_kind(definition) if isinstance(definition, str) else definition.get("kind", "ccc")


def _ccc_render_domain_key(location: str) -> str | None:
    """The default domain key of ``ccc-render:<location>``, as ``ccc:``'s for the same kind (None
    when the location cannot be parsed: the opener then names the mistake)."""
    try:
        request = parse_render_location(location)
    except ValueError:
        return None
    return PAIR_KEY if _definition_kind(request.definition) == "ccc" else DOMAIN_KEY


REGISTRY.register(
    StreamSource(
        "ccc-render",
        _open_ccc_render,
        order=4,
        describe=_describe_ccc_render,
        domain_key=_ccc_render_domain_key,
        seekable=True,
    )
)
