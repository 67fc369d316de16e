r"""GPU-shaped proxies of the torch renderer, measured on the CPU (issue 36): what one batch of the medium
mix with the JPEG round trip would cost on a GPU, counted op by op.

The batch is ``scripts/bench/render.py``'s medium mix (samples spread evenly over a paper-length
``difficulty=medium`` stream of the ResNet-50 presets on a synthetic table, 200 ImageNet-size
photographs, decoded with PIL into numpy arrays) at each ``--batch-sizes`` B, rendered by
``render_batch(specs, images, device, jpeg=True)``. Per batch:

- **launches**: ATen ops dispatched on device tensors (a ``TorchDispatchMode`` sees every op below
  autograd), except the ones that launch no kernel on a GPU: views (``OpOverload.is_view``: view,
  reshape aliases, expand, permute, select, slice, unbind, …), allocations (``empty*``, ``new_empty*``),
  metadata (``resize_``, ``set_``, ``lift_fresh``) and reads of a scalar (``_local_scalar_dense``,
  counted as a host read); the JSON lists the excluded ops seen, with counts;
- **host reads** (device→host, each a blocking round trip): ``_local_scalar_dense`` (``.item()``),
  ``equal``, ``is_nonzero``; ops whose output shape depends on device data: ``nonzero``, ``unique*``,
  ``masked_select``, ``index``/``index_put`` with a boolean index, ``repeat_interleave`` with a tensor
  count and no ``output_size``, ``bincount``; ``copy_`` or ``_to_copy`` from a device tensor into a host
  one; and the Python-level reads that dispatch nothing on a CPU tensor, counted by patching
  ``Tensor.tolist``, ``numpy``, ``__array__``, ``cpu``, ``to`` (to the host), ``__bool__``, ``__int__``,
  ``__float__`` and ``__index__`` during the measurement (the ops they dispatch inside are not counted
  again);
- **uploads** (host→device copies) and their bytes: ``_to_copy`` or ``copy_`` of a host tensor into a
  device one, ``torch.tensor``/``as_tensor``/``asarray`` of host data with the render device, and a host
  tensor with more than one element passed to an op on device tensors (on CUDA an error, or an
  implicit copy for an index; 0-dim host tensors are scalars there, not counted); ``non_blocking``
  copies are counted apart, and so are the **uploads that wait**: on CUDA a blocking copy, or a
  ``non_blocking`` one from pageable host memory, may first wait for all the work queued on the stream
  (CUDA Runtime API, "API synchronization behavior"). A copy counts as pinned when its source lies in a
  host buffer allocated with ``pin_memory=True`` (allocated unpinned here, where no CUDA driver is);
- **bytes moved**: the sum over launches of the bytes of every tensor input and output (in-place
  outputs counted as written), except for the ops that read or write through an index, which touch
  only the indexed elements of their source or target: a gather (``index``, ``index_select``,
  ``gather``, ``take``) moves its indices and twice its output (read from the source, written), a
  scatter (``index_put_``, ``index_copy_``, ``scatter_``, …) its indices and twice its values; the JSON
  splits launches and bytes by the innermost ``ccc`` source line that dispatched them;
- **FLOPs**, float64 (and complex128) and float32 (and lower, complex64) apart: elementwise ops one per
  output element, reductions and sorts one per input element, ``mm``/``addmm`` 2·M·N·K, ``bmm``/``baddbmm``
  2·B·M·N·K, ``convolution`` 2·(output elements)·(input channels per group)·(kernel elements), FFTs
  5·N·log2 N per transform of N points; copies, casts, gathers, indexing, padding and factories 0; integer
  ops 0 (their bytes are counted).

**Device or host.** The CPU stands for the GPU: the batch is rendered with ``device="cpu:0"``, and every
tensor is either a device tensor (it would live on the GPU) or a host tensor (it would stay in host
memory). Device tensors are the outputs of ops with at least one device tensor input, of factory ops
(``zeros``, ``full``, ``arange``, ``empty``, …) whose ``device`` is the render device (``cpu:0``, an
index that a host factory never carries), of ``_to_copy`` to the render device, and of ``torch.tensor``,
``as_tensor`` or ``asarray`` with the render device. Everything else is a host tensor: ``from_numpy``,
``torch.tensor`` of Python data without a device, factories without a device, ops on host tensors
alone (counted as host ops, not launches), module constants made at import, and what ``.cpu()`` or
``.to("cpu")`` returns from a device tensor (a host copy). While the measurement runs,
``Tensor.device`` reads ``cpu:0`` on a device tensor, so that code which places its tensors with
``x.device`` places them as it would on a GPU. Provenance lives in a weak table for the whole process,
so a device tensor that a cache keeps from an earlier batch stays a device tensor (each B is measured
after an untimed warm-up batch of other samples, every corruption among them: one-time uploads of cached
tables are not counted).

**Device-type branches.** Code that tests ``device.type`` still sees ``cpu``. Where the code has a
separate GPU branch the script substitutes it: ``jpeg_round_trip`` is replaced by
``integer_jpeg_round_trip`` (what every non-CPU device runs) in every ``ccc.render_torch`` module that
holds it, when that function exists; ``_upload.pinned_for`` and ``_upload._on_host`` (when they exist)
treat ``cpu:0`` as CUDA (host buffers asked pinned, copies made); and defocus blur's
``fft_samples_per_call`` returns the GPU's fixed count (``blur.FFT_SAMPLES_PER_CALL``), and
``gather_elements`` (motion blur's taps and zoom blur's zooms; ``motion_blur_gather_elements`` before)
the GPU's values per gather (``numerics.GATHER_ELEMENTS``) in every module that holds it, and
``_resample.multiplies_while_casting`` says yes, when they exist; before the JPEG branch existed (commit
ace2c68), ``jpeg_round_trip`` copied device images to the host, ran libjpeg there and uploaded the
result (nvJPEG's CUDA branch fails, issue 36): counted as one read and one upload. The JSON lists the
substitutions made.

**Fused operators.** The renderer's ``ccc::`` operators (``torch.library.custom_op``; on CUDA each runs one
Triton kernel, ``ccc/render_torch/_triton``) are dispatched whole: on ``cpu:0`` their ATen composition runs
unseen, and each counts as one launch that moves the bytes of its tensor inputs and outputs once (the kernel
reads its inputs and writes its output once; values it reads several times, such as a filter's neighbours,
are taken as served by the GPU's caches), with the FLOPs of its composition (the kernel makes the same float
operations: that is how it gives the same bits). A checkout without them counts their compositions op by op.

**Host CPU time** per image: CPU time of this process (one torch thread) for
``render_batch(specs, images, "cpu", jpeg=True)`` with nothing patched and no dispatch mode, after the
warm-up batch. It includes everything the CPU does: Python, the spec and table work, and the execution
of every kernel on the CPU (libjpeg for the final round trip on the CPU). It is an upper bound for the
host time per image of a GPU render, not an estimate of it.

**Host time on the meta device** per image (``host_meta_ms_per_image``): CPU time of this process (one
torch thread) for ``render_batch(specs, images, "meta", jpeg=True)``, nothing patched but the stage
timers, best of :data:`META_REPEATS` runs after the warm-up batch (the caches of the sizes' tap tables
then hold the batch's sizes, as they do after a few batches of a stream), per stage: ``geometry``
(the crops' host half, ``prepare_crop_resize_flip``, and its device half), ``stage_1`` and ``stage_2``
(``prepare_corruption_stage`` and its device half), ``upload`` (``BatchUpload.send``: the batch's
tables and the packing of the sources into its host buffer, and the one copy), ``jpeg`` (the round trip,
the integer path on meta) and ``other`` (the rest of ``render_batch``), and ``total``. For a checkout
before the one upload per batch, ``geometry`` is ``crop_resize_flip`` (with the packing) and the stages
``apply_corruption_stage``, each with its own copies; ``upload`` is 0. The meta device holds no data and runs no
kernel, so this is the host's work: Python, numpy, the tables and the dispatch of every op, including
torch's meta kernels (shape inference), which for many ops (elementwise ones through
``torch._refs``) run in Python and cost far more per op than a GPU launch's host cost: an upper
bound for the host time of a GPU render, far tighter than the CPU render's. ``meta_ops_per_batch``:
the ops dispatched per stage on meta (views and allocations included), to read the time against.
The meta runs take their host buffers (``ccc.render_torch._upload.host_buffer``, where the checkout has
it) from a cache of one tensor per shape and dtype, as torch's caching host allocator hands a freed
pinned block out again on CUDA: a fresh buffer per batch (what ``host_buffer`` allocates for any device
but CUDA) would charge every batch the first touch of the sources' pages (about 80 ms at B = 512), which
a render on CUDA does not pay.

**Host time on CUDA, modelled** (``host_cuda_model_ms_per_image``): the meta run with its launches'
host cost replaced by the model's launch cost. A ``TorchDispatchMode`` times every op inside its
dispatch on meta and counts as launches the ops on meta tensors that would launch a kernel on a GPU (a
copy to the device included; not views, allocations or scalar reads). ``meta_without_launches``: the
wall time of the plain meta run (best of :data:`META_REPEATS`, as every time here) less the launches'
timed dispatch: Python, numpy, the tables, the packing, the calls into torch, the views and
allocations (a difference of two measured times: at a few samples per batch it is within their noise,
and may read below zero); ``launches``: ``launch_count`` × 10 µs (the model's launch cost, taken as the
host's cost of ATen's dispatch and the driver's launch call; meta's shape functions, written in Python
for many ops, cost several times that); ``total`` their sum. The timed dispatch of an op also holds what the mode
adds to it (the op dispatched again from Python), ``mode_us_per_op``: the wall time a mode that only
counts adds to a plain run, per op; ``bound`` adds it back for every launch, an upper bound of what
the subtraction may have taken too much.
**Packing** (``host_packing_ms_per_image``): CPU time of ``geometry._pack_boxes``, the copy of every
sample's crop into a preallocated host buffer (on CUDA the pinned buffer that torch's caching host
allocator reuses), best of :data:`META_REPEATS`; None for a checkout without it.

**Stream windows** (``--windows N``, default 4; 0: none): the batches above spread their samples over
the whole paper stream, so a batch holds up to 38 (stage, corruption) groups: the worst case for
launches. A stream is rendered in order, and B consecutive samples share one corruption pair (a pair
lasts a whole path of the plan), so the batches of ``ccc-generate --render-device`` and of an
on-the-fly stream hold one or two groups per stage. For each B, ``N`` windows of B consecutive samples
starting at evenly spaced positions of the same stream are counted as above (launches, host reads,
uploads, bytes, FLOPs, and the modelled host time on CUDA; not the CPU's or meta's host time) and the
modelled seconds per batch and host time averaged over the windows: ``windows`` in the JSON, and the
rate a stream rendered in order would get by the model.

**The model** of one H100 (SXM, one stream, no overlap): seconds per batch = launches × 10 µs + host
round trips (host reads and uploads that wait) × 20 µs + bytes moved / 3 TB/s + float64 FLOPs / 50 TFLOP/s
+ float32 FLOPs / 400 TFLOP/s; images/s = B / that. The other uploads and the host time are not in it
(reported apart). The modelled rate at
B = 512 is measured when 512 is in ``--batch-sizes``, else interpolated linearly in B between the two
nearest measured sizes (per-batch seconds).

``--render-precision float32`` measures ``render_batch``'s float32 working precision (default float64).

Run from the repository root. The script measures the ``ccc`` of the checkout it lies in (its helpers put
that checkout first on ``sys.path``): to measure another commit, copy it into that commit's worktree::

    python scripts/bench/render_proxies.py --batch-sizes 16,128,512,1024 --json results/render_proxies.json
    python scripts/bench/render_proxies.py --quick     # B = 2 and 4, a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch._library import custom_ops
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corruptions import _environment, run_and_write  # noqa: E402
from generate import make_source_folder, synthetic_table  # noqa: E402
from render import PAPER_STREAM, SOURCE_IMAGES, _positive_list, window_specs  # noqa: E402

from ccc.render import RENDER_PRECISIONS, decode_jpeg  # noqa: E402
from ccc.render_torch import render_batch  # noqa: E402
from ccc.stream.plan import plan_sample, plan_stream  # noqa: E402
from ccc.stream.spec import SampleSpec  # noqa: E402

RENDER_DEVICE = torch.device("cpu", 0)
"""The render device as the measured code sees it: the CPU, with an index no host tensor carries."""
WARMUP_SAMPLES = 64
"""Samples of the untimed warm-up batch before each measured one (other samples of the same stream; 64 hold
every corruption of the medium mix, so that each corruption's once-per-process tables are made there)."""
MODEL = {
    "launch_seconds": 10e-6,
    "host_read_seconds": 20e-6,
    "bytes_per_second": 3e12,
    "float64_flops_per_second": 50e12,
    "float32_flops_per_second": 400e12,
}
"""The H100 model: seconds per launch and per host read, memory bandwidth (bytes/s), FLOP/s per precision."""
MODEL_TEXT = (
    "seconds per batch = launches × 10 µs + host round trips (reads, uploads that wait) × 20 µs + bytes moved / 3 TB/s "
    "+ float64 FLOPs / 50 TFLOP/s + float32 FLOPs / 400 TFLOP/s (one H100, no overlap)"
)
META_REPEATS = 5
"""Runs of each batch on the meta device (and of the packing) whose fastest is reported."""
META_STAGES = ("geometry", "stage_1", "stage_2", "upload", "jpeg", "other", "total")
"""The stages of ``host_meta_ms_per_image`` and ``meta_ops_per_batch`` (module docstring)."""
GOAL_BATCH = 512
"""The batch size of the issue's modelled-rate goal."""

NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_", "lift_fresh"}
"""Ops, besides views, that allocate or change metadata and launch no kernel on a GPU."""
SCALAR_READS = {"_local_scalar_dense", "equal", "is_nonzero"}
"""Ops that return device data to Python."""
DATA_DEPENDENT = {"nonzero", "unique_consecutive", "unique_dim", "_unique", "_unique2", "masked_select", "bincount"}
"""Ops whose output shape depends on device data (a round trip on a GPU)."""
BOOLEAN_INDEXED = {"index", "index_put", "index_put_", "_index_put_impl_"}
"""Indexing ops that read a boolean index on the host."""
GATHERS = {"index", "index_select", "gather", "take"}
"""Ops that read their source (the first input) through an index: they touch their output's size of it."""
SCATTERS = {"index_put", "index_put_", "_index_put_impl_", "index_copy", "index_copy_", "scatter", "scatter_"}
"""Ops that write their values (the last input) into their target (the first) through an index."""
REDUCTIONS = {
    "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean", "norm",
    "linalg_vector_norm", "cumsum", "cumprod", "logsumexp", "any", "all", "argmax", "argmin", "sort", "topk",
    "median", "kthvalue", "aminmax",
}  # fmt: skip
"""Ops counted one FLOP per input element."""
MEMORY_ONLY = {
    "copy_", "_to_copy", "clone", "cat", "stack", "index", "index_put", "index_put_", "_index_put_impl_", "gather",
    "scatter", "scatter_", "index_select", "index_copy", "index_copy_", "pad", "constant_pad_nd", "reflection_pad2d",
    "replication_pad2d", "flip", "roll", "repeat", "fill_", "fill", "zero_", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "arange", "scalar_tensor", "masked_fill", "masked_fill_", "where",
    "_unsafe_index", "take", "tril", "triu", "repeat_interleave", "nonzero", "masked_select", "_unique2",
    "_unique", "unique_dim", "unique_consecutive", "linspace", "eye", "slice_scatter", "select_scatter",
    "diagonal_scatter", "as_strided_scatter", "_pin_memory", "pin_memory", "expand_copy", "permute_copy",
    "view_copy", "col2im", "im2col",
}  # fmt: skip
"""Ops counted as 0 FLOPs (they move or make data)."""
FUSED_NAMESPACE = "ccc"
"""The namespace of the renderer's fused operators (``torch.library.custom_op("ccc::…")``): one Triton kernel
each on CUDA, counted as one launch that moves its inputs and outputs once (module docstring)."""
FFT = {"_fft_r2c", "_fft_c2r", "_fft_c2c"}
WIDE = {torch.float64, torch.complex128}
"""dtypes whose FLOPs count as float64."""


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _site() -> str:
    """``module.py:line`` of the innermost ``ccc`` frame calling into torch ("?" outside ``ccc``)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if "ccc" in path.parts and path.suffix == ".py":
            return f"{'/'.join(path.parts[path.parts.index('ccc') :])}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _is_render_device(device: object) -> bool:
    """Whether a ``device`` argument names the render device (``cpu:0``), not the host (``cpu``, None)."""
    if device is None:
        return False
    return torch.device(device) == RENDER_DEVICE


class ProxyCounter(TorchDispatchMode):
    """Counts launches, host reads, uploads, bytes and FLOPs of the ops dispatched under it (module
    docstring); ``provenance`` marks device tensors and is shared by every measurement of a process."""

    def __init__(self, provenance: WeakIdKeyDictionary) -> None:
        super().__init__()
        self.provenance = provenance
        self.quiet = 0
        """Depth of Python-level calls that already counted what they dispatch (ops then only propagate)."""
        self.launches = 0
        self.launch_ops: Counter[str] = Counter()
        self.excluded_ops: Counter[str] = Counter()
        self.host_ops = 0
        self.reads: Counter[str] = Counter()
        self.read_sites: Counter[str] = Counter()
        self.upload_sites: Counter[str] = Counter()
        self.read_bytes = 0
        self.uploads: Counter[str] = Counter()
        self.upload_bytes = 0
        self.non_blocking_uploads = 0
        self.waiting_uploads = 0
        """Uploads that would wait for the GPU on CUDA: blocking ones, ``non_blocking`` ones from pageable memory."""
        self.pinned: list[torch.Tensor] = []
        """The host buffers allocated with ``pin_memory=True`` (allocated unpinned here), kept for the batch."""
        self.bytes_moved = 0
        self.launch_sites: Counter[str] = Counter()
        self.bytes_by_site: Counter[str] = Counter()
        self.float64_flops = 0.0
        self.float32_flops = 0.0

    def on_device(self, tensor: object) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor in self.provenance

    def mark(self, outputs: object) -> None:
        for tensor in tree_flatten(outputs)[0]:
            if isinstance(tensor, torch.Tensor):
                self.provenance[tensor] = True

    def read(self, kind: str, nbytes: int) -> None:
        self.reads[kind] += 1
        self.read_sites[_site()] += 1
        self.read_bytes += nbytes

    def upload(self, kind: str, nbytes: int, non_blocking: bool = False, pinned: bool = False) -> None:
        self.uploads[kind] += 1
        self.upload_sites[_site()] += 1
        self.upload_bytes += nbytes
        self.non_blocking_uploads += bool(non_blocking)
        self.waiting_uploads += not (non_blocking and pinned)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lies in a host buffer allocated with ``pin_memory=True``."""
        pointer = tensor.untyped_storage().data_ptr()
        return any(buffer.untyped_storage().data_ptr() == pointer for buffer in self.pinned)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.ops.aten.empty.memory_format and kwargs.get("pin_memory"):
            output = func(*args, **{**kwargs, "pin_memory": False})  # no CUDA driver here to pin with
            self.pinned.append(output)
            self.host_ops += not self.quiet
            return output
        inputs = [value for value in tree_flatten((args, kwargs))[0] if isinstance(value, torch.Tensor)]
        name = func.overloadpacket.__name__
        device_inputs = [tensor for tensor in inputs if self.on_device(tensor)]
        if inputs:
            on_device = bool(device_inputs)
        else:
            on_device = _is_render_device(kwargs.get("device"))
        if func.namespace == FUSED_NAMESPACE and on_device and not self.quiet:
            with _CompositionFlops() as composition:  # its ATen composition runs here, op by op, on the CPU
                output = _composition(func)(*args, **kwargs)
            self._count_device_op(func, name, args, inputs, output, kwargs, composition)
            self.mark(output)
            return output
        output = func(*args, **kwargs)
        if self.quiet:
            if on_device or (name == "_to_copy" and _is_render_device(kwargs.get("device"))):
                self.mark(output)
            return output
        if name == "_to_copy":
            on_device = self._count_to_copy(inputs[0], output, kwargs, on_device)
        elif name == "copy_":
            self._count_copy(args[0], args[1], kwargs.get("non_blocking", False))
            on_device = self.on_device(args[0])
        elif on_device:
            self._count_device_op(func, name, args, inputs, output, kwargs)
        else:
            self.host_ops += 1
        if on_device:
            self.mark(output)
        return output

    def _count_to_copy(self, source: torch.Tensor, output: torch.Tensor, kwargs: dict, on_device: bool) -> bool:
        """A cast and/or a move; returns whether ``output`` is a device tensor."""
        target = kwargs.get("device")
        if target is None:
            if on_device:
                self._launch("_to_copy", [source], output)
            else:
                self.host_ops += 1
            return on_device
        if _is_render_device(target):
            if not on_device:
                self.upload("_to_copy", _nbytes(output), kwargs.get("non_blocking", False), self.is_pinned(source))
            elif output.dtype != source.dtype:
                self._launch("_to_copy", [source], output)
            return True
        if on_device:
            self.read("_to_copy to the host", _nbytes(source))
        else:
            self.host_ops += 1
        return False

    def _count_copy(self, destination: torch.Tensor, source: torch.Tensor, non_blocking: bool) -> None:
        if self.on_device(destination) and self.on_device(source):
            self._launch("copy_", [destination, source], destination)
        elif self.on_device(destination):
            self.upload("copy_", _nbytes(source), non_blocking, self.is_pinned(source))
        elif self.on_device(source):
            self.read("copy_ to a host tensor", _nbytes(source))
        else:
            self.host_ops += 1

    def _count_device_op(
        self,
        func: torch._ops.OpOverload,
        name: str,
        args: tuple,
        inputs: list[torch.Tensor],
        output: object,
        kwargs: dict,
        composition: _CompositionFlops | None = None,
    ) -> None:
        for tensor in inputs:
            if not self.on_device(tensor) and tensor.dim() > 0 and tensor.numel() > 1:
                self.upload(f"host tensor into {name}", _nbytes(tensor))
        if name in SCALAR_READS:
            self.read(name, sum(_nbytes(tensor) for tensor in inputs if self.on_device(tensor)))
            if name == "_local_scalar_dense":
                return
        elif name in DATA_DEPENDENT:
            self.read(name, 0)
        elif name in BOOLEAN_INDEXED and any(
            index.dtype == torch.bool and self.on_device(index) for index in inputs[1:]
        ):
            self.read(f"{name} with a boolean index", 0)
        elif name == "repeat_interleave" and kwargs.get("output_size") is None:
            self.read("repeat_interleave with a tensor count", 0)
        if func.is_view or name in NO_KERNEL:
            self.excluded_ops[name] += 1
            return
        self._launch(name, inputs, output, args, composition)

    def _launch(
        self,
        name: str,
        inputs: list[torch.Tensor],
        output: object,
        args: tuple = (),
        composition: _CompositionFlops | None = None,
    ) -> None:
        outputs = [tensor for tensor in tree_flatten(output)[0] if isinstance(tensor, torch.Tensor)]
        self.launches += 1
        self.launch_ops[name] += 1
        if name in GATHERS:  # the indices, and the gathered elements read and written
            moved = sum(_nbytes(tensor) for tensor in inputs[1:]) + 2 * sum(_nbytes(tensor) for tensor in outputs)
        elif name in SCATTERS:  # the indices and values read, the values written
            moved = sum(_nbytes(tensor) for tensor in inputs[1:]) + _nbytes(inputs[-1])
        else:
            moved = sum(_nbytes(tensor) for tensor in inputs + outputs)
        self.bytes_moved += moved
        site = _site()
        self.launch_sites[site] += 1
        self.bytes_by_site[site] += moved
        if composition is not None:  # a fused operator: its composition's FLOPs
            self.float64_flops += composition.float64_flops
            self.float32_flops += composition.float32_flops
            return
        flops, wide = _flops(name, inputs, outputs, args)
        if wide:
            self.float64_flops += flops
        else:
            self.float32_flops += flops


def _composition(func: torch._ops.OpOverload) -> Callable:
    """A fused ``ccc::`` operator's Python default, its ATen composition, to run op by op under a mode (called as
    the operator, it would be one op to the mode): ``torch.library`` keeps it as the operator's ``_init_fn``."""
    return custom_ops._maybe_get_opdef(func)._init_fn


class _CompositionFlops(TorchDispatchMode):
    """The FLOPs (:func:`_flops`) of the ATen ops a fused ``ccc::`` operator's composition dispatches (the
    compositions of the operators it calls included): its Triton kernel makes the same float operations (that is
    how it gives the same bits), in registers."""

    def __init__(self) -> None:
        super().__init__()
        self.float64_flops = 0.0
        self.float32_flops = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func.namespace == FUSED_NAMESPACE:  # an operator the composition calls: its own composition, op by op
            with _CompositionFlops() as inner:
                output = _composition(func)(*args, **kwargs)
            self.float64_flops += inner.float64_flops
            self.float32_flops += inner.float32_flops
            return output
        output = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if func.is_view or name in NO_KERNEL:  # as ProxyCounter: no launch, no FLOPs
            return output
        inputs = [value for value in tree_flatten((args, kwargs))[0] if isinstance(value, torch.Tensor)]
        outputs = [tensor for tensor in tree_flatten(output)[0] if isinstance(tensor, torch.Tensor)]
        flops, wide = _flops(name, inputs, outputs, args)
        if wide:
            self.float64_flops += flops
        else:
            self.float32_flops += flops
        return output


def _flops(name: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor], args: tuple) -> tuple[float, bool]:
    """(FLOPs of one launch, whether they are float64); 0 for integer-only and memory-only ops."""
    floating = [t for t in inputs + outputs if t.dtype.is_floating_point or t.dtype.is_complex]
    if not floating or name in MEMORY_ONLY:
        return 0.0, False
    wide = any(tensor.dtype in WIDE for tensor in floating)
    if name in ("mm", "addmm"):
        a, b = inputs[-2:]
        return 2.0 * a.shape[0] * a.shape[1] * b.shape[1], wide
    if name in ("bmm", "baddbmm"):
        a, b = inputs[-2:]
        return 2.0 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2], wide
    if name == "convolution":
        weight = inputs[1]
        return 2.0 * outputs[0].numel() * weight.shape[1] * math.prod(weight.shape[2:]), wide
    if name in FFT:
        signal = outputs[0] if name == "_fft_c2r" else inputs[0]
        points = math.prod(signal.shape[dim] for dim in args[1])
        return 5.0 * signal.numel() * math.log2(max(points, 2)), wide
    if name in REDUCTIONS:
        return float(sum(tensor.numel() for tensor in inputs)), wide
    return float(sum(tensor.numel() for tensor in outputs)), wide


