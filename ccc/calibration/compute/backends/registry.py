"""The calibration backends by name: how ``calibrate(config)`` builds the backend its config names.

A calibration backend runs work units and reports their results (:class:`CalibrationBackend`, the
contract every backend keeps, defined here). Each module of ``ccc.calibration.compute.backends`` ends
in ``register_backend(BackendEntry(name, factory, description))``, the factory building the backend
from a :class:`BackendSetup`; the package imports every module
(:func:`ccc.registry.import_submodules`), so a new backend (e.g. one that renders on the GPU) is one
new module. Registered: ``model``
(:class:`~ccc.calibration.compute.backends.model.ModelBackend`, the default: a model measures the units
on an executor) and ``simulation``
(:class:`~ccc.calibration.compute.backends.simulation.CorrelatedImagesBackend`: results drawn from known
accuracies) and ``torch`` (:class:`~ccc.calibration.compute.backends.torch_render.TorchRenderBackend`: the
cells rendered and evaluated on one device with :mod:`ccc.render_torch`; its bytes differ from the
CPU path's).

This module imports neither torch nor the backends nor the job (a backend is built from the job's
:class:`~ccc.calibration.compute.engine.RenderContext`), so that no module imports back into it. The
backends are a package of their own so that ``ccc.calibration.compute`` imports nothing on its own:
Ray rendering workers import :mod:`~ccc.calibration.compute.engine` alone, without torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ccc.registry import Registry

if TYPE_CHECKING:
    from ccc.calibration.compute.engine import RenderContext, UnitResult, WorkUnit
    from ccc.execution import Executor
    from ccc.models import ModelSource

ResultCallback = Callable[["UnitResult"], None]
"""Called by a backend once per finished unit."""


class CalibrationBackend(Protocol):
    """Runs work units; ``on_result`` is called once per finished unit, in completion order."""

    def run(self, units: Sequence[WorkUnit], on_result: ResultCallback) -> None:
        """Execute ``units`` and report each result through ``on_result``."""


@dataclasses.dataclass(frozen=True)
class BackendSetup:
    """What a backend factory may build its backend from.

    Attributes:
        context: the calibration job's render context (its image set, corruptions, seed and block
            size: ``CalibrationJob.render_context()``).
        executor: where work runs (:mod:`ccc.execution`, serial or Ray).
        model: a ModelSpec (loaded by each worker) or an ``nn.Module``.
        device: ``"cpu"`` or ``"cuda[:index]"``.
        batch_size: images per forward pass, >= 1.
        amp: float16 autocast (CUDA only).
        evaluators: model workers on Ray (None: the backend's default).
        options: the backend's own options (name → value; see each backend's description);
            a factory refuses an option it does not know in one line naming the valid ones.
    """

    context: RenderContext
    executor: Executor
    model: ModelSource
    device: str = "cpu"
    batch_size: int = 64
    amp: bool = False
    evaluators: int | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def check_options(self, backend: str, valid: tuple[str, ...]) -> None:
        """ValueError naming ``backend`` and its ``valid`` options for any other option."""
        unknown = sorted(set(self.options) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, unknown))} of calibration backend {backend!r}; "
                f"valid options: {', '.join(valid) or 'none'}"
            )

    def block_sizes(self) -> list[int]:
        """Images in each block of the job (the last one may be smaller)."""
        images, size = len(self.context.image_set), self.context.block_size
        return [min(size, images - block * size) for block in range(self.context.block_count)]


@dataclasses.dataclass(frozen=True)
class BackendEntry:
    """One registered calibration backend.

    name: its registry key (``CalibrationConfig.backend``); factory: ``factory(setup)`` returns
    the backend (ValueError in one line for a bad option); description: one line, naming its options;
    uses_executor: whether it runs work on ``setup.executor`` (False: in the calling process, so
    ``calibrate`` starts no Ray cluster for it).
    """

    name: str
    factory: Callable[[BackendSetup], CalibrationBackend]
    description: str
    uses_executor: bool = True


REGISTRY: Registry[BackendEntry] = Registry("calibration backend")
"""Every calibration backend, by name."""


def register_backend(entry: BackendEntry) -> BackendEntry:
    """Add ``entry`` (at the end of its module); ValueError if its name is taken."""
    return REGISTRY.register(entry)


def get_backend(name: str) -> BackendEntry:
    """The backend called ``name``; ValueError listing the registered backends otherwise."""
    return REGISTRY.get(name)


def list_backends(pattern: str = "*") -> list[str]:
    """Names of the registered backends matching the shell-style ``pattern``, by name."""
    return REGISTRY.names(pattern)
