"""Files that shared folders (a lab's cache, a mirror, a run folder) cannot turn against other files.

A writer that opens a path by name follows a symbolic link planted there and truncates, appends to
or replaces whatever it points at. Every file that ccc creates or continues in a folder another user
may write is therefore opened through this module:

- :func:`open_owned` opens an existing file or creates it, never following a symbolic link at its
  last component (``O_NOFOLLOW``) and refusing anything that is not a regular file with a single
  link (a hard link to another file); for lock files and continued ``.part`` files.
- :func:`create_temporary` creates a fresh file under a new random name in a folder (``O_EXCL``:
  an existing path is never reused), to be renamed into place with ``os.replace`` (which replaces
  a link itself, never its target).
- :func:`write_atomically` writes a whole small file that way.
- :func:`open_for_reading` opens an existing regular file for reading without following a link.
- :func:`refuse_symlink` refuses, in one line, an entry that a reader would otherwise follow.

Errors are :class:`UnsafePathError`, an ``OSError`` whose message is one line naming the path.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "UnsafePathError",
    "create_temporary",
    "open_for_reading",
    "open_owned",
    "refuse_symlink",
    "write_atomically",
]

_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOSE_ON_EXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(OSError):
    """A path that would make a writer or reader act on another file (a symbolic link, a hard link,
    a folder or device where a regular file belongs)."""


def refuse_symlink(path: str | os.PathLike[str], what: str) -> None:
    """Raise :class:`UnsafePathError` when ``path`` itself is a symbolic link.

    Args:
        path: the entry to check (a cache entry, a mirrored shard, ``mirror.json``).
        what: how the message names it ("cache entry", "mirrored shard").
    """
    if os.path.islink(path):
        raise UnsafePathError(f"{what} {path} is a symbolic link; refusing to follow it (remove it and run again)")


def _check_regular(descriptor: int, path: Path, what: str) -> None:
    """Close ``descriptor`` and raise unless it is a regular file with a single link."""
    status = os.fstat(descriptor)
    if stat.S_ISREG(status.st_mode) and status.st_nlink == 1:
        return
    os.close(descriptor)
    kind = "has other hard links" if stat.S_ISREG(status.st_mode) else "is not a regular file"
    raise UnsafePathError(f"{what} {path} {kind}; refusing to write it (remove it and run again)")


def open_owned(path: str | os.PathLike[str], what: str, *, append: bool = False) -> BinaryIO:
    """Open ``path`` for writing (and reading), creating it if missing, never following a link.

    Args:
        path: the file; its folder must exist.
        what: how an error names the file ("lock file", "partial download").
        append: writes go to the end (a continued download); otherwise the position starts at 0 and
            the content is kept until the caller truncates it.

    Returns:
        A binary file object opened ``r+b`` (``a+b`` with ``append``).

    Raises:
        UnsafePathError: ``path`` is a symbolic link, a hard link to another file or not a regular file.
        OSError: any other failure to open it (permissions, a full disk), naming the path.
    """
    path = Path(path)
    flags = os.O_RDWR | os.O_CREAT | _NO_FOLLOW | _CLOSE_ON_EXEC | (os.O_APPEND if append else 0)
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        if os.path.islink(path):
            raise UnsafePathError(
                f"{what} {path} is a symbolic link; refusing to follow it (remove it and run again)"
            ) from None
        raise OSError(error.errno, f"cannot open {what} {path}: {error.strerror}") from None
    _check_regular(descriptor, path, what)
    return os.fdopen(descriptor, "a+b" if append else "r+b")


def open_for_reading(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """Open the existing regular file ``path`` for reading, never following a link at its last component.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsafePathError: ``path`` is a symbolic link or not a regular file.
        OSError: any other failure to open it, naming the path.
    """
    path = Path(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | _NO_FOLLOW | _CLOSE_ON_EXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        refuse_symlink(path, what)
        raise OSError(error.errno, f"cannot open {what} {path}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UnsafePathError(f"{what} {path} is not a regular file; refusing to read it (remove it)")
    return os.fdopen(descriptor, "rb")


def create_temporary(folder: str | os.PathLike[str], name: str) -> tuple[BinaryIO, Path]:
    """Create a new, empty file ``.<name>.<random>.tmp`` in ``folder`` (never an existing path).

    Returns:
        The file opened ``wb`` and its path; rename it into place with ``os.replace`` when complete,
        or delete it.
    """
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    return os.fdopen(descriptor, "wb"), Path(temporary)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` through a fresh temporary file in its folder, fsynced then renamed.

    A symbolic link at ``path`` is replaced by the file, never followed; readers see the old or the new
    content, never a part. An OSError (a full disk) names ``path``; no temporary file is left.
    """
    path = Path(path)
    handle, temporary = create_temporary(path.parent, path.name)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise OSError(error.errno, f"cannot write {path}: {error.strerror}") from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