@contextlib.contextmanager
def _patched(owner: object, name: str, replacement: object) -> Iterator[None]:
    """``owner.name`` replaced by ``replacement`` inside the block (an inherited attribute is shadowed, then
    unshadowed)."""
    inherited = isinstance(owner, type) and name not in vars(owner)
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if inherited:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _python_level_patches(counter: ProxyCounter) -> contextlib.ExitStack:
    """Patches of the Python-level reads, uploads and ``Tensor.device`` (module docstring)."""
    stack = contextlib.ExitStack()

    def reading(method_name: str, returns_host_tensor: bool) -> None:
        original = getattr(torch.Tensor, method_name)

        def method(self: torch.Tensor, *args: object, **kwargs: object) -> object:
            if not counter.on_device(self) or counter.quiet:
                return original(self, *args, **kwargs)
            counter.read(f"Tensor.{method_name}", _nbytes(self))
            counter.quiet += 1
            try:
                result = original(self, *args, **kwargs)
                if returns_host_tensor and result is self:
                    with _disable_current_modes():
                        result = self.clone()
            finally:
                counter.quiet -= 1
            return result

        stack.enter_context(_patched(torch.Tensor, method_name, method))

    for method_name in ("tolist", "numpy", "__array__", "__bool__", "__int__", "__float__", "__index__"):
        reading(method_name, returns_host_tensor=False)
    reading("cpu", returns_host_tensor=True)

    original_to = torch.Tensor.to

    def to(self: torch.Tensor, *args: object, **kwargs: object) -> object:
        targets = [value for value in (*args, kwargs.get("device")) if isinstance(value, (str, torch.device))]
        if targets and not _is_render_device(targets[0]) and counter.on_device(self) and not counter.quiet:
            counter.read("Tensor.to the host", _nbytes(self))
            counter.quiet += 1
            try:
                result = original_to(self, *args, **kwargs)
                if result is self:
                    with _disable_current_modes():
                        result = self.clone()
            finally:
                counter.quiet -= 1
            return result
        return original_to(self, *args, **kwargs)

    stack.enter_context(_patched(torch.Tensor, "to", to))

    original_device = torch._C.TensorBase.device

    def device(self: torch.Tensor) -> torch.device:
        return RENDER_DEVICE if counter.on_device(self) else original_device.__get__(self)

    stack.enter_context(_patched(torch.Tensor, "device", property(device)))

    def factory(function_name: str) -> None:
        original = getattr(torch, function_name)

        def make(data: object, *args: object, **kwargs: object) -> torch.Tensor:
            target = kwargs.get("device")
            if not _is_render_device(target) or counter.quiet:
                return original(data, *args, **kwargs)
            counter.quiet += 1
            try:
                result = original(data, *args, **kwargs)
            finally:
                counter.quiet -= 1
            if not counter.on_device(data):
                counter.upload(f"torch.{function_name}", _nbytes(result))
            counter.mark(result)
            return result

        stack.enter_context(_patched(torch, function_name, make))

    for function_name in ("tensor", "as_tensor", "asarray"):
        factory(function_name)
    return stack


