"""Pickles of plain values and numpy arrays, read without unpickling: the opcodes are interpreted here.

``pickle.load`` imports and calls whatever globals a file names, so a dataset file from the internet
could run any code. :func:`read_plain_pickle` instead walks the opcodes (``pickletools.genops``) and
builds only ``None``, bools, ints, floats, ``str``, ``bytes``, tuples, lists and dicts. Three call
patterns that a pickle of such values contains are recognised by the names they call, which are
never imported or called:

- ``_codecs.encode(text, "latin1")`` and ``bytes()``: how Python 3 writes ``bytes`` at protocol 2;
- ``numpy.dtype(code, align, copy)`` followed by its state: a plain numeric dtype (bool, signed and
  unsigned integers, floats; any byte order);
- ``numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b"b")`` (``numpy._core`` in numpy 2)
  followed by the state ``(1, shape, dtype, fortran_order, raw_bytes)``: the array is made here with
  ``numpy.frombuffer`` from the raw bytes, after their length is checked against shape and dtype.

Python 2 strings (``STRING``, ``BINSTRING``, ``SHORT_BINSTRING``) are read as ``bytes``, as
``pickle.load(..., encoding="bytes")`` does. Protocols 0 to 4 as Python 3 writes them are read, and
Python 2's protocols 1 and 2 (the published CIFAR files: 2); of Python 2's text protocol 0, only
strings of ASCII characters (``pickletools`` decodes ``STRING`` as ASCII), so not its arrays.

Any other global, call, opcode (objects, sets, persistent ids, protocol 5's out-of-band buffers) or
structure is refused with :class:`PlainPickleError` before anything else is read. The work is bounded:
at most :data:`ccc.pickles.MAX_PICKLE_OPCODES` opcodes (each builds at most one value) and a file of at
most :data:`MAX_PICKLE_FILE_BYTES`; string arguments are read from the file's bytes in memory, so a
declared length can never exceed what the file holds.
"""

from __future__ import annotations

import math
import os
import pickletools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ccc.pickles import MAX_PICKLE_OPCODES

MAX_PICKLE_FILE_BYTES = 2**30
"""Largest pickle file read (1 GiB); the largest CIFAR file, CIFAR-100's ``train``, is about 160 MB."""

MAX_ARRAY_DIMENSIONS = 32
"""Most dimensions of an array in a pickle (numpy's own limit is 64)."""


class PlainPickleError(ValueError):
    """A pickle holds something other than plain values and numeric numpy arrays, or is damaged
    (refused; nothing named by it was imported or run). The message is one line naming the file."""


@dataclass(frozen=True)
class _Global:
    """A global the pickle names (``GLOBAL``, ``STACK_GLOBAL``): a name only, never imported."""

    module: str
    name: str


@dataclass
class _Pending:
    """The result of a recognised call whose state comes with the next ``BUILD``: ``kind`` is "dtype"
    (``detail``: the type code) or "array"; ``value`` is the finished dtype or array after it."""

    kind: str
    detail: str = ""
    value: Any = None


_RECONSTRUCT = {_Global("numpy.core.multiarray", "_reconstruct"), _Global("numpy._core.multiarray", "_reconstruct")}
_NDARRAY = _Global("numpy", "ndarray")
_DTYPE = _Global("numpy", "dtype")
_ENCODE = _Global("_codecs", "encode")
_BYTES = {_Global("builtins", "bytes"), _Global("__builtin__", "bytes")}
_ADMITTED_GLOBALS = {*_RECONSTRUCT, _NDARRAY, _DTYPE, _ENCODE, *_BYTES}

_NUMERIC_TYPE_CODE = re.compile(r"(b1|[iu][1248]|f[248])")
"""numpy type codes of the admitted dtypes (bool, integers, floats) as numpy pickles them."""

_BYTE_ORDERS = ("|", "<", ">", "=")

_VALUE_OPCODES = {
    "NONE": None,
    "NEWTRUE": True,
    "NEWFALSE": False,
    "EMPTY_TUPLE": (),
}

