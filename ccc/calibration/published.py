"""Safe import of the published CCC accuracy matrices (a pickle) into a :class:`CalibrationTable`.

The CCC authors publish their ResNet-50 calibration as ``ccc_accuracy_matrix.pickle``: a mapping from
``"n1_<name1>_n2_<name2>"`` to a 21×21 array of top-1 accuracy in percent, for the 210 ordered pairs
of the 15 corruptions. The public generator reads it with ``pandas.read_pickle`` and caches it with
``pickle.dump``, so the object in a file may be a plain ``dict`` or a ``pandas.Series`` of arrays,
written by numpy 1.x or 2.x and pickle protocols 2–5.

Unpickling runs code named by the file. :class:`RestrictedUnpickler` therefore resolves every global
through a fixed table of functions of this module that rebuild numpy arrays, dtypes and scalars,
and inert stand-ins that only record the state of a pandas ``Series`` (no pandas code runs, pandas
need not be installed). Any other global (``os.system``, ``builtins.eval``, ``subprocess.Popen``,
``pandas.DataFrame``, …) is refused before anything is called.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import math
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ccc.cache import cache_path_for_url, default_cache_dir, download_to_cache, is_url
from ccc.calibration.presets import CCC_CORRUPTIONS, RESNET50_DIFFICULTY_PRESETS
from ccc.calibration.table import GRID_SIZE, CalibrationError, CalibrationMetadata, CalibrationTable
from ccc.pickles import MAX_PICKLE_OPCODES, count_pickle_opcodes

logger = logging.getLogger(__name__)

PUBLISHED_MATRIX_URL = (
    "https://nc.mlcloud.uni-tuebingen.de/index.php/s/izTMnXkaHoNBZT4/download/ccc_accuracy_matrix.pickle"
)
"""Where the public CCC generator downloads the matrices from (a university server)."""

PUBLISHED_IMAGE_COUNT = 5000
MAX_PICKLE_BYTES = 64 * 2**20

MAX_PICKLE_ARRAY_ELEMENTS = 2**20
"""Most elements of one numpy array in an imported pickle (a matrix has 441)."""

MAX_MATRIX_NUMBERS = 2**16
"""Most entries (numbers and nested lists, shared ones counted at each use) of one matrix given as lists."""
_KEY_PATTERN = re.compile(r"n1_(?P<n1>.+)_n2_(?P<n2>.+)")

_CONVERSION_HINT = (
    "convert it once, in an environment you trust, to a plain dict of numpy arrays: "
    'python -c "import pickle, numpy as np, pandas as pd; '
    "m = pd.read_pickle('IN.pickle'); "
    "pickle.dump({str(k): np.asarray(v, dtype=float) for k, v in m.items()}, open('OUT.pickle', 'wb'))\""
)


class UnsafePickleError(CalibrationError):
    """A pickle references a global this importer does not admit; nothing of it was executed."""


# ------------------------------------------------------------------------------- immutability
class _ImmutableType(type):
    """Metaclass of the stand-in classes: a pickle's BUILD step cannot set attributes on them."""

    def __setattr__(cls, name: str, value: object) -> None:
        raise UnsafePickleError(f"refusing to modify {cls.__name__}.{name} from a pickle")

    def __delattr__(cls, name: str) -> None:
        raise UnsafePickleError(f"refusing to modify {cls.__name__}.{name} from a pickle")


class _AdmittedFunction:
    """An admitted callable; immutable, so a pickle cannot swap or re-configure it."""

    __slots__ = ("_function",)

    def __init__(self, function: Callable[..., object]) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *arguments: object) -> object:
        return self._function(*arguments)

    def __setattr__(self, name: str, value: object) -> None:
        raise UnsafePickleError(f"refusing to modify admitted function {self._function.__name__}")

    def __repr__(self) -> str:
        return f"<admitted {self._function.__name__}>"


# ------------------------------------------------------------------------------- numpy rebuilders
class _NdarrayType(metaclass=_ImmutableType):
    """Stand-in for the ``numpy.ndarray`` class argument of numpy's array pickles (not callable)."""