def _in_every_module(
    replaced: dict[str, tuple[str, object]], name: str, original: object, what: str, replacement: object
) -> None:
    """Substitute ``replacement`` for the function ``original`` in every ``ccc.render_torch`` module that holds
    it as ``name`` (modules import it by name)."""
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("ccc.render_torch") and getattr(module, name, None) is original:
            replaced[f"{module_name}.{name}"] = (what, replacement)


def _gpu_branches() -> dict[str, tuple[str, object]]:
    """Replacements of CPU-only branches by the GPU's (module docstring): ``module.attribute`` → (what
    replaces it, in words; the replacement); an empty dict where the checkout has none."""
    from ccc.render_torch import _resample, _upload, blur, jpeg, numerics

    replaced: dict[str, tuple[str, object]] = {}
    if hasattr(_upload, "pinned_for") and hasattr(_upload, "_on_host"):
        pinned_for = _upload.pinned_for
        replaced[f"{_upload.__name__}.pinned_for"] = (
            "cpu:0 as CUDA: host buffers asked pinned",
            lambda device: device == RENDER_DEVICE or pinned_for(device),
        )
        replaced[f"{_upload.__name__}._on_host"] = (
            "cpu:0 as CUDA: copies made",
            lambda device: device.type == "cpu" and device != RENDER_DEVICE,
        )
    if hasattr(jpeg, "integer_jpeg_round_trip"):
        integer = jpeg.integer_jpeg_round_trip
        _in_every_module(replaced, "jpeg_round_trip", jpeg.jpeg_round_trip, "integer_jpeg_round_trip", integer)
    if hasattr(_resample, "multiplies_while_casting"):
        replaced[f"{_resample.__name__}.multiplies_while_casting"] = (
            "uint8 × int32 in one operation",
            lambda device: True,
        )
    if hasattr(blur, "fft_samples_per_call"):
        per_call = blur.FFT_SAMPLES_PER_CALL
        replaced[f"{blur.__name__}.fft_samples_per_call"] = (f"{per_call} samples per call", lambda device: per_call)
    for name, constant in (
        ("gather_elements", "GATHER_ELEMENTS"),
        ("motion_blur_gather_elements", "MOTION_BLUR_GATHER_ELEMENTS"),  # its name before zoom blur shared it
    ):
        if hasattr(numerics, name):
            elements = getattr(numerics, constant)
            what = f"{elements:,} values per gather"
            _in_every_module(replaced, name, getattr(numerics, name), what, lambda device, elements=elements: elements)
    return replaced


