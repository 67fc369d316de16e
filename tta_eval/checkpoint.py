"""Checkpoints of a tta-eval run: what is saved, the atomic write, and whether a command may resume a run.

A checkpoint is one file in the run folder (``tta_eval.run_folder.CHECKPOINT_FILE``), written at a
batch boundary by the protocol machinery (``tta_eval.protocols._execution.lockstep``) every
``every`` samples. It is a ``Checkpoint``: a typed record of tensors and plain values (numbers,
strings, None, lists, tuples and dicts), written with ``torch.save`` and read back with
``torch.load(weights_only=True)`` after the opcode bound of ``ccc.pickles``, so reading a checkpoint
never runs code named by the file (a replaced file is refused in one line):

- ``config``: the text of the run's config.json: the checkpoint is bound to the command that wrote
  it (another command is refused naming what differs), and config.json is restored from it when
  it was deleted;
- ``batches``, ``samples``: the position in the stream;
- ``methods``: each method's ``tta_eval.methods.base.method_state_dict`` (networks, optimiser,
  EMA teachers, memory banks, filter counters, reset-policy state, ``torch.Generator`` states);
  a resumed run builds its methods from the model and settings and loads these into them;
- ``runners``, ``episodes``, ``protocol``: the ``state_dict`` of each method's runner (pending
  reset, warm-up done, frozen copy, loss scaler), of the episode tracker and of the protocol
  (Alfarra's pending skips, Tempora's queues, clocks and budgets);
- ``rng``: the global random states (torch, CUDA when present, numpy, python);
- ``records``: the size in bytes of each records CSV at the checkpoint (flushed and fsynced first);
- ``extra``: what the caller adds (``tta_eval.run.Run``: λ and its calibration, and the
  ``model_sha256`` of the weights the run started from, checked when it resumes).

Before a run resumes, ``tta_eval.resume`` checks what the file claims against the run folder and the
stream (its methods, its position, the records' sizes and rows, the random states' types and sizes,
``check_rng_states``), so that a damaged or edited checkpoint is refused in one line before any file
is changed.

The file is written to a temporary name next to it, fsynced and renamed over the previous one, then
the folder is fsynced: a kill at any moment leaves the previous checkpoint or the new one, never a
partial file; a write that fails (a full disk) is an OSError naming the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from ccc.pickles import NotPlainDataError, load_torch_file
from tta_eval.run_folder import CHECKPOINT_FILE

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 2
"""Version of the checkpoint's layout; a file of another version is refused (format 1, a pickle of the
method modules, is never unpickled)."""

DEFAULT_CHECKPOINT_EVERY = 100_000
"""Samples between checkpoints when ``--checkpoint-every`` is not given (75 per 7.5M-image CCC stream)."""


@dataclass(frozen=True)
class Checkpoint:
    """What a run saves to be resumed (see the module's docstring for each field).

    config: the text of the run's config.json; batches, samples: batches and samples of the stream
    consumed (>= 0); methods, runners: per method label, its method's and its runner's state;
    episodes, protocol: the episode tracker's and the protocol's state; rng: ``rng_states()``;
    records: per method label, the size of its records CSV in bytes; extra: the caller's entries.
    Every value is a tensor or a plain value.
    """

    config: str
    batches: int
    samples: int
    methods: dict[str, Any]
    runners: dict[str, Any]
    episodes: dict[str, Any]
    protocol: dict[str, Any]
    rng: dict[str, Any]
    records: dict[str, int]
    extra: dict[str, Any]

    def config_dict(self) -> dict[str, Any]:
        """The run's config the checkpoint is bound to."""
        return json.loads(self.config)

    def to_payload(self) -> dict[str, Any]:
        """The dict ``torch.save`` writes: the fields and the format."""
        return {"format": CHECKPOINT_FORMAT, **{field.name: getattr(self, field.name) for field in fields(self)}}

    @classmethod
    def from_payload(cls, payload: Any, path: Path) -> Checkpoint:
        """The checkpoint ``to_payload`` wrote to ``path``; ValueError (one line) for anything else."""
        names = {field.name for field in fields(cls)}
        found = payload.get("format") if isinstance(payload, dict) else None
        if found != CHECKPOINT_FORMAT:
            raise ValueError(
                f"checkpoint {str(path)!r} is not a tta-eval checkpoint of format {CHECKPOINT_FORMAT} "
                f"(format: {found!r}; "
                "format 1 was written by tta-eval before checkpoints held state dicts); pass --overwrite to start over"
            )
        missing = sorted(names - set(payload))
        if missing:
            raise ValueError(f"checkpoint {str(path)!r} lacks {', '.join(missing)}; pass --overwrite to start over")
        checkpoint = cls(**{name: payload[name] for name in names})
        expected = {field.name: {"str": str, "int": int}.get(str(field.type), dict) for field in fields(cls)}
        wrong = [
            name
            for name, kind in expected.items()
            if not isinstance(payload[name], kind) or (kind is int and payload[name] < 0)
        ]
        try:
            checkpoint.config_dict()
        except (TypeError, json.JSONDecodeError):
            wrong.append("config")
        if wrong:
            raise ValueError(
                f"checkpoint {str(path)!r} has malformed entries ({', '.join(sorted(set(wrong)))}); "
                "pass --overwrite to start over"
            )
        return checkpoint


def rng_states() -> dict[str, Any]:
    """The global random states as tensors and plain values: torch (CPU and, when available, every
    CUDA device), numpy (its key as an int64 tensor) and python."""
    kind, key, position, has_gauss, cached = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(key.astype(np.int64)), position, has_gauss, cached),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