_ARGUMENT_OPCODES = {
    "INT",
    "LONG",
    "FLOAT",
    "UNICODE",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG1",
    "LONG4",
    "BINFLOAT",
    "SHORT_BINBYTES",
    "BINBYTES",
    "BINBYTES8",
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
}
"""Opcodes pushing their argument as it is (``pickletools`` decodes it to the value; ``INT`` is also
how protocols 0 and 1 write a bool)."""

_PYTHON2_STRING_OPCODES = {"STRING", "BINSTRING", "SHORT_BINSTRING"}
"""Python 2 ``str``: bytes (``pickletools`` hands them over decoded as latin-1)."""


class _Refused(Exception):
    """Why the pickle is refused (turned into a PlainPickleError naming the file)."""


def _describe(value: object) -> str:
    """A short name of what ``value`` is, for messages (never its possibly huge text)."""
    if isinstance(value, _Global):
        return f"{value.module}.{value.name}"
    if isinstance(value, _Pending):
        return f"an unfinished numpy {value.kind}"
    return type(value).__name__


def _call(function: object, arguments: object) -> object:
    """The value of a recognised call ``function(*arguments)`` (``REDUCE``), computed here."""
    if not isinstance(function, _Global) or not isinstance(arguments, tuple):
        raise _Refused(f"a call of {_describe(function)} with {_describe(arguments)} (only recognised calls)")
    if function == _ENCODE:
        if len(arguments) == 2 and isinstance(arguments[0], str) and _is_text(arguments[1], "latin1"):
            try:
                return arguments[0].encode("latin-1")
            except UnicodeEncodeError:
                raise _Refused("_codecs.encode of text beyond latin-1 (not bytes written by Python 3)") from None
    elif function in _BYTES:
        if not arguments:
            return b""
    elif function == _DTYPE:
        # Python 2 wrote the type code as a str (read as bytes), Python 3 writes text.
        type_code = _ascii(arguments[0]) if arguments else None
        if len(arguments) == 3 and type_code is not None and _NUMERIC_TYPE_CODE.fullmatch(type_code):
            return _Pending("dtype", type_code)
        if type_code is not None:
            raise _Refused(f"numpy dtype {type_code[:20]!r}; only bool, integer and float dtypes are read")
    elif function in _RECONSTRUCT:
        if len(arguments) == 3 and isinstance(arguments[0], _Global) and arguments[0] == _NDARRAY:
            return _Pending("array")
    raise _Refused(f"a call of {_describe(function)} with arguments other than a plain array's, bytes' or dtype's")


def _is_text(value: object, text: str) -> bool:
    """Whether ``value`` is the str ``text`` (never comparing an array elementwise)."""
    return isinstance(value, str) and value == text