class _BoundedArray(np.ndarray):
    """The array numpy's ``_reconstruct`` returns: its BUILD step refuses more than
    :data:`MAX_PICKLE_ARRAY_ELEMENTS` elements."""

    def __setstate__(self, state: Any) -> None:
        shape = (
            state[1]
            if isinstance(state, tuple) and len(state) == 5
            else state[0]
            if isinstance(state, tuple) and state
            else None
        )
        if not isinstance(shape, tuple) or not all(isinstance(size, int) and size >= 0 for size in shape):
            raise UnsafePickleError(f"numpy array state needs a shape of non-negative integers, got {shape!r}")
        if math.prod(shape) > MAX_PICKLE_ARRAY_ELEMENTS:
            raise CalibrationError(
                f"the pickle declares a numpy array of shape {list(shape)}, more than the limit of "
                f"{MAX_PICKLE_ARRAY_ELEMENTS:,} elements; refusing to build it"
            )
        super().__setstate__(state)


def _reconstruct_array(array_type: object, shape: object, type_code: object) -> np.ndarray:
    """numpy's ``_reconstruct``: an empty array that the pickle's BUILD step then fills (bounded in size)."""
    if array_type is not _NdarrayType:
        raise UnsafePickleError(f"numpy array reconstruction is admitted only for numpy.ndarray, got {array_type!r}")
    return np.empty((0,), dtype=np.uint8).view(_BoundedArray)


def _array_from_buffer(buffer: object, dtype: object, shape: object, order: object) -> np.ndarray:
    """numpy's ``_frombuffer`` (pickle protocol 5): an array copied out of in-band bytes."""
    if not isinstance(buffer, (bytes, bytearray, pickle.PickleBuffer)):
        raise UnsafePickleError(f"array buffer must be bytes, got {type(buffer).__name__}")
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise UnsafePickleError(f"array buffer dtype must be a plain numpy dtype, got {dtype!r}")
    if order not in ("C", "F") or not isinstance(shape, tuple):
        raise UnsafePickleError(f"array buffer needs a shape tuple and order C/F, got {shape!r}, {order!r}")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order).copy(order="K")


def _make_dtype(code: object, align: object = False, copy: object = True) -> np.dtype:
    """``numpy.dtype`` from a type code string such as ``'f8'`` (the form numpy pickles use).

    Always a fresh copy (as numpy's own pickles request): the BUILD step that follows sets its
    state, and must never reach numpy's shared built-in dtype objects.
    """
    if not isinstance(code, str):
        raise UnsafePickleError(f"numpy dtype must be built from a type code string, got {code!r}")
    return np.dtype(code, align=bool(align), copy=True)


def _make_scalar(dtype: object, payload: object = None) -> Any:
    """numpy's ``scalar``: one numpy scalar of ``dtype`` from its raw bytes."""
    if not isinstance(dtype, np.dtype):
        raise UnsafePickleError(f"numpy scalar needs a numpy dtype, got {dtype!r}")
    if dtype.hasobject:
        return payload
    if not isinstance(payload, bytes) or len(payload) != dtype.itemsize:
        raise UnsafePickleError(f"numpy scalar of {dtype} needs {dtype.itemsize} bytes, got {payload!r}")
    return np.frombuffer(payload, dtype=dtype)[0]


def _latin1_encode(text: object, encoding: object = "latin1") -> bytes:
    """``_codecs.encode(text, 'latin1')``: how pickle protocol 2 stores bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f"only latin-1 encoding of a string is admitted, got {encoding!r}")
    return text.encode("latin-1")


def _empty_bytes(*arguments: object) -> bytes:
    """``bytes()`` as pickle protocol 2 stores an empty bytes object."""
    if arguments:
        raise UnsafePickleError(f"bytes(...) is admitted only without arguments, got {arguments!r}")
    return b""


# ----------------------------------------------------------------------------- pandas stand-ins
class _RecordedState(metaclass=_ImmutableType):
    """Base of the inert pandas stand-ins: creation takes no arguments, BUILD records the state."""

    pickled_state: object = None

    def __setstate__(self, state: object) -> None:
        self.pickled_state = state


class _PandasSeries(_RecordedState):
    """Stand-in for ``pandas.Series``."""


class _PandasSingleBlockManager(_RecordedState):
    """Stand-in for pandas' ``SingleBlockManager`` (the storage of a Series)."""


