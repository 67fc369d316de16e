"""Running and compiling the renderer's Triton kernels without a GPU (the ``test_triton_*.py`` files here).

The tests that import this module are skipped where Triton is not installed, except in CI (``CI=true``),
where its import error fails them.

- :func:`interpreted`: a kernel module's kernels run in Triton's interpreter on CPU tensors (numpy's IEEE
  operations, one rounding each: what the kernels compute on a GPU with ``enable_fp_fusion=False``);
- :func:`compiled_for_hopper`: a launch recorded (its arguments' types, its constexprs and options) and
  compiled for sm_90 (an H100/H200) by Triton's own compiler and ptxas, to PTX and a cubin.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest
import torch

try:
    import triton
except ImportError:
    if os.environ.get("CI") == "true":  # CI installs torch from PyPI, which brings Triton: it must be there
        raise
    pytest.skip("Triton is not installed (torch's CPU-only wheels come without it)", allow_module_level=True)

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime import interpreter  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

# Gluon, which Triton's launcher imports on first use, takes ``triton.language``'s Triton functions as they are
# at its import: import it before :func:`interpreted` replaces them.
importlib.import_module("triton.experimental.gluon")

HOPPER = GPUTarget("cuda", 90, 32)

_POINTER_TYPES = {
    torch.uint8: "*u8",
    torch.int16: "*i16",
    torch.int32: "*i32",
    torch.int64: "*i64",
    torch.float32: "*fp32",
    torch.float64: "*fp64",
}

_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")


def kernel_module(name: str) -> ModuleType:
    """``ccc.render_torch._triton.<name>``, imported once Triton is known to be there (it imports Triton)."""
    return importlib.import_module(f"ccc.render_torch._triton.{name}")


def _kernels(module: ModuleType) -> dict[str, JITFunction]:
    return {name: value for name, value in vars(module).items() if isinstance(value, JITFunction)}


class _LanguageFunction(InterpretedFunction):
    """A Triton function of ``triton.language`` interpreted as the interpreter does (its ``__call__``), then
    the language's attributes it patched for the call restored (the interpreter leaves them patched, which
    would break a later compilation in the same process)."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        scope = interpreter._patch_lang(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        finally:
            scope.restore()


@contextlib.contextmanager
def interpreted(module: ModuleType) -> Iterator[None]:
    """Within: every ``@triton.jit`` kernel of ``module`` runs in Triton's interpreter (CPU tensors), and so
    do the functions of ``triton.language`` written as Triton functions (``tl.zeros``, ``tl.sum``, ...), which
    Triton makes interpretable only when ``TRITON_INTERPRET`` was set before its import."""
    language = [triton.language, triton.language.standard, triton.language.math]
    with pytest.MonkeyPatch.context() as patch:
        for name, kernel in _kernels(module).items():
            patch.setattr(module, name, InterpretedFunction(kernel.fn))
        for owner in language:
            for name, function in _kernels(owner).items():
                patch.setattr(owner, name, _LanguageFunction(function.fn))
        yield


class _Recorder:
    def __init__(self, kernel: JITFunction) -> None:
        self.kernel = kernel
        self.launches: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


def _signature(kernel: JITFunction, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    names = kernel.arg_names
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    for name, value in zip(names, args):
        if isinstance(value, torch.Tensor):
            signature[name] = _POINTER_TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"argument {name} of {kernel.fn.__name__}: {type(value).__name__}")
    for name, value in kwargs.items():
        if name in names:
            signature[name] = "constexpr"
            constexprs[name] = value
    options = {name: value for name, value in kwargs.items() if name in _OPTIONS}
    return signature, constexprs, options


_FAST_MATH_FLAGS = "fast|reassoc|contract|arcp|afn"
"""LLVM's fast-math flags that change a finite result (``nnan``, ``ninf``, which LLVM infers where an operand
cannot be NaN or infinite, do not)."""
_FAST_MATH = re.compile(rf"= (?:fadd|fsub|fmul|fdiv|frem|fneg|call)\b[^=]*\b(?:{_FAST_MATH_FLAGS})\b")


def fast_math_instructions(llir: str) -> list[str]:
    """The instructions of a kernel's LLVM IR that carry a fast-math flag letting LLVM reassociate, contract or
    approximate a float operation (``fast``, ``reassoc``, ``contract``, ``arcp``, ``afn``): none is expected."""
    return [line.strip() for line in llir.splitlines() if _FAST_MATH.search(line)]


def compiled_for_hopper(module: ModuleType, launch: Callable[[], object]) -> list[dict]:
    """Every kernel launch that ``launch()`` makes through ``module``'s kernels, compiled for sm_90.

    Returns one dict per launch: ``name``, ``options`` (the launch's compile options) and ``asm`` (Triton's
    stages: ``ttir``, ``ttgir``, ``llir``, ``ptx``, ``cubin``)."""
    kernels = _kernels(module)
    recorders = {name: _Recorder(kernel) for name, kernel in kernels.items()}
    with pytest.MonkeyPatch.context() as patch:
        for name, recorder in recorders.items():
            patch.setattr(module, name, recorder)
        launch()
    compiled = []
    for name, recorder in recorders.items():
        for args, kwargs in recorder.launches:
            signature, constexprs, options = _signature(recorder.kernel, args, kwargs)
            source = ASTSource(fn=recorder.kernel, signature=signature, constexprs=constexprs)
            binary = triton.compile(source, target=HOPPER, options=options)
            compiled.append({"name": name, "options": options, "asm": binary.asm})
    return compiled