CUDA_RNG_STATE_BYTES = 16
"""Bytes of one CUDA device's random state (torch's Philox generator: its seed and offset, 8 bytes each)."""

MT19937_WORDS = 624
"""32-bit words of a Mersenne Twister's state (numpy's legacy generator and python's ``random``)."""


def _shown_value(value: Any) -> str:
    """A short description of a value read from a checkpoint, for an error message."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value):,} entries"
    return f"a {type(value).__name__}"


def _is_bytes_tensor(value: Any, size: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and tuple(value.shape) == (size,)


def is_int_between(value: Any, low: int, high: int | None = None) -> bool:
    """Whether ``value`` is an int (not a bool) in [low, high] (None: no upper bound)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value and (high is None or value <= high)


def _is_numpy_state(state: Any) -> bool:
    """Whether ``state`` is ``rng_states``' numpy entry: ("MT19937", its key as an int64 tensor of 624
    words in [0, 2**32), position in [0, 624], has_gauss 0 or 1, the cached gaussian as a float)."""
    if not isinstance(state, (list, tuple)) or len(state) != 5:
        return False
    kind, key, position, has_gauss, cached = state
    return (
        kind == "MT19937"
        and isinstance(key, torch.Tensor)
        and key.dtype == torch.int64
        and tuple(key.shape) == (MT19937_WORDS,)
        and bool(((key >= 0) & (key < 2**32)).all())
        and is_int_between(position, 0, MT19937_WORDS)
        and is_int_between(has_gauss, 0, 1)
        and isinstance(cached, (int, float))
    )


def _is_python_state(state: Any) -> bool:
    """Whether ``state`` is ``random.getstate()``: (3, 624 words in [0, 2**32) and a position in
    [0, 624], the next gaussian or None)."""
    if not isinstance(state, (list, tuple)) or len(state) != 3:
        return False
    version, internal, gauss = state
    return (
        version == 3
        and isinstance(internal, (list, tuple))
        and len(internal) == MT19937_WORDS + 1
        and all(is_int_between(word, 0, 2**32 - 1) for word in internal[:-1])
        and is_int_between(internal[-1], 0, MT19937_WORDS)
        and (gauss is None or isinstance(gauss, float))
    )