class _PandasBackedArray(_RecordedState):
    """Stand-in for pandas ≥ 3 ``StringArray`` (an index of strings backed by a numpy array)."""


class _PandasIndexType(metaclass=_ImmutableType):
    """Stand-in for the ``pandas.Index`` class argument of ``_new_Index`` (not callable)."""


class _PandasStringArrayType(metaclass=_ImmutableType):
    """Stand-in for the ``pandas.arrays.StringArray`` class argument (not callable)."""


@dataclasses.dataclass(frozen=True)
class _PandasIndex:
    """The data of a pandas ``Index`` (labels of a Series)."""

    data: object


@dataclasses.dataclass(frozen=True)
class _PandasStringDtype:
    """Stand-in for ``pandas.StringDtype(storage, na_value)``; only records its arguments."""

    arguments: tuple[object, ...]


def _make_string_dtype(*arguments: object) -> _PandasStringDtype:
    """pandas' ``StringDtype(...)`` as an inert record (the index labels are read from the array)."""
    return _PandasStringDtype(arguments)


def _new_pandas_index(index_type: object, state: object) -> _PandasIndex:
    """pandas' ``_new_Index(cls, state)``, admitted only for the plain ``Index`` class."""
    if index_type is not _PandasIndexType or not isinstance(state, dict) or "data" not in state:
        raise UnsafePickleError(
            f"pandas index reconstruction is admitted only for pandas.Index, got {index_type!r}; " + _CONVERSION_HINT
        )
    return _PandasIndex(state["data"])


def _unpickle_backed_array(array_type: object, checksum: object, state: object) -> _PandasBackedArray:
    """pandas' Cython ``__pyx_unpickle_NDArrayBacked``, admitted only for ``StringArray``."""
    if array_type is not _PandasStringArrayType:
        raise UnsafePickleError(
            f"pandas array reconstruction is admitted only for StringArray, got {array_type!r}; " + _CONVERSION_HINT
        )
    return _PandasBackedArray()


_NUMPY_GLOBALS: dict[tuple[str, str], object] = {}
for _numpy_core in ("numpy.core", "numpy._core"):  # numpy 1.x and 2.x module names
    _NUMPY_GLOBALS[(f"{_numpy_core}.multiarray", "_reconstruct")] = _AdmittedFunction(_reconstruct_array)
    _NUMPY_GLOBALS[(f"{_numpy_core}.multiarray", "scalar")] = _AdmittedFunction(_make_scalar)
    _NUMPY_GLOBALS[(f"{_numpy_core}.numeric", "_frombuffer")] = _AdmittedFunction(_array_from_buffer)

ADMITTED_GLOBALS: dict[tuple[str, str], object] = {
    **_NUMPY_GLOBALS,
    ("numpy", "ndarray"): _NdarrayType,
    ("numpy", "dtype"): _AdmittedFunction(_make_dtype),
    ("_codecs", "encode"): _AdmittedFunction(_latin1_encode),
    ("builtins", "bytes"): _AdmittedFunction(_empty_bytes),
    ("__builtin__", "bytes"): _AdmittedFunction(_empty_bytes),
    ("builtins", "slice"): slice,
    ("__builtin__", "slice"): slice,
    # pandas Series: the module paths of pandas 1.x–2.x, then the top-level names of pandas >= 3.
    ("pandas.core.series", "Series"): _PandasSeries,
    ("pandas", "Series"): _PandasSeries,
    ("pandas.core.internals.managers", "SingleBlockManager"): _PandasSingleBlockManager,
    ("pandas.core.indexes.base", "_new_Index"): _AdmittedFunction(_new_pandas_index),
    ("pandas.core.indexes.base", "Index"): _PandasIndexType,
    ("pandas", "Index"): _PandasIndexType,
    ("pandas._libs.arrays", "__pyx_unpickle_NDArrayBacked"): _AdmittedFunction(_unpickle_backed_array),
    ("pandas.arrays", "StringArray"): _PandasStringArrayType,
    ("pandas", "StringDtype"): _AdmittedFunction(_make_string_dtype),
}
"""(module, name) a pickle may reference → the object of this module that stands for it."""


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves globals only through :data:`ADMITTED_GLOBALS`.

    Everything else raises :class:`UnsafePickleError` naming ``module.name`` before any call.
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ADMITTED_GLOBALS[(module, name)]
        except KeyError:
            hint = f"; {_CONVERSION_HINT}" if module.split(".")[0] == "pandas" else ""
            raise UnsafePickleError(
                f"refusing to unpickle global {module}.{name}: only numpy arrays in a dict or a "
                f"pandas Series are admitted{hint}"
            ) from None

    def persistent_load(self, persistent_id: object) -> Any:
        raise UnsafePickleError(f"refusing persistent id {persistent_id!r} in the pickle")