def _ascii(value: object) -> str | None:
    """``value`` as text when it is ASCII text or bytes (Python 2's str), else None."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value if isinstance(value, str) and value.isascii() else None


def _finish_dtype(type_code: str, state: object) -> np.dtype:
    if not (isinstance(state, tuple) and len(state) in (8, 9)):
        raise _Refused(f"the state of numpy dtype {type_code!r} is not a plain dtype's")
    byte_order = _ascii(state[1])
    if byte_order not in _BYTE_ORDERS:
        raise _Refused(
            f"numpy dtype {type_code!r} has the byte order {repr(state[1])[:20]}, not one of {', '.join(_BYTE_ORDERS)}"
        )
    if any(item is not None for item in state[2:5]):
        raise _Refused(f"numpy dtype {type_code!r} has fields or a sub-array; only plain numeric dtypes are read")
    byte_order = "" if byte_order == "|" else byte_order
    return np.dtype(byte_order + type_code)


def _finish_array(state: object) -> np.ndarray:
    if not (isinstance(state, tuple) and len(state) == 5 and type(state[0]) is int and state[0] == 1):
        raise _Refused("the state of a numpy array is not (1, shape, dtype, fortran_order, bytes)")
    _, shape, dtype, fortran_order, raw = state
    if isinstance(dtype, _Pending):
        dtype = dtype.value
    if not isinstance(dtype, np.dtype):
        raise _Refused(f"a numpy array's dtype is {_describe(dtype)}, not a plain numeric dtype")
    valid_shape = isinstance(shape, tuple) and len(shape) <= MAX_ARRAY_DIMENSIONS
    if not (valid_shape and all(type(size) is int and 0 <= size < 2**63 for size in shape)):
        raise _Refused(f"a numpy array's shape is not a tuple of at most {MAX_ARRAY_DIMENSIONS} sizes in [0, 2**63)")
    if not isinstance(raw, bytes) or not isinstance(fortran_order, bool):
        raise _Refused("a numpy array's state does not hold its raw bytes and a fortran_order flag")
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise _Refused(
            f"a numpy array of shape {shape} and dtype {dtype} needs {expected:,} bytes, its state holds {len(raw):,}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")


def _build(target: object, state: object) -> object:
    """The object ``BUILD`` makes of ``target`` (a recognised call's result) and ``state``."""
    if not isinstance(target, _Pending) or target.value is not None:
        raise _Refused(f"setting the state of {_describe(target)}")
    target.value = _finish_dtype(target.detail, state) if target.kind == "dtype" else _finish_array(state)
    return target.value


def _pop_to_mark(stack: list[Any], marks: list[int]) -> list[Any]:
    if not marks:
        raise _Refused("an opcode needs a mark and there is none")
    position = marks.pop()
    items = stack[position:]
    del stack[position:]
    return items


def _interpret(data: bytes) -> object:
    """The value of the pickle ``data``: its opcodes interpreted with the rules of the module docstring."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    operations = pickletools.genops(data)
    for count, (operation, argument, position) in enumerate(operations, 1):
        if count > MAX_PICKLE_OPCODES:
            raise _Refused(f"it holds more than {MAX_PICKLE_OPCODES:,} opcodes")
        name = operation.name
        if name in _ARGUMENT_OPCODES:
            stack.append(argument)
        elif name in _PYTHON2_STRING_OPCODES:
            stack.append(argument.encode("latin-1"))
        elif name in _VALUE_OPCODES:
            stack.append(_VALUE_OPCODES[name])
        elif name in ("PROTO", "FRAME"):
            continue
        elif name == "MARK":
            marks.append(len(stack))
        elif name == "STOP":
            if len(stack) != 1 or marks:
                raise _Refused("it ends with a stack other than one value")
            if position + 1 != len(data):
                raise _Refused(f"{len(data) - position - 1:,} bytes follow the pickle's end")
            return _check_plain(stack.pop())
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            _pop_to_mark(stack, marks)
        elif name == "DUP":
            stack.append(stack[-1])
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[argument] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            if argument not in memo:
                raise _Refused(f"it reads memo entry {argument}, which was never stored")
            stored = memo[argument]
            stack.append(stored.value if isinstance(stored, _Pending) and stored.value is not None else stored)
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "TUPLE":
            stack.append(tuple(_pop_to_mark(stack, marks)))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            size = int(name[-1])
            if len(stack) < size:
                raise IndexError("stack underflow")
            items = tuple(stack[-size:])
            del stack[-size:]
            stack.append(items)
        elif name == "LIST":
            stack.append(_pop_to_mark(stack, marks))
        elif name == "DICT":
            items = _pop_to_mark(stack, marks)
            if len(items) % 2:
                raise _Refused("DICT with a key but no value")
            stack.append(dict(zip(items[::2], items[1::2])))
        elif name == "APPEND":
            item = stack.pop()
            _as(stack[-1], list, "APPEND").append(item)
        elif name == "APPENDS":
            items = _pop_to_mark(stack, marks)
            _as(stack[-1], list, "APPENDS").extend(items)
        elif name == "SETITEM":
            value = stack.pop()
            key = stack.pop()
            _as(stack[-1], dict, "SETITEM")[key] = value
        elif name == "SETITEMS":
            items = _pop_to_mark(stack, marks)
            if len(items) % 2:
                raise _Refused("SETITEMS with a key but no value")
            _as(stack[-1], dict, "SETITEMS").update(zip(items[::2], items[1::2]))
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            if name == "GLOBAL":
                module, _, attribute = argument.partition(" ")
            else:
                attribute = stack.pop()
                module = stack.pop()
                if not (isinstance(module, str) and isinstance(attribute, str)):
                    raise _Refused("STACK_GLOBAL names a global with values other than text")
            named = _Global(module, attribute)
            if named not in _ADMITTED_GLOBALS:
                raise _Refused(
                    f"it names the global {module}.{attribute}; only plain values and numeric numpy arrays are read"
                )
            stack.append(named)
        elif name == "REDUCE":
            arguments = stack.pop()
            stack.append(_call(stack.pop(), arguments))
        elif name == "BUILD":
            state = stack.pop()
            stack.append(_build(stack.pop(), state))
        else:
            raise _Refused(f"opcode {name} at byte {position}; only plain values and numeric numpy arrays are read")
    raise _Refused("it ends without a STOP opcode")


def _check_plain(value: object) -> object:
    """``value`` after checking that neither it nor anything inside it is a global's name or an unfinished
    call (each object is visited once, so shared references cost nothing more)."""
    pending = [value]
    visited: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in visited:
            continue
        visited.add(id(item))
        if isinstance(item, (_Global, _Pending)):
            raise _Refused(
                f"it holds {_describe(item)} as a value; only plain values and numeric numpy arrays are read"
            )
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
    return value


def _as(target: object, kind: type, opcode: str) -> Any:
    if not isinstance(target, kind):
        raise _Refused(f"{opcode} on {_describe(target)} (expected a {kind.__name__})")
    return target


def read_plain_pickle(data: bytes, what: str) -> object:
    """The value of the pickle ``data`` (see the module docstring for the protocols and what it may hold).

    Args:
        data: the whole file's bytes.
        what: how messages name the file, e.g. "CIFAR-10 file '/data/cifar-10-batches-py/test_batch'".

    Returns:
        None, bool, int, float, str, bytes, or tuples, lists and dicts of them, and numpy arrays of
        bool, integer or float dtype (read-only arrays over the raw bytes the pickle holds).

    Raises:
        PlainPickleError: one line, "WHAT cannot be read: REASON", for any other content, a truncated
            or damaged pickle, or more than :data:`~ccc.pickles.MAX_PICKLE_OPCODES` opcodes; nothing
            named by the pickle is imported or run.
    """
    try:
        return _interpret(data)
    except _Refused as refusal:
        reason = str(refusal)
    except IndexError:
        reason = "an opcode needs more values than the stack holds (damaged pickle)"
    except (ValueError, TypeError, UnicodeError, OverflowError, MemoryError, RecursionError) as error:
        # pickletools raises ValueError for truncated or unknown opcodes; TypeError: an unhashable key.
        reason = "damaged or truncated pickle: " + (" ".join(str(error).split())[:200] or type(error).__name__)
    raise PlainPickleError(f"{what} cannot be read: {reason}")


def read_plain_pickle_file(path: str | os.PathLike[str], what: str) -> object:
    """The value of the pickle file ``path`` (see :func:`read_plain_pickle`).

    Args:
        path: a regular file of at most :data:`MAX_PICKLE_FILE_BYTES` bytes.
        what: how messages name the file, e.g. "CIFAR-10 file"; they read "WHAT 'PATH' …".

    Raises:
        PlainPickleError: a missing, unreadable, oversized or refused file, in one line naming it.
    """
    path = Path(path)
    named = f"{what} {str(path)!r}"
    try:
        if not path.is_file():
            raise PlainPickleError(f"{named} does not exist or is not a regular file")
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            # Reading stops one byte past the bound, so a file growing meanwhile is refused too.
            data = handle.read(MAX_PICKLE_FILE_BYTES + 1) if size <= MAX_PICKLE_FILE_BYTES else b""
        if size > MAX_PICKLE_FILE_BYTES or len(data) > MAX_PICKLE_FILE_BYTES:
            raise PlainPickleError(
                f"{named} holds {max(size, len(data)):,} bytes or more, more than the {MAX_PICKLE_FILE_BYTES:,} "
                "read from a pickle"
            )
    except OSError as error:
        raise PlainPickleError(f"{named} cannot be read: {error.strerror or error}") from None
    return read_plain_pickle(data, named)