def check_rng_states(states: Mapping[str, Any]) -> None:
    """ValueError (one line saying which state is wrong and what it should be) unless ``states`` has
    the form ``rng_states`` writes, so that ``restore_rng_states`` cannot fail: torch's CPU state a
    uint8 tensor of this torch's size (5,056 bytes), each CUDA device's a uint8 tensor of
    ``CUDA_RNG_STATE_BYTES`` (at most as many as this machine's devices when it has CUDA), numpy's and
    python's Mersenne Twister states."""
    unknown = sorted(set(states) - {"torch", "cuda", "numpy", "python"}, key=str)
    if unknown:
        raise ValueError(f"unknown random state {unknown[0]!r} (known: cuda, numpy, python, torch)")
    missing = [name for name in ("torch", "numpy", "python") if name not in states]
    if missing:
        raise ValueError(f"random states lack {', '.join(map(repr, missing))}")
    size = torch.get_rng_state().numel()
    if not _is_bytes_tensor(states["torch"], size):
        raise ValueError(
            f"random state 'torch' must be a uint8 tensor of {size:,} bytes, got {_shown_value(states['torch'])}"
        )
    cuda = states.get("cuda", [])
    wrong = (
        [cuda]
        if not isinstance(cuda, (list, tuple))
        else [state for state in cuda if not _is_bytes_tensor(state, CUDA_RNG_STATE_BYTES)]
    )
    if wrong:
        raise ValueError(
            f"random state 'cuda' must be a list of uint8 tensors of {CUDA_RNG_STATE_BYTES} bytes "
            f"(one per CUDA device), got {_shown_value(wrong[0])}"
        )
    if torch.cuda.is_available() and len(cuda) > torch.cuda.device_count():
        raise ValueError(
            f"random state 'cuda' holds the states of {len(cuda)} CUDA devices, this machine has "
            f"{torch.cuda.device_count()}"
        )
    if not _is_numpy_state(states["numpy"]):
        raise ValueError(
            "random state 'numpy' must be numpy's MT19937 state (its kind, 624 words, position, has_gauss, "
            f"cached gaussian), got {_shown_value(states['numpy'])}"
        )
    if not _is_python_state(states["python"]):
        raise ValueError(
            "random state 'python' must be random.getstate() (version 3, 625 integers, next gaussian), "
            f"got {_shown_value(states['python'])}"
        )


def restore_rng_states(states: Mapping[str, Any]) -> None:
    """Set the global random states saved by ``rng_states`` (of the form ``check_rng_states`` accepts)."""
    torch.set_rng_state(states["torch"].cpu())
    kind, key, position, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, key.cpu().numpy().astype(np.uint32), position, has_gauss, cached))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