def safe_unpickle(data: bytes) -> object:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`; raise :class:`CalibrationError` on any failure.

    The opcodes are counted first (at most :data:`MAX_PICKLE_OPCODES`) and arrays are bounded
    (:data:`MAX_PICKLE_ARRAY_ELEMENTS`), so a small file cannot make the import build gigabytes.
    """
    try:
        if count_pickle_opcodes(data) > MAX_PICKLE_OPCODES:
            raise CalibrationError(
                f"the pickle holds more than {MAX_PICKLE_OPCODES:,} opcodes (the published matrices need at most about "
                "112,000); refusing to unpickle it"
            )
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except (UnsafePickleError, CalibrationError):
        raise
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OverflowError,
        MemoryError,
        RecursionError,
    ) as error:
        raise CalibrationError(f"not a readable pickle of arrays ({type(error).__name__}: {error})") from None


# ------------------------------------------------------------------------------- Series → dict
def _index_labels(index: object) -> list[object]:
    if not isinstance(index, _PandasIndex):
        raise CalibrationError(f"pandas Series has an unsupported index ({type(index).__name__})")
    data = index.data
    if isinstance(data, _PandasBackedArray):
        state = data.pickled_state
        items = state if isinstance(state, tuple) else ()
        arrays = [item for item in items if isinstance(item, np.ndarray)]
        if len(arrays) != 1:
            raise CalibrationError("pandas string index has an unexpected layout")
        data = arrays[0]
    if not isinstance(data, np.ndarray) or data.ndim != 1:
        raise CalibrationError("pandas Series index must be one-dimensional")
    return data.tolist()


def _series_to_dict(series: _PandasSeries) -> dict[object, object]:
    state = series.pickled_state
    manager = state.get("_mgr") if isinstance(state, dict) else None
    if not isinstance(manager, _PandasSingleBlockManager) or not isinstance(manager.pickled_state, tuple):
        raise CalibrationError("pandas Series pickle has an unexpected layout (no block manager)")
    layouts = [item for item in manager.pickled_state if isinstance(item, dict) and "0.14.1" in item]
    layout = layouts[0]["0.14.1"] if layouts else None
    if (
        not isinstance(layout, dict)
        or not isinstance(layout.get("axes"), list)
        or not isinstance(layout.get("blocks"), list)
    ):
        raise CalibrationError("pandas Series pickle has an unexpected layout (no axes/blocks)")
    axes, blocks = layout["axes"], layout["blocks"]
    if len(axes) != 1 or len(blocks) != 1 or not isinstance(blocks[0], dict):
        raise CalibrationError(
            f"pandas Series pickle must have one axis and one block, got {len(axes)} and {len(blocks)}"
        )
    labels = _index_labels(axes[0])
    values = blocks[0].get("values")
    if not isinstance(values, np.ndarray) or values.ndim != 1 or len(values) != len(labels):
        raise CalibrationError("pandas Series values must be one entry per index label")
    return dict(zip(labels, values.tolist()))


def _exceeds_entries(value: list | tuple, limit: int) -> bool:  # type: ignore[type-arg]
    """Whether nested lists/tuples hold more than ``limit`` entries, counting a shared list at each use
    (as numpy would)."""
    pending: list[object] = [value]
    seen = 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, (list, tuple)):
            pending.extend(item)
    return False


def read_matrix_pickle(data: bytes) -> dict[str, NDArray[np.float64]]:
    """Safely read a pickled mapping key → array (a dict or a pandas Series) into a plain dict.

    Values are returned as float64 arrays of whatever shape they have; :func:`import_ccc_pickle`
    validates keys, shapes and ranges. Raises :class:`UnsafePickleError` for a disallowed global and
    :class:`CalibrationError` for anything else that is not such a mapping.
    """
    loaded = safe_unpickle(data)
    if isinstance(loaded, _PandasSeries):
        mapping = _series_to_dict(loaded)
    elif isinstance(loaded, dict):
        mapping = loaded
    else:
        raise CalibrationError(
            f"the pickle holds a {type(loaded).__name__}; expected a dict or pandas Series "
            "mapping 'n1_<name>_n2_<name>' to 21×21 arrays"
        )
    result = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise CalibrationError(f"matrix keys must be strings, got {key!r}")
        if not isinstance(value, (np.ndarray, list, tuple)):
            raise CalibrationError(f"matrix {key!r} must be an array, got {type(value).__name__}")
        if not isinstance(value, np.ndarray) and _exceeds_entries(value, MAX_MATRIX_NUMBERS):
            raise CalibrationError(f"matrix {key!r} holds more than {MAX_MATRIX_NUMBERS:,} entries (a matrix has 441)")
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise CalibrationError(f"matrix {key!r} must hold numbers") from None
        result[key] = array
    return result


def _validate_published_mapping(
    mapping: dict[str, NDArray[np.float64]],
) -> dict[tuple[str, str], NDArray[np.float64]]:
    grids = {}
    unexpected = []
    for key, array in mapping.items():
        match = _KEY_PATTERN.fullmatch(key)
        if (
            not match
            or match["n1"] not in CCC_CORRUPTIONS
            or match["n2"] not in CCC_CORRUPTIONS
            or (match["n1"] == match["n2"])
        ):
            unexpected.append(key)
            continue
        if array.shape != (GRID_SIZE, GRID_SIZE):
            raise CalibrationError(f"matrix {key!r} must be {GRID_SIZE}×{GRID_SIZE}, got shape {list(array.shape)}")
        bad = ~np.isfinite(array) | (array < 0.0) | (array > 100.0)
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            raise CalibrationError(
                f"matrix {key!r} must be finite accuracy in [0, 100] percent, got {float(array[i, j])} at [{i}, {j}]"
            )
        grids[(match["n1"], match["n2"])] = array
    expected = [(a, b) for a in CCC_CORRUPTIONS for b in CCC_CORRUPTIONS if a != b]
    missing = [f"n1_{a}_n2_{b}" for a, b in expected if (a, b) not in grids]
    if unexpected or missing:
        raise CalibrationError(
            f"expected the {len(expected)} keys 'n1_<name>_n2_<name>' of the 15 CCC corruptions, "
            f"got {len(mapping)} keys; missing {len(missing)} (e.g. {missing[:3]}), "
            f"unexpected {len(unexpected)} (e.g. {unexpected[:3]})"
        )
    return grids


def table_from_published_bytes(data: bytes, *, source: str) -> CalibrationTable:
    """Build the ResNet-50 table from the bytes of the published pickle (see :func:`import_ccc_pickle`)."""
    grids = _validate_published_mapping(read_matrix_pickle(data))
    metadata = CalibrationMetadata(
        model_name="torchvision resnet50 IMAGENET1K_V1 (published CCC calibration)",
        preprocessing=(
            "224×224 corrupted image (n1 at s1, then n2 at s2) → to tensor → normalise with ImageNet "
            "mean/std; top-1 accuracy in percent"
        ),
        image_set_description=(
            "5,000 images of the ImageNet validation set chosen by the CCC authors "
            "(Press et al., NeurIPS 2023); the file list is not published"
        ),
        image_count=PUBLISHED_IMAGE_COUNT,
        source=source,
        source_sha256=hashlib.sha256(data).hexdigest(),
        notes=(
            "Imported from the published CCC accuracy matrices (pickle). Image counts are the "
            "nominal 5,000 per cell; weights and image list checksums are not published."
        ),
    )
    return CalibrationTable.from_grids(
        CCC_CORRUPTIONS,
        grids,
        image_counts=PUBLISHED_IMAGE_COUNT,
        metadata=metadata,
        difficulty_presets=RESNET50_DIFFICULTY_PRESETS,
    )


def _read_limited(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_PICKLE_BYTES:
            raise CalibrationError(
                f"{path}: {size} bytes is larger than any CCC calibration pickle (limit {MAX_PICKLE_BYTES})"
            )
        return path.read_bytes()
    except OSError as error:
        raise CalibrationError(f"{path}: cannot read: {error.strerror or error}") from None


def import_ccc_pickle(
    path_or_url: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> CalibrationTable:
    """Import the published CCC accuracy matrices (pickle file or http(s) URL) safely.

    The pickle is read with :class:`RestrictedUnpickler` (no code from the file runs) and must hold
    exactly the 210 keys ``"n1_<name1>_n2_<name2>"`` of the 15 CCC corruptions, each a finite
    21×21 array in [0, 100] percent. A URL is downloaded once into the cache (``cache_dir``, else
    :func:`ccc.cache.default_cache_dir`) and validated before it is kept; later imports of the same
    URL read the cached copy. ``progress`` shows a download progress bar.

    The table gets the public ResNet-50 difficulty presets, 5,000 images per cell, and records the
    source and the sha256 of the pickle in its metadata.

    Raises:
        UnsafePickleError: the pickle references a global outside numpy arrays / pandas Series.
        CalibrationError: the file is not such a mapping, or the keys or values are invalid.
        ccc.cache.DownloadError: the download failed.
    """
    if is_url(path_or_url):
        url = str(path_or_url)

        def validate(downloaded: Path) -> None:
            try:
                table_from_published_bytes(_read_limited(downloaded), source=url)
            except CalibrationError as error:
                raise type(error)(f"{url}: {error}") from None

        cached = download_to_cache(
            url, cache_dir=cache_dir, validate=validate, max_bytes=MAX_PICKLE_BYTES, progress=progress
        )
        data = _read_limited(cached)
        try:
            return table_from_published_bytes(data, source=url)
        except CalibrationError as error:
            raise type(error)(
                f"cached copy {cached} of {url}: {error} (delete the file to download it again)"
            ) from None
    path = Path(path_or_url)
    data = _read_limited(path)
    try:
        return table_from_published_bytes(data, source=str(path))
    except CalibrationError as error:
        raise type(error)(f"{path}: {error}") from None


CONVERTED_TABLES_FOLDER = "calibration"
"""Folder of the cache (:func:`ccc.cache.default_cache_dir`) holding tables converted from published pickles."""


def load_calibration(
    location: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> tuple[CalibrationTable, str | None]:
    """A calibration table from a ``.npz`` table, a published CCC pickle, or the pickle's http(s) URL.

    A pickle (file or URL) goes through :func:`import_ccc_pickle` (nothing in it runs); the converted
    table is kept as ``<cache>/calibration/published-<sha256 of the pickle, 16 hex>.npz`` so later
    calls read the table instead of the pickle. Returns the table and a one-line note saying what was
    converted or reused (None for a ``.npz`` table).

    Raises:
        CalibrationError: a missing or invalid file (naming it), a refused pickle.
        ccc.cache.DownloadError: a failed download.
    """
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if is_url(location):
        url = str(location)
        pickle_path = cache_path_for_url(url, cache_dir)
        if not pickle_path.is_file():
            import_ccc_pickle(url, cache_dir=cache_dir, progress=progress)
        source = url
    else:
        pickle_path = Path(location)
        if not pickle_path.is_file():
            raise CalibrationError(f"calibration table {pickle_path} does not exist")
        with pickle_path.open("rb") as handle:
            if handle.read(1) != b"\x80":
                return CalibrationTable.load(pickle_path), None
        source = str(pickle_path)
    data = _read_limited(pickle_path)
    converted = folder / CONVERTED_TABLES_FOLDER / f"published-{hashlib.sha256(data).hexdigest()[:16]}.npz"
    if converted.is_file():
        return CalibrationTable.load(
            converted
        ), f"using the table converted earlier from the published pickle {source}: {converted}"
    try:
        table = table_from_published_bytes(data, source=source)
    except CalibrationError as error:
        raise type(error)(f"{source}: {error}") from None
    converted.parent.mkdir(parents=True, exist_ok=True)
    table.save(converted)
    return table, (
        f"converted the published CCC pickle {source} into the table {converted} "
        f"(checksum {table.checksum()[:16]}…; later runs read it)"
    )


def admitted_global_names() -> list[str]:
    """The ``module.name`` globals a pickle may reference, sorted (for documentation and errors)."""
    return sorted(f"{module}.{name}" for module, name in ADMITTED_GLOBALS)