@contextlib.contextmanager
def _gpu_branches_substituted(replaced: dict[str, tuple[str, object]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for target, (_, replacement) in replaced.items():
            module_name, attribute = target.rsplit(".", 1)
            stack.enter_context(_patched(sys.modules[module_name], attribute, replacement))
        yield


def spread_specs(folder: Path, count: int, offset: float) -> list[SampleSpec]:
    """``count`` samples spread evenly over ``render.PAPER_STREAM`` planned on ``folder``'s images, starting
    ``offset`` (a fraction of the stride) in: offset 0 is ``render.medium_specs(folder, count)``."""
    plan = plan_stream(PAPER_STREAM, synthetic_table(), folder)
    stride = PAPER_STREAM["num_images"] // count
    return [plan_sample(plan, index * stride + int(offset * stride)) for index in range(count)]


class _OpCount(TorchDispatchMode):
    """Counts the ops dispatched under it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += 1
        return func(*args, **(kwargs or {}))


class _DispatchTimer(TorchDispatchMode):
    """Times every op inside its dispatch under it (on the meta device: its shape function), the ops that
    would launch a kernel on a GPU apart (``host_cuda_model_ms_per_image``, module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self.launch_seconds = 0.0
        self.launches = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        start = time.perf_counter()
        output = func(*args, **(kwargs or {}))
        spent = time.perf_counter() - start
        self.seconds += spent
        tensors = [value for value in tree_flatten((args, kwargs, output))[0] if isinstance(value, torch.Tensor)]
        name = func.overloadpacket.__name__
        kernel = not func.is_view and name not in NO_KERNEL and name not in SCALAR_READS
        if kernel and any(tensor.device.type == "meta" for tensor in tensors):
            self.launch_seconds += spent
            self.launches += 1
        return output


_HOST_BUFFERS: dict[tuple[tuple[int, ...], torch.dtype], torch.Tensor] = {}
"""The meta runs' host buffers, one per (shape, dtype), kept for the process (:func:`_cached_host_buffers`)."""


@contextlib.contextmanager
def _cached_host_buffers() -> Iterator[None]:
    """Inside the block, ``host_buffer`` hands out the cached buffer of its shape and dtype in every
    ``ccc.render_torch`` module that holds it (module docstring; nothing where the checkout has none). On
    the meta device a buffer's contents are never read, so one buffer may serve several copies."""
    from ccc.render_torch import _upload

    original = getattr(_upload, "host_buffer", None)
    if original is None:
        yield
        return

    def cached(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (tuple(shape), dtype)
        if key not in _HOST_BUFFERS:
            _HOST_BUFFERS[key] = torch.empty(key[0], dtype=dtype)
        return _HOST_BUFFERS[key]

    replaced: dict[str, tuple[str, object]] = {}
    _in_every_module(replaced, "host_buffer", original, "cached host buffers", cached)
    with _gpu_branches_substituted(replaced):
        yield


@contextlib.contextmanager
def _stage_meters(meter: Callable[[], float]) -> Iterator[dict[str, float]]:
    """The stages of ``render_batch`` (``META_STAGES`` but ``other`` and ``total``) wrapped, inside the
    block, to add what ``meter()`` grows by during each to the yielded dict: a stage's host half and the
    device half it returns (checkouts with ``prepare_*`` halves), or its one call (older checkouts), and
    the batch's upload (``BatchUpload.send``, where it exists; before, each stage copied its own)."""
    from ccc.render_torch import _upload, pipeline

    spent: dict[str, float] = {}
    corruption_stages = iter(("stage_1", "stage_2") * 2)

    def timed(name: str, function: Callable, *args: object, **kwargs: object) -> object:
        start = meter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + meter() - start

    def metered(stage: Callable[[], str], function: Callable, halves: bool) -> Callable:
        def call(*args: object, **kwargs: object) -> object:
            name = stage()
            result = timed(name, function, *args, **kwargs)
            return functools.partial(timed, name, result) if halves else result

        return call

    with contextlib.ExitStack() as stack:
        for attributes, stage in (
            (("prepare_crop_resize_flip", "crop_resize_flip"), lambda: "geometry"),
            (("prepare_corruption_stage", "apply_corruption_stage"), lambda: next(corruption_stages)),
            (("jpeg_round_trip",), lambda: "jpeg"),
        ):
            attribute = next(name for name in attributes if hasattr(pipeline, name))
            halves = attribute.startswith("prepare_")
            stack.enter_context(_patched(pipeline, attribute, metered(stage, getattr(pipeline, attribute), halves)))
        if hasattr(_upload, "BatchUpload"):
            send = _upload.BatchUpload.send
            stack.enter_context(_patched(_upload.BatchUpload, "send", lambda self: timed("upload", send, self)))
        yield spent


def _meta_stages(
    specs: Sequence[SampleSpec], images: Sequence[np.ndarray], meter: Callable[[], float], precision: str
) -> dict:
    """What ``meter()`` grows by in each stage of one ``render_batch`` on the meta device (``META_STAGES``)."""
    with _stage_meters(meter) as spent:
        start = meter()
        render_batch(specs, images, "meta", jpeg=True, precision=precision)
        total = meter() - start
    stages = {stage: spent.get(stage, 0.0) for stage in META_STAGES[:-2]}  # a checkout's missing stage: 0
    return {**stages, "other": total - sum(stages.values()), "total": total}


def host_cuda_model(specs: Sequence[SampleSpec], images: Sequence[np.ndarray], precision: str) -> dict:
    """``host_cuda_model_ms_per_image`` (module docstring): best of :data:`META_REPEATS` meta renders, each
    plain, under a mode that only counts, and under :class:`_DispatchTimer`, host buffers cached."""
    walls: dict[str, list[float]] = {"plain": [], "null": [], "timed": []}
    timers, counters = [], []
    with _cached_host_buffers():
        for _ in range(META_REPEATS):
            timers.append(_DispatchTimer())
            counters.append(_OpCount())
            for kind, mode in (("plain", contextlib.nullcontext()), ("null", counters[-1]), ("timed", timers[-1])):
                start = time.perf_counter()
                with mode:
                    render_batch(specs, images, "meta", jpeg=True, precision=precision)
                walls[kind].append(time.perf_counter() - start)
    timer = min(timers, key=lambda timer: timer.seconds)
    best = {kind: min(seconds) for kind, seconds in walls.items()}
    # what a mode costs per op (its call and the op's dispatch again from Python), which the timed launches include
    mode_seconds = max(best["null"] - best["plain"], 0.0) / counters[-1].count
    host_model = {
        "meta_without_launches": best["plain"] - timer.launch_seconds,
        "launches": timer.launches * MODEL["launch_seconds"],
    }
    host_model["total"] = sum(host_model.values())
    host_model["bound"] = host_model["total"] + timer.launches * mode_seconds
    return {
        **{part: 1e3 * seconds / len(specs) for part, seconds in host_model.items()},
        "launch_count": timer.launches,
        "mode_us_per_op": 1e6 * mode_seconds,
    }


def measure_meta(specs: Sequence[SampleSpec], images: Sequence[np.ndarray], precision: str) -> dict:
    """``host_meta_ms_per_image``, ``meta_ops_per_batch``, ``host_packing_ms_per_image`` and
    ``host_cuda_model_ms_per_image`` (module docstring), after ``measure_batch``'s warm-up."""
    from ccc.render_torch import geometry

    batch = len(specs)
    with _cached_host_buffers():
        runs = [_meta_stages(specs, images, time.process_time, precision) for _ in range(META_REPEATS)]
        fastest = min(runs, key=lambda run: run["total"])
        counter = _OpCount()
        with counter:
            ops = _meta_stages(specs, images, lambda: float(counter.count), precision)
    packing = None
    pack = getattr(geometry, "_pack_boxes", None)
    if pack is not None:
        boxes = np.array([spec.crop_box for spec in specs], dtype=np.int64)
        padded = np.empty((batch, *(boxes[:, 2:] - boxes[:, :2]).max(axis=0)[::-1].tolist(), 3), dtype=np.uint8)
        seconds = []
        for _ in range(META_REPEATS):
            start = time.process_time()
            pack(images, boxes, padded)
            seconds.append(time.process_time() - start)
        packing = 1e3 * min(seconds) / batch
    return {
        "host_meta_ms_per_image": {stage: 1e3 * fastest[stage] / batch for stage in META_STAGES},
        "meta_ops_per_batch": {stage: int(ops[stage]) for stage in META_STAGES},
        "host_packing_ms_per_image": packing,
        "host_cuda_model_ms_per_image": host_cuda_model(specs, images, precision),
    }


def count_batch(
    specs: Sequence[SampleSpec],
    images: Sequence[np.ndarray],
    warmup: tuple[Sequence[SampleSpec], Sequence[np.ndarray]],
    provenance: WeakIdKeyDictionary,
    replaced: dict[str, tuple[str, object]],
    precision: str,
) -> ProxyCounter:
    """The counts of one ``render_batch`` on the stand-in device with the GPU branches substituted, after
    an uncounted warm-up batch (module docstring)."""
    counter = ProxyCounter(provenance)
    with _gpu_branches_substituted(replaced):
        warm = ProxyCounter(provenance)
        with warm, _python_level_patches(warm):
            render_batch(*warmup, RENDER_DEVICE, jpeg=True, precision=precision)
        with counter, _python_level_patches(counter):
            render_batch(specs, images, RENDER_DEVICE, jpeg=True, precision=precision)
    return counter


def measure_windows(
    windows: Sequence[Sequence[SampleSpec]],
    images_of: Callable[[Sequence[SampleSpec]], list[np.ndarray]],
    warmup: tuple[Sequence[SampleSpec], Sequence[np.ndarray]],
    provenance: WeakIdKeyDictionary,
    replaced: dict[str, tuple[str, object]],
    precision: str,
) -> dict:
    """The counts and modelled seconds of each window of consecutive samples, and their means."""
    rows = []
    for specs in windows:
        counter = count_batch(specs, images_of(specs), warmup, provenance, replaced, precision)
        host = host_cuda_model(specs, images_of(specs), precision)
        pairs = sorted({f"{spec.n1}→{spec.n2}" for spec in specs})
        rows.append(
            {
                "first_sample": specs[0].index,
                "pairs": pairs,
                "launches": counter.launches,
                "host_reads": sum(counter.reads.values()),
                "uploads": sum(counter.uploads.values()),
                "bytes_moved": counter.bytes_moved,
                "float64_flops": counter.float64_flops,
                "waiting_uploads": counter.waiting_uploads,
                "model_seconds_per_batch": _model_seconds(counter),
                "host_cuda_model_ms_per_image": host["total"],
            }
        )
    batch = len(windows[0])
    mean_seconds = sum(row["model_seconds_per_batch"] for row in rows) / len(rows)
    return {
        "windows": rows,
        "mean_launches": sum(row["launches"] for row in rows) / len(rows),
        "mean_bytes_moved_per_image": sum(row["bytes_moved"] for row in rows) / len(rows) / batch,
        "mean_model_seconds_per_batch": mean_seconds,
        "mean_host_cuda_model_ms_per_image": sum(row["host_cuda_model_ms_per_image"] for row in rows) / len(rows),
        "model_images_per_second": batch / mean_seconds,
    }


def measure_batch(
    specs: Sequence[SampleSpec],
    images: Sequence[np.ndarray],
    warmup: tuple[Sequence[SampleSpec], Sequence[np.ndarray]],
    provenance: WeakIdKeyDictionary,
    replaced: dict[str, tuple[str, object]],
    precision: str,
) -> dict:
    """Every proxy of one batch (module docstring); ``warmup``: the specs and images of the untimed batch."""
    render_batch(*warmup, "cpu", jpeg=True, precision=precision)
    start = time.process_time()
    render_batch(specs, images, "cpu", jpeg=True, precision=precision)
    host_seconds = time.process_time() - start
    with _cached_host_buffers():
        render_batch(*warmup, "meta", jpeg=True, precision=precision)
    meta = measure_meta(specs, images, precision)
    counter = count_batch(specs, images, warmup, provenance, replaced, precision)
    batch = len(specs)
    seconds = _model_seconds(counter)
    return {
        "batch_size": batch,
        "launches": counter.launches,
        "host_reads": sum(counter.reads.values()),
        "host_read_bytes": counter.read_bytes,
        "uploads": sum(counter.uploads.values()),
        "upload_bytes": counter.upload_bytes,
        "non_blocking_uploads": counter.non_blocking_uploads,
        "waiting_uploads": counter.waiting_uploads,
        "bytes_moved": counter.bytes_moved,
        "float64_flops": counter.float64_flops,
        "float32_flops": counter.float32_flops,
        "host_ops": counter.host_ops,
        "host_cpu_ms_per_image": 1e3 * host_seconds / batch,
        **meta,
        "model_seconds_per_batch": seconds,
        "model_images_per_second": batch / seconds,
        "reads_by_kind": dict(counter.reads.most_common()),
        "uploads_by_kind": dict(counter.uploads.most_common()),
        "reads_by_site": dict(counter.read_sites.most_common()),
        "uploads_by_site": dict(counter.upload_sites.most_common()),
        "launches_by_op": dict(counter.launch_ops.most_common()),
        "launches_by_site": dict(counter.launch_sites.most_common()),
        "bytes_moved_by_site": dict(counter.bytes_by_site.most_common()),
        "excluded_ops": dict(counter.excluded_ops.most_common()),
    }


def _model_seconds(counter: ProxyCounter) -> float:
    return (
        counter.launches * MODEL["launch_seconds"]
        + (sum(counter.reads.values()) + counter.waiting_uploads) * MODEL["host_read_seconds"]
        + counter.bytes_moved / MODEL["bytes_per_second"]
        + counter.float64_flops / MODEL["float64_flops_per_second"]
        + counter.float32_flops / MODEL["float32_flops_per_second"]
    )


def rate_at(batches: dict[str, dict], size: int) -> dict:
    """Modelled images/s at batch ``size``: measured, or per-batch seconds interpolated linearly in B
    between the nearest measured sizes (extrapolated from the two nearest outside their range)."""
    if str(size) in batches:
        return {"images_per_second": batches[str(size)]["model_images_per_second"], "how": "measured"}
    sizes = sorted(int(key) for key in batches)
    if len(sizes) < 2:
        return {"images_per_second": None, "how": "one batch size measured"}
    below = [value for value in sizes if value < size]
    above = [value for value in sizes if value > size]
    low, high = (below[-1], above[0]) if below and above else ((sizes[-2], sizes[-1]) if below else sizes[:2])
    seconds = [batches[str(value)]["model_seconds_per_batch"] for value in (low, high)]
    estimate = seconds[0] + (seconds[1] - seconds[0]) * (size - low) / (high - low)
    how = "interpolated" if below and above else "extrapolated"
    return {"images_per_second": size / estimate, "how": f"{how} from B = {low} and {high}"}


def goals(batches: dict[str, dict], at_goal: dict) -> dict[str, dict]:
    """Issue 36's goals, each with its measured value and whether it is met."""
    sizes = sorted(int(key) for key in batches)
    rows = {}
    if 16 in sizes and 128 in sizes:
        ratio = batches["128"]["launches"] / batches["16"]["launches"]
        rows["launches B=128 / B=16 ≤ 1.3"] = {"value": ratio, "met": ratio <= 1.3}
    worst = {key: max(batch[key] for batch in batches.values()) for key in ("host_reads", "uploads")}
    rows["host reads per batch = 0"] = {"value": worst["host_reads"], "met": worst["host_reads"] == 0}
    rows["uploads per batch ≤ 1"] = {"value": worst["uploads"], "met": worst["uploads"] <= 1}
    waiting = max(batch["waiting_uploads"] for batch in batches.values())
    rows["uploads that wait for the GPU per batch = 0"] = {"value": waiting, "met": waiting == 0}
    host = max(batch["host_cpu_ms_per_image"] for batch in batches.values())
    rows["host CPU ms per image ≤ 0.1 (upper bound, every B)"] = {"value": host, "met": host <= 0.1}
    meta = max(batch["host_meta_ms_per_image"]["total"] for batch in batches.values())
    rows["host ms per image on meta ≤ 0.1 (upper bound, every B)"] = {"value": meta, "met": meta <= 0.1}
    # per-batch host costs (a group's tables and launches) weigh on small batches: the goal is read where the rate's is
    goal_batch = batches.get(str(GOAL_BATCH))
    modelled = None if goal_batch is None else goal_batch["host_cuda_model_ms_per_image"]["total"]
    rows[f"host ms per image on CUDA, modelled, ≤ 0.1 at B={GOAL_BATCH}"] = {
        "value": modelled,
        "met": modelled is not None and modelled <= 0.1,
    }
    rate = at_goal["images_per_second"]
    rows[f"modelled images/s at B={GOAL_BATCH} ≥ 10,000"] = {"value": rate, "met": rate is not None and rate >= 1e4}
    return rows


def table(result: dict) -> str:
    """Markdown: one row per batch size, then the modelled rate at B = 512 and the goals."""
    lines = [
        "| B | launches | host reads | uploads (MB; waiting) | bytes moved (GB) | float64 GFLOP | float32 GFLOP | "
        "host CPU ms/image | host ms/image on meta (geometry, stage 1, stage 2, upload, JPEG, other) | "
        "packing ms/image | host ms/image on CUDA, modelled (meta without launches + launches; bound) | "
        "modelled ms/batch | modelled images/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for batch in result["batches"].values():
        meta = batch["host_meta_ms_per_image"]
        packing = batch["host_packing_ms_per_image"]
        stages = ", ".join(f"{meta[stage]:,.3f}" for stage in META_STAGES[:-1])
        host = batch["host_cuda_model_ms_per_image"]
        parts = f"{host['meta_without_launches']:,.3f} + {host['launches']:,.3f}; ≤ {host['bound']:,.3f}"
        lines.append(
            f"| {batch['batch_size']} | {batch['launches']:,} | {batch['host_reads']:,} | "
            f"{batch['uploads']:,} ({batch['upload_bytes'] / 1e6:,.1f}; {batch['waiting_uploads']:,}) | "
            f"{batch['bytes_moved'] / 1e9:,.2f} | "
            f"{batch['float64_flops'] / 1e9:,.2f} | {batch['float32_flops'] / 1e9:,.2f} | "
            f"{batch['host_cpu_ms_per_image']:,.2f} | {meta['total']:,.3f} ({stages}) | "
            f"{'—' if packing is None else f'{packing:,.3f}'} | {host['total']:,.3f} ({parts}) | "
            f"{1e3 * batch['model_seconds_per_batch']:,.2f} | "
            f"{batch['model_images_per_second']:,.0f} |"
        )
    windowed = [batch for batch in result["batches"].values() if "stream_windows" in batch]
    if windowed:
        lines += [
            "",
            "Stream windows (B consecutive samples, mean over the windows):",
            "",
            "| B | windows | pairs per window | mean launches | mean bytes moved per image (MB) | "
            "host ms/image on CUDA, modelled | modelled ms/batch | modelled images/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for batch in windowed:
            windows = batch["stream_windows"]
            pairs = "/".join(str(len(row["pairs"])) for row in windows["windows"])
            lines.append(
                f"| {batch['batch_size']} | {len(windows['windows'])} | {pairs} | {windows['mean_launches']:,.0f} | "
                f"{windows['mean_bytes_moved_per_image'] / 1e6:,.0f} | "
                f"{windows['mean_host_cuda_model_ms_per_image']:,.3f} | "
                f"{1e3 * windows['mean_model_seconds_per_batch']:,.2f} | {windows['model_images_per_second']:,.0f} |"
            )
    at_goal = result["model_at_goal_batch"]
    rate = at_goal["images_per_second"]
    lines += [
        "",
        f"model: {result['model']}",
        f"modelled images/s at B = {GOAL_BATCH}: {'—' if rate is None else f'{rate:,.0f}'} ({at_goal['how']})",
        "",
        *(
            f"- {name}: {row['value']:,.2f} — {'met' if row['met'] else 'not met'}"
            if row["value"] is not None
            else f"- {name}: —"
            for name, row in result["goals"].items()
        ),
    ]
    return "\n".join(lines)


def _commit(folder: Path) -> str | None:
    """The git commit checked out in ``folder`` (None outside a git checkout)."""
    completed = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True)
    return completed.stdout.strip() if completed.returncode == 0 else None


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--batch-sizes", default="16,128,1024", help="comma list of batch sizes B (default: 16,128,1024)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: B = 2 and 4 (overrides --batch-sizes)")
    parser.add_argument(
        "--render-precision",
        choices=RENDER_PRECISIONS,
        default=RENDER_PRECISIONS[0],
        help="render_batch's working float precision (default: float64)",
    )
    parser.add_argument(
        "--windows",
        type=int,
        default=4,
        help="per B, windows of B consecutive stream samples counted and averaged (default 4; 0: none)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write all results to this JSON file")
    parser.add_argument("--work", type=Path, default=None, help="folder for the photographs (default: temporary)")
    return parser


def run(arguments: argparse.Namespace) -> dict:
    """Measure every batch size (module docstring); prints the table and returns the results."""
    sizes = [2, 4] if arguments.quick else _positive_list(arguments.batch_sizes, "--batch-sizes")
    torch.set_num_threads(1)
    provenance = WeakIdKeyDictionary()
    batches = {}
    with tempfile.TemporaryDirectory() as temporary:
        folder = make_source_folder((arguments.work or Path(temporary)) / "val", SOURCE_IMAGES)
        decoded: dict[str, np.ndarray] = {}

        def images_of(specs: Sequence[SampleSpec]) -> list[np.ndarray]:
            for spec in specs:
                if spec.source_path not in decoded:
                    decoded[spec.source_path] = np.array(decode_jpeg((folder / spec.source_path).read_bytes()))
            return [decoded[spec.source_path] for spec in specs]

        warmup_specs = spread_specs(folder, min(WARMUP_SAMPLES, max(sizes)), 0.5)
        warmup = (warmup_specs, images_of(warmup_specs))
        replaced = _gpu_branches()
        for size in sizes:
            specs = spread_specs(folder, size, 0.0)
            print(f"  B = {size}", file=sys.stderr, flush=True)
            batches[str(size)] = measure_batch(
                specs, images_of(specs), warmup, provenance, replaced, arguments.render_precision
            )
            if arguments.windows > 0:
                windows = window_specs(folder, size, arguments.windows)
                batches[str(size)]["stream_windows"] = measure_windows(
                    windows, images_of, warmup, provenance, replaced, arguments.render_precision
                )
    at_goal = rate_at(batches, GOAL_BATCH)
    import ccc

    result = {
        "settings": {
            "batch_sizes": sizes,
            "ccc": str(Path(ccc.__file__).resolve().parent),
            "ccc_commit": _commit(Path(ccc.__file__).resolve().parent),
            "torch": torch.__version__,
            "threads": 1,
            "processor": platform.processor() or platform.machine(),
            "source_images": f"{SOURCE_IMAGES} photographs, 500×375 or 375×500 JPEG quality 90",
            "render_device": str(RENDER_DEVICE),
            "render_precision": arguments.render_precision,
            "gpu_branches_substituted": {target: words for target, (words, _) in replaced.items()},
        },
        "model": MODEL_TEXT,
        "model_constants": MODEL,
        "batches": batches,
        "model_at_goal_batch": at_goal,
        "goals": goals(batches, at_goal),
        "environment": _environment(),
    }
    print(table(result))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a usage error)."""
    return run_and_write(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