class _WriteErrors:
    """A binary file whose first write error is kept: ``torch.save`` reports a failed write (a full disk)
    as a RuntimeError of its zip writer, losing the OSError."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self._handle.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self._handle.flush()


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> int:
    """Write ``checkpoint`` (its ``to_payload``) with ``torch.save`` to ``path`` atomically (temporary
    file, fsync, rename, fsync of the folder); returns the file's size in bytes. A failed write (a full disk) is an
    OSError naming ``path`` (the previous checkpoint stays); the temporary is removed on error."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as handle:
            writer = _WriteErrors(handle)
            try:
                torch.save(checkpoint.to_payload(), writer)
            except RuntimeError:
                if writer.error is None:
                    raise
            if writer.error is not None:
                raise writer.error
            handle.flush()
            os.fsync(handle.fileno())
            size = handle.tell()
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        reason = error.strerror or str(error)
        raise OSError(
            error.errno, f"{reason}; the checkpoint was not written (the previous one, if any, is kept)", str(path)
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_folder(path.parent)
    return size


def read_checkpoint(run_dir: Path, device: str | torch.device = "cpu") -> Checkpoint | None:
    """The checkpoint of ``run_dir`` (tensors on ``device``), or None when it has none; ValueError of
    one line for a file that is not a checkpoint of this format. Nothing named by the file runs
    (``ccc.pickles.load_torch_file``)."""
    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    try:
        payload = load_torch_file(path, "checkpoint", map_location=device)
    except NotPlainDataError as error:
        raise ValueError(
            f"{error}, as checkpoints of format 1 (older tta-eval) do; pass --overwrite to start over"
        ) from None
    except ValueError as error:
        raise ValueError(f"{error}; pass --overwrite to start over") from None
    return Checkpoint.from_payload(payload, path)


def remove_checkpoint(run_dir: Path) -> None:
    """Delete the checkpoint of a finished run (and a temporary one a kill left behind)."""
    for name in (CHECKPOINT_FILE, f".{CHECKPOINT_FILE}.tmp"):
        (Path(run_dir) / name).unlink(missing_ok=True)


def model_sha256(model: torch.nn.Module) -> str:
    """The sha256 of ``model``'s weights: the name, dtype, shape and bytes of every entry of its
    ``state_dict`` (parameters and buffers), in name order. A resumed run rebuilds each method's reset
    state from the model, so it must load the weights the run started from."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if not isinstance(tensor, torch.Tensor):
            continue
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class Checkpointer:
    """Writes a run's checkpoints every ``every`` samples (> 0).

    run_dir: the run folder; config: the text of the run's config.json (the checkpoints are bound to
    it); records: label → the open records file of each method (flushed and fsynced before each
    checkpoint, their sizes saved); extra: what every checkpoint also carries (tensors and plain
    values); start: samples already consumed (a resumed run). The protocol machinery calls ``due``
    at each batch boundary and ``save`` when it returns True.
    """

    def __init__(
        self,
        run_dir: Path,
        every: int,
        config: str,
        records: Mapping[str, TextIO],
        extra: Mapping[str, Any] | None = None,
        start: int = 0,
    ) -> None:
        if every <= 0:
            raise ValueError(f"checkpoint interval must be a positive number of samples, got {every!r}")
        self.path = Path(run_dir) / CHECKPOINT_FILE
        self.every = every
        self._config = config
        self._records = records
        self._extra = dict(extra or {})
        self._next = (start // every + 1) * every
        self.writes: list[tuple[int, float]] = []
        """(bytes, seconds) of every checkpoint written by this object."""

    def due(self, samples: int) -> bool:
        """True when ``samples`` (consumed so far) reached the next checkpoint."""
        return samples >= self._next

    def save(self, state: Mapping[str, Any], samples: int) -> None:
        """Flush and fsync the records, then write a ``Checkpoint`` of ``state`` (methods, runners,
        episodes, protocol: state dicts; position: batches and samples consumed) with the records'
        sizes, the global random states and the extra entries."""
        started = time.perf_counter()
        sizes = {}
        for label, handle in self._records.items():
            try:
                handle.flush()
                os.fsync(handle.fileno())
            except OSError as error:
                message = (
                    f"{error.strerror or error}; the checkpoint was not written (the previous one, if any, is kept)"
                )
                raise OSError(error.errno, message, handle.name) from None
            sizes[label] = os.fstat(handle.fileno()).st_size
        checkpoint = Checkpoint(
            config=self._config,
            batches=int(state["position"]["batches"]),
            samples=int(state["position"]["samples"]),
            methods=dict(state["methods"]),
            runners=dict(state["runners"]),
            episodes=dict(state["episodes"]),
            protocol=dict(state["protocol"]),
            rng=rng_states(),
            records=sizes,
            extra=self._extra,
        )
        size = write_checkpoint(self.path, checkpoint)
        self._next = (samples // self.every + 1) * self.every
        self.writes.append((size, time.perf_counter() - started))
        logger.info("checkpoint at sample %d: %.1f MB in %.2f s", samples, size / 1e6, self.writes[-1][1])
